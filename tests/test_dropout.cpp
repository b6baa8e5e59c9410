// Dropout: the mask against its definition from the counter-based
// generator, kept fraction and scaling, dependence on seed, step and layer
// name, identity in inference and at rate 0, identical masks on every
// execution space, the integer keep test against the float one at the
// rates' edges, finite-difference gradients, and argument errors.
#include <tessera/kernels/dropout.hpp>
#include <tessera/layers/dropout.hpp>

#include "layer_check.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class DropoutKernels : public ::testing::Test {};
TYPED_TEST_SUITE(DropoutKernels, test::ExecSpaces);

template <class E>
using V = Kokkos::View<float*, Kokkos::LayoutRight, typename E::memory_space>;

template <class E>
std::vector<float> dropped_ones(std::size_t n, float rate, std::uint64_t seed, std::uint64_t stream,
                                std::uint64_t first_counter) {
  V<E> x("x", n), y("y", n);
  Kokkos::deep_copy(x, 1.0f);
  kernels::dropout_apply(E(), x, y, rate, seed, stream, first_counter, false);
  return test::to_host(y);
}

TYPED_TEST(DropoutKernels, KeptFractionAndScale) {
  const std::size_t n = 100000;
  for (const float rate : {0.1f, 0.5f, 0.8f}) {
    const auto y = dropped_ones<TypeParam>(n, rate, 3, 11, 0);
    const float scale = 1.0f / (1.0f - rate);
    std::size_t kept = 0;
    for (float v : y) {
      if (v != 0.0f) {
        ++kept;
        ASSERT_EQ(v, scale) << "rate " << rate;
      }
    }
    const double p = 1.0 - rate, sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(double(kept) / n, p, 5 * sigma) << "rate " << rate;
  }
}

TYPED_TEST(DropoutKernels, MaskMatchesDefinitionAndDefaultSpace) {
  const std::size_t n = 5000;
  const float rate = 0.3f;
  const auto y = dropped_ones<TypeParam>(n, rate, 17, 23, 1000);
  EXPECT_EQ(y, (dropped_ones<Kokkos::DefaultExecutionSpace>(n, rate, 17, 23, 1000)));
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(y[i] != 0.0f, counter_uniform(17, 23, 1000 + i) >= rate) << "element " << i;
}

// The mask's integer test is counter_uniform(...) >= rate for every rate:
// its threshold u is the first 24-bit value with u / 2^24 >= rate, rates on
// and between the steps of 2^-24 included, and it agrees with the float
// test on every index drawn (a wrapping first counter included).
TEST(Dropout, IntegerKeepTestIsTheFloatTestAtEveryRate) {
  const float step = 1.0f / 16777216.0f;
  const std::vector<float> rates = {0.0f,
                                    step,
                                    std::nextafter(step, 1.0f),
                                    0.3f,
                                    std::nextafter(0.5f, 0.0f),
                                    0.5f,
                                    std::nextafter(0.5f, 1.0f),
                                    std::nextafter(1.0f, 0.0f),
                                    1.0f};
  for (const float rate : rates) {
    const UniformAtLeast kept(5, 7, 0, rate);
    const std::uint64_t u = kept.threshold;
    ASSERT_LE(u, std::uint64_t{1} << 24) << "rate " << rate;
    EXPECT_GE(static_cast<float>(u) * step, rate) << "rate " << rate;
    if (u > 0) EXPECT_LT(static_cast<float>(u - 1) * step, rate) << "rate " << rate;
    for (const std::uint64_t first : {std::uint64_t{0}, ~std::uint64_t{0} - 500}) {
      const UniformAtLeast from(5, 7, first, rate);
      for (std::uint64_t i = 0; i < 1000; ++i)
        ASSERT_EQ(from(i), counter_uniform(5, 7, first + i) >= rate)
            << "rate " << rate << ", counter " << first + i;
    }
  }
  EXPECT_EQ(UniformAtLeast(5, 7, 0, 0.3f).threshold, 5033165u);  // ceil(0.3f * 2^24)
}

TYPED_TEST(DropoutKernels, AccumulatesAndRejectsBadRates) {
  using E = TypeParam;
  V<E> x("x", 100), y("y", 100), short_y("short", 99);
  Kokkos::deep_copy(x, 1.0f);
  Kokkos::deep_copy(y, 2.0f);
  kernels::dropout_apply(E(), x, y, 0.5f, 1, 2, 0, true);
  for (float v : test::to_host(y)) EXPECT_TRUE(v == 2.0f || v == 4.0f) << v;
  EXPECT_THROW(kernels::dropout_apply(E(), x, y, 1.0f, 1, 2, 0, false), Error);
  EXPECT_THROW(kernels::dropout_apply(E(), x, short_y, 0.5f, 1, 2, 0, false), Error);
}

