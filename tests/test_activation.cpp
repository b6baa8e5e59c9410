// Activation kernels: values and finite-difference gradients.
#include <tessera/kernels/activation.hpp>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class ActivationKernels : public ::testing::Test {};
TYPED_TEST_SUITE(ActivationKernels, test::ExecSpaces);

template <class ExecSpace>
using V = Kokkos::View<float*, Kokkos::LayoutRight, typename ExecSpace::memory_space>;

TYPED_TEST(ActivationKernels, ReluValues) {
  using E = TypeParam;
  V<E> x("x", 5), y("y", 5);
  test::from_host(x, {-2.0f, -0.5f, 0.0f, 0.5f, 3.0f});
  kernels::activation_forward<kernels::ReluOp>(E(), x, y);
  const std::vector<float> expected = {0.0f, 0.0f, 0.0f, 0.5f, 3.0f};
  EXPECT_EQ(test::to_host(y), expected);
}

TYPED_TEST(ActivationKernels, ReluGradientMatchesFiniteDifferences) {
  using E = TypeParam;
  const int n = 32;
  V<E> x("x", n), y("y", n), dy("dy", n), dx("dx", n);
  // Keep inputs away from the kink at 0, where the derivative jumps.
  auto xh = test::random_values(n, 31);
  for (auto& v : xh) v = v < 0 ? v - 0.1f : v + 0.1f;
  test::from_host(x, xh);
  const auto r = test::random_values(n, 32);
  test::from_host(dy, r);
  const auto loss = [&]() {
    kernels::activation_forward<kernels::ReluOp>(E(), x, y);
    const auto yh = test::to_host(y);
    double l = 0;
    for (int i = 0; i < n; ++i) l += double(r[i]) * yh[i];
    return l;
  };
  loss();
  kernels::activation_backward<kernels::ReluOp>(E(), x, y, dy, dx);
  test::expect_gradient("dx", x, test::to_host(dx), loss, 1e-2f);
}

}  // namespace
