// Pooling layers: shared shape inference over the sliding-window geometry,
// and dispatch to the pooling kernels.
#include <tessera/kernels/pool.hpp>
#include <tessera/layers/pool.hpp>

namespace tessera {

namespace {
void require_images(const std::string& where, const Shape& in) {
  TESSERA_REQUIRE(in.rank() == 4, where << ": input " << in << " is not an image batch [N, C, H, W]");
}

kernels::Pool2dGeometry pool_geometry(const Shape& input, Extent2 kernel, Extent2 stride,
                                      Extent2 padding) {
  kernels::Pool2dGeometry g;
  g.planes = input[0] * input[1];
  g.rows = kernels::WindowAxis(input[2], kernel.h, stride.h, padding.h);
  g.cols = kernels::WindowAxis(input[3], kernel.w, stride.w, padding.w);
  return g;
}

// The whole plane as one window.
kernels::Pool2dGeometry global_geometry(const Shape& input) {
  return pool_geometry(input, Extent2(input[2], input[3]), 1, 0);
}
}  // namespace

Pool2D::Pool2D(const char* type, std::string name, Extent2 kernel, Extent2 stride,
               Extent2 padding, std::vector<std::string> inputs)
    : Layer(std::move(name), std::move(inputs)),
      type_(type),
      kernel_(kernel),
      stride_(stride.h == 0 ? kernel.h : stride.h, stride.w == 0 ? kernel.w : stride.w),
      padding_(padding) {
  TESSERA_REQUIRE(kernel.h > 0 && kernel.w > 0 && stride_.h > 0 && stride_.w > 0 &&
                      padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel.h &&
                      2 * padding.w <= kernel.w,
                  where() << ": kernel " << kernel.h << " x " << kernel.w << ", stride " << stride.h
                          << " x " << stride.w << ", padding " << padding.h << " x " << padding.w
                          << ": expected a positive kernel, stride >= 0 (0: the kernel), and "
                             "padding between 0 and half the kernel");
}

Shape Pool2D::output_shape(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  require_images(where(), in);
  const auto g = pool_geometry(in, kernel_, stride_, padding_);
  TESSERA_REQUIRE(g.rows.out >= 1 && g.cols.out >= 1,
                  where() << ": input " << in << " is smaller than the kernel " << kernel_.h << " x "
                          << kernel_.w << " with padding " << padding_.h << " x " << padding_.w);
  return Shape{in[0], in[1], g.rows.out, g.cols.out};
}

std::int64_t Pool2D::flops_per_sample(const Shapes& inputs) const {
  return output_shape(inputs).inner() * kernel_.h * kernel_.w;
}

void MaxPool2D::allocate(const Shapes& inputs) {
  argmax_ = Kokkos::View<int*, MemSpace>(
      Kokkos::view_alloc(name() + ".argmax", Kokkos::WithoutInitializing),
      output_shape(inputs).numel());
}

void MaxPool2D::forward(const Tensors& x, const Tensor<float>& y, const StepContext& /*ctx*/) {
  ScopedRegion region("tessera::MaxPool2D::forward");
  kernels::max_pool2d_forward(ExecSpace(), pool_geometry(x[0].shape(), kernel(), stride(), padding()),
                              x[0].flat(), y.flat(), argmax_);
}

void MaxPool2D::backward(const Tensors& x, const Tensor<float>& /*y*/, const Tensor<float>& dy,
                         const Tensors& dx, const StepContext& /*ctx*/) {
  ScopedRegion region("tessera::MaxPool2D::backward");
  if (dx[0].numel() == 0) return;
  kernels::max_pool2d_backward(ExecSpace(),
                               pool_geometry(x[0].shape(), kernel(), stride(), padding()), argmax_,
                               dy.flat(), dx[0].flat());
}

void AvgPool2D::forward(const Tensors& x, const Tensor<float>& y, const StepContext& /*ctx*/) {
  ScopedRegion region("tessera::AvgPool2D::forward");
  kernels::avg_pool2d_forward(ExecSpace(), pool_geometry(x[0].shape(), kernel(), stride(), padding()),
                              x[0].flat(), y.flat());
}

void AvgPool2D::backward(const Tensors& x, const Tensor<float>& /*y*/, const Tensor<float>& dy,
                         const Tensors& dx, const StepContext& /*ctx*/) {
  ScopedRegion region("tessera::AvgPool2D::backward");
  if (dx[0].numel() == 0) return;
  kernels::avg_pool2d_backward(ExecSpace(),
                               pool_geometry(x[0].shape(), kernel(), stride(), padding()),
                               dy.flat(), dx[0].flat());
}

Shape GlobalAvgPool::output_shape(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  require_images(where(), in);
  return Shape{in[0], in[1]};
}

void GlobalAvgPool::forward(const Tensors& x, const Tensor<float>& y, const StepContext& /*ctx*/) {
  ScopedRegion region("tessera::GlobalAvgPool::forward");
  kernels::avg_pool2d_forward(ExecSpace(), global_geometry(x[0].shape()), x[0].flat(), y.flat());
}

void GlobalAvgPool::backward(const Tensors& x, const Tensor<float>& /*y*/, const Tensor<float>& dy,
                             const Tensors& dx, const StepContext& /*ctx*/) {
  ScopedRegion region("tessera::GlobalAvgPool::backward");
  if (dx[0].numel() == 0) return;
  kernels::avg_pool2d_backward(ExecSpace(), global_geometry(x[0].shape()), dy.flat(), dx[0].flat());
}

}  // namespace tessera
