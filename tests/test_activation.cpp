// Activations: kernel values against std:: references on every execution
// space, and finite-difference gradients of every activation layer.
#include <tessera/layers/activation.hpp>

#include "layer_check.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class ActivationKernels : public ::testing::Test {};
TYPED_TEST_SUITE(ActivationKernels, test::ExecSpaces);

template <class ExecSpace>
using V = Kokkos::View<float*, Kokkos::LayoutRight, typename ExecSpace::memory_space>;

template <class E, class Op>
void expect_values(const Op& op, double (*reference)(double)) {
  const std::vector<float> xs = {-50.0f, -3.0f, -1.0f, -0.25f, 0.0f, 0.25f, 1.0f, 3.0f, 50.0f};
  V<E> x("x", xs.size()), y("y", xs.size());
  test::from_host(x, xs);
  kernels::activation_forward(E(), op, x, y);
  const auto ys = test::to_host(y);
  for (std::size_t i = 0; i < xs.size(); ++i)
    EXPECT_NEAR(ys[i], reference(xs[i]), 1e-6 + 1e-6 * std::fabs(reference(xs[i])))
        << Op::name << "(" << xs[i] << ")";
}

TYPED_TEST(ActivationKernels, ValuesMatchReferences) {
  using E = TypeParam;
  expect_values<E>(kernels::ReluOp{}, [](double x) { return x > 0 ? x : 0.0; });
  expect_values<E>(kernels::LeakyReluOp{0.2f}, [](double x) { return x > 0 ? x : 0.2 * x; });
  expect_values<E>(kernels::GeluOp{},
                   [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); });
  expect_values<E>(kernels::TanhOp{}, [](double x) { return std::tanh(x); });
  expect_values<E>(kernels::SigmoidOp{}, [](double x) { return 1 / (1 + std::exp(-x)); });
}

template <class L>
void expect_layer_gradients(L&& layer) {
  test::LayerHarness h(layer, {Shape{3, 2, 4}});
  // Keep inputs away from 0, where ReLU's derivative jumps.
  auto x = test::to_host(h.inputs[0].flat());
  for (auto& v : x) v = v < 0 ? v - 0.1f : v + 0.1f;
  test::from_host(h.inputs[0].flat(), x);
  h.expect_gradients({}, 1e-3f, 5e-3, 1e-3);
}

TEST(ActivationLayers, GradientsMatchFiniteDifferences) {
  expect_layer_gradients(ReLU("relu"));
  expect_layer_gradients(LeakyReLU("leaky", kernels::LeakyReluOp{0.1f}));
  expect_layer_gradients(GELU("gelu"));
  expect_layer_gradients(Tanh("tanh"));
  expect_layer_gradients(Sigmoid("sigmoid"));
}

TEST(ActivationLayers, BackwardAccumulatesIntoDx) {
  ReLU relu("relu");
  test::LayerHarness h(relu, {Shape{2, 3}});
  test::from_host(h.output_grad.flat(), std::vector<float>(6, 1.0f));
  h.forward();
  h.backward();
  const auto once = test::to_host(h.input_grads[0].flat());
  relu.backward(h.inputs, h.output, h.output_grad, h.input_grads, {});
  const auto twice = test::to_host(h.input_grads[0].flat());
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i], 2 * once[i]);
}

}  // namespace
