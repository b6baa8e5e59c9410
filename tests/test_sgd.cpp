// SGD updates against hand-computed values.
#include <tessera/kernels/sgd.hpp>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class SgdKernel : public ::testing::Test {};
TYPED_TEST_SUITE(SgdKernel, test::ExecSpaces);

template <class ExecSpace>
using V = Kokkos::View<float*, Kokkos::LayoutRight, typename ExecSpace::memory_space>;

TYPED_TEST(SgdKernel, PlainStep) {
  using E = TypeParam;
  V<E> p("p", 2), g("g", 2), v("v", 2);
  test::from_host(p, {1.0f, -2.0f});
  test::from_host(g, {0.5f, 0.25f});
  kernels::SgdParams hp;
  hp.lr = 0.1f;
  kernels::sgd_step(E(), hp, p, g, v);
  const auto ph = test::to_host(p);
  EXPECT_FLOAT_EQ(ph[0], 1.0f - 0.1f * 0.5f);
  EXPECT_FLOAT_EQ(ph[1], -2.0f - 0.1f * 0.25f);
}

TYPED_TEST(SgdKernel, MomentumWeightDecayTwoSteps) {
  using E = TypeParam;
  V<E> p("p", 1), g("g", 1), v("v", 1);
  test::from_host(p, {1.0f});
  test::from_host(g, {0.5f});
  kernels::SgdParams hp;
  hp.lr = 0.1f;
  hp.momentum = 0.9f;
  hp.weight_decay = 0.01f;
  // step 1: g' = 0.5 + 0.01 * 1 = 0.51; v = 0.51; p = 1 - 0.051 = 0.949
  kernels::sgd_step(E(), hp, p, g, v);
  EXPECT_FLOAT_EQ(test::to_host(p)[0], 0.949f);
  EXPECT_FLOAT_EQ(test::to_host(v)[0], 0.51f);
  // step 2: g' = 0.5 + 0.00949 = 0.50949; v = 0.9 * 0.51 + 0.50949 = 0.96849;
  // p = 0.949 - 0.096849 = 0.852151
  kernels::sgd_step(E(), hp, p, g, v);
  EXPECT_NEAR(test::to_host(v)[0], 0.96849, 1e-6);
  EXPECT_NEAR(test::to_host(p)[0], 0.852151, 1e-6);
}

TYPED_TEST(SgdKernel, NesterovStep) {
  using E = TypeParam;
  V<E> p("p", 1), g("g", 1), v("v", 1);
  test::from_host(p, {1.0f});
  test::from_host(g, {2.0f});
  test::from_host(v, {1.0f});
  kernels::SgdParams hp;
  hp.lr = 0.5f;
  hp.momentum = 0.5f;
  hp.nesterov = true;
  // v = 0.5 * 1 + 2 = 2.5; p = 1 - 0.5 * (2 + 0.5 * 2.5) = 1 - 1.625 = -0.625
  kernels::sgd_step(E(), hp, p, g, v);
  EXPECT_FLOAT_EQ(test::to_host(v)[0], 2.5f);
  EXPECT_FLOAT_EQ(test::to_host(p)[0], -0.625f);
}

}  // namespace
