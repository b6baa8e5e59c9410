// BatchNorm and LayerNorm: shapes, parameters and state, and the shared
// group-normalisation passes over the norm kernels.
#include <tessera/layers/impl/registration.hpp>
#include <tessera/layers/norm.hpp>

namespace tessera {

namespace impl {

void GroupNormalizer::bind(const Tensors& values, const Tensors& gradients) {
  gamma_ = values.at(0);
  beta_ = values.at(1);
  gamma_grad_ = gradients.at(0);
  beta_grad_ = gradients.at(1);
}

void GroupNormalizer::allocate(const kernels::GroupLayout& largest, const std::string& label) {
  mean_ = Vector<float>(label + "::mean", largest.groups);
  invstd_ = Vector<float>(label + "::invstd", largest.groups);
  sums_ = Vector<double>(label + "::sums", 2 * largest.groups);
  partials_ = Vector<double>(label + "::partials", kernels::group_partials_size(largest, affine_));
}

Vector<float> GroupNormalizer::mean(std::int64_t groups) const {
  return Kokkos::subview(mean_, std::pair<std::int64_t, std::int64_t>(0, groups));
}

Vector<float> GroupNormalizer::invstd(std::int64_t groups) const {
  return Kokkos::subview(invstd_, std::pair<std::int64_t, std::int64_t>(0, groups));
}

Vector<double> GroupNormalizer::sums(std::int64_t groups) const {
  return Kokkos::subview(sums_, std::pair<std::int64_t, std::int64_t>(0, 2 * groups));
}

template <class T>
void GroupNormalizer::local_moments(const ExecSpace& exec, const kernels::GroupLayout& layout,
                                    const Tensor<T>& x, float eps, float momentum,
                                    const Tensor<float>& running_mean,
                                    const Tensor<float>& running_var) {
  kernels::group_moments(exec, layout, x.flat(), eps, mean(layout.groups), invstd(layout.groups),
                         momentum, running_mean.flat(), running_var.flat(), partials_);
}

template <class T>
Vector<double> GroupNormalizer::batch_sums(const ExecSpace& exec,
                                           const kernels::GroupLayout& layout, const Tensor<T>& x) {
  kernels::group_sums(exec, layout, x.flat(), sums(layout.groups), partials_);
  return sums(layout.groups);
}

void GroupNormalizer::batch_moments(const ExecSpace& exec, std::int64_t groups, std::int64_t count,
                                    float eps) {
  kernels::moments_from_sums(exec, sums(groups), count, eps, mean(groups), invstd(groups));
}

void GroupNormalizer::running_moments(const ExecSpace& exec, const Tensor<float>& running_mean,
                                      const Tensor<float>& running_var, float eps) {
  const std::int64_t groups = running_mean.numel();
  kernels::moments_from_running(exec, running_mean.flat(), running_var.flat(), eps, mean(groups),
                                invstd(groups));
}

template <class T>
void GroupNormalizer::normalize(const ExecSpace& exec, const kernels::GroupLayout& layout,
                                const Tensor<T>& x, const Tensor<T>& y) {
  kernels::group_normalize(exec, layout, affine_, x.flat(), mean(layout.groups),
                           invstd(layout.groups), gamma_.flat(), beta_.flat(), y.flat());
}

template <class T>
void GroupNormalizer::backward(const ExecSpace& exec, const kernels::GroupLayout& layout,
                               const Tensor<T>& x, const Tensor<T>& dy, const Tensor<T>& dx,
                               bool batch_statistics, std::int64_t count, const BatchSync* sync,
                               bool add_to_dx) {
  const Vector<float> m = mean(layout.groups), s = invstd(layout.groups);
  const Vector<double> gradient_sums = sums(layout.groups);
  // Per group, the sums the input gradient needs are (before the factor
  // gamma) this rank's affine gradients: one pass gives both.
  const bool per_group = affine_ == kernels::Affine::per_group;
  const bool input_gradient = dx.numel() > 0;
  if (per_group || (input_gradient && batch_statistics))
    kernels::group_gradient_sums(exec, layout, affine_, x.flat(), dy.flat(), m, s, gamma_.flat(),
                                 gradient_sums, partials_);
  if (per_group)
    kernels::affine_gradients_from_sums(exec, gradient_sums, gamma_grad_.flat(), beta_grad_.flat());
  else
    kernels::affine_gradients(exec, layout, affine_, x.flat(), dy.flat(), m, s, gamma_grad_.flat(),
                              beta_grad_.flat(), partials_);
  if (!input_gradient) return;
  if (batch_statistics && sync != nullptr) sync->sum(gradient_sums);
  kernels::group_input_gradient(exec, layout, affine_, x.flat(), dy.flat(), m, s, gamma_.flat(),
                                batch_statistics, gradient_sums, count, dx.flat(), add_to_dx);
}

}  // namespace impl

namespace {
std::vector<ParameterSpec> affine_specs(const Shape& shape) {
  return {ParameterSpec{"gamma", shape, Init::ones}, ParameterSpec{"beta", shape, Init::zeros}};
}

// Statistics (sum, squares) and normalisation (subtract, two multiplies, add).
constexpr std::int64_t norm_flops_per_element = 7;
}  // namespace

BatchNorm::BatchNorm(std::string name, const Options& options, std::vector<std::string> inputs)
    : GenericLayer(std::move(name), std::move(inputs)),
      momentum_(options.momentum),
      eps_(options.eps) {
  const float momentum = options.momentum, eps = options.eps;
  TESSERA_REQUIRE(momentum >= 0.0f && momentum <= 1.0f,
                  where() << ": momentum must be in [0, 1], got " << momentum);
  TESSERA_REQUIRE(eps > 0.0f, where() << ": eps must be positive, got " << eps);
}

LayerType batchnorm_layer_type() {
  using O = BatchNorm::Options;
  return impl::LayerTypeBuilder<BatchNorm>("batchnorm")
      .number("momentum", &O::momentum, Range::closed(0, 1))
      .number("eps", &O::eps, Range::open_closed(0, 1))
      .output(
          "same shape; per feature for `[N, F]`, per channel for `[N, C, H, W]`; training "
          "uses batch statistics and updates the running ones, evaluation uses the running "
          "ones")
      .example({{4, 2, 2, 2}});
}

LayerType layernorm_layer_type() {
  return impl::LayerTypeBuilder<LayerNorm>("layernorm")
      .number("eps", &LayerNorm::Options::eps, Range::open_closed(0, 1))
      .boolean("last_axis", &LayerNorm::Options::last_axis)
      .note("true: each position over its last axis, e.g. each token of `[N, T, C]`")
      .output(
          "same shape; normalises each sample over all its elements (with `last_axis`, each "
          "position over the last axis), with an elementwise scale and shift")
      .example({{3, 2, 2, 2}});
}

Shape BatchNorm::output_shape(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  TESSERA_REQUIRE(
      in.rank() == 2 || in.rank() == 4,
      where() << ": input " << in << " must be [N, F] (per feature) or [N, C, H, W] (per channel)");
  return in;
}

kernels::GroupLayout BatchNorm::layout(const Shape& input) const {
  return kernels::GroupLayout{input[0], input[1], input.rank() == 4 ? input[2] * input[3] : 1};
}

std::int64_t BatchNorm::statistics_count(const kernels::GroupLayout& l,
                                         const StepContext& ctx) const {
  if (ctx.sync == nullptr) return l.group_size();
  TESSERA_REQUIRE(ctx.global_batch >= l.outer,
                  where() << ": synchronised statistics over a global batch of " << ctx.global_batch
                          << " samples, fewer than this rank's " << l.outer);
  return ctx.global_batch * l.inner;
}

std::vector<ParameterSpec> BatchNorm::parameter_specs(const Shapes& inputs) const {
  return affine_specs(Shape{output_shape(inputs)[1]});
}

void BatchNorm::bind_parameters(const Tensors& values, const Tensors& gradients) {
  normalizer_.bind(values, gradients);
}

std::vector<ParameterSpec> BatchNorm::state_specs(const Shapes& inputs) const {
  const Shape channels{output_shape(inputs)[1]};
  return {ParameterSpec{"running_mean", channels, Init::zeros},
          ParameterSpec{"running_var", channels, Init::ones}};
}

void BatchNorm::bind_state(const Tensors& state) {
  running_mean_ = state.at(0);
  running_var_ = state.at(1);
}

void BatchNorm::allocate(const Shapes& inputs) {
  normalizer_.allocate(layout(output_shape(inputs)), "tessera::BatchNorm '" + name() + "'");
}

std::int64_t BatchNorm::flops_per_sample(const Shapes& inputs) const {
  return norm_flops_per_element * inputs.at(0).inner();
}

template <class T>
void BatchNorm::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::BatchNorm::forward");
  const kernels::GroupLayout l = layout(x[0].shape());
  if (ctx.training && ctx.recomputing) {
    // mean and invstd hold this step's statistics from the first pass.
  } else if (ctx.training && ctx.sync == nullptr) {
    normalizer_.local_moments(ctx.exec, l, x[0], eps_, momentum_, running_mean_, running_var_);
  } else if (ctx.training) {
    // The sums of every rank's shard, summed between the two steps.
    const Vector<double> sums = normalizer_.batch_sums(ctx.exec, l, x[0]);
    ctx.sync->sum(sums);
    const std::int64_t count = statistics_count(l, ctx);
    kernels::update_running_moments(ctx.exec, sums, count, momentum_, running_mean_.flat(),
                                    running_var_.flat());
    normalizer_.batch_moments(ctx.exec, l.groups, count, eps_);
  } else {
    normalizer_.running_moments(ctx.exec, running_mean_, running_var_, eps_);
  }
  normalizer_.normalize(ctx.exec, l, x[0], y);
}

