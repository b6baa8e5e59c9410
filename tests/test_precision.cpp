// The 16-bit storage types (core/precision.hpp): every 16-bit pattern
// survives a trip through float; conversions from float give the nearest
// value, ties to even, checked against the neighbouring codes rather than
// against a second implementation; the edge cases IEEE rounding defines
// (overflow, subnormals, signed zeros, NaN); and the same bits from a
// kernel on every execution space as from host code.
#include <tessera/core/precision.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <class H>
double value(std::uint16_t bits) {
  return static_cast<double>(static_cast<float>(H::from_bits(bits)));
}

template <class H>
bool is_nan(std::uint16_t bits) {
  return std::isnan(static_cast<float>(H::from_bits(bits)));
}

static_assert(std::is_same<accumulator_t<bf16>, float>::value, "bf16 accumulates in float");
static_assert(std::is_same<accumulator_t<fp16>, float>::value, "fp16 accumulates in float");
static_assert(std::is_same<accumulator_t<float>, float>::value, "float accumulates in float");
static_assert(std::is_same<accumulator_t<double>, double>::value, "double accumulates in double");

template <class H>
void expect_round_trips() {
  int nans = 0;
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = static_cast<float>(H::from_bits(bits));
    const std::uint16_t back = H(f).bits;
    if (std::isnan(f)) {
      ++nans;
      ASSERT_TRUE(is_nan<H>(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000u, bits & 0x8000u) << std::hex << b;
    } else {
      ASSERT_EQ(back, bits) << std::hex << b << " -> " << f;
    }
  }
  // Exponent all ones with a non-zero fraction, both signs.
  EXPECT_EQ(nans, (std::is_same<H, bf16>::value ? 2 * 127 : 2 * 1023));
}

TEST(Precision, EverySixteenBitValueSurvivesFloat) {
  expect_round_trips<bf16>();
  expect_round_trips<fp16>();
}

// H(x) for finite x is the code nearest x, ties to the even code: no code
// beside it (codes are ordered by magnitude within a sign) is nearer, and
// at equal distance it is the even one. Infinity where x is at least half
// a last place beyond the largest finite value.
template <class H>
void expect_nearest_even(float x) {
  const std::uint16_t c = H(x).bits;
  const double dx = static_cast<double>(x);
  ASSERT_FALSE(is_nan<H>(c)) << x;
  const std::uint16_t magnitude = c & 0x7fffu;
  const std::uint16_t infinity = std::is_same<H, bf16>::value ? 0x7f80u : 0x7c00u;
  ASSERT_LE(magnitude, infinity) << x;
  ASSERT_EQ(c & 0x8000u, std::signbit(x) ? 0x8000u : 0u) << x;
  const std::uint16_t sign = c & 0x8000u;
  const double largest = value<H>(infinity - 1u);
  const double half_place = 0.5 * (largest - value<H>(infinity - 2u));
  if (magnitude == infinity) {
    // Beyond the largest finite value by at least half of its last place.
    ASSERT_GE(std::abs(dx), largest + half_place) << x;
    return;
  }
  // The largest finite code takes only what lies below that threshold (a
  // tie there goes to infinity, the even code).
  if (magnitude == infinity - 1u) ASSERT_LT(std::abs(dx), largest + half_place) << x;
  const double got = std::abs(dx - value<H>(c));
  for (const std::uint32_t m : {magnitude - 1u, magnitude + 1u}) {
    // Below zero lie the other sign's codes; infinity is checked above.
    if (m > 0x7fffu || m == infinity) continue;
    const double other = std::abs(dx - value<H>(static_cast<std::uint16_t>(sign | m)));
    ASSERT_LE(got, other) << x << " -> " << std::hex << c << ", neighbour " << m;
    if (got == other) {
      ASSERT_EQ(c & 1u, 0u) << x << ": a tie must go to the even code " << std::hex << c;
    }
  }
}

