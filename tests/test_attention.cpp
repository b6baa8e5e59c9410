// Causal self-attention: the attention kernels (the build's path and the
// device path at every team size) against a naive double-precision loop
// (with and without dropout, large scores included), causality (position t's
// output, and the gradient reaching the input, do not depend on anything
// after t), layer gradients over head counts, bias and dropout, and the
// shape errors.
#include <tessera/kernels/attention.hpp>
#include <tessera/layers/attention.hpp>

#include <cmath>
#include <limits>

#include "layer_check.hpp"
#include "team_sizes.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class AttentionKernels : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionKernels, test::ExecSpaces);

template <class E>
using V1 = Kokkos::View<float*, typename E::memory_space>;
template <class E>
using V2 = Kokkos::View<float**, Kokkos::LayoutRight, typename E::memory_space>;

// Y [N T, C] and, for dY [N T, C], dqkv [N T, 3 C] in double, with the
// magnitudes of dqkv's terms (their absolute values summed: the scale of
// a float sum's rounding). A term of dQ or dK holds dS = scale P (dP - dot),
// whose float rounding scales with |dP| and the sum of |P dP| behind dot
// rather than with |dS|: its magnitude counts those.
// Also each query row's largest score and the sum of its exponentials
// (the statistics forward keeps), [N H, T].
struct Reference {
  std::vector<double> y, dqkv, dqkv_magnitude, max, sum;
};

Reference reference(const std::vector<float>& qkv, const std::vector<float>& dy,
                    const kernels::AttentionLayout& l, float scale,
                    const kernels::AttentionDropout& dropout) {
  const std::int64_t T = l.positions, H = l.heads, D = l.head_dim, C = l.channels();
  Reference r{std::vector<double>(l.batch * T * C, 0.0),
              std::vector<double>(l.batch * T * 3 * C, 0.0),
              std::vector<double>(l.batch * T * 3 * C, 0.0),
              std::vector<double>(l.batch * H * T, 0.0), std::vector<double>(l.batch * H * T, 0.0)};
  const auto at = [&](std::int64_t n, std::int64_t t, std::int64_t col) {
    return double(qkv[(n * T + t) * 3 * C + col]);
  };
  const auto dy_at = [&](std::int64_t n, std::int64_t t, std::int64_t col) {
    return double(dy[(n * T + t) * C + col]);
  };
  const auto add = [&](std::int64_t n, std::int64_t t, std::int64_t col, double term,
                       double magnitude) {
    r.dqkv[(n * T + t) * 3 * C + col] += term;
    r.dqkv_magnitude[(n * T + t) * 3 * C + col] += magnitude;
  };
  for (std::int64_t n = 0; n < l.batch; ++n)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < T; ++t) {
        std::vector<double> p(t + 1), keep(t + 1, 1.0), dp(t + 1), dp_magnitude(t + 1);
        double max = -1e300, sum = 0;
        for (std::int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += at(n, t, h * D + d) * at(n, j, C + h * D + d);
          p[j] = scale * dot;
          max = std::max(max, p[j]);
          if (dropout.rate > 0) keep[j] = dropout.scale(((n * H + h) * T + t) * T + j);
        }
        for (std::int64_t j = 0; j <= t; ++j) sum += std::exp(p[j] - max);
        r.max[(n * H + h) * T + t] = max;
        r.sum[(n * H + h) * T + t] = sum;
        double dot = 0, dot_magnitude = 0;  // sum over j of P dP, and of |P dP|
        for (std::int64_t j = 0; j <= t; ++j) {
          p[j] = std::exp(p[j] - max) / sum;
          dp[j] = dp_magnitude[j] = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            r.y[(n * T + t) * C + h * D + d] += p[j] * keep[j] * at(n, j, 2 * C + h * D + d);
            const double term = dy_at(n, t, h * D + d) * at(n, j, 2 * C + h * D + d);
            dp[j] += term;
            dp_magnitude[j] += std::abs(term);
          }
          dp[j] *= keep[j];
          dp_magnitude[j] *= keep[j];
          dot += p[j] * dp[j];
          dot_magnitude += p[j] * dp_magnitude[j];
        }
        for (std::int64_t j = 0; j <= t; ++j) {
          const double ds = scale * p[j] * (dp[j] - dot);
          const double ds_magnitude = scale * p[j] * (dp_magnitude[j] + dot_magnitude);
          for (std::int64_t d = 0; d < D; ++d) {
            const double k = at(n, j, C + h * D + d), q = at(n, t, h * D + d);
            add(n, t, h * D + d, ds * k, ds_magnitude * std::abs(k));
            add(n, j, C + h * D + d, ds * q, ds_magnitude * std::abs(q));
            const double dv = p[j] * keep[j] * dy_at(n, t, h * D + d);
            add(n, j, 2 * C + h * D + d, dv, std::abs(dv));
          }
        }
      }
  return r;
}

