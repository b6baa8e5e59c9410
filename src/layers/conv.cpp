// Conv2D: shape checks, parameter layout, scratch sizing, and dispatch to
// the convolution kernels.
#include <tessera/kernels/conv.hpp>
#include <tessera/layers/conv.hpp>
#include <tessera/layers/impl/registration.hpp>

#include <sstream>

namespace tessera {

namespace {
kernels::Conv2dGeometry conv_geometry(const Shape& input, const Conv2D::Options& o) {
  kernels::Conv2dGeometry g;
  g.batch = input[0];
  g.in_channels = input[1];
  g.out_channels = o.out_channels;
  g.rows = kernels::WindowAxis(input[2], o.kernel.h, o.stride.h, o.padding.h);
  g.cols = kernels::WindowAxis(input[3], o.kernel.w, o.stride.w, o.padding.w);
  return g;
}

// The operations conv2d_forward and conv2d_backward (kernels/conv.hpp)
// execute for g on `schedule`, without the bias; as in the direct form,
// each term of a sum of products counts as a multiply and an add. Copies,
// padding, the folds of columns (which finish the direct form's sums) and
// the sums of the thread groups' partials are not counted. The im2col
// products are the direct form's.
// Winograd's F(m x m, r x r), t x t tiles, as impl/winograd.hpp runs it: per
// tile, t^2 products of every channel pair; per tile and channel, the
// input transform B^T d B and the output transform A^T M A or the
// gradient's A d A^T, each the terms of its matrices' nonzero coefficients
// (impl::winograd_input_flops and the others); per channel pair, the
// weights' G g G^T or the gradient's G^T dU G, 2 r t (r + t) either.
struct ConvOperations {
  double forward = 0, weight_gradient = 0, input_gradient = 0;
};

ConvOperations executed_operations(const kernels::Conv2dGeometry& g, kernels::ConvSchedule schedule,
                                   bool input_gradient) {
  const double in = static_cast<double>(g.in_channels), out = static_cast<double>(g.out_channels);
  const double batch = static_cast<double>(g.batch);
  const double direct = 2 * out * static_cast<double>(g.patch() * g.positions()) * batch;
  ConvOperations ops;
  if (schedule == kernels::ConvSchedule::winograd && g.winograd()) {
    const kernels::impl::Winograd wg(g.rows.kernel);
    const int t = wg.t;
    const double input_tile = kernels::impl::winograd_input_flops(wg);
    const double output_tile = kernels::impl::winograd_output_flops(wg);
    const double gradient_tile = kernels::impl::winograd_gradient_flops(wg);
    const double weights = kernels::impl::winograd_weight_flops(wg) * in * out;
    const double products = 2.0 * t * t * in * out;
    // Tiles of the outputs, and of the transposed convolution's: the inputs.
    const double tiles = batch * static_cast<double>(g.winograd_tiles());
    const double input_tiles = batch * static_cast<double>(g.transposed().winograd_tiles());
    ops.forward = weights + tiles * (in * input_tile + products + out * output_tile);
    ops.weight_gradient = tiles * (in * input_tile + products + out * gradient_tile) + weights;
    ops.input_gradient = weights + input_tiles * (out * input_tile + products + in * output_tile);
    return ops;
  }
  ops.forward = ops.weight_gradient = ops.input_gradient = direct;
  if (schedule == kernels::ConvSchedule::direct && g.direct_planar()) {
    // The planar form (kernels/impl/conv_planar.hpp): its forward where an
    // output row holds a vector, its weight gradient without dx.
    if (kernels::impl::planar_row_vectors(g) > 0)
      ops.forward = kernels::impl::planar_forward_products(g);
    if (!input_gradient) ops.weight_gradient = kernels::impl::planar_weight_gradient_products(g);
  }
  return ops;
}
}  // namespace

Conv2D::Conv2D(std::string name, const Options& options, std::vector<std::string> inputs)
    : GenericLayer(std::move(name), std::move(inputs)), options_(options) {
  const std::int64_t out_channels = options.out_channels;
  const Extent2 kernel = options.kernel, stride = options.stride, padding = options.padding;
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
  const auto g = conv_geometry(in, options_);
  const Options& o = options_;
  TESSERA_REQUIRE(g.rows.out >= 1 && g.cols.out >= 1,
                  where() << ": input " << in << " is smaller than the kernel " << o.kernel.h
                          << " x " << o.kernel.w << " with padding " << o.padding.h << " x "
                          << o.padding.w);
  return Shape{in[0], o.out_channels, g.rows.out, g.cols.out};
}

std::vector<ParameterSpec> Conv2D::parameter_specs(const Shapes& inputs) const {
  const Options& o = options_;
  const std::int64_t in_channels = inputs.at(0)[1], taps = o.kernel.h * o.kernel.w;
  const std::int64_t fan_in = in_channels * taps, fan_out = o.out_channels * taps;
  std::vector<ParameterSpec> specs{
      ParameterSpec{"weight", Shape{o.out_channels, in_channels, o.kernel.h, o.kernel.w}, o.init,
                    fan_in, fan_out}};
  if (o.bias)
    specs.push_back(ParameterSpec{"bias", Shape{o.out_channels}, Init::zeros, fan_in, fan_out});
  return specs;
}

void Conv2D::bind_parameters(const Tensors& values, const Tensors& gradients) {
  weight_ = values.at(0);
  weight_grad_ = gradients.at(0);
  // Without a bias, empty tensors: the kernels skip it.
  if (options_.bias) {
    bias_ = values.at(1);
    bias_grad_ = gradients.at(1);
  }
}

std::int64_t Conv2D::temporary_elements(const Shapes& inputs) const {
  const auto g = conv_geometry(inputs.at(0), options_);
  const std::int64_t block_bytes =
      host_fast_paths_v<ExecSpace> ? max_scratch_bytes : kernels::device_block_scratch_bytes;
  return kernels::conv2d_schedule<ExecSpace>() != kernels::ConvSchedule::blocks
             ? g.thread_scratch_size(kernels::conv2d_thread_slots<ExecSpace>())
             : g.scratch_size(kernels::conv2d_block_samples(g, block_bytes));
}

KernelOptions Conv2D::kernel_options(const Shapes& inputs, bool input_gradient) const {
  const auto g = conv_geometry(inputs.at(0), options_);
  KernelOptions options;
  options.family = "conv2d";
  for (const auto s : kernels::conv2d_schedules<ExecSpace>(g))
    options.names.push_back(kernels::conv_schedule_name(s));
  options.fixed = kernels::conv_schedule_name(kernels::conv2d_fixed_schedule<ExecSpace>(g));
  const Options& o = options_;
  std::ostringstream key;
  key << "conv2d " << inputs.at(0) << " -> " << o.out_channels << " kernel " << o.kernel.h << "x"
      << o.kernel.w << " stride " << o.stride.h << "x" << o.stride.w << " padding " << o.padding.h
      << "x" << o.padding.w << (input_gradient ? " with dx" : " without dx");
  options.key = key.str();
  return options;
}

std::vector<double> Conv2D::time_kernel_options(const ExecSpace& exec, const Shapes& inputs,
                                                bool input_gradient, int repetitions) const {
  const auto g = conv_geometry(inputs.at(0), options_);
  return kernels::conv2d_seconds(exec, g, kernels::conv2d_schedules<ExecSpace>(g), input_gradient,
                                 repetitions);
}

std::string Conv2D::kernel_option() const {
  return scratch_.size() > 0 ? kernels::conv_schedule_name(schedule_) : chosen_;
}

void Conv2D::set_kernel_option(const std::string& name) {
  kernels::ConvSchedule schedule;
  TESSERA_REQUIRE(kernels::conv_schedule_from_name(name, schedule),
                  where() << ": no kernel option '" << name
                          << "'; a convolution's are \"blocks\", \"threads\", \"winograd\" and "
                             "\"direct\" (those this build runs: Layer::kernel_options)");
  chosen_ = name;
  if (scratch_.size() > 0) schedule_ = schedule;
}

void Conv2D::allocate(const Shapes& inputs) {
  schedule_ = kernels::conv2d_fixed_schedule<ExecSpace>(conv_geometry(inputs.at(0), options_));
  if (!chosen_.empty()) kernels::conv_schedule_from_name(chosen_, schedule_);
  // The kernels' scratch: written before it is read in every call.
  scratch_ = Vector<float>(temporaries(inputs), temporary_elements(inputs));
  weight_rounded_ =
      compute() == FloatFormat::fp32
          ? Tensor<float>()
          : Tensor<float>(name() + ".weight_rounded", parameter_specs(inputs).at(0).shape);
}

std::int64_t Conv2D::buffer_bytes() const { return bytes_held(weight_rounded_); }

std::int64_t Conv2D::flops_per_sample(const Shapes& inputs) const {
  const Shape out = output_shape(inputs);
  const std::int64_t outputs = out.inner();
  return 2 * outputs * inputs.at(0)[1] * options_.kernel.h * options_.kernel.w +
         (options_.bias ? outputs : 0);
}

LayerCost Conv2D::cost(const Shapes& inputs, bool input_gradient) const {
  LayerCost c = Layer::cost(inputs, input_gradient);
  const double outputs = static_cast<double>(output_shape(inputs).numel());
  const double product =
      2 * outputs * static_cast<double>(inputs.at(0)[1] * options_.kernel.h * options_.kernel.w);
  const double bias = options_.bias ? outputs : 0.0;
  // Backward: dW from the columns, dx through the transposed weights when
  // wanted, and the bias sums; the column copies are not arithmetic.
  c.backward.flops = product * (input_gradient ? 2 : 1) + bias;
  // allocate() chose schedule_; before it, the schedule it will choose.
  const auto g = conv_geometry(inputs.at(0), options_);
  kernels::ConvSchedule schedule = kernels::conv2d_fixed_schedule<ExecSpace>(g);
  if (scratch_.size() > 0)
    schedule = schedule_;
  else if (!chosen_.empty())
    kernels::conv_schedule_from_name(chosen_, schedule);
  const ConvOperations ops = executed_operations(g, schedule, input_gradient);
  c.forward.executed = ops.forward + bias;
  c.backward.executed = ops.weight_gradient + (input_gradient ? ops.input_gradient : 0.0) + bias;
  return c;
}

LayerType conv2d_layer_type() {
  using O = Conv2D::Options;
  return impl::LayerTypeBuilder<Conv2D>("conv2d")
      .integer("out_channels", &O::out_channels, Range::closed(1, 1 << 20), impl::required)
      .extent2("kernel", &O::kernel, Range::closed(1, 4096), impl::required)
      .extent2("stride", &O::stride, Range::closed(1, 4096))
      .extent2("padding", &O::padding, Range::closed(0, 4096))
      .boolean("bias", &O::bias)
      .initializer("init", &O::init)
      .output(
          "`[N, out_channels, (H + 2p - k) / s + 1, (W + 2p - k) / s + 1]`; weights "
          "`[out, in, kh, kw]`")
      .example({{2, 2, 4, 3}}, "out_channels = 2\nkernel = [3, 2]\npadding = 1");
}

template <class T>
void Conv2D::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::Conv2D::forward");
  const ExecSpace& exec = ctx.exec;
  const auto g = conv_geometry(x[0].shape(), options_);
  if constexpr (is_storage16_v<T>) round_weights<T>(exec, weight_, weight_rounded_);
  const Tensor<float>& w = is_storage16_v<T> ? weight_rounded_ : weight_;
  kernels::conv2d_forward(exec, g, x[0].flat(), w.matrix(), bias_.flat(), y.flat(), scratch_,
                          schedule_);
}

template <class T>
void Conv2D::backward_as(const TensorsOf<T>& x, const Tensor<T>& /*y*/, const Tensor<T>& dy,
                         const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::Conv2D::backward");
  const auto g = conv_geometry(x[0].shape(), options_);
  const Tensor<float>& w = is_storage16_v<T> ? weight_rounded_ : weight_;
  kernels::conv2d_backward(ctx.exec, g, x[0].flat(), w.matrix(), dy.flat(), dx[0].flat(),
                           weight_grad_.matrix(), bias_grad_.flat(), scratch_, schedule_);
}

template class GenericLayer<Conv2D>;

}  // namespace tessera
