// Dense layer: shape checks and dispatch to the dense kernels.
#include <tessera/kernels/dense.hpp>
#include <tessera/layers/dense.hpp>

namespace tessera {

Dense::Dense(std::string name, std::int64_t units) : Layer(std::move(name)), units_(units) {
  TESSERA_REQUIRE(units > 0, "tessera::Dense '" << this->name() << "': units must be positive, got "
                                                << units);
}

Shape Dense::output_shape(const Shape& input) const {
  TESSERA_REQUIRE(input.rank() >= 2, "tessera::Dense '" << name() << "': input " << input
                                                         << " needs a batch and a feature dimension");
  return Shape{input[0], units_};
}

std::vector<ParameterSpec> Dense::parameter_specs(const Shape& input) const {
  const std::int64_t in = input.inner();
  return {ParameterSpec{"weight", Shape{units_, in}, Init::he_uniform, in, units_},
          ParameterSpec{"bias", Shape{units_}, Init::zeros, in, units_}};
}

void Dense::bind_parameters(const std::vector<Tensor<float>>& values,
                            const std::vector<Tensor<float>>& gradients) {
  weight_ = values.at(0);
  bias_ = values.at(1);
  weight_grad_ = gradients.at(0);
  bias_grad_ = gradients.at(1);
}

std::int64_t Dense::flops_per_sample(const Shape& input) const {
  return 2 * input.inner() * units_ + units_;
}

void Dense::forward(const Tensor<float>& x, const Tensor<float>& y, bool /*training*/) {
  ScopedRegion region("tessera::Dense::forward");
  kernels::dense_forward(ExecSpace(), x.matrix(), weight_.matrix(), bias_.flat(), y.matrix());
}

void Dense::backward(const Tensor<float>& x, const Tensor<float>& /*y*/, const Tensor<float>& dy,
                     const Tensor<float>& dx) {
  ScopedRegion region("tessera::Dense::backward");
  kernels::dense_backward(ExecSpace(), x.matrix(), weight_.matrix(), dy.matrix(), dx.matrix(),
                          weight_grad_.matrix(), bias_grad_.flat());
}

}  // namespace tessera
