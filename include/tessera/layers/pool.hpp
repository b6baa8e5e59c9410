// Pooling over NCHW images: max and average pooling over sliding windows
// (PyTorch semantics), and global average pooling to one value per channel.
#pragma once

#include <tessera/layers/conv.hpp>
#include <tessera/layers/layer.hpp>

namespace tessera {

// Shape inference and options shared by the windowed pooling layers.
// stride 0 means stride = kernel.
class Pool2D : public Layer {
 public:
  struct Options {
    Extent2 kernel = 1;
    Extent2 stride = 0;   // 0: the kernel
    Extent2 padding = 0;  // at most half the kernel
  };

  // type: the concrete layer's name, known here so the constructor's checks can name it.
  Pool2D(const char* type, std::string name, const Options& options,
         std::vector<std::string> inputs);

  const char* type() const final { return type_; }
  // Max pooling's backward reads the positions forward kept, average
  // pooling's none: neither reads a value.
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool writes_input_gradients() const override { return true; }

  Extent2 kernel() const { return kernel_; }
  Extent2 stride() const { return stride_; }
  Extent2 padding() const { return padding_; }
  Shape output_shape(const Shapes& inputs) const override;
  // One operation per window tap.
  std::int64_t flops_per_sample(const Shapes& inputs) const override;
  // Backward reads the output gradient only (and max pooling's argmax).
  LayerCost cost(const Shapes& inputs, bool input_gradient) const override;

 private:
  const char* type_;
  Extent2 kernel_, stride_, padding_;
};

// Ties go to the first maximum in row-major window order; padding never wins.
class MaxPool2D final : public GenericLayer<MaxPool2D, Pool2D> {
 public:
  MaxPool2D(std::string name, const Options& options, std::vector<std::string> inputs = {})
      : GenericLayer("MaxPool2D", std::move(name), options, std::move(inputs)) {}
  MaxPool2D(std::string name, Extent2 kernel, Extent2 stride = 0, Extent2 padding = 0,
            std::vector<std::string> inputs = {})
      : MaxPool2D(std::move(name), Options{kernel, stride, padding}, std::move(inputs)) {}
  void allocate(const Shapes& inputs) override;
  std::int64_t buffer_bytes() const override;
  // Pooling's, with the argmax written forward and read backward.
  LayerCost cost(const Shapes& inputs, bool input_gradient) const override;
  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);

 private:
  Kokkos::View<int*, MemSpace> argmax_;  // per output: position of the maximum in its plane
};

// count_include_pad = true: every window averages over kernel_h * kernel_w.
class AvgPool2D final : public GenericLayer<AvgPool2D, Pool2D> {
 public:
  AvgPool2D(std::string name, const Options& options, std::vector<std::string> inputs = {})
      : GenericLayer("AvgPool2D", std::move(name), options, std::move(inputs)) {}
  AvgPool2D(std::string name, Extent2 kernel, Extent2 stride = 0, Extent2 padding = 0,
            std::vector<std::string> inputs = {})
      : AvgPool2D(std::move(name), Options{kernel, stride, padding}, std::move(inputs)) {}
  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);
};

// [N, C, H, W] -> [N, C]: the mean of each channel.
class GlobalAvgPool final : public GenericLayer<GlobalAvgPool> {
 public:
  using GenericLayer::GenericLayer;
  const char* type() const override { return "GlobalAvgPool"; }
  bool backward_reads_inputs() const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool writes_input_gradients() const override { return true; }
  Shape output_shape(const Shapes& inputs) const override;
  std::int64_t flops_per_sample(const Shapes& inputs) const override {
    return inputs.at(0).inner();
  }
  LayerCost cost(const Shapes& inputs, bool input_gradient) const override {
    return gradient_routing_cost(inputs, input_gradient, 0);
  }
  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);
};

extern template class GenericLayer<MaxPool2D, Pool2D>;
extern template class GenericLayer<AvgPool2D, Pool2D>;
extern template class GenericLayer<GlobalAvgPool>;

}  // namespace tessera