template <class T>
void BatchNorm::backward_as(const TensorsOf<T>& x, const Tensor<T>& /*y*/, const Tensor<T>& dy,
                            const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::BatchNorm::backward");
  const kernels::GroupLayout l = layout(x[0].shape());
  normalizer_.backward(ctx.exec, l, x[0], dy, dx[0], ctx.training, statistics_count(l, ctx),
                       ctx.training ? ctx.sync : nullptr, !ctx.write_input_gradients);
}

LayerNorm::LayerNorm(std::string name, const Options& options, std::vector<std::string> inputs)
    : GenericLayer(std::move(name), std::move(inputs)),
      eps_(options.eps),
      last_axis_(options.last_axis) {
  const float eps = options.eps;
  TESSERA_REQUIRE(eps > 0.0f, where() << ": eps must be positive, got " << eps);
}

// Each sample is one group of all its elements, or each position one
// group of its last axis.
kernels::GroupLayout LayerNorm::layout(const Shape& s) const {
  if (!last_axis_) return kernels::GroupLayout{1, s[0], s.inner()};
  const std::int64_t last = s[s.rank() - 1];
  return kernels::GroupLayout{1, s.numel() / last, last};
}

Shape LayerNorm::output_shape(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  TESSERA_REQUIRE(in.rank() >= 2,
                  where() << ": input " << in << " needs a batch dimension and at least one more");
  return in;
}