template <class H>
void expect_rounding() {
  // Every float exponent from below the smallest fp16 subnormal to float's
  // largest, with random fractions, both signs.
  std::uint64_t counter = 0;
  for (std::uint32_t exponent = 90; exponent <= 254; ++exponent)
    for (int k = 0; k < 400; ++k) {
      const auto fraction =
          static_cast<std::uint32_t>(counter_uniform(5, 17, counter++) * 0x800000);
      const float x = from_bits((exponent << 23) | (fraction & 0x7fffffu));
      expect_nearest_even<H>(x);
      expect_nearest_even<H>(-x);
    }
  // Exact ties: halfway between consecutive codes, at every exponent.
  for (std::uint32_t b = 0; b < 0x7fffu; b += 97) {
    const auto lo = static_cast<std::uint16_t>(b), hi = static_cast<std::uint16_t>(b + 1);
    if (is_nan<H>(lo) || is_nan<H>(hi) || std::isinf(value<H>(hi))) continue;
    const double mid = 0.5 * (value<H>(lo) + value<H>(hi));
    const float x = static_cast<float>(mid);
    if (static_cast<double>(x) != mid) continue;  // not representable in float
    EXPECT_EQ(H(x).bits, (lo & 1u) == 0 ? lo : hi) << std::hex << lo;
  }
}

TEST(Precision, ConversionsRoundToNearestEven) {
  expect_rounding<bf16>();
  expect_rounding<fp16>();
}

TEST(Precision, EdgeCases) {
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80u);
  EXPECT_EQ(fp16(1.0f).bits, 0x3c00u);
  EXPECT_EQ(fp16(-2.0f).bits, 0xc000u);
  // bf16 ties: 1 + 2^-8 lies halfway between 0x3f80 and 0x3f81.
  EXPECT_EQ(bf16(from_bits(0x3f808000u)).bits, 0x3f80u);
  EXPECT_EQ(bf16(from_bits(0x3f818000u)).bits, 0x3f82u);
  EXPECT_EQ(bf16(from_bits(0x3f808001u)).bits, 0x3f81u);
  // Overflow: float's largest rounds to bf16 infinity; fp16's largest
  // finite is 65504, and 65520 (halfway to 2^16) rounds to infinity.
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()).bits, 0x7f80u);
  EXPECT_EQ(fp16(65504.0f).bits, 0x7bffu);
  EXPECT_EQ(fp16(65519.996f).bits, 0x7bffu);
  EXPECT_EQ(fp16(65520.0f).bits, 0x7c00u);
  EXPECT_EQ(fp16(-1e30f).bits, 0xfc00u);
  // fp16 subnormals: 2^-24 is the smallest; 2^-25 is a tie that goes to
  // +0; 1.5 2^-25 rounds up; the largest subnormal rounds into the smallest
  // normal 2^-14.
  EXPECT_EQ(fp16(std::ldexp(1.0f, -24)).bits, 0x0001u);
  EXPECT_EQ(fp16(std::ldexp(1.0f, -25)).bits, 0x0000u);
  EXPECT_EQ(fp16(std::ldexp(1.5f, -25)).bits, 0x0001u);
  EXPECT_EQ(fp16(std::ldexp(3.0f, -25)).bits, 0x0002u);
  EXPECT_EQ(fp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)).bits, 0x0400u);
  EXPECT_EQ(static_cast<float>(fp16::from_bits(0x0001u)), std::ldexp(1.0f, -24));
  EXPECT_EQ(static_cast<float>(fp16::from_bits(0x03ffu)), std::ldexp(1023.0f, -24));
  // Signed zeros and infinities keep their sign; NaN stays NaN.
  EXPECT_EQ(fp16(-0.0f).bits, 0x8000u);
  EXPECT_EQ(bf16(-0.0f).bits, 0x8000u);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fp16(inf).bits, 0x7c00u);
  EXPECT_EQ(bf16(-inf).bits, 0xff80u);
  EXPECT_TRUE(std::isnan(static_cast<float>(fp16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(std::nanf("")))));
  // A NaN whose payload sits only in the bits bf16 drops stays a NaN.
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(static_cast<float>(fp16(from_bits(0x7f800001u)))));
}

