// Embedding: lookups against a naive host loop, a backward that sums each
// token's rows in row order (the same bits as a sequential host sum, on
// every space and thread count, with many repeated tokens), the GPU's
// backward by teams at every team size, layer gradients with and without
// positions, and the errors for ids outside the vocabulary and for inputs
// that are not token ids.
#include <tessera/kernels/embedding.hpp>
#include <tessera/layers/embedding.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "layer_check.hpp"
#include "team_sizes.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class EmbeddingKernels : public ::testing::Test {};
TYPED_TEST_SUITE(EmbeddingKernels, test::ExecSpaces);

template <class E>
using V1 = Kokkos::View<float*, Kokkos::LayoutRight, typename E::memory_space>;
template <class E>
using V2 = Kokkos::View<float**, Kokkos::LayoutRight, typename E::memory_space>;

// The reference of embedding backward, in double and row order: each
// token's sum of its rows of dy (NaN for a token no row holds), and each
// position's sum over the samples.
std::vector<double> token_sums(const std::vector<float>& ids, const std::vector<float>& dy,
                               std::int64_t vocabulary, std::int64_t channels) {
  std::vector<double> sums(vocabulary * channels, std::nan(""));
  const std::int64_t rows = static_cast<std::int64_t>(ids.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < channels; ++c) {
      double& sum = sums[static_cast<std::int64_t>(ids[r]) * channels + c];
      sum = (std::isnan(sum) ? 0.0 : sum) + dy[r * channels + c];
    }
  return sums;
}
std::vector<double> position_sums(const std::vector<float>& dy, std::int64_t samples,
                                  std::int64_t positions, std::int64_t channels) {
  std::vector<double> sums(positions * channels, 0.0);
  for (std::int64_t n = 0; n < samples; ++n)
    for (std::int64_t i = 0; i < positions * channels; ++i)
      sums[i] += dy[n * positions * channels + i];
  return sums;
}

TYPED_TEST(EmbeddingKernels, LookupAndDeterministicBackwardMatchHostLoops) {
  using E = TypeParam;
  const std::int64_t samples = 6, positions = 5, vocabulary = 4;
  const std::int64_t rows = samples * positions;
  // 130 channels: the host's sums take the channels in chunks of 64 (two
  // whole chunks and a short one).
  for (const std::int64_t channels : {std::int64_t(3), std::int64_t(130)})
    for (const bool with_positions : {false, true}) {
      SCOPED_TRACE(std::to_string(channels) + " channels, " +
                   (with_positions ? "with positions" : "tokens only"));
      // Few tokens over many rows: every bucket holds several rows, and token
      // 3 none (its gradient row must stay as it was).
      std::vector<float> ids(rows);
      for (std::int64_t r = 0; r < rows; ++r)
        ids[r] = static_cast<float>(counter_hash(11, 1, r) % (vocabulary - 1));
      V1<E> id_view("ids", rows);
      V2<E> table("table", vocabulary, channels), y("y", rows, channels), dy("dy", rows, channels),
          dtable("dtable", vocabulary, channels);
      V2<E> pos("pos", with_positions ? positions : 0, with_positions ? channels : 0),
          dpos("dpos", with_positions ? positions : 0, with_positions ? channels : 0);
      test::from_host(id_view, ids);
      const auto table_h = test::random_values(vocabulary * channels, 2);
      const auto pos_h = test::random_values(pos.size(), 3);
      const auto dy_h = test::random_values(rows * channels, 4);
      const auto dtable_start = test::random_values(vocabulary * channels, 5);
      const auto dpos_start = test::random_values(dpos.size(), 6);
      test::from_host(table, table_h);
      test::from_host(pos, pos_h);
      test::from_host(dy, dy_h);
      test::from_host(dtable, dtable_start);
      test::from_host(dpos, dpos_start);
      kernels::TokenBuckets buckets("buckets", vocabulary, rows);

      kernels::embedding_forward(E(), positions, id_view, table, pos, y);
      kernels::embedding_backward(E(), positions, id_view, dy, buckets, dtable, dpos);
      for (const std::int64_t count : test::to_host(buckets.fill)) EXPECT_EQ(count, 0);

      const auto yh = test::to_host(y);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < channels; ++c) {
          float expected = table_h[static_cast<std::int64_t>(ids[r]) * channels + c];
          if (with_positions) expected += pos_h[(r % positions) * channels + c];
          EXPECT_EQ(yh[r * channels + c], expected) << r << ", " << c;
        }
      // Sums in double in row order, then one rounding: bit for bit.
      std::vector<float> dtable_expected = dtable_start;
      const auto tokens = token_sums(ids, dy_h, vocabulary, channels);
      for (std::size_t i = 0; i < tokens.size(); ++i)
        if (!std::isnan(tokens[i])) dtable_expected[i] += static_cast<float>(tokens[i]);
      EXPECT_EQ(test::to_host(dtable), dtable_expected);
      if (with_positions) {
        std::vector<float> dpos_expected = dpos_start;
        const auto by_position = position_sums(dy_h, samples, positions, channels);
        for (std::size_t i = 0; i < by_position.size(); ++i)
          dpos_expected[i] += static_cast<float>(by_position[i]);
        EXPECT_EQ(test::to_host(dpos), dpos_expected);
      }
    }
}

