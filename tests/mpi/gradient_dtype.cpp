// Gradient averaging in bf16 and fp16 across ranks; gtest_ranks.sh runs
// it under mpiexec on 2 and 3 ranks. Every rank derives every rank's
// gradients from a counter hash, so each can check the sum on its own:
// (a) inputs and partial sums exact in the format come back exact, to the
// bit, on every rank; (b) general values come back as the same bits on
// every rank, each a value of the format, within the rounding bound of
// sums in the format; (c) fp16 sums beyond 65504 come back infinite,
// where bf16's range holds them. Buckets of 256 bytes (one per layer),
// started during the simulated backward and after it.
#include <tessera/core/precision.hpp>
#include <tessera/parallel/gradient_averager.hpp>

#include <cmath>
#include <cstring>

#include "../tessera_test.hpp"
#include "dense_stack.hpp"

namespace {

using namespace tessera;

// A gradient buffer's values on one rank: value(rank, i) for every element.
using Values = std::function<float(int rank, std::int64_t i)>;

struct Averaged {
  std::vector<float> sums;  // this rank's buffer after averaging
  std::int64_t count = 0;   // parameters (the rest of the buffer is padding)
};

// Every rank fills its gradients with value(rank, i) and averages them in
// `format`, calling layer_done in backward's order as the Trainer does.
Averaged average(const Communicator& comm, FloatFormat format, bool overlap, const Values& value) {
  auto model = test::dense_stack();
  GradientAverager averager(comm, *model, 256, overlap, format);
  EXPECT_EQ(averager.buckets().size(), 5u) << "one bucket per layer";
  EXPECT_EQ(averager.format(), format);
  const Vector<float>& gradients = model->parameters().gradients();
  std::vector<float> mine(gradients.size());
  for (std::size_t i = 0; i < mine.size(); ++i)
    mine[i] = value(comm.rank(), static_cast<std::int64_t>(i));
  test::from_host(gradients, mine);
  averager.begin();
  for (std::size_t i = model->layers().size(); i-- > 0;) averager.layer_done(i);
  averager.finish();
  return {test::to_host(gradients), model->parameters().count()};
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Whether every rank holds the same bits.
bool same_on_every_rank(const Communicator& comm, const std::vector<float>& values) {
  const std::string bytes(reinterpret_cast<const char*>(values.data()),
                          values.size() * sizeof(float));
  const auto all = comm.gather(content_hash(bytes));
  for (const auto h : all)
    if (h != all[0]) return false;
  return true;
}

float power_of_two(std::uint64_t seed, int rank, std::int64_t i, int low, int high) {
  const auto k = static_cast<int>(
      counter_hash(seed, static_cast<std::uint64_t>(rank) + 100, static_cast<std::uint64_t>(i)) %
      static_cast<std::uint64_t>(high - low + 1));
  return std::ldexp(1.0f, low + k);
}

template <class T>
float round_to(float x) {
  return static_cast<float>(T(x));
}

class GradientDtype : public ::testing::TestWithParam<FloatFormat> {};

// (a) Integers of at most 4 bits times a power of two shared by all ranks:
// inputs exact in both formats, and every partial sum (at most 3 * 15 = 45,
// 6 bits) too. The result is the exact sum, bit for bit, whatever the order.
TEST_P(GradientDtype, ExactSumsComeBackExactOnEveryRank) {
  const Communicator comm;
  ASSERT_GE(comm.size(), 2) << "run under mpiexec with at least 2 ranks";
  // fp16: exponents from -8 to 3 stay normal (2^-14 and up) and below 65504.
  const int low = GetParam() == FloatFormat::fp16 ? -8 : -40;
  const int high = GetParam() == FloatFormat::fp16 ? 3 : 40;
  const Values value = [&](int rank, std::int64_t i) {
    const auto m =
        static_cast<int>(
            counter_hash(5, static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(i)) % 31) -
        15;
    return static_cast<float>(m) * power_of_two(6, 0, i, low, high);
  };
  for (const bool overlap : {true, false}) {
    const Averaged a = average(comm, GetParam(), overlap, value);
    int wrong = 0;
    for (std::int64_t i = 0; i < a.count; ++i) {
      double exact = 0;
      for (int r = 0; r < comm.size(); ++r) exact += value(r, i);
      if (bits_of(a.sums[i]) != bits_of(static_cast<float>(exact)) && ++wrong <= 5)
        ADD_FAILURE() << "rank " << comm.rank() << ", element " << i << ": " << a.sums[i]
                      << " instead of " << exact;
    }
    EXPECT_EQ(wrong, 0) << "overlap " << overlap;
    EXPECT_TRUE(same_on_every_rank(comm, a.sums));
  }
}

// (b) Random values over many binades (for fp16 down into its subnormals
// and below, where they round to zero). Inputs round once to the format
// (relative error at most u = 2^-8 for bf16, 2^-11 for fp16) and each of
// the ranks - 1 partial sums rounds once, so with A the sum of the inputs'
// magnitudes the result lies within (u + gamma (1 + u)) A of the exact sum,
// gamma = (ranks - 1) u / (1 - (ranks - 1) u), plus, for fp16, 2^-25 (half
// its smallest subnormal) for each of the 2 ranks - 1 roundings below its
// normal range.
TEST_P(GradientDtype, GeneralSumsAgreeAcrossRanksWithinTheRoundingBound) {
  const Communicator comm;
  ASSERT_GE(comm.size(), 2) << "run under mpiexec with at least 2 ranks";
  const bool fp16_format = GetParam() == FloatFormat::fp16;
  const Values value = [&](int rank, std::int64_t i) {
    const float u =
        counter_uniform(9, static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(i));
    return (2 * u - 1) * power_of_two(10, rank, i, fp16_format ? -27 : -30, fp16_format ? 3 : 30);
  };
  const double u = std::ldexp(1.0, fp16_format ? -11 : -8);
  const double underflow = fp16_format ? std::ldexp(1.0, -25) : 0.0;
  const int ranks = comm.size();
  const double gamma = (ranks - 1) * u / (1 - (ranks - 1) * u);
  std::vector<float> first;
  for (const bool overlap : {true, false}) {
    const Averaged a = average(comm, GetParam(), overlap, value);
    int outside = 0, not_in_format = 0, rounded = 0;
    double worst = 0;
    for (std::int64_t i = 0; i < a.count; ++i) {
      double exact = 0, magnitudes = 0;
      for (int r = 0; r < ranks; ++r) {
        exact += value(r, i);
        magnitudes += std::fabs(value(r, i));
      }
      const double bound = (u + gamma * (1 + u)) * magnitudes + (2 * ranks - 1) * underflow;
      const double error = std::fabs(a.sums[i] - exact);
      worst = std::max(worst, error / bound);
      if (error > bound && ++outside <= 5)
        ADD_FAILURE() << "element " << i << ": " << a.sums[i] << " vs exact " << exact << ", error "
                      << error << " > bound " << bound;
      const float in_format = fp16_format ? round_to<fp16>(a.sums[i]) : round_to<bf16>(a.sums[i]);
      if (bits_of(in_format) != bits_of(a.sums[i])) ++not_in_format;
      if (a.sums[i] != static_cast<float>(exact)) ++rounded;
    }
    EXPECT_EQ(outside, 0);
    EXPECT_EQ(not_in_format, 0) << "results must be values of the format";
    EXPECT_GT(rounded, a.count / 2) << "most general sums are not exact in 16 bits";
    EXPECT_TRUE(same_on_every_rank(comm, a.sums));
    // Starting buckets during backward or after it changes nothing.
    if (first.empty())
      first = a.sums;
    else
      EXPECT_EQ(std::memcmp(first.data(), a.sums.data(), first.size() * sizeof(float)), 0);
    if (comm.rank() == 0)
      std::printf("%s on %d ranks, overlap %d: worst error %.3f of the bound over %lld sums\n",
                  float_format_name(GetParam()), ranks, overlap ? 1 : 0, worst,
                  static_cast<long long>(a.count));
  }
}

// (c) 40000 on every rank sums beyond fp16's largest finite value 65504:
// infinity, of the right sign; 60000 and -60000 cancel exactly. bf16 has
// float's range: the same sums are finite (40000 is 39936 in bf16).
TEST_P(GradientDtype, Fp16OverflowComesBackInfinite) {
  const Communicator comm;
  ASSERT_GE(comm.size(), 2) << "run under mpiexec with at least 2 ranks";
  const Values value = [](int rank, std::int64_t i) {
    switch (i % 4) {
      case 0:
        return 40000.0f;
      case 1:
        return -40000.0f;
      case 2:
        return rank == 0 ? 60000.0f : rank == 1 ? -60000.0f : 0.0f;
      default:
        return 1.0f;
    }
  };
  const Averaged a = average(comm, GetParam(), true, value);
  const bool fp16_format = GetParam() == FloatFormat::fp16;
  const float big = static_cast<float>(comm.size()) * (fp16_format ? 40000.0f : 39936.0f);
  const float expected[4] = {fp16_format ? INFINITY : big, fp16_format ? -INFINITY : -big, 0.0f,
                             static_cast<float>(comm.size())};
  int wrong = 0;
  for (std::int64_t i = 0; i < a.count; ++i)
    if (bits_of(a.sums[i]) != bits_of(expected[i % 4]) && ++wrong <= 5)
      ADD_FAILURE() << "element " << i << ": " << a.sums[i] << " instead of " << expected[i % 4];
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(same_on_every_rank(comm, a.sums));
}

INSTANTIATE_TEST_SUITE_P(Formats, GradientDtype,
                         ::testing::Values(FloatFormat::bf16, FloatFormat::fp16),
                         [](const ::testing::TestParamInfo<FloatFormat>& info) {
                           return std::string(float_format_name(info.param));
                         });

}  // namespace
