// Activations: kernel values against std:: references on every execution
// space, and finite-difference gradients of every activation layer.
#include <tessera/layers/activation.hpp>

#include <algorithm>
#include <cmath>

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

// GELU and its derivative on a dense grid over [-12, 12], computed by the
// kernels on each execution space, against double precision: relative
// 2e-6 for |x| <= 3 and 3e-5 beyond (where x * Phi(x) falls to 1e-32; the
// form 0.5 * x * (1 + erf(x / sqrt(2))) in float returns 0 there from
// x = -5.5 on, and would fail this).
TYPED_TEST(ActivationKernels, GeluKeepsItsRelativePrecision) {
  using E = TypeParam;
  const int n = 240001;
  std::vector<float> xs(n);
  for (int i = 0; i < n; ++i) xs[i] = -12.0f + 24.0f * static_cast<float>(i) / (n - 1);
  V<E> x("x", n), y("y", n), dy("dy", n), dx("dx", n);
  test::from_host(x, xs);
  Kokkos::deep_copy(dy, 1.0f);
  kernels::activation_forward(E(), kernels::GeluOp{}, x, y);
  kernels::activation_backward(E(), kernels::GeluOp{}, x, y, dy, dx);
  const auto ys = test::to_host(y), ds = test::to_host(dx);
  double worst_near = 0, worst_far = 0, worst_derivative = 0;
  for (int i = 0; i < n; ++i) {
    const double v = xs[i], cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    if (v != 0) {
      const double relative = std::fabs(ys[i] - v * cdf) / std::fabs(v * cdf);
      double& worst = std::fabs(v) <= 3 ? worst_near : worst_far;
      worst = std::max(worst, relative);
    }
    worst_derivative = std::max(worst_derivative, std::fabs(ds[i] - (cdf + v * pdf)));
  }
  EXPECT_LE(worst_near, 2e-6);
  EXPECT_LE(worst_far, 3e-5);
  EXPECT_LE(worst_derivative, 5e-7);
}

// GELU keeps its derivative in forward: y and each input gradient (dx
// written, added to, and in dy's memory) have the bits of computing f'(x)
// from x in backward, and a kept buffer longer than x serves.
TYPED_TEST(ActivationKernels, GeluKeptDerivativeGivesTheSameBits) {
  using E = TypeParam;
  const int n = 1037;
  const auto xs = test::random_values(n, 71), dys = test::random_values(n, 72),
             start = test::random_values(n, 73);
  V<E> x("x", n), y("y", n), y_kept("y kept", n), kept("kept", n + 5), dy("dy", n);
  test::from_host(x, xs);
  test::from_host(dy, dys);
  const kernels::GeluOp op;
  kernels::activation_forward(E(), op, x, y);
  kernels::activation_forward_keeping(E(), op, x, y_kept, kept);
  EXPECT_EQ(test::to_host(y_kept), test::to_host(y));
  for (const bool add : {true, false}) {
    V<E> dx("dx", n), dx_kept("dx kept", n);
    test::from_host(dx, start);
    test::from_host(dx_kept, start);
    kernels::activation_backward(E(), op, x, y, dy, dx, add);
    kernels::activation_backward_kept(E(), kept, dy, dx_kept, add);
    EXPECT_EQ(test::to_host(dx_kept), test::to_host(dx)) << (add ? "added" : "written");
  }
  V<E> in_place("dy in place", n), in_place_kept("dy in place, kept", n);
  test::from_host(in_place, dys);
  test::from_host(in_place_kept, dys);
  kernels::activation_backward(E(), op, x, y, in_place, in_place);
  kernels::activation_backward_kept(E(), kept, in_place_kept, in_place_kept);
  EXPECT_EQ(test::to_host(in_place_kept), test::to_host(in_place));
  V<E> short_kept("short", n - 1);
  EXPECT_THROW(kernels::activation_forward_keeping(E(), op, x, y_kept, short_kept), Error);
}

