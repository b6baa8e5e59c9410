// Dense layer: shape checks and dispatch to the dense kernels.
#include <tessera/kernels/dense.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/impl/registration.hpp>

namespace tessera {

Dense::Dense(std::string name, const Options& options, std::vector<std::string> inputs)
    : Layer(std::move(name), std::move(inputs)), options_(options) {
  TESSERA_REQUIRE(options.units > 0, where() << ": units must be positive, got " << options.units);
}

Shape Dense::output_shape(const Shapes& inputs) const {
  const Shape& input = inputs.at(0);
  TESSERA_REQUIRE(input.rank() >= 2,
                  where() << ": input " << input << " needs a batch and a feature dimension");
  return Shape{input[0], options_.units};
}

std::vector<ParameterSpec> Dense::parameter_specs(const Shapes& inputs) const {
  const std::int64_t in = inputs.at(0).inner(), units = options_.units;
  std::vector<ParameterSpec> specs{
      ParameterSpec{"weight", Shape{units, in}, options_.init, in, units}};
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
  return 2 * inputs.at(0).inner() * options_.units + (options_.bias ? options_.units : 0);
}

LayerCost Dense::cost(const Shapes& inputs, bool input_gradient) const {
  LayerCost c = Layer::cost(inputs, input_gradient);
  const double batch = static_cast<double>(inputs.at(0)[0]);
  const double product = 2 * batch * static_cast<double>(inputs.at(0).inner() * options_.units);
  const double bias = options_.bias ? batch * static_cast<double>(options_.units) : 0.0;
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
      .output("`[N, units]`; the input's non-batch dimensions are flattened")
      .example({{2, 3, 4}}, "units = 3");
}

void Dense::forward(const Tensors& x, const Tensor<float>& y, const StepContext& /*ctx*/) {
  ScopedRegion region("tessera::Dense::forward");
  kernels::dense_forward(ExecSpace(), x[0].matrix(), weight_.matrix(), bias_.flat(), y.matrix());
}

void Dense::backward(const Tensors& x, const Tensor<float>& /*y*/, const Tensor<float>& dy,
                     const Tensors& dx, const StepContext& /*ctx*/) {
  ScopedRegion region("tessera::Dense::backward");
  kernels::dense_backward(ExecSpace(), x[0].matrix(), weight_.matrix(), dy.matrix(), dx[0].matrix(),
                          weight_grad_.matrix(), bias_grad_.flat());
}

}  // namespace tessera
