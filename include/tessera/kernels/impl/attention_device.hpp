// The device path of the attention kernels (attention.hpp): one team per
// row of the [T, T] score block, so a GPU gets N H T teams (16384 on the
// tiny GPT) instead of N H threads each walking a whole head.
//
// Forward, one team per query row (n, h, t), one launch: thread j computes
// S(t, j) = scale Q(t).K(j) (lane_dot over d) inside team_sum over MaxAt
// (the row maximum: exact, a NaN wins it), team_sum adds the exponentials,
// P is written to probs (zeros after t) and P' (dropout applied) to the
// scratch row; then thread d sums Y(t, d) = P'(t, j) V(j, d) over j <= t in
// order of j (neighbouring threads read neighbouring values of V's rows).
// Backward, two launches. Query rows (n, h, t): dP(t, j) = dY(t).V(j) times
// the dropout mask, dot = team_sum of P dP, dS(t, j) = scale P (dP - dot)
// into the scratch row, then dQ(t, d) = sum over j <= t of dS(t, j) K(j, d)
// in order of j. Key rows (n, h, j): the columns dS(t, j) and P'(t, j) for
// t >= j are copied into team scratch (in chunks of attention_column_chunk
// positions, so that the scratch does not grow with T), and thread k < 2 D
// sums dK(j, d) = dS(t, j) Q(t, d) or dV(j, d) = P'(t, j) dY(t, d) over
// t >= j in order of t. Every element of dqkv is written once, by one
// thread; every sum has a fixed order, so the bits depend on neither the
// team size nor the thread count. On the host (tiny GPT, 2 threads,
// medians of 3 interleaved runs) these kernels take 22 ms forward and 37
// backward per layer where the host path's register tiles take 8.3 and
// 11.7, so host builds keep the tiles.
#pragma once

#include <tessera/kernels/attention_layout.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/math.hpp>
#include <tessera/kernels/impl/team.hpp>
#include <tessera/kernels/impl/team_max.hpp>
#include <tessera/kernels/reduce.hpp>

#include <cstdint>

namespace tessera::kernels::impl {

// Positions of a key row's columns that a backward team holds in scratch at once.
constexpr std::int64_t attention_column_chunk = 256;

// Pairs (t, j <= t) of the causal score blocks of every (sample, head): the
// terms of each product over positions (the host path's blocks of
// tile_rows rows visit up to tile_rows - 1 more a row, the zeros after t).
inline std::int64_t attention_pairs(const AttentionLayout& l) {
  return l.batch * l.heads * (l.positions * (l.positions + 1) / 2);
}

// Elements of one of Q, K, V or heads (and of their gradients): N T C.
inline std::int64_t attention_head_elements(const AttentionLayout& l) {
  return l.batch * l.positions * l.channels();
}

// FLOPs of one dropout decision applied to a probability: the uniform's
// scaling, 1 - rate and its inverse, and the product.
constexpr double attention_dropout_flops = 4;

// FLOPs of forward (both paths), per pair: the score's dot product and its
// scale (2 D + 1), the exponential with its subtraction and its add to the
// sum (3), the product by the inverse (1) and Y's multiply-add (2 D), and
// the dropout where it applies.
inline double attention_forward_flops(const AttentionLayout& l, bool drop) {
  return double(attention_pairs(l)) * (4.0 * l.head_dim + 5 + (drop ? attention_dropout_flops : 0));
}

// sum + the sum over i < count, in order, of w[i] b[i ld].
KOKKOS_INLINE_FUNCTION float weighted_column_sum(float sum, const float* w, std::int64_t count,
                                                 const float* b, std::int64_t ld) {
  for (std::int64_t i = 0; i < count; ++i) sum += w[i] * b[i * ld];
  return sum;
}

// What the teams of the query rows read: the fused projection (rows ld
// apart), the probabilities and the scratch rows, the dropout, the scale
// and the layout (T positions, H heads of D, C channels).
template <class QKV>
struct AttentionRows {
  QKV qkv;
  AttentionScores probs, scratch;
  AttentionDropout dropout;
  float scale;
  std::int64_t T, H, D, C, ld;

