// Causal self-attention: the fused QKV and output projections through the
// dense kernels, the attention between them through the attention kernels.
#include <tessera/kernels/dense.hpp>
#include <tessera/kernels/dropout.hpp>
#include <tessera/kernels/tensor_ops.hpp>
#include <tessera/layers/attention.hpp>
#include <tessera/layers/impl/registration.hpp>

#include <cmath>

namespace tessera {

CausalSelfAttention::CausalSelfAttention(std::string name, const Options& options,
                                         std::vector<std::string> inputs)
    : GenericLayer(std::move(name), std::move(inputs)),
      options_(options),
      stream_(kernels::name_stream(this->name())) {
  TESSERA_REQUIRE(options.heads > 0, where() << ": heads must be positive, got " << options.heads);
  TESSERA_REQUIRE(options.dropout >= 0.0f && options.dropout < 1.0f,
                  where() << ": dropout must be in [0, 1), got " << options.dropout);
}

LayerType causalselfattention_layer_type() {
  using O = CausalSelfAttention::Options;
  return impl::LayerTypeBuilder<CausalSelfAttention>("causalselfattention")
      .integer("heads", &O::heads, Range::closed(1, 1 << 16), impl::required)
      .note("C must be a multiple")
      .number("dropout", &O::dropout, Range::half_open(0, 1))
      .note("on the attention weights, in training")
      .boolean("bias", &O::bias)
      .initializer("init", &O::init)
      .output(
          "`[N, T, C]` from `[N, T, C]`: fused QKV projection `qkv_weight [3C, C]`, softmax of "
          "Q K^T / sqrt(C / heads) over positions 0 to t (causal), dropout, output projection "
          "`proj_weight [C, C]`")
      .example({{2, 5, 4}}, "heads = 2\ndropout = 0.25")
      .sequence_example(LayerExample::Context::vectors);
}

Shape CausalSelfAttention::output_shape(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  TESSERA_REQUIRE(in.rank() == 3 && in[2] % options_.heads == 0 && in[1] > 0,
                  where() << ": input " << in << " must be token vectors [N, T, C] with C a "
                          << "multiple of the " << options_.heads << " heads");
  return in;
}

kernels::AttentionLayout CausalSelfAttention::layout(const Shape& in) const {
  return kernels::AttentionLayout{in[0], in[1], options_.heads, in[2] / options_.heads};
}

std::vector<ParameterSpec> CausalSelfAttention::parameter_specs(const Shapes& inputs) const {
  const std::int64_t c = output_shape(inputs)[2];
  std::vector<ParameterSpec> specs{
      ParameterSpec{"qkv_weight", Shape{3 * c, c}, options_.init, c, 3 * c}};
  if (options_.bias)
    specs.push_back(ParameterSpec{"qkv_bias", Shape{3 * c}, Init::zeros, c, 3 * c});
  specs.push_back(ParameterSpec{"proj_weight", Shape{c, c}, options_.init, c, c});
  if (options_.bias) specs.push_back(ParameterSpec{"proj_bias", Shape{c}, Init::zeros, c, c});
  return specs;
}

void CausalSelfAttention::bind_parameters(const Tensors& values, const Tensors& gradients) {
  std::size_t i = 0;
  qkv_weight_ = values.at(i);
  qkv_weight_grad_ = gradients.at(i++);
  if (options_.bias) {
    qkv_bias_ = values.at(i);
    qkv_bias_grad_ = gradients.at(i++);
  }
  proj_weight_ = values.at(i);
  proj_weight_grad_ = gradients.at(i++);
  if (options_.bias) {
    proj_bias_ = values.at(i);
    proj_bias_grad_ = gradients.at(i);
  }
}

namespace {
// Floats laid out one after another, each on a 64-byte boundary.
struct FloatLayout {
  std::int64_t elements = 0;
  std::int64_t take(std::int64_t n) {
    const std::int64_t at = elements;
    elements += (n + 15) / 16 * 16;
    return at;
  }
};
// Where dqkv, dheads and the kernels' scratch lie in the temporaries.
struct AttentionTemporaries : FloatLayout {
  std::int64_t dqkv, dheads, scratch;
  AttentionTemporaries(const kernels::AttentionLayout& l, std::int64_t rows, std::int64_t c)
      : dqkv(take(rows * 3 * c)),
        dheads(take(rows * c)),
        scratch(take(l.batch * l.heads * kernels::attention_scratch_rows(l) * l.positions)) {}
};
// Where qkv, heads and each query's softmax statistics (what forward keeps
// for backward, and writes whole) lie: O(T) per head, no [T, T] block.
struct AttentionKept : FloatLayout {
  std::int64_t qkv, heads, stats;
  AttentionKept(const kernels::AttentionLayout& l, std::int64_t rows, std::int64_t c)
      : qkv(take(rows * 3 * c)),
        heads(take(rows * c)),
        stats(take(l.batch * l.heads * kernels::attention_stat_rows * l.positions)) {}
};
}  // namespace

std::int64_t CausalSelfAttention::recomputed_elements(const Shapes& inputs) const {
  const Shape in = output_shape(inputs);
  return AttentionKept(layout(in), in[0] * in[1], in[2]).elements;
}

std::int64_t CausalSelfAttention::temporary_elements(const Shapes& inputs) const {
  const Shape in = output_shape(inputs);
  return AttentionTemporaries(layout(in), in[0] * in[1], in[2]).elements;
}

void CausalSelfAttention::allocate(const Shapes& inputs) {
  const Shape in = output_shape(inputs);
  const kernels::AttentionLayout l = layout(in);
  const std::int64_t rows = in[0] * in[1], c = in[2];
  const std::string label = "tessera::CausalSelfAttention '" + name() + "'";
  max_batch_ = in[0];
  const AttentionKept kept(l, rows, c);
  float* const keep = recomputed(inputs);
  qkv_ = Matrix<float>(keep + kept.qkv, rows, 3 * c);
  heads_ = Matrix<float>(keep + kept.heads, rows, c);
  stats_ = kernels::AttentionScores(keep + kept.stats, l.batch * l.heads,
                                    kernels::attention_stat_rows, l.positions);
  // Backward's gradients of qkv and heads, and the kernels' scratch: every
  // call writes them before it reads them (16 bits: the widened input and
  // output in forward, dy and dx in backward, in dqkv's and dheads' room).
  const AttentionTemporaries at(l, rows, c);
  float* const memory = temporaries(inputs);
  dqkv_ = Matrix<float>(memory + at.dqkv, rows, 3 * c);
  dheads_ = Matrix<float>(memory + at.dheads, rows, c);
  scratch_ = kernels::AttentionScores(memory + at.scratch, l.batch * l.heads,
                                      kernels::attention_scratch_rows(l), l.positions);
  if (compute() != FloatFormat::fp32) {
    qkv_weight_rounded_ = Tensor<float>(label + "::qkv_weight_rounded", Shape{3 * c, c});
    proj_weight_rounded_ = Tensor<float>(label + "::proj_weight_rounded", Shape{c, c});
  }
}

std::int64_t CausalSelfAttention::buffer_bytes() const {
  return bytes_held(qkv_weight_rounded_, proj_weight_rounded_);
}

std::int64_t CausalSelfAttention::flops_per_sample(const Shapes& inputs) const {
  const Shape in = output_shape(inputs);
  const std::int64_t t = in[1], c = in[2];
  const std::int64_t bias = options_.bias ? 4 * c : 0;
  // Projections, the two T x T x C products, the softmax (about 5 per score).
  return t * (2 * c * 3 * c + 2 * c * c + bias) + 2 * 2 * t * t * c + 5 * options_.heads * t * t;
}

LayerCost CausalSelfAttention::cost(const Shapes& inputs, bool input_gradient) const {
  LayerCost cost = Layer::cost(inputs, input_gradient);
  const Shape in = output_shape(inputs);
  const double n = static_cast<double>(in[0]), t = static_cast<double>(in[1]),
               c = static_cast<double>(in[2]), h = static_cast<double>(options_.heads);
  const double projections = 2 * n * t * (3 * c * c + c * c);
  const double products = 2 * 2 * n * t * t * c, softmax = 5 * n * h * t * t;
  const double bias = options_.bias ? n * t * 4 * c : 0;
  // Backward: weight gradients and input gradients of both projections (the
  // QKV input gradient only when wanted), four T x T x C products, the
  // softmax gradient and the dropout mask drawn again.
  cost.forward.flops = projections + products + softmax + bias;
  cost.backward.flops = projections + 2 * n * t * c * c +
                        (input_gradient ? 2 * n * t * 3 * c * c : 0) + 2 * products + softmax +
                        bias;
  // Backward computes the scores and probabilities again from the
  // statistics forward kept (2 per query). Forward writes and reads the
  // scores a block of rows at a time (their causal half); keys (forward),
  // keys and values (backward) copied transposed into scratch and read.
  cost.backward.flops += products / 2 + softmax;
  cost.forward.bytes += sizeof(float) * (n * h * t * t + 2 * n * t * 4 * c + 2 * n * t * c);
  cost.backward.bytes += sizeof(float) * (2 * n * h * t * t + 4 * n * t * 5 * c + 2 * n * t * c);
  return cost;
}

CausalSelfAttention::Rows CausalSelfAttention::leading_rows(const Matrix<float>& m,
                                                            std::int64_t rows,
                                                            std::int64_t columns) {
  return Rows(m.data(), rows, columns > 0 ? columns : m.extent(1));
}

kernels::AttentionDropout CausalSelfAttention::dropout(const Shape& in,
                                                       const StepContext& ctx) const {
  kernels::AttentionDropout d;
  if (!ctx.training || options_.dropout <= 0.0f) return d;
  TESSERA_REQUIRE(ctx.step >= 0 && ctx.sample_offset >= 0,
                  where() << ": step " << ctx.step << " and sample offset " << ctx.sample_offset
                          << " must not be negative");
  // As Dropout: each step owns 2^40 counters, numbered by the sample's place
  // in the global batch, so a sample draws the same mask on any rank count.
  const auto per_sample = static_cast<std::uint64_t>(options_.heads * in[1] * in[1]);
  d.rate = options_.dropout;
  d.seed = ctx.seed;
  d.stream = stream_;
  d.first_counter = (static_cast<std::uint64_t>(ctx.step) << 40) +
                    static_cast<std::uint64_t>(ctx.sample_offset) * per_sample;
  return d;
}

void CausalSelfAttention::forward_rows(const Rows& x, const Tensor<float>& qkv_weight,
                                       const Tensor<float>& proj_weight, const Rows& y,
                                       const Shape& in, const StepContext& ctx) {
  const kernels::AttentionLayout l = layout(in);
  const std::int64_t rows = in[0] * in[1];
  const ExecSpace& exec = ctx.exec;
  const auto qkv = leading_rows(qkv_, rows), heads = leading_rows(heads_, rows);
  const std::pair<std::int64_t, std::int64_t> scores(0, l.batch * l.heads);
  kernels::dense_forward(exec, x, qkv_weight.matrix(), qkv_bias_.flat(), qkv);
  // y starts as the projection's bias (written beside the attention's
  // kernel), and the projection's product is added onto it.
  kernels::attention_forward(
      exec, l, 1.0f / std::sqrt(static_cast<float>(l.head_dim)), dropout(in, ctx), qkv,
      Kokkos::subview(stats_, scores, Kokkos::ALL(), Kokkos::ALL()),
      Kokkos::subview(scratch_, scores, Kokkos::ALL(), Kokkos::ALL()), heads, y, proj_bias_.flat());
  kernels::dense_accumulate(exec, heads, proj_weight.matrix(), y);
}

void CausalSelfAttention::backward_attention(const Rows& dy, const Tensor<float>& proj_weight,
                                             const Shape& in, const StepContext& ctx) {
  const kernels::AttentionLayout l = layout(in);
  const std::int64_t rows = in[0] * in[1];
  const ExecSpace& exec = ctx.exec;
  const auto qkv = leading_rows(qkv_, rows), heads = leading_rows(heads_, rows);
  const auto dqkv = leading_rows(dqkv_, rows), dheads = leading_rows(dheads_, rows);
  const std::pair<std::int64_t, std::int64_t> scores(0, l.batch * l.heads);
  // dheads written, not accumulated: nothing to zero first.
  kernels::dense_backward_products(exec, heads, proj_weight.matrix(), dy, dheads,
                                   proj_weight_grad_.matrix(), 0.0f);
  // The projection's bias gradient beside the attention's kernel, unless
  // dy lives in dqkv_'s storage (16 bits), which that kernel writes.
  const bool dy_in_dqkv = dy.data() == dqkv_.data();
  if (dy_in_dqkv) kernels::dense_bias_gradient(exec, dy, proj_bias_grad_.flat());
  kernels::attention_backward(
      exec, l, 1.0f / std::sqrt(static_cast<float>(l.head_dim)), dropout(in, ctx), qkv,
      Kokkos::subview(stats_, scores, Kokkos::ALL(), Kokkos::ALL()),
      Kokkos::subview(scratch_, scores, Kokkos::ALL(), Kokkos::ALL()), dheads, dqkv, dy,
      dy_in_dqkv ? decltype(proj_bias_grad_.flat())() : proj_bias_grad_.flat());
}

void CausalSelfAttention::backward_qkv(const ExecSpace& exec, const Rows& x,
                                       const Tensor<float>& qkv_weight, const Rows& dx,
                                       bool write_dx) {
  kernels::dense_backward(exec, x, qkv_weight.matrix(), leading_rows(dqkv_, x.extent(0)), dx,
                          qkv_weight_grad_.matrix(), qkv_bias_grad_.flat(), write_dx);
}

template <class T>
void CausalSelfAttention::forward_as(const TensorsOf<T>& x, const Tensor<T>& y,
                                     const StepContext& ctx) {
  ScopedRegion region("tessera::CausalSelfAttention::forward");
  const Shape& in = x[0].shape();
  TESSERA_REQUIRE(in[0] <= max_batch_, where() << ": batch of " << in[0] << " exceeds the "
                                               << max_batch_ << " allocate() was given");
  if constexpr (std::is_same<T, float>::value) {
    forward_rows(x[0].last_axis_matrix(), qkv_weight_, proj_weight_, y.last_axis_matrix(), in, ctx);
  } else {
    // The widened input in dqkv_'s storage and the float output in
    // dheads_'s: neither holds anything between passes.
    const ExecSpace& exec = ctx.exec;
    const std::int64_t rows = in[0] * in[1], c = in[2];
    round_weights<T>(exec, qkv_weight_, qkv_weight_rounded_);
    round_weights<T>(exec, proj_weight_, proj_weight_rounded_);
    const Rows xf = leading_rows(dqkv_, rows, c), yf = leading_rows(dheads_, rows);
    kernels::copy_into(exec, x[0].flat(), xf, false);
    forward_rows(xf, qkv_weight_rounded_, proj_weight_rounded_, yf, in, ctx);
    kernels::copy_into(exec, yf, y.flat(), false);
  }
}

template <class T>
void CausalSelfAttention::backward_as(const TensorsOf<T>& x, const Tensor<T>& /*y*/,
                                      const Tensor<T>& dy, const TensorsOf<T>& dx,
                                      const StepContext& ctx) {
  ScopedRegion region("tessera::CausalSelfAttention::backward");
  const Shape& in = x[0].shape();
  if constexpr (std::is_same<T, float>::value) {
    backward_attention(dy.last_axis_matrix(), proj_weight_, in, ctx);
    backward_qkv(ctx.exec, x[0].last_axis_matrix(), qkv_weight_, dx[0].last_axis_matrix(),
                 ctx.write_input_gradients);
  } else {
    // dy widened into dqkv_'s storage, read before the attention's backward
    // writes dqkv_; then x widened into qkv_'s, and dx into dheads_'s, once
    // the attention's backward has read them.
    const ExecSpace& exec = ctx.exec;
    const std::int64_t rows = in[0] * in[1], c = in[2];
    const Rows dyf = leading_rows(dqkv_, rows, c);
    kernels::copy_into(exec, dy.flat(), dyf, false);
    backward_attention(dyf, proj_weight_rounded_, in, ctx);
    const Rows xf = leading_rows(qkv_, rows, c);
    kernels::copy_into(exec, x[0].flat(), xf, false);
    const bool input_gradient = dx[0].numel() > 0;
    const Rows dxf = input_gradient ? leading_rows(dheads_, rows) : Rows(nullptr, 0, 0);
    // dx widened to be added to, unless it is written whole.
    const bool write = ctx.write_input_gradients;
    if (input_gradient && !write) kernels::copy_into(exec, dx[0].flat(), dxf, false);
    backward_qkv(ctx.exec, xf, qkv_weight_rounded_, dxf, write);
    if (input_gradient) kernels::copy_into(exec, dxf, dx[0].flat(), false);
  }
}

template class GenericLayer<CausalSelfAttention>;

}  // namespace tessera