TEST(Dropout, NameStreamIsFnv1a64) {
  EXPECT_EQ(kernels::name_stream(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(kernels::name_stream("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(kernels::name_stream("foobar"), 0x85944171f73967e8ULL);
}

StepContext training(std::uint64_t seed, std::int64_t step) {
  StepContext ctx;
  ctx.seed = seed;
  ctx.step = step;
  return ctx;
}

std::vector<float> layer_output(test::LayerHarness& h, const StepContext& ctx) {
  h.forward(ctx);
  return test::to_host(h.output.flat());
}

TEST(Dropout, MaskIsTheCounterOfTheStepAndTheSamplesPlaceInTheGlobalBatch) {
  const Shape shape{8, 3, 5};
  const float rate = 0.4f;
  Dropout drop("drop", rate);
  test::LayerHarness h(drop, {shape});
  const auto x = test::to_host(h.inputs[0].flat());
  const auto y = layer_output(h, training(9, 3));
  const std::uint64_t stream = kernels::name_stream("drop");
  for (std::size_t i = 0; i < y.size(); ++i) {
    // Each step owns 2^40 counters; element i of the batch is counter i.
    const bool keep = counter_uniform(9, stream, (std::uint64_t{3} << 40) + i) >= rate;
    ASSERT_EQ(y[i], keep ? x[i] * (1.0f / (1.0f - rate)) : 0.0f) << "element " << i;
  }
  // A smaller (last) batch at the same step draws the prefix of the same counters.
  Tensor<float> small_y("small_y", Shape{3, 3, 5});
  drop.forward({h.inputs[0].leading(3)}, small_y, training(9, 3));
  const auto small = test::to_host(small_y.flat());
  EXPECT_EQ(small, std::vector<float>(y.begin(), y.begin() + small.size()));
  // A rank's shard starting at sample 5 of the global batch draws the masks
  // those samples draw on one rank.
  StepContext shard = training(9, 3);
  shard.sample_offset = 5;
  Tensor<float> shard_y("shard_y", Shape{3, 3, 5});
  Tensor<float> shard_x("shard_x", Shape{3, 3, 5});
  const std::int64_t per_sample = 15;
  test::from_host(shard_x.flat(), std::vector<float>(x.begin() + 5 * per_sample, x.end()));
  drop.forward({shard_x}, shard_y, shard);
  EXPECT_EQ(test::to_host(shard_y.flat()), std::vector<float>(y.begin() + 5 * per_sample, y.end()));
}

TEST(Dropout, MaskDependsOnSeedStepAndName) {
  const Shape shape{16, 64};
  Dropout a("a", 0.5f), b("b", 0.5f);
  test::LayerHarness ha(a, {shape}), hb(b, {shape});
  test::from_host(hb.inputs[0].flat(), test::to_host(ha.inputs[0].flat()));
  const auto base = layer_output(ha, training(1, 4));
  EXPECT_EQ(layer_output(ha, training(1, 4)), base);
  EXPECT_NE(layer_output(ha, training(1, 5)), base);
  EXPECT_NE(layer_output(ha, training(2, 4)), base);
  EXPECT_NE(layer_output(hb, training(1, 4)), base);
}

TEST(Dropout, IdentityAtRateZeroAndInInference) {
  const Shape shape{4, 2, 3, 3};
  Dropout none("none", 0.0f), half("half", 0.5f);
  test::LayerHarness hn(none, {shape}), hh(half, {shape});
  EXPECT_EQ(layer_output(hn, training(1, 2)), test::to_host(hn.inputs[0].flat()));
  StepContext infer;
  infer.training = false;
  EXPECT_EQ(layer_output(hh, infer), test::to_host(hh.inputs[0].flat()));
  test::from_host(hh.output_grad.flat(), test::random_values(shape.numel(), 3));
  hh.backward(infer);
  EXPECT_EQ(test::to_host(hh.input_grads[0].flat()), test::to_host(hh.output_grad.flat()));
}

TEST(Dropout, GradientsWithAFixedMask) {
  Dropout drop("drop", 0.3f);
  test::LayerHarness h(drop, {Shape{5, 7}});
  h.expect_gradients(training(42, 7));
  // Backward applies the forward mask: dx is zero exactly where y is.
  const auto y = test::to_host(h.output.flat());
  const auto dx = test::to_host(h.input_grads[0].flat());
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i] == 0.0f, dx[i] == 0.0f) << i;
}

// In bf16 and fp16, training draws the float layer's mask and each kept
// value is the float layer's rounded once.
TEST(Dropout, Bf16AndFp16AreTheFloatResultsRoundedOnce) {
  StepContext ctx;
  ctx.training = true;
  ctx.seed = 11;
  ctx.step = 3;
  Dropout a("drop", Dropout::Options{0.4f}), b("drop", Dropout::Options{0.4f});
  test::expect_16bit_matches_float<bf16>(a, b, {Shape{4, 50}}, {}, 1e-5, 1.0, ctx);
  Dropout c("drop", Dropout::Options{0.4f}), d("drop", Dropout::Options{0.4f});
  test::expect_16bit_matches_float<fp16>(c, d, {Shape{4, 50}}, {}, 1e-5, 1.0, ctx);
}

// The benchmark's traffic: the mask is recomputed, so backward reads the
// output gradient and adds to the input gradient only.
TEST(Dropout, CostCountsWhatTheKernelsTouch) {
  const LayerCost c = Dropout("drop", 0.5f).cost({Shape{4, 10}}, true);
  EXPECT_EQ(c.forward.bytes, 4.0 * (40 + 40));
  EXPECT_EQ(c.backward.bytes, 4.0 * (40 + 2 * 40));
}

TEST(Dropout, RejectsRatesOutsideZeroToOne) {
  for (const float rate : {1.0f, -0.1f, 1.5f}) {
    try {
      Dropout drop("drop", rate);
      FAIL() << "expected tessera::Error for rate " << rate;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tessera::Dropout 'drop': rate must be in [0, 1), got"),
                std::string::npos)
          << e.what();
    }
  }
  Dropout drop("drop", 0.5f);
  EXPECT_THROW(drop.output_shape({Shape{7}}), Error);
}

}  // namespace