  // Forward for query row (n, h, t) (row (n H + h) T + t) into heads.
  template <class Member, class Heads>
  KOKKOS_INLINE_FUNCTION void forward(const Member& m, std::int64_t row, const Heads& heads) const {
    const bool drop = dropout.rate > 0;
    const std::int64_t nh = row / T, t = row % T;
    const std::int64_t n = nh / H, h = nh % H;
    float* p = &probs(nh, t, 0);
    float* kept = &scratch(nh, t, 0);
    const float* q = &qkv(n * T + t, h * D);
    MaxAt<float>* max_lanes = team_lanes_scratch<MaxAt<float>>(m);
    float* sum_lanes = team_lanes_scratch<float>(m);
    const auto score = [&](const std::int64_t j) {
      const float s = scale * lane_dot(q, &qkv(n * T + j, C + h * D), D);
      p[j] = s;
      return MaxAt<float>{s, j};
    };
    const float max = team_sum<MaxAt<float>>(m, max_lanes, t + 1, score).value;
    const float sum = team_sum<float>(m, sum_lanes, t + 1, [&](const std::int64_t j) {
      const float e = exp_nonpositive(p[j] - max);
      p[j] = e;
      return e;
    });
    const float inverse = 1.0f / sum;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, T), [&](const std::int64_t j) {
      if (j > t) {
        p[j] = 0.0f;
        return;
      }
      p[j] *= inverse;
      if (drop) kept[j] = p[j] * dropout.scale(row * T + j);
    });
    m.team_barrier();
    const float* w = drop ? kept : p;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, D), [&](const std::int64_t d) {
      heads(n * T + t, h * D + d) =
          weighted_column_sum(0.0f, w, t + 1, &qkv(n * T, 2 * C + h * D + d), ld);
    });
  }

  // Backward for query row (n, h, t): dS into the scratch row, dQ into dqkv.
  template <class Member, class DHeads, class DQKV>
  KOKKOS_INLINE_FUNCTION void backward(const Member& m, std::int64_t row, const DHeads& dheads,
                                       const DQKV& dqkv) const {
    const bool drop = dropout.rate > 0;
    const std::int64_t nh = row / T, t = row % T;
    const std::int64_t n = nh / H, h = nh % H;
    const float* p = &probs(nh, t, 0);
    float* ds = &scratch(nh, t, 0);
    const float* dy = &dheads(n * T + t, h * D);
    const float dot =
        team_sum<float>(m, team_lanes_scratch<float>(m), t + 1, [&](const std::int64_t j) {
          float dp = lane_dot(dy, &qkv(n * T + j, 2 * C + h * D), D);
          if (drop) dp *= dropout.scale(row * T + j);
          ds[j] = dp;
          return p[j] * dp;
        });
    const float s = scale;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, t + 1),
                         [&](const std::int64_t j) { ds[j] = s * p[j] * (ds[j] - dot); });
    m.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, D), [&](const std::int64_t d) {
      dqkv(n * T + t, h * D + d) =
          weighted_column_sum(0.0f, ds, t + 1, &qkv(n * T, C + h * D + d), ld);
    });
  }
};

template <class QKV>
AttentionRows<QKV> attention_rows(const AttentionLayout& l, float scale,
                                  const AttentionDropout& dropout, const QKV& qkv,
                                  const AttentionScores& probs, const AttentionScores& scratch) {
  return AttentionRows<QKV>{
      qkv,         probs,   scratch,    dropout,      scale,
      l.positions, l.heads, l.head_dim, l.channels(), std::int64_t(qkv.stride(0))};
}

// Forward's team for query row (n, h, t) (rank (n H + h) T + t).
template <class QKV, class Heads>
struct AttentionQueryRows {
  AttentionRows<QKV> rows;
  Heads heads;

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& m, std::int64_t row) const {
    rows.forward(m, row, heads);
  }
};

// Forward's one launch; `more`: independent parts the caller adds to it
// (e.g. the output projection's bias broadcast into its output).
template <class ExecSpace, class QKV, class Heads, class... More>
void attention_forward_device(const ExecSpace& exec, const AttentionLayout& l, float scale,
                              const AttentionDropout& dropout, const QKV& qkv,
                              const AttentionScores& probs, const AttentionScores& scratch,
                              const Heads& heads, TeamShape shape = {},
                              const TeamPart<More>&... more) {
  check_attention("tessera::kernels::attention_forward", l, qkv, probs, scratch,
                  attention_device_scratch_rows(l), heads);
  const std::int64_t T = l.positions, H = l.heads;
  const bool drop = dropout.rate > 0;
  // qkv read, probs written in full (zeros after t), with dropout P' (the
  // causal half of scratch) written, heads written.
  const std::int64_t heads_size = attention_head_elements(l);
  const Work work{bytes_of<typename QKV::non_const_value_type>(3 * heads_size) +
                      bytes_of<float>(l.batch * H * T * T) +
                      (drop ? bytes_of<float>(attention_pairs(l)) : 0) +
                      bytes_of<typename Heads::non_const_value_type>(heads_size),
                  attention_forward_flops(l, drop)};
  parallel_teams("tessera::kernels::attention_forward::query_rows", exec, shape,
                 team_part(l.batch * H * T, work,
                           AttentionQueryRows<QKV, Heads>{
                               attention_rows(l, scale, dropout, qkv, probs, scratch), heads},
                           team_sum_bytes<MaxAt<float>>() + team_sum_bytes<float>()),
                 more...);
}

