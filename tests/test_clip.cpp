// Gradient clipping by global norm and the deterministic sum of squares under
// it: values against a host reference, scaling only above the threshold, and
// bitwise identical results on every execution space and thread count.
#include <tessera/kernels/reduce.hpp>
#include <tessera/optim/clip.hpp>

#include <cmath>
#include <limits>
#include <type_traits>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class Reduce : public ::testing::Test {};
TYPED_TEST_SUITE(Reduce, test::ExecSpaces);

double host_sum_squares(const std::vector<float>& x) {
  double sum = 0;
  for (float v : x) sum += static_cast<double>(v) * v;
  return sum;
}

TYPED_TEST(Reduce, SumSquaresMatchesTheHostAcrossChunkBoundaries) {
  using E = TypeParam;
  const std::int64_t chunk = kernels::deterministic_chunk;
  for (const std::int64_t n :
       {std::int64_t(0), std::int64_t(1), chunk - 1, chunk, chunk + 1, 5 * chunk + 17}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    Kokkos::View<float*, typename E::memory_space> x("x", n);
    const auto values = test::random_values(static_cast<std::size_t>(n), 21 + n);
    test::from_host(x, values);
    const double sum = kernels::deterministic_sum_squares(E(), x);
    const double reference = host_sum_squares(values);
    EXPECT_NEAR(sum, reference, 1e-12 * (1.0 + reference));
  }
}

TYPED_TEST(Reduce, SumSquaresIsBitwiseTheSameOnEverySpace) {
  using E = TypeParam;
  const std::int64_t n = 37 * kernels::deterministic_chunk + 5;
  const auto values = test::random_values(static_cast<std::size_t>(n), 77, -3.0f, 3.0f);
  Kokkos::View<float*, typename E::memory_space> x("x", n);
  test::from_host(x, values);
  Kokkos::View<float*, Kokkos::HostSpace> x_serial("x", n);
  test::from_host(x_serial, values);
  const double here = kernels::deterministic_sum_squares(E(), x);
  const double serial =
      kernels::deterministic_sum_squares(Kokkos::DefaultHostExecutionSpace(), x_serial);
  // The chunked order, written out sequentially: in each chunk, element j
  // goes to lane j % sum_lanes, and lanes are added pairwise.
  std::vector<double> chunks;
  for (std::int64_t c = 0; c * kernels::deterministic_chunk < n; ++c) {
    double lanes[kernels::sum_lanes] = {};
    const std::int64_t first = c * kernels::deterministic_chunk;
    for (std::int64_t i = first; i < std::min(n, first + kernels::deterministic_chunk); ++i)
      lanes[(i - first) % kernels::sum_lanes] += static_cast<double>(values[i]) * values[i];
    for (int width = kernels::sum_lanes / 2; width > 0; width /= 2)
      for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
    chunks.push_back(lanes[0]);
  }
  double expected = 0;
  for (double s : chunks) expected += s;
  EXPECT_EQ(here, expected);
  EXPECT_EQ(serial, expected);
}

TYPED_TEST(Reduce, SumSquaresReportsNonFiniteInputs) {
  using E = TypeParam;
  Kokkos::View<float*, typename E::memory_space> x("x", 3000);
  auto values = test::random_values(3000, 5);
  values[2500] = std::numeric_limits<float>::quiet_NaN();
  test::from_host(x, values);
  EXPECT_TRUE(std::isnan(kernels::deterministic_sum_squares(E(), x)));
  values[2500] = std::numeric_limits<float>::infinity();
  test::from_host(x, values);
  EXPECT_TRUE(std::isinf(kernels::deterministic_sum_squares(E(), x)));
}

TYPED_TEST(Reduce, SumSquaresChecksItsScratch) {
  using E = TypeParam;
  Kokkos::View<float*, typename E::memory_space> x("x", 2 * kernels::deterministic_chunk + 1);
  Kokkos::View<double*, typename E::memory_space> scratch("scratch", 3);
  try {
    kernels::deterministic_sum_squares(E(), x, scratch);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("tessera::kernels::deterministic_sum_squares: scratch holds 3 "
                                   "doubles; 4 needed for 2049 elements"),
        std::string::npos)
        << e.what();
  }
}

// Gradients of every entry, in entry order, without the alignment padding.
std::vector<float> entry_gradients(const ParameterStore& store) {
  std::vector<float> out;
  for (std::size_t i = 0; i < store.entries().size(); ++i)
    for (float g : test::to_host(store.gradient(i).flat())) out.push_back(g);
  return out;
}

