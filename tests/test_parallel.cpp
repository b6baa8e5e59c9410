// Data-parallel building blocks on one process: batch shards, the bucket
// plan of gradient averaging, the 16-bit sum that gradients travel with in
// bf16 or fp16, the collective verdict and replica hashes. Several ranks
// are tested end to end under mpiexec (tests/mpi/).
#include <tessera/core/precision.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/norm.hpp>
#include <tessera/parallel/gradient_averager.hpp>
#include <tessera/parallel/impl/sum16.hpp>

#include <cmath>
#include <numeric>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

TEST(Parallel, ShardsCoverTheGlobalBatchInOrder) {
  for (const std::int64_t global : {0, 1, 7, 96, 128}) {
    for (const int ranks : {1, 2, 3, 5}) {
      std::int64_t next = 0, smallest = global, largest = 0;
      for (int r = 0; r < ranks; ++r) {
        const Shard s = shard_of(global, r, ranks);
        EXPECT_EQ(s.offset, next) << global << " over " << ranks << ", rank " << r;
        next += s.count;
        smallest = std::min(smallest, s.count);
        largest = std::max(largest, s.count);
      }
      EXPECT_EQ(next, global);
      EXPECT_LE(largest - smallest, 1) << "uneven split of " << global << " over " << ranks;
    }
  }
  // The first global % ranks ranks take the extra sample.
  EXPECT_EQ(shard_of(7, 0, 3).count, 3);
  EXPECT_EQ(shard_of(7, 2, 3).offset, 5);
  EXPECT_EQ(shard_of(7, 2, 3).count, 2);
  test::expect_error([] { shard_of(5, 3, 3); }, "tessera::shard_of: rank 3 of 3");
}

std::unique_ptr<Model> mlp() {
  auto m = std::make_unique<Model>(Shape{20});
  m->add<Dense>("fc1", 30).add<BatchNorm>("bn").add<ReLU>("relu").add<Dense>("fc2", 10).add<Dense>(
      "fc3", 4);
  m->compile(4, 1);
  return m;
}

TEST(Parallel, BucketsTileTheGradientsFromTheLastLayerBackwards) {
  auto model = mlp();
  const Communicator comm;
  const std::int64_t count = model->parameters().count();
  for (const std::int64_t bytes : {4, 400, 1 << 30}) {
    const GradientAverager averager(comm, *model, bytes);
    const auto& buckets = averager.buckets();
    ASSERT_FALSE(buckets.empty());
    // Contiguous, from the end of the buffer to its start.
    std::int64_t end = count;
    std::size_t previous_layer = model->layers().size();
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      EXPECT_EQ(buckets[b].offset + buckets[b].count, end) << "bucket " << b << " of " << bytes;
      EXPECT_LT(buckets[b].ready_after, previous_layer);
      if (b + 1 < buckets.size()) EXPECT_GE(buckets[b].count * 4, bytes);
      end = buckets[b].offset;
      previous_layer = buckets[b].ready_after;
    }
    EXPECT_EQ(end, 0);
    // A bucket is ready once the first layer it holds has run backward.
    EXPECT_EQ(buckets.back().ready_after, 0u);
    if (bytes == 4) {
      // One bucket per layer with parameters: fc3, fc2, bn, fc1.
      ASSERT_EQ(buckets.size(), 4u);
      EXPECT_EQ(buckets[0].ready_after, 4u);
      EXPECT_EQ(buckets[2].ready_after, 1u);
    }
    if (bytes == (1 << 30)) EXPECT_EQ(buckets.size(), 1u);
  }
  test::expect_error([&] { GradientAverager(comm, *model, 0); },
                     "tessera::GradientAverager: bucket size 0 bytes must be positive");
}

TEST(Parallel, OneRankAveragesNothingAndAgreesWithItself) {
  auto model = mlp();
  const Communicator comm;
  EXPECT_EQ(comm.size(), 1);
  GradientAverager averager(comm, *model, 64);
  std::vector<float> grads(model->parameters().count());
  std::iota(grads.begin(), grads.end(), 0.0f);
  test::from_host(model->parameters().gradients(), grads);
  averager.begin();
  for (std::size_t i = model->layers().size(); i-- > 0;) averager.layer_done(i);
  averager.finish();
  EXPECT_EQ(test::to_host(model->parameters().gradients()), grads);
  EXPECT_EQ(averager.overlap_fraction(), 0.0);

  comm.agree("");  // success everywhere: no throw
  try {
    comm.agree("data.train_images: cannot read");
    FAIL() << "agree() with a failure must throw";
  } catch (const CollectiveError& e) {
    EXPECT_STREQ(e.what(), "data.train_images: cannot read");
  }
  require_same_on_every_rank(comm, 42, "the deck", "");
}

