// Softmax along dimension 1 (features of [N, F], channels of [N, C, H, W]
// at every position): probabilities inside a model, e.g. attention weights
// or a mixture. The loss applies its own softmax to the model's output, so a
// classifier ends with logits, not with this layer.
#pragma once

#include <tessera/layers/layer.hpp>

namespace tessera {

class Softmax final : public GenericLayer<Softmax> {
 public:
  using GenericLayer::GenericLayer;
  const char* type() const override { return "Softmax"; }
  bool backward_reads_inputs() const override { return false; }
  Shape output_shape(const Shapes& inputs) const override;
  // exp, sum and scale per element.
  std::int64_t flops_per_sample(const Shapes& inputs) const override {
    return 3 * inputs.at(0).inner();
  }
  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);
};

extern template class GenericLayer<Softmax>;

}  // namespace tessera