std::vector<ParameterSpec> LayerNorm::parameter_specs(const Shapes& inputs) const {
  const Shape out = output_shape(inputs);
  return affine_specs(last_axis_ ? Shape{out[out.rank() - 1]} : drop_batch(out));
}

void LayerNorm::bind_parameters(const Tensors& values, const Tensors& gradients) {
  normalizer_.bind(values, gradients);
}

void LayerNorm::allocate(const Shapes& inputs) {
  normalizer_.allocate(layout(output_shape(inputs)), "tessera::LayerNorm '" + name() + "'");
}

std::int64_t LayerNorm::flops_per_sample(const Shapes& inputs) const {
  return norm_flops_per_element * inputs.at(0).inner();
}

template <class T>
void LayerNorm::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::LayerNorm::forward");
  const kernels::GroupLayout l = layout(x[0].shape());
  normalizer_.local_moments(ctx.exec, l, x[0], eps_);
  normalizer_.normalize(ctx.exec, l, x[0], y);
}

template <class T>
void LayerNorm::backward_as(const TensorsOf<T>& x, const Tensor<T>& /*y*/, const Tensor<T>& dy,
                            const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::LayerNorm::backward");
  const kernels::GroupLayout l = layout(x[0].shape());
  normalizer_.backward(ctx.exec, l, x[0], dy, dx[0], true, l.group_size(), nullptr,
                       !ctx.write_input_gradients);
}

template class GenericLayer<BatchNorm>;
template class GenericLayer<LayerNorm>;

}  // namespace tessera