// With F16C the conversions are the CPU's; the portable integer code (what
// GPUs and CPUs without F16C run) must give the same bits: every fp16
// pattern widened (NaNs: NaN of the same sign), and narrowing at every
// float exponent that reaches fp16, near ties, at the overflow threshold
// and among the subnormals.
TEST(Precision, F16cAndPortableFp16ConversionsAgree) {
  if (!TESSERA_F16C) GTEST_SKIP() << "built without F16C: fp16 converts with the portable code";
  using F = impl::fp16_format;
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float hw = F::from_bits(h), sw = F::portable_from_bits(h);
    if (std::isnan(sw)) {
      ASSERT_TRUE(std::isnan(hw)) << std::hex << b;
      ASSERT_EQ(std::signbit(hw), std::signbit(sw)) << std::hex << b;
    } else {
      ASSERT_EQ(std::memcmp(&hw, &sw, sizeof hw), 0) << std::hex << b;
    }
  }
  std::vector<float> in;
  // Every exponent from below the subnormals to beyond the range, with
  // fractions around the ties (the low 13 bits near 0x1000) and at random.
  for (std::uint32_t e = 90; e <= 150; ++e)
    for (std::uint32_t low : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu, 0x3000u})
      for (std::uint32_t high : {0x0u, 0x2000u, 0x7fe000u, 0x56a000u}) {
        const std::uint32_t u = (e << 23) | high | low;
        in.push_back(from_bits(u));
        in.push_back(from_bits(u | 0x80000000u));
      }
  for (float v : test::random_values(20000, 7, -70000.0f, 70000.0f)) in.push_back(v);
  for (float v : test::random_values(20000, 8, -1e-4f, 1e-4f)) in.push_back(v);
  in.push_back(65504.0f);
  in.push_back(65519.996f);
  in.push_back(65520.0f);
  in.push_back(std::numeric_limits<float>::infinity());
  in.push_back(std::numeric_limits<float>::denorm_min());
  for (float f : in)
    ASSERT_EQ(F::to_bits(f), F::portable_to_bits(f))
        << f << " (bits " << std::hex << impl::float_bits(f) << ")";
  EXPECT_EQ(F::to_bits(std::nanf("")) & 0x7e00u, 0x7e00u);
  EXPECT_EQ(F::portable_to_bits(std::nanf("")) & 0x7e00u, 0x7e00u);
}

template <class ExecSpace>
class PrecisionKernels : public ::testing::Test {};
TYPED_TEST_SUITE(PrecisionKernels, test::ExecSpaces);

// Values stored as H and read back as float inside a kernel (free
// function: CUDA takes no device lambda in a test body).
template <class E, class H>
std::vector<float> through_kernel(const std::vector<float>& in) {
  const auto n = static_cast<std::int64_t>(in.size());
  Kokkos::View<float*, typename E::memory_space> x("x", n), y("y", n);
  Kokkos::View<H*, typename E::memory_space> stored("stored", n);
  test::from_host(x, in);
  Kokkos::parallel_for(
      "test::narrow_widen", Kokkos::RangePolicy<E>(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
        stored(i) = narrow<H>(x(i));
        y(i) = widen(stored(i));
      });
  return test::to_host(y);
}

TYPED_TEST(PrecisionKernels, KernelsConvertAsHostCodeDoes) {
  std::vector<float> in = test::random_values(4096, 3, -70000.0f, 70000.0f);
  const auto small = test::random_values(4096, 4, -1e-6f, 1e-6f);
  in.insert(in.end(), small.begin(), small.end());
  in.push_back(std::numeric_limits<float>::infinity());
  in.push_back(-0.0f);
  const auto check = [&](const std::vector<float>& got, auto tag) {
    using H = decltype(tag);
    ASSERT_EQ(got.size(), in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      const float expected = static_cast<float>(H(in[i]));
      ASSERT_EQ(std::memcmp(&got[i], &expected, sizeof(float)), 0)
          << in[i] << ": " << got[i] << " vs " << expected;
    }
  };
  check(through_kernel<TypeParam, bf16>(in), bf16{});
  check(through_kernel<TypeParam, fp16>(in), fp16{});
  // Views of the 16-bit types take two bytes per value.
  const Kokkos::View<fp16*, typename TypeParam::memory_space> halves("h", 10);
  EXPECT_EQ(halves.span() * sizeof(fp16), 20u);
}

}  // namespace
