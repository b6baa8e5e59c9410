// Flatten, Add and Concat over the shared data-movement kernels.
#include <tessera/kernels/tensor_ops.hpp>
#include <tessera/layers/impl/registration.hpp>
#include <tessera/layers/structural.hpp>

namespace tessera {

namespace {
std::string shapes_text(const Shapes& shapes) {
  std::string text;
  for (const auto& s : shapes) text += (text.empty() ? "" : ", ") + to_string(s);
  return text;
}
// Elements per channel: H * W for images, 1 for feature vectors.
std::int64_t spatial_size(const Shape& s) { return s.rank() <= 2 ? 1 : s.inner() / s[1]; }
}  // namespace

LayerType flatten_layer_type() {
  return impl::LayerTypeBuilder<Flatten>("flatten").output("`[N, C·H·W]`").example({{2, 3, 2, 2}});
}

LayerType add_layer_type() {
  return impl::LayerTypeBuilder<Add>("add")
      .output("the element-wise sum of inputs of one shape")
      .example({{2, 5}, {2, 5}, {2, 5}});
}

LayerType concat_layer_type() {
  return impl::LayerTypeBuilder<Concat>("concat")
      .output(
          "concatenation along dimension 1 (channels, or features); the other dimensions "
          "must agree")
      .example({{2, 2, 3, 2}, {2, 3, 3, 2}});
}

Shape Flatten::output_shape(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  TESSERA_REQUIRE(in.rank() >= 2, where() << ": input " << in << " needs a batch dimension");
  return Shape{in[0], in.inner()};
}

template <class T>
void Flatten::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::Flatten::forward");
  kernels::copy_into(ctx.exec, x[0].flat(), y.flat(), false);
}

template <class T>
void Flatten::backward_as(const TensorsOf<T>& /*x*/, const Tensor<T>& /*y*/, const Tensor<T>& dy,
                          const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::Flatten::backward");
  if (dx[0].numel() > 0)
    kernels::copy_into(ctx.exec, dy.flat(), dx[0].flat(), true, ctx.write_input_gradients);
}

Shape Add::output_shape(const Shapes& inputs) const {
  for (const auto& s : inputs)
    TESSERA_REQUIRE(s == inputs[0],
                    where() << ": inputs must have one shape, got " << shapes_text(inputs));
  return inputs[0];
}

std::int64_t Add::flops_per_sample(const Shapes& inputs) const {
  return static_cast<std::int64_t>(inputs.size() - 1) * inputs.at(0).inner();
}

template <class T>
void Add::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::Add::forward");
  for (std::size_t i = 0; i < x.size(); ++i)
    kernels::copy_into(ctx.exec, x[i].flat(), y.flat(), i > 0);
}

template <class T>
void Add::backward_as(const TensorsOf<T>& /*x*/, const Tensor<T>& /*y*/, const Tensor<T>& dy,
                      const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::Add::backward");
  // An input gradient in dy's memory (Layer::backward_in_place) last, once
  // the others have read dy.
  for (const bool in_place : {false, true})
    for (const auto& g : dx)
      if (g.numel() > 0 && (g.data() == dy.data()) == in_place)
        kernels::copy_into(ctx.exec, dy.flat(), g.flat(), true, ctx.write_input_gradients);
}

Shape Concat::output_shape(const Shapes& inputs) const {
  const Shape& first = inputs.at(0);
  TESSERA_REQUIRE(first.rank() >= 2,
                  where() << ": inputs need a channel dimension, got " << shapes_text(inputs));
  Shape out = first;
  std::int64_t channels = 0;
  for (const auto& s : inputs) {
    bool fits = s.rank() == first.rank();
    for (int d = 0; fits && d < s.rank(); ++d) fits = d == 1 || s[d] == first[d];
    TESSERA_REQUIRE(fits, where() << ": inputs must agree in every dimension but 1, got "
                                  << shapes_text(inputs));
    channels += s[1];
  }
  out.set(1, channels);
  return out;
}

template <class T>
void Concat::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::Concat::forward");
  const Shape& out = y.shape();
  std::int64_t offset = 0;
  for (const auto& input : x) {
    kernels::channel_block(ctx.exec, input.flat(), input.shape()[1], y.flat(), out[1], offset,
                           out[0], spatial_size(out), true);
    offset += input.shape()[1];
  }
}

template <class T>
void Concat::backward_as(const TensorsOf<T>& x, const Tensor<T>& /*y*/, const Tensor<T>& dy,
                         const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::Concat::backward");
  const Shape& out = dy.shape();
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (dx[i].numel() > 0)
      kernels::channel_block(ctx.exec, dx[i].flat(), x[i].shape()[1], dy.flat(), out[1], offset,
                             out[0], spatial_size(out), false);
    offset += x[i].shape()[1];
  }
}

template class GenericLayer<Flatten>;
template class GenericLayer<Add>;
template class GenericLayer<Concat>;

}  // namespace tessera
