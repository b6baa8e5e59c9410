// Dense layer: y = x W^T + b over the flattened features of each sample.
#pragma once

#include <tessera/layers/layer.hpp>

namespace tessera {

class Dense final : public Layer {
 public:
  Dense(std::string name, std::int64_t units);

  const char* type() const override { return "Dense"; }
  std::int64_t units() const { return units_; }
  Shape output_shape(const Shape& input) const override;
  std::vector<ParameterSpec> parameter_specs(const Shape& input) const override;
  void bind_parameters(const std::vector<Tensor<float>>& values,
                       const std::vector<Tensor<float>>& gradients) override;
  std::int64_t flops_per_sample(const Shape& input) const override;

  void forward(const Tensor<float>& x, const Tensor<float>& y, bool training) override;
  void backward(const Tensor<float>& x, const Tensor<float>& y, const Tensor<float>& dy,
                const Tensor<float>& dx) override;

 private:
  std::int64_t units_;
  Tensor<float> weight_, bias_, weight_grad_, bias_grad_;
};

}  // namespace tessera
