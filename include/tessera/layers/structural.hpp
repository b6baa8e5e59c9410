// Layers that move data without arithmetic weights: Flatten, Add (residual
// sums of equal shapes) and Concat (along channels, dim 1).
#pragma once

#include <tessera/layers/layer.hpp>

namespace tessera {

// [N, ...] -> [N, prod(...)]
class Flatten final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Flatten"; }
  Shape output_shape(const Shapes& inputs) const override;
  void forward(const Tensors& x, const Tensor<float>& y, const StepContext& ctx) override;
  void backward(const Tensors& x, const Tensor<float>& y, const Tensor<float>& dy,
                const Tensors& dx, const StepContext& ctx) override;
};

// y = x0 + x1 + ...; all inputs have one shape.
class Add final : public Layer {
 public:
  static constexpr int input_count = -1;  // two or more
  Add(std::string name, std::vector<std::string> inputs)
      : Layer(std::move(name), std::move(inputs)) {}
  const char* type() const override { return "Add"; }
  int arity() const override { return input_count; }
  Shape output_shape(const Shapes& inputs) const override;
  std::int64_t flops_per_sample(const Shapes& inputs) const override;
  void forward(const Tensors& x, const Tensor<float>& y, const StepContext& ctx) override;
  void backward(const Tensors& x, const Tensor<float>& y, const Tensor<float>& dy,
                const Tensors& dx, const StepContext& ctx) override;
};

// Concatenation along dim 1 (channels of NCHW, features of [N, F]); the
// other dimensions must agree.
class Concat final : public Layer {
 public:
  static constexpr int input_count = -1;  // two or more
  Concat(std::string name, std::vector<std::string> inputs)
      : Layer(std::move(name), std::move(inputs)) {}
  const char* type() const override { return "Concat"; }
  int arity() const override { return input_count; }
  Shape output_shape(const Shapes& inputs) const override;
  void forward(const Tensors& x, const Tensor<float>& y, const StepContext& ctx) override;
  void backward(const Tensors& x, const Tensor<float>& y, const Tensor<float>& dy,
                const Tensors& dx, const StepContext& ctx) override;
};

}  // namespace tessera
