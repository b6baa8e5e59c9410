// Pooling layers: shared shape inference over the sliding-window geometry,
// and dispatch to the pooling kernels.
#include <tessera/kernels/pool.hpp>
#include <tessera/layers/impl/registration.hpp>
#include <tessera/layers/pool.hpp>

namespace tessera {

namespace {
void require_images(const std::string& where, const Shape& in) {
  TESSERA_REQUIRE(in.rank() == 4,
                  where << ": input " << in << " is not an image batch [N, C, H, W]");
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

Pool2D::Pool2D(const char* type, std::string name, const Options& options,
               std::vector<std::string> inputs)
    : Layer(std::move(name), std::move(inputs)),
      type_(type),
      kernel_(options.kernel),
      stride_(options.stride.h == 0 ? options.kernel.h : options.stride.h,
              options.stride.w == 0 ? options.kernel.w : options.stride.w),
      padding_(options.padding) {
  const Extent2 kernel = options.kernel, stride = options.stride, padding = options.padding;
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
                  where() << ": input " << in << " is smaller than the kernel " << kernel_.h
                          << " x " << kernel_.w << " with padding " << padding_.h << " x "
                          << padding_.w);
  return Shape{in[0], in[1], g.rows.out, g.cols.out};
}

std::int64_t Pool2D::flops_per_sample(const Shapes& inputs) const {
  return output_shape(inputs).inner() * kernel_.h * kernel_.w;
}

LayerCost Pool2D::cost(const Shapes& inputs, bool input_gradient) const {
  return gradient_routing_cost(inputs, input_gradient, 0);
}

LayerCost MaxPool2D::cost(const Shapes& inputs, bool input_gradient) const {
  return gradient_routing_cost(inputs, input_gradient,
                               sizeof(int) * static_cast<double>(output_shape(inputs).numel()));
}

namespace {
// The keys both windowed pools take.
template <class L>
impl::LayerTypeBuilder<L> windowed_pool(const char* name) {
  using O = Pool2D::Options;
  impl::LayerTypeBuilder<L> builder(name);
  builder.extent2("kernel", &O::kernel, Range::closed(1, 4096), impl::required)
      .extent2("stride", &O::stride, Range::closed(1, 4096))
      .default_text("= kernel")
      .extent2("padding", &O::padding, Range::closed(0, 4096))
      .note("at most kernel / 2")
      .complete([](O& o) {
        if (o.stride.h == 0) o.stride = o.kernel;
      });
  return builder;
}
}  // namespace

LayerType maxpool2d_layer_type() {
  return windowed_pool<MaxPool2D>("maxpool2d")
      .output("`[N, C, Ho, Wo]`; ties go to the first maximum")
      .example({{2, 2, 4, 5}}, "kernel = 2");
}

LayerType avgpool2d_layer_type() {
  return windowed_pool<AvgPool2D>("avgpool2d")
      .output(
          "`[N, C, Ho, Wo]`; padded cells count in the divisor (PyTorch's "
          "`count_include_pad = true`)")
      .example({{2, 2, 5, 4}}, "kernel = 3\nstride = 2\npadding = 1");
}

LayerType globalavgpool_layer_type() {
  return impl::LayerTypeBuilder<GlobalAvgPool>("globalavgpool")
      .output("`[N, C]`")
      .example({{2, 3, 3, 2}});
}

void MaxPool2D::allocate(const Shapes& inputs) {
  argmax_ = Kokkos::View<int*, MemSpace>(
      Kokkos::view_alloc(name() + ".argmax", Kokkos::WithoutInitializing),
      output_shape(inputs).numel());
}

std::int64_t MaxPool2D::buffer_bytes() const { return bytes_held(argmax_); }

template <class T>
void MaxPool2D::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::MaxPool2D::forward");
  kernels::max_pool2d_forward(ctx.exec, pool_geometry(x[0].shape(), kernel(), stride(), padding()),
                              x[0].flat(), y.flat(), argmax_);
}

template <class T>
void MaxPool2D::backward_as(const TensorsOf<T>& x, const Tensor<T>& /*y*/, const Tensor<T>& dy,
                            const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::MaxPool2D::backward");
  if (dx[0].numel() == 0) return;
  kernels::max_pool2d_backward(ctx.exec, pool_geometry(x[0].shape(), kernel(), stride(), padding()),
                               argmax_, dy.flat(), dx[0].flat(), !ctx.write_input_gradients);
}

template <class T>
void AvgPool2D::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::AvgPool2D::forward");
  kernels::avg_pool2d_forward(ctx.exec, pool_geometry(x[0].shape(), kernel(), stride(), padding()),
                              x[0].flat(), y.flat());
}

template <class T>
void AvgPool2D::backward_as(const TensorsOf<T>& x, const Tensor<T>& /*y*/, const Tensor<T>& dy,
                            const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::AvgPool2D::backward");
  if (dx[0].numel() == 0) return;
  kernels::avg_pool2d_backward(ctx.exec, pool_geometry(x[0].shape(), kernel(), stride(), padding()),
                               dy.flat(), dx[0].flat(), !ctx.write_input_gradients);
}

Shape GlobalAvgPool::output_shape(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  require_images(where(), in);
  return Shape{in[0], in[1]};
}

template <class T>
void GlobalAvgPool::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::GlobalAvgPool::forward");
  kernels::avg_pool2d_forward(ctx.exec, global_geometry(x[0].shape()), x[0].flat(), y.flat());
}

template <class T>
void GlobalAvgPool::backward_as(const TensorsOf<T>& x, const Tensor<T>& /*y*/, const Tensor<T>& dy,
                                const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::GlobalAvgPool::backward");
  if (dx[0].numel() == 0) return;
  kernels::avg_pool2d_backward(ctx.exec, global_geometry(x[0].shape()), dy.flat(), dx[0].flat(),
                               !ctx.write_input_gradients);
}

template class GenericLayer<MaxPool2D, Pool2D>;
template class GenericLayer<AvgPool2D, Pool2D>;
template class GenericLayer<GlobalAvgPool>;

}  // namespace tessera
