// Activation layers: one template, instantiated per kernel op.
#include <tessera/layers/activation.hpp>

namespace tessera {

template <class Op>
Activation<Op>::Activation(std::string name, Op op, std::vector<std::string> inputs)
    : Layer(std::move(name), std::move(inputs)),
      op_(op),
      forward_region_(std::string("tessera::") + Op::name + "::forward"),
      backward_region_(std::string("tessera::") + Op::name + "::backward") {}

template <class Op>
void Activation<Op>::forward(const Tensors& x, const Tensor<float>& y, const StepContext& /*ctx*/) {
  ScopedRegion region(forward_region_);
  kernels::activation_forward(ExecSpace(), op_, x[0].flat(), y.flat());
}

template <class Op>
void Activation<Op>::backward(const Tensors& x, const Tensor<float>& y, const Tensor<float>& dy,
                              const Tensors& dx, const StepContext& /*ctx*/) {
  ScopedRegion region(backward_region_);
  if (dx[0].numel() == 0) return;
  kernels::activation_backward(ExecSpace(), op_, x[0].flat(), y.flat(), dy.flat(), dx[0].flat());
}

template class Activation<kernels::ReluOp>;
template class Activation<kernels::LeakyReluOp>;
template class Activation<kernels::GeluOp>;
template class Activation<kernels::TanhOp>;
template class Activation<kernels::SigmoidOp>;

}  // namespace tessera