// One attention problem: random qkv (with a score near 400, which
// overflows exp unless the row maximum comes off first) and dY.
struct Problem {
  kernels::AttentionLayout l;
  kernels::AttentionDropout dropout;
  float scale;
  std::vector<float> qkv, dy;
};

Problem problem(const kernels::AttentionLayout& l, float rate) {
  Problem pr{l, {}, 1.0f / std::sqrt(static_cast<float>(l.head_dim)), {}, {}};
  pr.dropout.rate = rate;
  pr.dropout.seed = 3;
  pr.dropout.stream = 9;
  pr.dropout.first_counter = 1234;
  const std::int64_t rows = l.batch * l.positions, C = l.channels();
  pr.qkv = test::random_values(rows * 3 * C, 21, -2.0f, 2.0f);
  for (std::int64_t d = 0; d < l.head_dim && l.positions > 1; ++d) {
    pr.qkv[(1 * 3 * C) + d] = 20.0f;      // query of sample 0, position 1, head 0
    pr.qkv[(0 * 3 * C) + C + d] = 20.0f;  // key of position 0, head 0
  }
  pr.dy = test::random_values(rows * C, 22, -1.0f, 1.0f);
  return pr;
}

// Heads, row statistics and dqkv of a kernel pair, on the host.
struct Results {
  std::vector<float> heads, stats, dqkv;
};

// Runs forward then backward; Forward and Backward take the views.
template <class E, class Forward, class Backward>
Results run(const Problem& pr, std::int64_t scratch_rows, const Forward& forward,
            const Backward& backward) {
  const kernels::AttentionLayout& l = pr.l;
  const std::int64_t rows = l.batch * l.positions, C = l.channels();
  V2<E> qkv("qkv", rows, 3 * C), heads("heads", rows, C), dheads("dheads", rows, C),
      dqkv("dqkv", rows, 3 * C);
  kernels::AttentionScores stats("stats", l.batch * l.heads, kernels::attention_stat_rows,
                                 l.positions),
      scratch("s", l.batch * l.heads, scratch_rows, l.positions);
  test::from_host(qkv, pr.qkv);
  test::from_host(dheads, pr.dy);
  // Poisoned outputs: every element must be written.
  Kokkos::deep_copy(heads, std::nanf(""));
  Kokkos::deep_copy(dqkv, std::nanf(""));
  Kokkos::deep_copy(stats, std::nanf(""));
  Kokkos::deep_copy(scratch, std::nanf(""));
  forward(qkv, stats, scratch, heads);
  backward(qkv, stats, scratch, dheads, dqkv);
  return Results{test::to_host(heads), test::to_host(stats), test::to_host(dqkv)};
}

void expect_matches_reference(const Problem& pr, const Results& got) {
  const kernels::AttentionLayout& l = pr.l;
  const Reference expected = reference(pr.qkv, pr.dy, l, pr.scale, pr.dropout);
  for (std::size_t i = 0; i < got.heads.size(); ++i)
    EXPECT_NEAR(got.heads[i], expected.y[i], 1e-5 * (1.0 + std::abs(expected.y[i]))) << i;
  for (std::size_t i = 0; i < got.dqkv.size(); ++i)
    EXPECT_NEAR(got.dqkv[i], expected.dqkv[i], 1e-5 * (1.0 + expected.dqkv_magnitude[i]))
        << "dqkv " << i;
  // Statistics: each row's largest score and the inverse of the sum of
  // its exponentials (the sum's terms are at most 1, one of them 1).
  const std::int64_t T = l.positions;
  for (std::int64_t b = 0; b < l.batch * l.heads; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int64_t i = b * T + t;
      const float max = got.stats[(b * kernels::attention_stat_rows + 0) * T + t];
      const float inverse = got.stats[(b * kernels::attention_stat_rows + 1) * T + t];
      EXPECT_NEAR(max, expected.max[i], 1e-5 * (1.0 + std::abs(expected.max[i]))) << "max " << i;
      EXPECT_NEAR(inverse * expected.sum[i], 1.0, 1e-5 * double(t + 1)) << "inverse " << i;
    }
}

