// Softmax: shape checks, dispatch to the softmax kernels, registration.
#include <tessera/kernels/softmax.hpp>
#include <tessera/layers/impl/registration.hpp>
#include <tessera/layers/softmax.hpp>

namespace tessera {

namespace {
kernels::SoftmaxLayout layout_of(const Shape& s) {
  return kernels::SoftmaxLayout{s[0], s[1], s.rank() > 2 ? s.inner() / s[1] : 1};
}
}  // namespace

LayerType softmax_layer_type() {
  return impl::LayerTypeBuilder<Softmax>("softmax")
      .output("same shape; along dimension 1 (features, or channels at every position)")
      .example({{3, 4, 2, 1}});
}

Shape Softmax::output_shape(const Shapes& inputs) const {
  const Shape& in = inputs.at(0);
  TESSERA_REQUIRE(in.rank() >= 2 && in[1] > 0,
                  where() << ": input " << in << " needs a batch dimension and at least one class");
  return in;
}

template <class T>
void Softmax::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region("tessera::Softmax::forward");
  kernels::softmax_forward(ctx.exec, layout_of(x[0].shape()), x[0].flat(), y.flat());
}

template <class T>
void Softmax::backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                          const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region("tessera::Softmax::backward");
  if (dx[0].numel() == 0) return;
  kernels::softmax_backward(ctx.exec, layout_of(x[0].shape()), y.flat(), dy.flat(), dx[0].flat());
}

template class GenericLayer<Softmax>;

}  // namespace tessera
