// Dropout: in training, zeroes each element with probability `rate` and
// scales the survivors by 1 / (1 - rate); in inference, the identity. The
// mask is a function of (seed, layer name, step, element), recomputed in
// backward rather than stored.
#pragma once

#include <tessera/layers/layer.hpp>

namespace tessera {

class Dropout final : public GenericLayer<Dropout> {
 public:
  struct Options {
    float rate = 0.0f;  // in [0, 1)
  };

  Dropout(std::string name, const Options& options, std::vector<std::string> inputs = {});
  Dropout(std::string name, float rate, std::vector<std::string> inputs = {})
      : Dropout(std::move(name), Options{rate}, std::move(inputs)) {}

  const char* type() const override { return "Dropout"; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool backward_in_place() const override { return true; }
  float rate() const { return rate_; }
  Shape output_shape(const Shapes& inputs) const override;
  void allocate(const Shapes& inputs) override;
  std::int64_t flops_per_sample(const Shapes& inputs) const override {
    return inputs.at(0).inner();
  }
  // Backward reads the output gradient only: the mask is recomputed.
  LayerCost cost(const Shapes& inputs, bool input_gradient) const override {
    return gradient_routing_cost(inputs, input_gradient, 0);
  }

  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);

 private:
  // The counter of element 0 at this step: steps own disjoint counter ranges
  // of the largest batch's size, so no counter is drawn twice.
  std::uint64_t first_counter(const Shape& x, const StepContext& ctx) const;

  float rate_;
  std::uint64_t stream_;
  std::int64_t max_elements_ = 0;
};

extern template class GenericLayer<Dropout>;

}  // namespace tessera