// The path the build takes on E (attention_forward, attention_backward).
template <class E>
Results run_build_path(const Problem& pr) {
  const kernels::AttentionLayout& l = pr.l;
  return run<E>(
      pr, kernels::attention_scratch_rows<E>(l),
      [&](auto qkv, auto stats, auto scratch, auto heads) {
        kernels::attention_forward(E(), l, pr.scale, pr.dropout, qkv, stats, scratch, heads);
      },
      [&](auto qkv, auto stats, auto scratch, auto dheads, auto dqkv) {
        kernels::attention_backward(E(), l, pr.scale, pr.dropout, qkv, stats, scratch, dheads,
                                    dqkv);
      });
}

// Shapes below one register tile of the host path (4 positions by 8
// values) and across several, with edge tiles in both directions; and
// more positions than the device path's key rows hold in scratch at once.
const std::vector<kernels::AttentionLayout>& layouts() {
  static const std::vector<kernels::AttentionLayout> all{
      {2, 5, 2, 3}, {2, 13, 2, 20}, {1, kernels::impl::attention_column_chunk + 45, 1, 4}};
  return all;
}

// The path the build takes on E.
TYPED_TEST(AttentionKernels, MatchesNaiveReference) {
  using E = TypeParam;
  // And where the build takes the host path, a head wider than two of the
  // host's vector registers (its widest tiles, then narrower ones) over
  // three blocks of 16 query rows, the last one short.
  std::vector<kernels::AttentionLayout> all = layouts();
  if constexpr (host_fast_paths_v<E>) all.push_back({2, 37, 2, 40});
  for (const kernels::AttentionLayout& l : all)
    for (const float rate : {0.0f, 0.3f}) {
      SCOPED_TRACE(std::to_string(l.positions) + " positions, rate " + std::to_string(rate));
      const Problem pr = problem(l, rate);
      expect_matches_reference(pr, run_build_path<E>(pr));
    }
}

// The device path, whichever path the build takes: close to the reference,
// and the same bits for every team size the backend allows.
TYPED_TEST(AttentionKernels, DevicePathMatchesReferenceWithTheSameBitsForEveryTeamSize) {
  using E = TypeParam;
  for (const kernels::AttentionLayout& l : layouts())
    for (const float rate : {0.0f, 0.3f}) {
      SCOPED_TRACE(std::to_string(l.positions) + " positions, rate " + std::to_string(rate));
      const Problem pr = problem(l, rate);
      const auto device = [&](kernels::TeamShape shape) {
        return run<E>(
            pr, kernels::impl::attention_device_scratch_rows(l),
            [&](auto qkv, auto stats, auto scratch, auto heads) {
              kernels::impl::attention_forward_device(E(), l, pr.scale, pr.dropout, qkv, stats,
                                                      scratch, heads, shape);
            },
            [&](auto qkv, auto stats, auto scratch, auto dheads, auto dqkv) {
              kernels::impl::attention_backward_device(E(), l, pr.scale, pr.dropout, qkv, stats,
                                                       scratch, dheads, dqkv, shape);
            });
      };
      const Results automatic = device({});
      expect_matches_reference(pr, automatic);
      for (const kernels::TeamShape shape : test::team_shapes<E>()) {
        SCOPED_TRACE("team size " + std::to_string(shape.size));
        const Results fixed = device(shape);
        EXPECT_EQ(fixed.heads, automatic.heads);
        EXPECT_EQ(fixed.stats, automatic.stats);
        EXPECT_EQ(fixed.dqkv, automatic.dqkv);
      }
    }
}