void set_entry_gradients(const ParameterStore& store, const std::vector<float>& gradients) {
  std::size_t at = 0;
  for (std::size_t i = 0; i < store.entries().size(); ++i) {
    const auto flat = store.gradient(i).flat();
    test::from_host(
        flat, std::vector<float>(gradients.begin() + at, gradients.begin() + at + flat.size()));
    at += flat.size();
  }
  ASSERT_EQ(at, gradients.size());
}

// Two entries, {3, 4} and {0}: global norm 5.
ParameterStore store_with_norm_five() {
  ParameterStore store;
  store.add("a", ParameterSpec{"w", Shape{2}});
  store.add("b", ParameterSpec{"b", Shape{1}});
  store.allocate();
  set_entry_gradients(store, {3.0f, 4.0f, 0.0f});
  return store;
}

// The spaces that can reach a ParameterStore's buffers (not Serial beside a GPU).
#if defined(KOKKOS_ENABLE_SERIAL)
using StoreSpaces =
    std::conditional_t<Kokkos::SpaceAccessibility<Kokkos::Serial, MemSpace>::accessible &&
                           !std::is_same_v<ExecSpace, Kokkos::Serial>,
                       ::testing::Types<ExecSpace, Kokkos::Serial>, ::testing::Types<ExecSpace>>;
#else
using StoreSpaces = ::testing::Types<ExecSpace>;
#endif

template <class ExecSpace>
class Clip : public ::testing::Test {};
TYPED_TEST_SUITE(Clip, StoreSpaces);

TYPED_TEST(Clip, LeavesGradientsAtOrBelowTheThreshold) {
  using E = TypeParam;
  ParameterStore store = store_with_norm_five();
  EXPECT_EQ(clip_grad_norm(E(), store, 10.0f), 5.0f);
  EXPECT_EQ(entry_gradients(store), (std::vector<float>{3.0f, 4.0f, 0.0f}));
  EXPECT_EQ(clip_grad_norm(E(), store, 5.0f), 5.0f);
  EXPECT_EQ(entry_gradients(store), (std::vector<float>{3.0f, 4.0f, 0.0f}));
}

TYPED_TEST(Clip, ScalesAboveTheThresholdToMaxNorm) {
  using E = TypeParam;
  ParameterStore store = store_with_norm_five();
  // factor = 1 / (5 + 1e-6); the gradient becomes {0.6, 0.8, 0} within 2e-7.
  EXPECT_EQ(clip_grad_norm(E(), store, 1.0f), 5.0f);
  const auto g = entry_gradients(store);
  EXPECT_NEAR(g[0], 0.6, 2e-7);
  EXPECT_NEAR(g[1], 0.8, 2e-7);
  EXPECT_EQ(g[2], 0.0f);
  EXPECT_LE(clip_grad_norm(E(), store, 1.0f), 1.0f);
}

TYPED_TEST(Clip, NonFiniteNormLeavesGradientsForTheCallerToSee) {
  using E = TypeParam;
  ParameterStore store = store_with_norm_five();
  set_entry_gradients(store, {3.0f, std::numeric_limits<float>::infinity(), 1.0f});
  EXPECT_TRUE(std::isinf(clip_grad_norm(E(), store, 1.0f)));
  EXPECT_EQ(entry_gradients(store)[2], 1.0f);
}

TYPED_TEST(Clip, RejectsANonPositiveMaxNorm) {
  ParameterStore store = store_with_norm_five();
  try {
    clip_grad_norm(TypeParam(), store, 0.0f);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "tessera::clip_grad_norm: max_norm 0 must be positive and finite"),
              std::string::npos)
        << e.what();
  }
}

// A large store (many chunks) clipped here and on the default space gives the
// same norm and the same gradients, bit for bit.
template <class E>
std::pair<float, std::vector<float>> clip_large_store(const std::vector<float>& gradients) {
  ParameterStore store;
  store.add("fc", ParameterSpec{"weight", Shape{100, 190}});
  store.add("fc", ParameterSpec{"bias", Shape{1000}});
  store.allocate();
  set_entry_gradients(store, gradients);
  const float norm = clip_grad_norm(E(), store, 3.0f);
  return {norm, entry_gradients(store)};
}

TYPED_TEST(Clip, SameResultAsTheDefaultSpaceBitwise) {
  const auto values = test::random_values(20000, 91, -2.0f, 2.0f);
  const auto here = clip_large_store<TypeParam>(values);
  const auto on_default = clip_large_store<ExecSpace>(values);
  EXPECT_EQ(here.first, on_default.first);
  EXPECT_EQ(here.second, on_default.second);
  EXPECT_NEAR(here.first, std::sqrt(host_sum_squares(values)), 1e-3);
  EXPECT_NE(here.second, values);  // it did clip
}

}  // namespace
