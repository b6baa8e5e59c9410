// Dense layer: y = x W^T + b over the flattened features of each sample;
// without a bias (Options::bias = false), y = x W^T.
#pragma once

#include <tessera/layers/layer.hpp>

namespace tessera {

class Dense final : public Layer {
 public:
  struct Options {
    std::int64_t units = 0;
    // A bias in front of a normalisation is cancelled by it: leave it out there.
    bool bias = true;
    Init init = Init::he_uniform;  // the weights; the bias starts at zero
  };

  Dense(std::string name, const Options& options, std::vector<std::string> inputs = {});
  Dense(std::string name, std::int64_t units, std::vector<std::string> inputs = {})
      : Dense(std::move(name), Options{units}, std::move(inputs)) {}

  const char* type() const override { return "Dense"; }
  std::int64_t units() const { return options_.units; }
  bool has_bias() const { return options_.bias; }
  Shape output_shape(const Shapes& inputs) const override;
  std::vector<ParameterSpec> parameter_specs(const Shapes& inputs) const override;
  void bind_parameters(const Tensors& values, const Tensors& gradients) override;
  std::int64_t flops_per_sample(const Shapes& inputs) const override;
  LayerCost cost(const Shapes& inputs, bool input_gradient) const override;

  void forward(const Tensors& x, const Tensor<float>& y, const StepContext& ctx) override;
  void backward(const Tensors& x, const Tensor<float>& y, const Tensor<float>& dy,
                const Tensors& dx, const StepContext& ctx) override;

 private:
  Options options_;
  Tensor<float> weight_, bias_, weight_grad_, bias_grad_;
};

}  // namespace tessera