// The parts the layer adds to the attention's launches: the output
// projection's bias broadcast into its output (forward) and that bias's
// gradient, the column sums of the output's gradient (backward). Through
// the public overloads (the path the build takes) and through the device
// path at every team size: heads and dqkv as without them, y the bias
// exactly, db within a rounding a row of the double sums, with the same
// bits at every team size.
TYPED_TEST(AttentionKernels, OutputBiasAndItsGradientBesideTheKernels) {
  using E = TypeParam;
  const kernels::AttentionLayout l{2, 13, 2, 20};
  const Problem pr = problem(l, 0.3f);
  const std::int64_t rows = l.batch * l.positions, C = l.channels();
  const auto bias_h = test::random_values(C, 31);
  const auto start_h = test::random_values(C, 32);
  const auto dy_h = test::random_values(rows * C, 33);
  V1<E> bias("bias", C);
  V2<E> dy("dy", rows, C);
  test::from_host(bias, bias_h);
  test::from_host(dy, dy_h);
  const auto plain = run_build_path<E>(pr);
  const double u = std::numeric_limits<float>::epsilon() / 2;
  std::vector<float> first_db;
  // shape.size < 0: the public overloads.
  std::vector<kernels::TeamShape> shapes{kernels::TeamShape{-1}};
  for (const auto shape : test::team_shapes<E>()) shapes.push_back(shape);
  for (const kernels::TeamShape shape : shapes) {
    SCOPED_TRACE(shape.size < 0 ? "public overloads" : "team size " + std::to_string(shape.size));
    V2<E> y("y", rows, C);
    V1<E> db("db", C);
    Kokkos::deep_copy(y, std::nanf(""));
    test::from_host(db, start_h);
    namespace impl = kernels::impl;
    const auto got = run<E>(
        pr,
        shape.size < 0 ? kernels::attention_scratch_rows<E>(l)
                       : impl::attention_device_scratch_rows(l),
        [&](auto qkv, auto stats, auto scratch, auto heads) {
          if (shape.size < 0)
            kernels::attention_forward(E(), l, pr.scale, pr.dropout, qkv, stats, scratch, heads, y,
                                       bias);
          else
            impl::attention_forward_device(E(), l, pr.scale, pr.dropout, qkv, stats, scratch, heads,
                                           shape, impl::broadcast_rows_part(y, bias));
        },
        [&](auto qkv, auto stats, auto scratch, auto dheads, auto dqkv) {
          if (shape.size < 0)
            kernels::attention_backward(E(), l, pr.scale, pr.dropout, qkv, stats, scratch, dheads,
                                        dqkv, dy, db);
          else
            impl::attention_backward_device(E(), l, pr.scale, pr.dropout, qkv, stats, scratch,
                                            dheads, dqkv, shape,
                                            impl::dense_bias_gradient_part(dy, db));
        });
    if (shape.size < 0) {
      EXPECT_EQ(got.heads, plain.heads);
      EXPECT_EQ(got.dqkv, plain.dqkv);
    } else {
      expect_matches_reference(pr, got);
    }
    const auto yh = test::to_host(y);
    for (std::int64_t i = 0; i < rows * C; ++i) EXPECT_EQ(yh[i], bias_h[i % C]) << "y " << i;
    const auto dbh = test::to_host(db);
    for (std::int64_t c = 0; c < C; ++c) {
      double sum = start_h[c], magnitude = std::abs(start_h[c]);
      for (std::int64_t r = 0; r < rows; ++r) {
        sum += dy_h[r * C + c];
        magnitude += std::abs(dy_h[r * C + c]);
      }
      EXPECT_NEAR(dbh[c], sum, double(rows + 1) * u * magnitude) << "db " << c;
    }
    if (shape.size < 0) continue;
    if (first_db.empty())
      first_db = dbh;
    else
      EXPECT_EQ(dbh, first_db);
  }
}

TYPED_TEST(AttentionKernels, ScratchOfTheOtherPathIsRejected) {
  using E = TypeParam;
  const kernels::AttentionLayout l{1, 6, 1, 4};
  V2<E> qkv("qkv", 6, 12), heads("heads", 6, 4);
  // The host path's scratch: 2 D + 48 rows.
  kernels::AttentionScores stats("stats", 1, 2, 6), scratch("s", 1, 2 * 4 + 48, 6);
  test::expect_error(
      [&] {
        kernels::impl::attention_forward_device(E(), l, 1.0f, {}, qkv, stats, scratch, heads);
      },
      "tessera::kernels::attention_forward: qkv [6, 12], stats [1, 2, 6], scratch [1, 56, 6], "
      "heads [6, 4] for batch 1, 6 positions, 1 heads of 4; expected qkv [N T, 3 C], stats "
      "[N H, 2, T], scratch [N H, 1, T]");
}