// The GPU's backward (a team per token sorts its bucket and sums it, a team
// per position block sums its rows, in fixed chunks): the same bits at every team size, each bucket
// sorted by row, and close to double sums. Token 1 takes most rows: 200 of 250 (more rows than
// chunks), and 4500 of 5000 in the second case, a bucket larger than a team sorts in its scratch.
// Token 3 takes none.
TYPED_TEST(EmbeddingKernels, TeamsBackwardSameBitsForEveryTeamSizeAndCloseToDouble) {
  using E = TypeParam;
  const std::int64_t vocabulary = 5, channels = 11;
  for (const std::int64_t samples : {5, 100}) {
    const std::int64_t positions = 50, rows = samples * positions;
    SCOPED_TRACE(std::to_string(rows) + " rows");
    std::vector<float> ids(rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint64_t h = counter_hash(12, 1, r);
      ids[r] = h % 10 != 0 ? 1.0f : static_cast<float>(h / 10 % 3 == 2 ? 4 : h / 10 % 3);
    }
    V1<E> id_view("ids", rows);
    V2<E> dy("dy", rows, channels);
    test::from_host(id_view, ids);
    const auto dy_h = test::random_values(rows * channels, 7);
    const auto dtable_start = test::random_values(vocabulary * channels, 8);
    const auto dpos_start = test::random_values(positions * channels, 9);
    test::from_host(dy, dy_h);
    std::vector<float> first_table, first_pos;
    for (const kernels::TeamShape team : test::team_shapes<E>()) {
      V2<E> dtable("dtable", vocabulary, channels), dpos("dpos", positions, channels);
      test::from_host(dtable, dtable_start);
      test::from_host(dpos, dpos_start);
      kernels::TokenBuckets buckets("buckets", vocabulary, rows);
      kernels::impl::embedding_backward_teams(E(), positions, id_view, dy, buckets, dtable, dpos,
                                              team);
      const auto table_h = test::to_host(dtable), pos_h = test::to_host(dpos);
      const auto offsets = test::to_host(buckets.offsets), order = test::to_host(buckets.rows);
      // The counters are back at zero for the next step, which fills none.
      for (const std::int64_t count : test::to_host(buckets.fill)) EXPECT_EQ(count, 0);
      for (std::int64_t v = 0; v < vocabulary; ++v) {
        std::vector<std::int64_t> expected;
        for (std::int64_t r = 0; r < rows; ++r)
          if (static_cast<std::int64_t>(ids[r]) == v) expected.push_back(r);
        EXPECT_EQ(
            std::vector<std::int64_t>(order.begin() + offsets[v], order.begin() + offsets[v + 1]),
            expected)
            << "bucket " << v << ", team size " << team.size;
      }
      if (!first_table.empty()) {
        EXPECT_EQ(table_h, first_table) << "team size " << team.size;
        EXPECT_EQ(pos_h, first_pos) << "team size " << team.size;
        continue;
      }
      first_table = table_h;
      first_pos = pos_h;
      // Sums in double, rounded once to float: within a float's rounding
      // of the start plus the sum.
      const double u = std::numeric_limits<float>::epsilon() / 2;
      const auto tokens = token_sums(ids, dy_h, vocabulary, channels);
      for (std::int64_t i = 0; i < vocabulary * channels; ++i) {
        const double start = dtable_start[i], sum = tokens[i];
        if (std::isnan(sum))
          EXPECT_EQ(table_h[i], dtable_start[i]) << i / channels;
        else
          EXPECT_NEAR(table_h[i], start + sum, 2 * u * (std::abs(start) + std::abs(sum)) + 1e-12)
              << i / channels << ", " << i % channels;
      }
      const auto by_position = position_sums(dy_h, samples, positions, channels);
      for (std::int64_t i = 0; i < positions * channels; ++i) {
        const double start = dpos_start[i], sum = by_position[i];
        EXPECT_NEAR(pos_h[i], start + sum, 2 * u * (std::abs(start) + std::abs(sum)) + 1e-12)
            << i / channels << ", " << i % channels;
      }
    }
  }
}

TYPED_TEST(EmbeddingKernels, FindsTheFirstInvalidId) {
  using E = TypeParam;
  V1<E> ids("ids", 6);
  test::from_host(ids, {0.0f, 3.0f, 1.0f, 2.0f, 1.0f, 0.0f});
  EXPECT_EQ(kernels::first_invalid_token(E(), ids, 4), -1);
  EXPECT_EQ(kernels::first_invalid_token(E(), ids, 3), 1);  // 3 is outside [0, 3)
  test::from_host(ids, {0.0f, 1.0f, 1.5f, -1.0f, 1.0f, 0.0f});
  EXPECT_EQ(kernels::first_invalid_token(E(), ids, 4), 2);  // 1.5 is no id
}

