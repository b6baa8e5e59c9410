// Seeded initialisers: the statistics each kind promises, identical values
// on every execution space, and per-layer overrides in a model.
#include <tessera/kernels/init.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/registry.hpp>
#include <tessera/model/model.hpp>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

struct Moments {
  double mean = 0, stddev = 0, max_abs = 0;
};

Moments moments(const std::vector<float>& v) {
  Moments m;
  for (float x : v) m.mean += x;
  m.mean /= v.size();
  for (float x : v) {
    m.stddev += (x - m.mean) * (x - m.mean);
    m.max_abs = std::max(m.max_abs, std::fabs(double(x)));
  }
  m.stddev = std::sqrt(m.stddev / v.size());
  return m;
}

template <class ExecSpace>
class InitKernels : public ::testing::Test {};
TYPED_TEST_SUITE(InitKernels, test::ExecSpaces);

// The same (seed, stream) gives the same numbers on every space: compare
// against the default space.
TYPED_TEST(InitKernels, SameValuesOnEverySpace) {
  using V = Kokkos::View<float*, Kokkos::LayoutRight, typename TypeParam::memory_space>;
  V uniform("uniform", 1000), normal("normal", 1000);
  Vector<float> uniform_ref("uniform_ref", 1000), normal_ref("normal_ref", 1000);
  kernels::init_uniform(TypeParam(), uniform, 0.5f, 3, 4);
  kernels::init_normal(TypeParam(), normal, 2.0f, 3, 4);
  kernels::init_uniform(ExecSpace(), uniform_ref, 0.5f, 3, 4);
  kernels::init_normal(ExecSpace(), normal_ref, 2.0f, 3, 4);
  EXPECT_EQ(test::to_host(uniform), test::to_host(uniform_ref));
  EXPECT_EQ(test::to_host(normal), test::to_host(normal_ref));
}

TEST(Init, StatisticsOfEveryKind) {
  const std::int64_t in = 400, out = 600;  // 240k weights
  const double he = std::sqrt(2.0 / in), xavier = std::sqrt(2.0 / (in + out));
  const struct {
    Init init;
    double stddev;
    bool bounded;
  } cases[] = {{Init::he_uniform, he, true},
               {Init::he_normal, he, false},
               {Init::xavier_uniform, xavier, true},
               {Init::xavier_normal, xavier, false}};
  for (const auto& c : cases) {
    SCOPED_TRACE(init_name(c.init));
    Model model(Shape{in});
    model.add<Dense>("fc", out).set_initializer("fc", c.init);
    model.compile(1, 9);
    const Moments w = moments(test::to_host(model.parameters().value(0).flat()));
    EXPECT_NEAR(w.mean, 0.0, 0.01 * c.stddev);
    EXPECT_NEAR(w.stddev, c.stddev, 0.01 * c.stddev);
    if (c.bounded)
      EXPECT_LE(w.max_abs, std::sqrt(3.0) * c.stddev);
    else
      EXPECT_GT(w.max_abs, 3.5 * c.stddev);  // normal tails reach far out
    for (float b : test::to_host(model.parameters().value(1).flat())) EXPECT_EQ(b, 0.0f);
  }
}

TEST(Init, OverridesAndErrors) {
  Model a(Shape{8}), b(Shape{8});
  a.add<Dense>("fc1", 8).add<Dense>("fc2", 4);
  b.add<Dense>("fc1", 8).add<Dense>("fc2", 4).set_initializer("fc2", Init::xavier_normal);
  a.compile(1, 5);
  b.compile(1, 5);
  // Only fc2's weights change.
  EXPECT_EQ(test::to_host(a.parameters().value(0).flat()),
            test::to_host(b.parameters().value(0).flat()));
  EXPECT_NE(test::to_host(a.parameters().value(2).flat()),
            test::to_host(b.parameters().value(2).flat()));

  Model unknown(Shape{8});
  unknown.add<Dense>("fc1", 8).set_initializer("fc9", Init::he_normal);
  test::expect_error([&] { unknown.compile(1, 0); },
                     "an initializer names layer 'fc9', which is not in the model");
  test::expect_error([&] { Model(Shape{8}).set_initializer("fc1", Init::ones); },
                     "'ones' is not a weight initializer");
  test::expect_error([] { init_from_name("he"); },
                     "unknown initializer 'he'; allowed: zeros, ones, he_uniform, he_normal, "
                     "xavier_uniform, xavier_normal");
  // Every name a deck accepts is one the engine knows.
  for (const auto& name : weight_initializer_names())
    EXPECT_STREQ(init_name(init_from_name(name)), name.c_str());
}

}  // namespace
