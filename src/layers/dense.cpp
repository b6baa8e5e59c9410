// Dense layer: shape checks and dispatch to the dense kernels.
#include <tessera/kernels/dense.hpp>
#include <tessera/kernels/tensor_ops.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/impl/registration.hpp>

namespace tessera {

Dense::Dense(std::string name, const Options& options, std::vector<std::string> inputs)
    : GenericLayer(std::move(name), std::move(inputs)), options_(options) {
  TESSERA_REQUIRE(options.units > 0, where() << ": units must be positive, got " << options.units);
}

Shape Dense::output_shape(const Shapes& inputs) const {
  const Shape& input = inputs.at(0);
  TESSERA_REQUIRE(input.rank() >= 2,
                  where() << ": input " << input << " needs a batch and a feature dimension");
  if (!options_.last_axis) return Shape{input[0], options_.units};
  Shape out = input;
  out.set(input.rank() - 1, options_.units);
  return out;
}

std::int64_t Dense::in_features(const Shape& input) const {
  return options_.last_axis ? input[input.rank() - 1] : input.inner();
}

std::int64_t Dense::rows_per_sample(const Shape& input) const {
  return input.inner() / in_features(input);
}

template <class T>
UnmanagedMatrix<T> Dense::rows(const Tensor<T>& t) const {
  return options_.last_axis ? t.last_axis_matrix() : t.matrix();
}

template <>
Tensor<bf16>& Dense::rounded_weight<bf16>() {
  return weight_bf16_;
}
template <>
Tensor<fp16>& Dense::rounded_weight<fp16>() {
  return weight_fp16_;
}

void Dense::allocate(const Shapes& inputs) {
  const Shape shape{options_.units, in_features(inputs.at(0))};
  if (compute() == FloatFormat::bf16) weight_bf16_ = Tensor<bf16>(name() + ".weight_bf16", shape);
  if (compute() == FloatFormat::fp16) weight_fp16_ = Tensor<fp16>(name() + ".weight_fp16", shape);
}

std::int64_t Dense::buffer_bytes() const { return bytes_held(weight_bf16_, weight_fp16_); }

std::vector<ParameterSpec> Dense::parameter_specs(const Shapes& inputs) const {
  const std::int64_t in = in_features(inputs.at(0)), units = options_.units;
  ParameterSpec weight{"weight", Shape{units, in}, options_.init, in, units};
  weight.tied_layer = options_.tie;
  std::vector<ParameterSpec> specs{weight};
  if (options_.bias) specs.push_back(ParameterSpec{"bias", Shape{units}, Init::zeros, in, units});
  return specs;
}

void Dense::bind_parameters(const Tensors& values, const Tensors& gradients) {
  weight_ = values.at(0);
  weight_grad_ = gradients.at(0);
  // Without a bias, empty tensors: the kernels skip it.
  if (options_.bias) {
    bias_ = values.at(1);
    bias_grad_ = gradients.at(1);
  }
}

std::int64_t Dense::flops_per_sample(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  return rows_per_sample(in) *
         (2 * in_features(in) * options_.units + (options_.bias ? options_.units : 0));
}

LayerCost Dense::cost(const Shapes& inputs, bool input_gradient) const {
  LayerCost c = Layer::cost(inputs, input_gradient);
  const Shape& in = inputs.at(0);
  const double rows = static_cast<double>(in[0] * rows_per_sample(in));
  const double product = 2 * rows * static_cast<double>(in_features(in) * options_.units);
  const double bias = options_.bias ? rows * static_cast<double>(options_.units) : 0.0;
  // Backward: dW = dy^T x, dx = dy W when wanted, and the bias sums.
  c.backward.flops = product * (input_gradient ? 2 : 1) + bias;
  return c;
}

LayerType dense_layer_type() {
  using O = Dense::Options;
  return impl::LayerTypeBuilder<Dense>("dense")
      .integer("units", &O::units, Range::closed(1, 1 << 24), impl::required)
      .boolean("bias", &O::bias)
      .initializer("init", &O::init)
      .boolean("last_axis", &O::last_axis)
      .note("true: the last axis only, the same weights at every position before it")
      .layer_name("tie", &O::tie)
      .note("a layer whose `weight` [units, in] this one shares, e.g. an `embedding`")
      .output(
          "`[N, units]`; the input's non-batch dimensions are flattened; with `last_axis`, "
          "`[N, ..., units]`")
      .example({{2, 3, 4}}, "units = 3");
}

template <class T>
void Dense::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::Dense::forward");
  const ExecSpace& exec = ctx.exec;
  if constexpr (std::is_same<T, float>::value) {
    (void)ctx;
    kernels::dense_forward(exec, rows(x[0]), weight_.matrix(), bias_.flat(), rows(y));
  } else {
    const Tensor<T>& w = rounded_weight<T>();
    round_weights<T>(exec, weight_, w);
    kernels::dense_forward(exec, rows(x[0]), w.matrix(), bias_.flat(), rows(y), scratch(ctx));
  }
}

template <class T>
void Dense::backward_as(const TensorsOf<T>& x, const Tensor<T>& /*y*/, const Tensor<T>& dy,
                        const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::Dense::backward");
  const ExecSpace& exec = ctx.exec;
  if constexpr (std::is_same<T, float>::value) {
    kernels::dense_backward(exec, rows(x[0]), weight_.matrix(), rows(dy), rows(dx[0]),
                            weight_grad_.matrix(), bias_grad_.flat(), ctx.write_input_gradients);
  } else {
    kernels::dense_backward(exec, rows(x[0]), rounded_weight<T>().matrix(), rows(dy), rows(dx[0]),
                            weight_grad_.matrix(), bias_grad_.flat(), scratch(ctx),
                            ctx.write_input_gradients);
  }
}

template class GenericLayer<Dense>;

}  // namespace tessera