TEST(Embedding, GradientsMatchFiniteDifferences) {
  for (const bool positions : {false, true}) {
    SCOPED_TRACE(positions ? "with positions" : "tokens only");
    Embedding::Options options;
    options.vocabulary = 5;
    options.dim = 3;
    options.positions = positions;
    Embedding embedding("embed", options);
    test::LayerHarness h(embedding, {Shape{3, 4}});
    EXPECT_EQ(h.output.shape(), (Shape{3, 4, 3}));
    ASSERT_EQ(h.parameters().entries().size(), positions ? 2u : 1u);
    EXPECT_EQ(h.parameters().entries()[0].spec.shape, (Shape{5, 3}));
    if (positions) EXPECT_EQ(h.parameters().entries()[1].spec.shape, (Shape{4, 3}));
    h.token_inputs(options.vocabulary);
    h.expect_gradients();
  }
}

// In bf16 and fp16 the ids stay float, so ids above 256 (which bf16 would
// round: 257 to 256, 777 to 776) look up their own rows; each vector is the
// float lookup (with its position added) rounded once, and the table
// gradients are the float layer's sums of the same (16-bit) dy.
template <class T>
void expect_embedding_16bit() {
  Embedding::Options options;
  options.vocabulary = 1000;
  options.dim = 3;
  options.positions = true;
  Embedding a("embed", options), b("embed", options);
  a.set_compute(format_of<T>());
  const Shape shape{2, 3};
  test::LayerHarness h16(a, {shape}), h32(b, {shape});
  const std::vector<float> ids{257.0f, 777.0f, 0.0f, 999.0f, 256.0f, 777.0f};
  test::from_host(h32.inputs[0].flat(), ids);
  Kokkos::deep_copy(h16.parameters().values(), h32.parameters().values());
  std::vector<float> dy = test::random_values(h32.output.numel(), 8);
  for (auto& v : dy) v = float(T(v));
  test::from_host(h32.output_grad.flat(), dy);
  h32.forward();
  h32.backward();

  Tensor<T> y("y16", h32.output.shape()), dy16("dy16", h32.output.shape());
  std::vector<T> dy_bits(dy.size());
  for (std::size_t k = 0; k < dy.size(); ++k) dy_bits[k] = T(dy[k]);
  test::from_host(dy16.flat(), dy_bits);
  a.forward_ids16({h32.inputs[0]}, y, StepContext{});
  h16.parameters().zero_gradients(ExecSpace());
  a.backward_ids16({h32.inputs[0]}, dy16, StepContext{});

  const auto y32 = test::to_host(h32.output.flat());
  const auto got = test::to_host(y.flat());
  for (std::size_t k = 0; k < y32.size(); ++k)
    EXPECT_EQ(float(got[k]), float(T(y32[k]))) << "y[" << k << "]";
  EXPECT_EQ(test::to_host(h16.parameters().gradients()),
            test::to_host(h32.parameters().gradients()));
  // Row 257 of the table holds the gradient of sample 0, position 0 only.
  const auto grads = test::to_host(h16.parameters().gradients());
  for (std::int64_t c = 0; c < 3; ++c) {
    EXPECT_EQ(grads[257 * 3 + c], dy[c]);
    EXPECT_EQ(grads[256 * 3 + c], dy[4 * 3 + c]);
  }
  test::expect_error([&] { a.forward(h32.inputs, h32.output, StepContext{}); },
                     std::string("called with fp32 tensors after set_compute(") +
                         float_format_name(format_of<T>()) + ")");
}

TEST(Embedding, Bf16AndFp16KeepTheIdsFloat) {
  expect_embedding_16bit<bf16>();
  expect_embedding_16bit<fp16>();
}

TEST(Embedding, ErrorsNameLayerSampleAndPosition) {
  Embedding::Options options;
  options.vocabulary = 4;
  options.dim = 2;
  Embedding embedding("embed", options);
  test::expect_error(
      [&] {
        embedding.output_shape({Shape{2, 3, 4}});
      },
      "tessera::Embedding 'embed': input [2, 3, 4] must be token ids [N, T]");
  test::LayerHarness h(embedding, {Shape{2, 3}});
  test::from_host(h.inputs[0].flat(), {0.0f, 1.0f, 2.0f, 3.0f, 7.0f, 1.0f});
  test::expect_error([&] { h.forward(); },
                     "tessera::Embedding 'embed': sample 1, position 1 holds 7, not a token id "
                     "from 0 to 3");
  options.dim = 0;
  test::expect_error([&] { Embedding("bad", options); },
                     "tessera::Embedding 'bad': vocabulary and dim must be positive, got 4 and 0");
}

}  // namespace