// The value of a code of T in double, with infinity standing for the next
// power of two past the largest finite value: where IEEE rounding puts the
// boundary of overflow, halfway between that and the largest finite value.
template <class T>
double code_value(std::uint16_t code) {
  const float f = static_cast<float>(T::from_bits(code));
  if (!std::isinf(f)) return f;
  const double beyond = std::is_same<T, bf16>::value ? std::ldexp(1.0, 128) : 65536.0;
  return f > 0 ? beyond : -beyond;
}

// Whether the code r of T is `exact` rounded to nearest, ties to even:
// no code next to it is nearer, and on a tie r is the even one.
template <class T>
bool nearest_code(std::uint16_t r, double exact) {
  const std::uint16_t sign = r & 0x8000u, magnitude = r & 0x7fffu;
  const std::uint16_t infinity = T(INFINITY).bits;
  std::vector<std::uint16_t> neighbours;
  if (magnitude < infinity)
    neighbours.push_back(static_cast<std::uint16_t>(sign | (magnitude + 1)));
  if (magnitude > 0) neighbours.push_back(static_cast<std::uint16_t>(sign | (magnitude - 1)));
  if (magnitude == 0) neighbours.push_back(static_cast<std::uint16_t>((sign ^ 0x8000u) | 1u));
  const double distance = std::fabs(code_value<T>(r) - exact);
  for (const std::uint16_t n : neighbours) {
    const double other = std::fabs(code_value<T>(n) - exact);
    if (other < distance || (other == distance && (r & 1u))) return false;
  }
  return true;
}