// The building blocks on the host, over their whole ranges.
TEST(ActivationMath, ExpOfNonPositiveArguments) {
  double worst = 0, worst_subnormal = 0;
  for (int i = 0; i <= 1000000; ++i) {
    const float a = -104.0f * static_cast<float>(i) / 1000000;
    const double exact = std::exp(static_cast<double>(a));
    const double error = std::fabs(kernels::impl::exp_nonpositive(a) - exact);
    if (a >= -87.0f)
      worst = std::max(worst, error / exact);
    else
      worst_subnormal = std::max(worst_subnormal, error);
  }
  EXPECT_LE(worst, 2e-7);
  // From -87 on the result is a subnormal or the smallest normals: within
  // the spacing of the subnormals (1.4e-45), plus 2e-7 of the largest.
  EXPECT_LE(worst_subnormal, 1.4e-45 + 2e-7 * std::exp(-87.0));
  EXPECT_EQ(kernels::impl::exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(kernels::impl::exp_nonpositive(-0.0f), 1.0f);
  EXPECT_EQ(kernels::impl::exp_nonpositive(-110.0f), 0.0f);
  EXPECT_EQ(kernels::impl::exp_nonpositive(-1e30f), 0.0f);
}

TEST(ActivationMath, NormalCdf) {
  double worst = 0;
  for (int i = 0; i <= 1000000; ++i) {
    const float x = -12.5f + 25.5f * static_cast<float>(i) / 1000000;
    const double exact = 0.5 * std::erfc(-static_cast<double>(x) / std::sqrt(2.0));
    worst = std::max(worst, std::fabs(kernels::impl::normal_cdf(x) - exact) / exact);
  }
  EXPECT_LE(worst, 3e-5);
  EXPECT_EQ(kernels::impl::normal_cdf(20.0f), 1.0f);
  EXPECT_EQ(kernels::impl::normal_cdf(-20.0f), 0.0f);
}

// The density's exponential that comes with Phi: e^(-x^2 / 2) within the
// exponential's 1.1e-7 and the rounding of its argument (z^2 = x^2 / 2
// rounded twice: 2.4e-7 of it, relative, in the result), down to the
// normal floats; Phi's part is normal_cdf's.
TEST(ActivationMath, NormalCdfPartsShareOneExponential) {
  double worst = 0;
  for (int i = 0; i <= 1000000; ++i) {
    const float x = -13.0f + 26.0f * static_cast<float>(i) / 1000000;
    const kernels::impl::NormalCdf p = kernels::impl::normal_cdf_parts(x);
    EXPECT_EQ(p.cdf, kernels::impl::normal_cdf(x));
    const double a = 0.5 * double(x) * double(x);
    if (a > 87) continue;
    const double exact = std::exp(-a);
    worst = std::max(worst, std::fabs(p.gauss - exact) / exact / (1.1e-7 + 2.4e-7 * a));
  }
  EXPECT_LE(worst, 1.0);
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

// In bf16 and fp16 each output and input gradient is the float layer's
// rounded once. Tanh and Sigmoid take their derivative from the output,
// which is rounded too: for inputs in [-1, 1], tanh's 1 - y^2 then errs by
// at most 2 u y^2 <= 2 u 0.58, relative 2.8 u of 1 - y^2 >= 0.42, and
// sigmoid's y (1 - y) by |1 - 2 y| u y <= 0.34 u, relative 1.7 u of
// y (1 - y) >= 0.197: with dx's own rounding, within 4 u.
template <class T, class L>
void expect_activation_16bit(const L& prototype, double input_grad_u) {
  L a(prototype.name(), prototype.op()), b(prototype.name(), prototype.op());
  test::expect_16bit_matches_float<T>(a, b, {Shape{4, 3, 5}}, {}, 1e-5, input_grad_u);
}

TEST(ActivationLayers, Bf16AndFp16AreTheFloatResultsRoundedOnce) {
  for (int format = 0; format < 2; ++format) {
    const auto check = [&](const auto& layer, double input_grad_u = 1.0) {
      if (format == 0)
        expect_activation_16bit<bf16>(layer, input_grad_u);
      else
        expect_activation_16bit<fp16>(layer, input_grad_u);
    };
    check(ReLU("relu"));
    check(LeakyReLU("leaky", kernels::LeakyReluOp{0.1f}));
    check(GELU("gelu"));
    check(Tanh("tanh"), 4.0);
    check(Sigmoid("sigmoid"), 4.0);
  }
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