// The work of backward's launches. Query rows: dY, V and K read, P's
// causal half read and dS's written (scratch), dQ written; per pair dP's
// dot product (2 D), P dP's multiply-add into the dot (2), dS (3) and dQ's
// multiply-add (2 D), and the dropout. Key rows: dS and P read in their
// causal halves, dY and Q read, dK and dV written; per pair the
// multiply-adds of dK and dV (2 D each), and the dropout.
template <class QKV, class DHeads, class DQKV>
Work attention_backward_work(const AttentionLayout& l, bool drop, bool query_rows) {
  const std::int64_t heads_size = attention_head_elements(l), pairs = attention_pairs(l);
  const double dropout_flops = drop ? attention_dropout_flops : 0;
  const double dheads = bytes_of<typename DHeads::non_const_value_type>(heads_size);
  const double qkv = bytes_of<typename QKV::non_const_value_type>(heads_size);
  const double dqkv = bytes_of<typename DQKV::non_const_value_type>(heads_size);
  if (query_rows)
    return {dheads + 2 * qkv + bytes_of<float>(2 * pairs) + dqkv,
            double(pairs) * (4.0 * l.head_dim + 5 + dropout_flops)};
  return {bytes_of<float>(2 * pairs) + dheads + qkv + 2 * dqkv,
          double(pairs) * (4.0 * l.head_dim + dropout_flops)};
}

// Backward's team for query row (n, h, t) (rank (n H + h) T + t).
template <class QKV, class DHeads, class DQKV>
struct AttentionGradientQueryRows {
  AttentionRows<QKV> rows;
  DHeads dheads;
  DQKV dqkv;

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& m, std::int64_t row) const {
    rows.backward(m, row, dheads, dqkv);
  }
};

// Backward's two launches; `more`: independent parts the caller adds to
// the first (e.g. the output projection's bias gradient).
template <class ExecSpace, class QKV, class DHeads, class DQKV, class... More>
void attention_backward_device(const ExecSpace& exec, const AttentionLayout& l, float scale,
                               const AttentionDropout& dropout, const QKV& qkv,
                               const AttentionScores& probs, const AttentionScores& scratch,
                               const DHeads& dheads, const DQKV& dqkv, TeamShape shape = {},
                               const TeamPart<More>&... more) {
  const char* fn = "tessera::kernels::attention_backward";
  const std::int64_t scratch_rows = attention_device_scratch_rows(l);
  check_attention(fn, l, qkv, probs, scratch, scratch_rows, dheads);
  check_attention(fn, l, dqkv, probs, scratch, scratch_rows, dheads);
  const std::int64_t T = l.positions, H = l.heads, D = l.head_dim, C = l.channels();
  const bool drop = dropout.rate > 0;
  const std::int64_t ld = qkv.stride(0), ldh = dheads.stride(0);
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  parallel_teams(
      "tessera::kernels::attention_backward::query_rows", exec, shape,
      team_part(l.batch * H * T, attention_backward_work<QKV, DHeads, DQKV>(l, drop, true),
                AttentionGradientQueryRows<QKV, DHeads, DQKV>{
                    attention_rows(l, scale, dropout, qkv, probs, scratch), dheads, dqkv},
                team_sum_bytes<float>()),
      more...);
  const std::int64_t chunk = T < attention_column_chunk ? T : attention_column_chunk;
  const std::size_t column_bytes = sizeof(float) * static_cast<std::size_t>(2 * chunk + 2 * D);
  parallel_for(
      "tessera::kernels::attention_backward::key_rows",
      team_policy(exec, l.batch * H * T, shape, column_bytes),
      attention_backward_work<QKV, DHeads, DQKV>(l, drop, false), KOKKOS_LAMBDA(const Member& m) {
        const std::int64_t row = m.league_rank(), nh = row / T, j = row % T;
        const std::int64_t n = nh / H, h = nh % H;
        // The chunk's dS(t, j) and P'(t, j), then the partial sums of dK
        // and dV across chunks.
        float* column = static_cast<float*>(m.team_scratch(0).get_shmem(column_bytes));
        float* kept = column + chunk;
        float* partial = kept + chunk;
        for (std::int64_t t0 = j; t0 < T; t0 += chunk) {
          const std::int64_t count = T - t0 < chunk ? T - t0 : chunk;
          const bool last = t0 + count == T;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(m, count), [&](const std::int64_t i) {
            const std::int64_t t = t0 + i;
            column[i] = scratch(nh, t, j);
            kept[i] =
                drop ? probs(nh, t, j) * dropout.scale((nh * T + t) * T + j) : probs(nh, t, j);
          });
          m.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(m, 2 * D), [&](const std::int64_t k) {
            const bool value = k >= D;
            const std::int64_t d = value ? k - D : k;
            const float start = t0 == j ? 0.0f : partial[k];
            const float sum =
                value ? weighted_column_sum(start, kept, count, &dheads(n * T + t0, h * D + d), ldh)
                      : weighted_column_sum(start, column, count, &qkv(n * T + t0, h * D + d), ld);
            if (!last)
              partial[k] = sum;
            else
              dqkv(n * T + j, (value ? 2 * C : C) + h * D + d) = sum;
          });
          m.team_barrier();
        }
      });
}

}  // namespace tessera::kernels::impl
