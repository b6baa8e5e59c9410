// Element-wise activation layers: one class template over the kernel ops.
#pragma once

#include <tessera/kernels/activation.hpp>
#include <tessera/layers/layer.hpp>

namespace tessera {

template <class Op>
class Activation final : public GenericLayer<Activation<Op>> {
 public:
  using Options = Op;  // the op's parameters (LeakyReLU's slope)

  explicit Activation(std::string name, Op op = {}, std::vector<std::string> inputs = {});
  const char* type() const override { return Op::name; }
  const Op& op() const { return op_; }
  Shape output_shape(const Shapes& inputs) const override { return inputs.at(0); }
  std::int64_t flops_per_sample(const Shapes& inputs) const override {
    return inputs.at(0).inner();
  }
  // An op that keeps its derivative (GELU) reads that in backward, not x.
  bool backward_reads_inputs() const override { return Op::reads_x && !Op::keeps_derivative; }
  bool backward_reads_output() const override { return Op::reads_y; }
  bool backward_in_place() const override { return true; }
  bool writes_input_gradients() const override { return true; }
  // The derivative forward keeps (a float per input element), where the op
  // keeps it: written whole by every forward.
  std::int64_t recomputed_elements(const Shapes& inputs) const override {
    return Op::keeps_derivative ? inputs.at(0).numel() : 0;
  }
  void allocate(const Shapes& inputs) override;
  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);

 private:
  Op op_;
  std::string forward_region_, backward_region_;
  UnmanagedVector<float> derivative_;  // Op::keeps_derivative: f'(x) of the last forward
};

using ReLU = Activation<kernels::ReluOp>;
using LeakyReLU = Activation<kernels::LeakyReluOp>;
using GELU = Activation<kernels::GeluOp>;
using Tanh = Activation<kernels::TanhOp>;
using Sigmoid = Activation<kernels::SigmoidOp>;

extern template class GenericLayer<ReLU>;
extern template class GenericLayer<LeakyReLU>;
extern template class GenericLayer<GELU>;
extern template class GenericLayer<Tanh>;
extern template class GenericLayer<Sigmoid>;

}  // namespace tessera
