// Embedding: shape checks, the token-id check, dispatch to the embedding
// kernels, registration.
#include <tessera/layers/embedding.hpp>
#include <tessera/layers/impl/registration.hpp>

namespace tessera {

Embedding::Embedding(std::string name, const Options& options, std::vector<std::string> inputs)
    : Layer(std::move(name), std::move(inputs)), options_(options) {
  TESSERA_REQUIRE(options.vocabulary > 0 && options.dim > 0,
                  where() << ": vocabulary and dim must be positive, got " << options.vocabulary
                          << " and " << options.dim);
}

LayerType embedding_layer_type() {
  using O = Embedding::Options;
  return impl::LayerTypeBuilder<Embedding>("embedding")
      .integer("vocabulary", &O::vocabulary, Range::closed(1, 1 << 24), impl::required)
      .note("token ids run from 0 to vocabulary - 1")
      .integer("dim", &O::dim, Range::closed(1, 1 << 20), impl::required)
      .boolean("positions", &O::positions)
      .note("true: adds a learned vector per position, a table `[T, dim]`")
      .initializer("init", &O::init)
      .output(
          "`[N, T, dim]` from token ids `[N, T]` (the model input); the table `weight` is "
          "`[vocabulary, dim]`, the position table `position` `[T, dim]`; no input gradient")
      .example({{2, 5}}, "vocabulary = 7\ndim = 3\npositions = true")
      .sequence_example(LayerExample::Context::tokens, 7);
}

Shape Embedding::output_shape(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  TESSERA_REQUIRE(in.rank() == 2 && in[1] > 0,
                  where() << ": input " << in << " must be token ids [N, T]");
  return Shape{in[0], in[1], options_.dim};
}

std::vector<ParameterSpec> Embedding::parameter_specs(const Shapes& inputs) const {
  const Shape out = output_shape(inputs);
  std::vector<ParameterSpec> specs{ParameterSpec{"weight", Shape{options_.vocabulary, options_.dim},
                                                 options_.init, options_.vocabulary, options_.dim}};
  if (options_.positions)
    specs.push_back(ParameterSpec{"position", Shape{out[1], options_.dim}, options_.init, out[1],
                                  options_.dim});
  return specs;
}

void Embedding::bind_parameters(const Tensors& values, const Tensors& gradients) {
  table_ = values.at(0);
  table_grad_ = gradients.at(0);
  if (options_.positions) {
    position_table_ = values.at(1);
    position_table_grad_ = gradients.at(1);
  }
}

void Embedding::allocate(const Shapes& inputs) {
  buckets_ = kernels::TokenBuckets("tessera::Embedding '" + name() + "'", options_.vocabulary,
                                   inputs.at(0).numel());
}

std::int64_t Embedding::buffer_bytes() const {
  return bytes_held(buckets_.offsets, buckets_.fill, buckets_.rows);
}

std::int64_t Embedding::flops_per_sample(const Shapes& inputs) const {
  return options_.positions ? inputs.at(0)[1] * options_.dim : 0;
}

template <class T>
void Embedding::lookup(const ExecSpace& exec, const Tensor<float>& x, const Tensor<T>& y) {
  ScopedRegion region("tessera::Embedding::forward");
  check_compute(format_of<T>());
  const auto ids = x.flat();
  const std::int64_t bad = kernels::first_invalid_token(exec, ids, options_.vocabulary);
  if (bad >= 0) {
    float value = 0;
    Kokkos::deep_copy(
        Kokkos::View<float, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(&value),
        Kokkos::subview(ids, bad));
    const std::int64_t positions = x.shape()[1];
    TESSERA_REQUIRE(false, where() << ": sample " << bad / positions << ", position "
                                   << bad % positions << " holds " << value
                                   << ", not a token id from 0 to " << options_.vocabulary - 1
                                   << " (check the data's vocabulary against the layer's)");
  }
  kernels::embedding_forward(exec, x.shape()[1], ids, table_.matrix(), position_table_.matrix(),
                             y.last_axis_matrix());
}

template <class T>
void Embedding::scatter(const ExecSpace& exec, const Tensor<float>& x, const Tensor<T>& dy) {
  ScopedRegion region("tessera::Embedding::backward");
  check_compute(format_of<T>());
  kernels::embedding_backward(exec, x.shape()[1], x.flat(), dy.last_axis_matrix(), buckets_,
                              table_grad_.matrix(), position_table_grad_.matrix());
}

void Embedding::forward(const Tensors& x, const Tensor<float>& y, const StepContext& ctx) {
  lookup(ctx.exec, x[0], y);
}
void Embedding::forward_ids16(const Tensors& ids, const Tensor<bf16>& y, const StepContext& ctx) {
  lookup(ctx.exec, ids[0], y);
}
void Embedding::forward_ids16(const Tensors& ids, const Tensor<fp16>& y, const StepContext& ctx) {
  lookup(ctx.exec, ids[0], y);
}

void Embedding::backward(const Tensors& x, const Tensor<float>& /*y*/, const Tensor<float>& dy,
                         const Tensors& /*dx*/, const StepContext& ctx) {
  scatter(ctx.exec, x[0], dy);
}
void Embedding::backward_ids16(const Tensors& ids, const Tensor<bf16>& dy, const StepContext& ctx) {
  scatter(ctx.exec, ids[0], dy);
}
void Embedding::backward_ids16(const Tensors& ids, const Tensor<fp16>& dy, const StepContext& ctx) {
  scatter(ctx.exec, ids[0], dy);
}

}  // namespace tessera
