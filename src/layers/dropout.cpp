// Dropout over the counter-based dropout kernel.
#include <tessera/kernels/dropout.hpp>
#include <tessera/kernels/tensor_ops.hpp>
#include <tessera/layers/dropout.hpp>
#include <tessera/layers/impl/registration.hpp>

namespace tessera {

Dropout::Dropout(std::string name, const Options& options, std::vector<std::string> inputs)
    : GenericLayer(std::move(name), std::move(inputs)),
      rate_(options.rate),
      stream_(kernels::name_stream(this->name())) {
  const float rate = options.rate;
  TESSERA_REQUIRE(rate >= 0.0f && rate < 1.0f, where() << ": rate must be in [0, 1), got " << rate);
}

LayerType dropout_layer_type() {
  return impl::LayerTypeBuilder<Dropout>("dropout")
      .number("rate", &Dropout::Options::rate, Range::half_open(0, 1), impl::required)
      .output(
          "same shape; in training zeroes each element with probability `rate` and scales "
          "the rest by 1 / (1 − rate); the identity in evaluation. The mask depends only on "
          "the run's seed, the layer name, the step and the element, not on threads or "
          "backend")
      .example({{3, 2, 4}}, "rate = 0.25");
}

Shape Dropout::output_shape(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  TESSERA_REQUIRE(in.rank() >= 2, where() << ": input " << in << " needs a batch dimension");
  return in;
}

void Dropout::allocate(const Shapes& inputs) { max_elements_ = inputs.at(0).numel(); }

std::uint64_t Dropout::first_counter(const Shape& x, const StepContext& ctx) const {
  TESSERA_REQUIRE(x.numel() <= max_elements_, where() << ": input " << x << " has more than the "
                                                      << max_elements_
                                                      << " elements allocate() was given");
  TESSERA_REQUIRE(ctx.step >= 0 && ctx.sample_offset >= 0,
                  where() << ": step " << ctx.step << " and sample offset " << ctx.sample_offset
                          << " must not be negative");
  // Each step owns 2^40 counters, numbered by the sample's place in the
  // global batch: a sample draws the same mask on any number of ranks.
  const std::int64_t per_sample = x[0] > 0 ? x.numel() / x[0] : 0;
  return (static_cast<std::uint64_t>(ctx.step) << 40) +
         static_cast<std::uint64_t>(ctx.sample_offset) * static_cast<std::uint64_t>(per_sample);
}

template <class T>
void Dropout::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::Dropout::forward");
  if (!ctx.training) {
    kernels::copy_into(ctx.exec, x[0].flat(), y.flat(), false);
    return;
  }
  kernels::dropout_apply(ctx.exec, x[0].flat(), y.flat(), rate_, ctx.seed, stream_,
                         first_counter(x[0].shape(), ctx), false);
}

template <class T>
void Dropout::backward_as(const TensorsOf<T>& x, const Tensor<T>& /*y*/, const Tensor<T>& dy,
                          const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::Dropout::backward");
  if (dx[0].numel() == 0) return;
  if (!ctx.training) {
    kernels::copy_into(ctx.exec, dy.flat(), dx[0].flat(), true);
    return;
  }
  kernels::dropout_apply(ctx.exec, dy.flat(), dx[0].flat(), rate_, ctx.seed, stream_,
                         first_counter(x[0].shape(), ctx), true);
}

template class GenericLayer<Dropout>;

}  // namespace tessera