// What the layer keeps from forward to backward and its temporaries grow
// as T, not T^2: no [T, T] scores or probabilities exist whole, on either
// path (the host path holds blocks of 16 rows of T, the device path chunks
// of attention_column_chunk positions per team).
TEST(CausalSelfAttention, MemoryGrowsLinearlyWithTheContext) {
  CausalSelfAttention::Options o;
  o.heads = 4;
  const CausalSelfAttention layer("attn", o);
  const auto elements = [&](std::int64_t t) {
    const Shapes in{Shape{2, t, 64}};
    return layer.recomputed_elements(in) + layer.temporary_elements(in);
  };
  EXPECT_EQ(elements(2048), 4 * elements(512));
  EXPECT_EQ(elements(512), 4 * elements(128));
  // At 2048 positions the [N H, T, T] probabilities alone would be 32 M floats.
  EXPECT_LT(elements(2048), 2 * 4 * 2048 * 2048 / 8);
}

CausalSelfAttention::Options attention_options(std::int64_t heads, float dropout, bool bias) {
  CausalSelfAttention::Options o;
  o.heads = heads;
  o.dropout = dropout;
  o.bias = bias;
  return o;
}

// Changing the tokens after position t leaves outputs 0..t unchanged, bit
// for bit (masked scores are exact zeros, so they add nothing); and a
// gradient at positions 0..t only reaches inputs 0..t.
TEST(CausalSelfAttention, PositionTDependsOnNothingAfterT) {
  const std::int64_t N = 2, T = 6, C = 8;
  CausalSelfAttention attention("attn", attention_options(2, 0.0f, true));
  test::LayerHarness h(attention, {Shape{N, T, C}}, 3);
  StepContext eval;
  eval.training = false;
  h.forward(eval);
  const auto before = test::to_host(h.output.flat());
  const auto original = test::to_host(h.inputs[0].flat());
  for (std::int64_t t = 0; t + 1 < T; ++t) {
    SCOPED_TRACE(t);
    auto x = original;
    const auto noise = test::random_values(x.size(), 50 + t, -3.0f, 3.0f);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t s = t + 1; s < T; ++s)
        for (std::int64_t c = 0; c < C; ++c) x[(n * T + s) * C + c] += noise[(n * T + s) * C + c];
    test::from_host(h.inputs[0].flat(), x);
    h.forward(eval);
    const auto after = test::to_host(h.output.flat());
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t s = 0; s < T; ++s)
        for (std::int64_t c = 0; c < C; ++c) {
          const std::size_t i = (n * T + s) * C + c;
          if (s <= t)
            EXPECT_EQ(after[i], before[i]) << "sample " << n << " position " << s;
          else
            EXPECT_NE(after[i], before[i]) << "sample " << n << " position " << s;
        }
    // Backward from positions 0..t only: inputs after t get exactly nothing.
    std::vector<float> dy(h.output.numel(), 0.0f);
    const auto r = test::random_values(dy.size(), 70 + t);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t s = 0; s <= t; ++s)
        for (std::int64_t c = 0; c < C; ++c) dy[(n * T + s) * C + c] = r[(n * T + s) * C + c];
    test::from_host(h.output_grad.flat(), dy);
    h.backward(eval);
    const auto dx = test::to_host(h.input_grads[0].flat());
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t s = t + 1; s < T; ++s)
        for (std::int64_t c = 0; c < C; ++c)
          EXPECT_EQ(dx[(n * T + s) * C + c], 0.0f) << "sample " << n << " position " << s;
  }
}

