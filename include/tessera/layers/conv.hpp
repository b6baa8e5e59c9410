// 2-D convolution over NCHW images: weights [out, in, kh, kw] and a bias per
// output channel (optional), computed by one of kernels::ConvSchedule's
// schedules over blocks of samples whose scratch is allocated once in
// allocate(). On the OpenMP and Serial spaces, with a BLAS whose gemm runs
// on its calling thread, each thread takes whole blocks: im2col + gemm
// (threads), Winograd's F(4 x 4, 3 x 3) and F(2 x 2, 5 x 5) at
// stride 1 with channel counts that are multiples of 16 (winograd), or
// register tiles over the input laid out channel-last (direct); which one
// is the layer's kernel option (set_kernel_option; kernels::conv2d_fixed_schedule
// until set). Elsewhere each block takes all threads in turn (blocks). In
// bf16 or fp16 the columns are float and the products take a float copy of
// the weights rounded to the format.
#pragma once

#include <tessera/layers/layer.hpp>

namespace tessera {

namespace kernels {
enum class ConvSchedule;  // kernels/conv.hpp
}

// Window sizes along (rows, columns); a single number sets both.
struct Extent2 {
  std::int64_t h = 0, w = 0;
  Extent2(std::int64_t both) : h(both), w(both) {}  // NOLINT: implicit on purpose
  Extent2(std::int64_t rows, std::int64_t cols) : h(rows), w(cols) {}
};

// [N, C, H, W] -> [N, out_channels, (H + 2 p - k) / s + 1, (W + 2 p - k) / s + 1]
class Conv2D final : public GenericLayer<Conv2D> {
 public:
  // Scratch ceiling of ConvSchedule::blocks: the batch is lowered to
  // columns in blocks of samples whose columns fit in this many bytes.
  // The host fast paths' blocks: blocks that stay in cache beat whole-batch
  // blocks there (on the reference CNN, batch 128, 2 threads, 4 MiB ran both
  // convolutions faster than 16 MiB or than one sample at a time). The
  // device paths take kernels::device_block_scratch_bytes instead.
  static constexpr std::int64_t max_scratch_bytes = std::int64_t(4) << 20;

  struct Options {
    std::int64_t out_channels = 0;
    Extent2 kernel = 1, stride = 1, padding = 0;
    // A bias in front of BatchNorm is cancelled by it: leave it out there.
    bool bias = true;
    Init init = Init::he_uniform;  // the weights; the bias starts at zero
  };

  Conv2D(std::string name, const Options& options, std::vector<std::string> inputs = {});
  Conv2D(std::string name, std::int64_t out_channels, Extent2 kernel, Extent2 stride = 1,
         Extent2 padding = 0, std::vector<std::string> inputs = {})
      : Conv2D(std::move(name), Options{out_channels, kernel, stride, padding}, std::move(inputs)) {
  }

  const char* type() const override { return "Conv2D"; }
  bool backward_reads_output() const override { return false; }
  const Options& options() const { return options_; }
  std::int64_t out_channels() const { return options_.out_channels; }
  Extent2 kernel() const { return options_.kernel; }
  Extent2 stride() const { return options_.stride; }
  Extent2 padding() const { return options_.padding; }
  bool has_bias() const { return options_.bias; }

  // Kernel options: the schedules kernels::conv2d_schedules lists for the
  // geometry (threads, winograd, direct on the OpenMP and Serial spaces;
  // blocks elsewhere), family "conv2d".
  KernelOptions kernel_options(const Shapes& inputs, bool input_gradient) const override;
  std::vector<double> time_kernel_options(const ExecSpace& exec, const Shapes& inputs,
                                          bool input_gradient, int repetitions) const override;
  std::string kernel_option() const override;
  void set_kernel_option(const std::string& name) override;

  Shape output_shape(const Shapes& inputs) const override;
  std::vector<ParameterSpec> parameter_specs(const Shapes& inputs) const override;
  void bind_parameters(const Tensors& values, const Tensors& gradients) override;
  void allocate(const Shapes& inputs) override;
  std::int64_t buffer_bytes() const override;
  std::int64_t temporary_elements(const Shapes& inputs) const override;
  std::int64_t flops_per_sample(const Shapes& inputs) const override;
  LayerCost cost(const Shapes& inputs, bool input_gradient) const override;

  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);

 private:
  Options options_;
  Tensor<float> weight_, bias_, weight_grad_, bias_grad_;
  // 16-bit compute: the weights rounded to the format (made by forward,
  // read again by backward).
  Tensor<float> weight_rounded_;
  kernels::ConvSchedule schedule_{};  // set by allocate(), then by set_kernel_option()
  std::string chosen_;                // set_kernel_option()'s option until allocate()
  Vector<float> scratch_;
};

extern template class GenericLayer<Conv2D>;

}  // namespace tessera
