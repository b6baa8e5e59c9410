// Activation layers: one template, instantiated per kernel op.
#include <tessera/kernels/activation.hpp>
#include <tessera/layers/activation.hpp>

namespace tessera {

namespace {
template <class Op>
struct LayerNames;
template <>
struct LayerNames<kernels::ReluOp> {
  static constexpr const char* type = "ReLU";
  static constexpr const char* forward = "tessera::ReLU::forward";
  static constexpr const char* backward = "tessera::ReLU::backward";
};
}  // namespace

template <class Op>
const char* Activation<Op>::type() const {
  return LayerNames<Op>::type;
}

template <class Op>
void Activation<Op>::forward(const Tensor<float>& x, const Tensor<float>& y, bool /*training*/) {
  ScopedRegion region(LayerNames<Op>::forward);
  kernels::activation_forward<Op>(ExecSpace(), x.flat(), y.flat());
}

template <class Op>
void Activation<Op>::backward(const Tensor<float>& x, const Tensor<float>& y,
                              const Tensor<float>& dy, const Tensor<float>& dx) {
  ScopedRegion region(LayerNames<Op>::backward);
  if (dx.numel() == 0) return;
  kernels::activation_backward<Op>(ExecSpace(), x.flat(), y.flat(), dy.flat(), dx.flat());
}

template class Activation<kernels::ReluOp>;

}  // namespace tessera