TEST(CausalSelfAttention, GradientsMatchFiniteDifferences) {
  struct Case {
    std::int64_t heads;
    float dropout;
    bool bias;
    Shape input;
  };
  // The fourth and fifth span several register tiles (4 positions by 8
  // values), the sixth two blocks of 16 query rows.
  for (const Case& c :
       {Case{1, 0.0f, true, Shape{2, 4, 3}}, Case{2, 0.0f, false, Shape{1, 5, 4}},
        Case{4, 0.3f, true, Shape{2, 3, 8}}, Case{1, 0.0f, false, Shape{1, 9, 10}},
        Case{1, 0.2f, true, Shape{1, 6, 9}}, Case{1, 0.0f, false, Shape{1, 20, 8}}}) {
    SCOPED_TRACE(to_string(c.input) + " heads " + std::to_string(c.heads));
    CausalSelfAttention attention("attn", attention_options(c.heads, c.dropout, c.bias));
    test::LayerHarness h(attention, {c.input}, 4);
    EXPECT_EQ(h.output.shape(), c.input);
    EXPECT_EQ(h.parameters().entries().size(), c.bias ? 4u : 2u);
    StepContext ctx;
    ctx.seed = 5;
    ctx.step = 2;
    h.expect_gradients(ctx);
  }
}

// In bf16 and fp16 the input, output and their gradients are 16-bit and
// the attention between the projections is float, so on values a 16-bit
// layer can hold (rounded inputs and weights) the output and the input
// gradient are the float layer's rounded once, and the weight gradients
// are the float layer's. With dropout, in training, the same mask.
template <class T>
void expect_attention_16bit() {
  StepContext ctx;
  ctx.seed = 5;
  ctx.step = 2;
  for (const float rate : {0.0f, 0.3f}) {
    SCOPED_TRACE(rate);
    CausalSelfAttention a("attn", attention_options(2, rate, true)),
        b("attn", attention_options(2, rate, true));
    test::expect_16bit_matches_float<T>(a, b, {Shape{2, 6, 8}}, {}, 1e-5, 1.0, ctx);
  }
  CausalSelfAttention a("attn", attention_options(1, 0.0f, false)),
      b("attn", attention_options(1, 0.0f, false));
  test::expect_16bit_matches_float<T>(a, b, {Shape{1, 9, 10}}, {}, 1e-5, 1.0, ctx);
}

TEST(CausalSelfAttention, Bf16AndFp16AreTheFloatResultsRoundedOnce) {
  expect_attention_16bit<bf16>();
  expect_attention_16bit<fp16>();
}

TEST(CausalSelfAttention, DropoutFollowsStepAndIsOffInEvaluation) {
  CausalSelfAttention attention("attn", attention_options(2, 0.5f, true));
  test::LayerHarness h(attention, {Shape{2, 4, 4}}, 6);
  StepContext ctx;
  ctx.seed = 1;
  const auto run = [&](const StepContext& c) {
    h.forward(c);
    return test::to_host(h.output.flat());
  };
  ctx.step = 1;
  const auto first = run(ctx);
  EXPECT_EQ(run(ctx), first);  // the mask is drawn from counters, not state
  ctx.step = 2;
  EXPECT_NE(run(ctx), first);
  StepContext eval;
  eval.training = false;
  const auto plain = run(eval);
  EXPECT_NE(plain, first);
  CausalSelfAttention no_dropout("attn", attention_options(2, 0.0f, true));
  test::LayerHarness h0(no_dropout, {Shape{2, 4, 4}}, 6);
  h0.forward(ctx);
  EXPECT_EQ(test::to_host(h0.output.flat()), plain);
}

TEST(CausalSelfAttention, ErrorsNameLayerAndShape) {
  CausalSelfAttention attention("attn", attention_options(3, 0.0f, true));
  test::expect_error(
      [&] {
        attention.output_shape({Shape{2, 4, 8}});
      },
      "tessera::CausalSelfAttention 'attn': input [2, 4, 8] must be token vectors "
      "[N, T, C] with C a multiple of the 3 heads");
  test::expect_error(
      [&] {
        attention.output_shape({Shape{2, 12}});
      },
      "tessera::CausalSelfAttention 'attn': input [2, 12] must be token vectors");
  test::expect_error([&] { CausalSelfAttention("a", attention_options(0, 0.0f, true)); },
                     "tessera::CausalSelfAttention 'a': heads must be positive, got 0");
  test::expect_error([&] { CausalSelfAttention("a", attention_options(2, 1.0f, true)); },
                     "tessera::CausalSelfAttention 'a': dropout must be in [0, 1), got 1");
}

}  // namespace
