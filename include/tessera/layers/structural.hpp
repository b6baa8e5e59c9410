// Layers that move data without arithmetic weights: Flatten, Add (residual
// sums of equal shapes) and Concat (along channels, dim 1).
#pragma once

#include <tessera/layers/layer.hpp>

namespace tessera {

// [N, ...] -> [N, prod(...)]
class Flatten final : public GenericLayer<Flatten> {
 public:
  using GenericLayer::GenericLayer;
  const char* type() const override { return "Flatten"; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool backward_in_place() const override { return true; }
  bool writes_input_gradients() const override { return true; }
  Shape output_shape(const Shapes& inputs) const override;
  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);
};

// y = x0 + x1 + ...; all inputs have one shape. In 16 bits each input
// after the first is added to y and rounded once.
class Add final : public GenericLayer<Add> {
 public:
  static constexpr int input_count = -1;  // two or more
  Add(std::string name, std::vector<std::string> inputs)
      : GenericLayer(std::move(name), std::move(inputs)) {}
  const char* type() const override { return "Add"; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool backward_in_place() const override { return true; }
  bool writes_input_gradients() const override { return true; }
  int arity() const override { return input_count; }
  Shape output_shape(const Shapes& inputs) const override;
  std::int64_t flops_per_sample(const Shapes& inputs) const override;
  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);
};

// Concatenation along dim 1 (channels of NCHW, features of [N, F]); the
// other dimensions must agree.
class Concat final : public GenericLayer<Concat> {
 public:
  static constexpr int input_count = -1;  // two or more
  Concat(std::string name, std::vector<std::string> inputs)
      : GenericLayer(std::move(name), std::move(inputs)) {}
  const char* type() const override { return "Concat"; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  int arity() const override { return input_count; }
  Shape output_shape(const Shapes& inputs) const override;
  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);
};

extern template class GenericLayer<Flatten>;
extern template class GenericLayer<Add>;
extern template class GenericLayer<Concat>;

}  // namespace tessera
