// Element-wise activation layers: one class template over the kernel ops.
#pragma once

#include <tessera/kernels/activation.hpp>
#include <tessera/layers/layer.hpp>

namespace tessera {

template <class Op>
class Activation final : public Layer {
 public:
  using Options = Op;  // the op's parameters (LeakyReLU's slope)

  explicit Activation(std::string name, Op op = {}, std::vector<std::string> inputs = {});
  const char* type() const override { return Op::name; }
  const Op& op() const { return op_; }
  Shape output_shape(const Shapes& inputs) const override { return inputs.at(0); }
  std::int64_t flops_per_sample(const Shapes& inputs) const override {
    return inputs.at(0).inner();
  }
  void forward(const Tensors& x, const Tensor<float>& y, const StepContext& ctx) override;
  void backward(const Tensors& x, const Tensor<float>& y, const Tensor<float>& dy,
                const Tensors& dx, const StepContext& ctx) override;

 private:
  Op op_;
  std::string forward_region_, backward_region_;
};

using ReLU = Activation<kernels::ReluOp>;
using LeakyReLU = Activation<kernels::LeakyReluOp>;
using GELU = Activation<kernels::GeluOp>;
using Tanh = Activation<kernels::TanhOp>;
using Sigmoid = Activation<kernels::SigmoidOp>;

}  // namespace tessera
