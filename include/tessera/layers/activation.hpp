// Element-wise activation layers, one class template over the kernel ops.
#pragma once

#include <tessera/layers/layer.hpp>

namespace tessera {

template <class Op>
class Activation final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override;
  Shape output_shape(const Shape& input) const override { return input; }
  void forward(const Tensor<float>& x, const Tensor<float>& y, bool training) override;
  void backward(const Tensor<float>& x, const Tensor<float>& y, const Tensor<float>& dy,
                const Tensor<float>& dx) override;
};

namespace kernels {
struct ReluOp;
}
using ReLU = Activation<kernels::ReluOp>;

}  // namespace tessera
