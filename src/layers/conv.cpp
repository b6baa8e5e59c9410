// Conv2D: shape checks, parameter layout, scratch sizing, and dispatch to
// the convolution kernels.
#include <tessera/kernels/conv.hpp>
#include <tessera/layers/conv.hpp>

namespace tessera {

namespace {
kernels::Conv2dGeometry conv_geometry(const Shape& input, std::int64_t out_channels, Extent2 kernel,
                                      Extent2 stride, Extent2 padding) {
  kernels::Conv2dGeometry g;
  g.batch = input[0];
  g.in_channels = input[1];
  g.out_channels = out_channels;
  g.rows = kernels::WindowAxis(input[2], kernel.h, stride.h, padding.h);
  g.cols = kernels::WindowAxis(input[3], kernel.w, stride.w, padding.w);
  return g;
}
}  // namespace

Conv2D::Conv2D(std::string name, std::int64_t out_channels, Extent2 kernel, Extent2 stride,
               Extent2 padding, std::vector<std::string> inputs)
    : Layer(std::move(name), std::move(inputs)),
      out_channels_(out_channels),
      kernel_(kernel),
      stride_(stride),
      padding_(padding) {
  TESSERA_REQUIRE(out_channels > 0 && kernel.h > 0 && kernel.w > 0 && stride.h > 0 &&
                      stride.w > 0 && padding.h >= 0 && padding.w >= 0,
                  where() << ": out_channels " << out_channels << ", kernel " << kernel.h << " x "
                          << kernel.w << ", stride " << stride.h << " x " << stride.w
                          << ", padding " << padding.h << " x " << padding.w
                          << ": expected positive channels, kernel and stride, padding >= 0");
}

Shape Conv2D::output_shape(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  TESSERA_REQUIRE(in.rank() == 4 && in[1] > 0,
                  where() << ": input " << in << " is not an image batch [N, C, H, W]");
  const auto g = conv_geometry(in, out_channels_, kernel_, stride_, padding_);
  TESSERA_REQUIRE(g.rows.out >= 1 && g.cols.out >= 1,
                  where() << ": input " << in << " is smaller than the kernel " << kernel_.h << " x "
                          << kernel_.w << " with padding " << padding_.h << " x " << padding_.w);
  return Shape{in[0], out_channels_, g.rows.out, g.cols.out};
}

std::vector<ParameterSpec> Conv2D::parameter_specs(const Shapes& inputs) const {
  const std::int64_t in_channels = inputs.at(0)[1];
  const std::int64_t taps = kernel_.h * kernel_.w;
  return {ParameterSpec{"weight", Shape{out_channels_, in_channels, kernel_.h, kernel_.w},
                        Init::he_uniform, in_channels * taps, out_channels_ * taps},
          ParameterSpec{"bias", Shape{out_channels_}, Init::zeros, in_channels * taps,
                        out_channels_ * taps}};
}

void Conv2D::bind_parameters(const Tensors& values, const Tensors& gradients) {
  weight_ = values.at(0);
  bias_ = values.at(1);
  weight_grad_ = gradients.at(0);
  bias_grad_ = gradients.at(1);
}

void Conv2D::allocate(const Shapes& inputs) {
  const auto g = conv_geometry(inputs.at(0), out_channels_, kernel_, stride_, padding_);
  const std::int64_t block = kernels::conv2d_block_samples(g, max_scratch_bytes);
  scratch_ = Vector<float>(Kokkos::view_alloc(name() + ".scratch", Kokkos::WithoutInitializing),
                           block * g.scratch_per_sample());
}

std::int64_t Conv2D::flops_per_sample(const Shapes& inputs) const {
  const Shape out = output_shape(inputs);
  const std::int64_t outputs = out.inner();
  return 2 * outputs * inputs.at(0)[1] * kernel_.h * kernel_.w + outputs;
}

LayerCost Conv2D::cost(const Shapes& inputs, bool input_gradient) const {
  LayerCost c = Layer::cost(inputs, input_gradient);
  const double outputs = static_cast<double>(output_shape(inputs).numel());
  const double product = 2 * outputs * static_cast<double>(inputs.at(0)[1] * kernel_.h * kernel_.w);
  // Backward: dW from the columns, dx through the transposed weights when
  // wanted, and the bias sums; the column copies are not arithmetic.
  c.backward.flops = product * (input_gradient ? 2 : 1) + outputs;
  return c;
}

void Conv2D::forward(const Tensors& x, const Tensor<float>& y, const StepContext& /*ctx*/) {
  ScopedRegion region("tessera::Conv2D::forward");
  const auto g = conv_geometry(x[0].shape(), out_channels_, kernel_, stride_, padding_);
  kernels::conv2d_forward(ExecSpace(), g, x[0].flat(), weight_.matrix(), bias_.flat(), y.flat(),
                          scratch_);
}

void Conv2D::backward(const Tensors& x, const Tensor<float>& /*y*/, const Tensor<float>& dy,
                      const Tensors& dx, const StepContext& /*ctx*/) {
  ScopedRegion region("tessera::Conv2D::backward");
  const auto g = conv_geometry(x[0].shape(), out_channels_, kernel_, stride_, padding_);
  kernels::conv2d_backward(ExecSpace(), g, x[0].flat(), weight_.matrix(), dy.flat(), dx[0].flat(),
                           weight_grad_.matrix(), bias_grad_.flat(), scratch_);
}

}  // namespace tessera
