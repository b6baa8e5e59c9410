// Activation layers: one template, instantiated per kernel op.
#include <tessera/layers/activation.hpp>
#include <tessera/layers/impl/registration.hpp>

namespace tessera {

template <class Op>
Activation<Op>::Activation(std::string name, Op op, std::vector<std::string> inputs)
    : GenericLayer<Activation<Op>>(std::move(name), std::move(inputs)),
      op_(op),
      forward_region_(std::string("tessera::") + Op::name + "::forward"),
      backward_region_(std::string("tessera::") + Op::name + "::backward") {}

template <class Op>
void Activation<Op>::allocate(const Shapes& inputs) {
  if constexpr (Op::keeps_derivative)
    derivative_ = UnmanagedVector<float>(this->recomputed(inputs), recomputed_elements(inputs));
}

template <class Op>
template <class T>
void Activation<Op>::forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx) {
  ScopedRegion region(forward_region_);
  if constexpr (Op::keeps_derivative) {
    TESSERA_REQUIRE(derivative_.size() >= static_cast<std::size_t>(x[0].numel()),
                    this->where() << ": forward of " << x[0].numel() << " elements before "
                                  << "allocate() for as many (it holds " << derivative_.size()
                                  << ")");
    kernels::activation_forward_keeping(ctx.exec, op_, x[0].flat(), y.flat(), derivative_);
  } else {
    kernels::activation_forward(ctx.exec, op_, x[0].flat(), y.flat());
  }
}

template <class Op>
template <class T>
void Activation<Op>::backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                                 const TensorsOf<T>& dx, const StepContext& ctx) {
  ScopedRegion region(backward_region_);
  if (dx[0].numel() == 0) return;
  if constexpr (Op::keeps_derivative)
    kernels::activation_backward_kept(ctx.exec, derivative_, dy.flat(), dx[0].flat(),
                                      !ctx.write_input_gradients);
  else
    kernels::activation_backward(ctx.exec, op_, x[0].flat(), y.flat(), dy.flat(), dx[0].flat(),
                                 !ctx.write_input_gradients);
}

LayerType relu_layer_type() {
  return impl::LayerTypeBuilder<ReLU>("relu").output("same shape").example({{3, 2, 4}});
}

LayerType leakyrelu_layer_type() {
  return impl::LayerTypeBuilder<LeakyReLU>("leakyrelu")
      .number("slope", &kernels::LeakyReluOp::slope, Range::closed(0, 1))
      .output("same shape; `slope · x` for x < 0")
      .example({{3, 2, 4}}, "slope = 0.1");
}

LayerType gelu_layer_type() {
  return impl::LayerTypeBuilder<GELU>("gelu")
      .output("same shape; the exact (erf) form")
      .example({{3, 2, 4}});
}

LayerType tanh_layer_type() {
  return impl::LayerTypeBuilder<Tanh>("tanh").output("same shape").example({{3, 2, 4}});
}

LayerType sigmoid_layer_type() {
  return impl::LayerTypeBuilder<Sigmoid>("sigmoid").output("same shape").example({{3, 2, 4}});
}

template class Activation<kernels::ReluOp>;
template class Activation<kernels::LeakyReluOp>;
template class Activation<kernels::GeluOp>;
template class Activation<kernels::TanhOp>;
template class Activation<kernels::SigmoidOp>;
template class GenericLayer<ReLU>;
template class GenericLayer<LeakyReLU>;
template class GenericLayer<GELU>;
template class GenericLayer<Tanh>;
template class GenericLayer<Sigmoid>;

}  // namespace tessera