// MPI applies the reduction of sum16_op(format) to pairs of codes as
// add16<T> does: the float sum rounded to T (the definition), which is the
// exact sum rounded to nearest, ties to even, wherever double holds the
// exact sum (checked against the neighbouring codes, not a second
// rounding); the same bits in either order; NaN as the one quiet NaN.
template <class T>
void expect_sum16(FloatFormat format) {
  // Random pairs of codes (every class: zeros, subnormals, normals,
  // infinities, NaNs), half of them near each other, where rounding and
  // cancellation happen; then hand-picked cases.
  std::vector<std::uint16_t> a, b;
  for (std::uint64_t i = 0; i < 200000; ++i) {
    const auto x = static_cast<std::uint16_t>(counter_hash(41, 1, i));
    const auto y = static_cast<std::uint16_t>(counter_hash(41, 2, i));
    a.push_back(x);
    b.push_back(i % 2 ? y : static_cast<std::uint16_t>((x ^ (y & 0x8fffu))));
  }
  const std::uint16_t one = T(1.0f).bits, inf = T(INFINITY).bits, nan = T(NAN).bits;
  const std::uint16_t largest = static_cast<std::uint16_t>(inf - 1);
  for (const auto& [x, y] : std::vector<std::pair<std::uint16_t, std::uint16_t>>{
           {inf, inf | 0x8000u},
           {inf, one},
           {inf | 0x8000u, one},
           {nan, one},
           {one, nan},
           {0x8000u, 0x8000u},
           {0x8000u, 0},
           {one, one | 0x8000u},
           {largest, largest},
           {static_cast<std::uint16_t>(nan | 0x8000u | 1u), one}}) {
    a.push_back(x);
    b.push_back(y);
  }
  const int n = static_cast<int>(a.size());
  std::vector<std::uint16_t> sum = b, reversed = a;
  const MPI_Op op = impl::sum16_op(format);
  EXPECT_EQ(impl::sum16_op(format), op) << "one op per format";
  ASSERT_EQ(MPI_Reduce_local(a.data(), sum.data(), n, MPI_UINT16_T, op), MPI_SUCCESS);
  ASSERT_EQ(MPI_Reduce_local(b.data(), reversed.data(), n, MPI_UINT16_T, op), MPI_SUCCESS);
  int failures = 0, rounded = 0;
  const auto fail = [&](int i, const char* what) {
    if (++failures <= 10)
      ADD_FAILURE() << float_format_name(format) << ": 0x" << std::hex << a[i] << " + 0x" << b[i]
                    << " = 0x" << sum[i] << " (reversed 0x" << reversed[i] << "): " << what;
  };
  for (int i = 0; i < n; ++i) {
    const float x = static_cast<float>(T::from_bits(a[i])),
                y = static_cast<float>(T::from_bits(b[i]));
    const float f = x + y;
    if (sum[i] != reversed[i]) fail(i, "not commutative");
    if (sum[i] != impl::add16<T>(a[i], b[i])) fail(i, "MPI's result is not add16's");
    if (std::isnan(f)) {
      if (sum[i] != nan) fail(i, "not the quiet NaN");
      continue;
    }
    if (sum[i] != T(f).bits) fail(i, "not the float sum rounded to the format");
    if (std::isinf(x) || std::isinf(y)) {
      if (sum[i] != (std::isinf(x) ? a[i] : b[i])) fail(i, "an infinity did not propagate");
      continue;
    }
    // Both finite: where the double sum is exact (TwoSum's error is 0), the
    // code must be its correct rounding.
    const double dx = x, dy = y, s = dx + dy, v = s - dx;
    if ((dx - (s - v)) + (dy - v) != 0) continue;
    ++rounded;
    if (!nearest_code<T>(sum[i], s)) fail(i, "not the nearest code, ties to even");
    if (s == 0 && sum[i] != ((a[i] & b[i] & 0x8000u) ? 0x8000u : 0u))
      fail(i, "an exact zero has the wrong sign");
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(rounded, n / 3) << "too few pairs checked against the exact sum";
}

TEST(Parallel, SixteenBitSumRoundsEachPairOnce) {
  expect_sum16<bf16>(FloatFormat::bf16);
  expect_sum16<fp16>(FloatFormat::fp16);
  test::expect_error([] { impl::sum16_op(FloatFormat::fp32); },
                     "tessera::impl::sum16_op: format fp32 has no 16-bit sum; use bf16 or fp16");
}

TEST(Parallel, SixteenBitSumCornerCases) {
  // By hand: ties to even at 1 + half an ulp, overflow, subnormals, NaN.
  const auto bf = [](std::uint16_t x, std::uint16_t y) { return impl::add16<bf16>(x, y); };
  const auto fp = [](std::uint16_t x, std::uint16_t y) { return impl::add16<fp16>(x, y); };
  EXPECT_EQ(bf(0x3f80, 0x3b80), 0x3f80);  // 1 + 2^-8: a tie, to even 1
  EXPECT_EQ(bf(0x3f81, 0x3b80), 0x3f82);  // (1 + 2^-7) + 2^-8: a tie, up to even
  EXPECT_EQ(bf(0x7f7f, 0x7f7f), 0x7f80);  // largest + largest: infinity
  EXPECT_EQ(bf(0x7f80, 0xff80), 0x7fc0);  // inf + -inf: the quiet NaN
  EXPECT_EQ(bf(0xffc1, 0x3f80), 0x7fc0);  // NaN with a payload and a sign + 1
  EXPECT_EQ(bf(0xff80, 0x3f80), 0xff80);  // -inf + 1
  EXPECT_EQ(fp(0x3c00, 0x1000), 0x3c00);  // 1 + 2^-11: a tie, to even 1
  EXPECT_EQ(fp(0x3c01, 0x1000), 0x3c02);
  EXPECT_EQ(fp(0x7bff, 0x4800), 0x7bff);  // 65504 + 8 = 65512: below the boundary 65520
  EXPECT_EQ(fp(0x7bff, 0x4c00), 0x7c00);  // 65504 + 16 = 65520: a tie, to even infinity
  EXPECT_EQ(fp(0x7bff, 0x7bff), 0x7c00);
  EXPECT_EQ(fp(0xfbff, 0xfbff), 0xfc00);
  EXPECT_EQ(fp(0x7c00, 0xfc00), 0x7e00);
  EXPECT_EQ(fp(0xfe55, 0x3c00), 0x7e00);
  EXPECT_EQ(fp(0x0001, 0x0001), 0x0002);  // subnormals add exactly
  EXPECT_EQ(fp(0x03ff, 0x0001), 0x0400);  // into the smallest normal
  EXPECT_EQ(fp(0x8000, 0x8000), 0x8000);  // -0 + -0 = -0
  EXPECT_EQ(fp(0x8000, 0x0000), 0x0000);
  EXPECT_EQ(fp(0x3c00, 0xbc00), 0x0000);  // 1 - 1 = +0
}

TEST(Parallel, ContentHashSeesEveryBit) {
  Vector<float> a("a", 100), b("b", 100);
  EXPECT_EQ(content_hash(a), content_hash(b));
  Kokkos::deep_copy(Kokkos::subview(b, 99), -0.0f);  // only the sign bit differs
  EXPECT_NE(content_hash(a), content_hash(b));
  EXPECT_NE(content_hash(std::string("deck a")), content_hash(std::string("deck b")));
}

}  // namespace
