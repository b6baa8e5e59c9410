// The device path of the attention kernels (attention.hpp): one team per
// query row (and in backward one per key row), so a GPU gets N H T teams
// (16384 on the tiny GPT) instead of N H threads each walking a whole head.
// No [T, T] block exists: each team recomputes the scores it needs,
// S(t, j) = scale Q(t).K(j) (lane_dot over d), and holds at most
// attention_column_chunk of them at a time in team scratch.
//
// Forward, one team per query row (n, h, t), one launch: team_sum over
// MaxAt of S(t, j) for j <= t (the row maximum: exact, a NaN wins it),
// team_sum of exp(S - max) (S again), the row's statistics (max, inverse
// of the sum) into stats; then in chunks of positions, P'(t, j) (P with
// the dropout applied) into team scratch and thread d adds P'(t, j) V(j, d)
// over the chunk in order of j onto its partial sum of Y(t, d).
// Backward, two launches. Query rows (n, h, t): dot = team_sum of P dP with
// P recomputed from S and the statistics and dP(t, j) = dY(t).V(j) times
// the dropout mask, written to the scratch row; then in chunks dS(t, j) =
// scale P (dP - dot) into team scratch and dQ(t, d) = sum over j <= t of
// dS(t, j) K(j, d) in order of j. Key rows (n, h, j): in chunks of
// positions t >= j, dS(t, j) and P'(t, j) recomputed the same way (the
// query row's dot read from scratch) into team scratch, and thread k < 2 D
// sums dK(j, d) = dS(t, j) Q(t, d) or dV(j, d) = P'(t, j) dY(t, d) over
// t >= j in order of t. Every element of dqkv is written once, by one
// thread; every sum has a fixed order and both launches compute P and dS
// through the same functions, so the bits depend on neither the team size
// nor the thread count. The price of O(T) memory is the scores computed
// three times forward and P four times backward (a dot product over D
// each), where the T x T probabilities were kept before. On the host these
// kernels are slower than the host path's register tiles, so host builds
// keep the tiles.
#pragma once

#include <tessera/kernels/attention_layout.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/math.hpp>
#include <tessera/kernels/impl/team.hpp>
#include <tessera/kernels/impl/team_max.hpp>
#include <tessera/kernels/reduce.hpp>

#include <cstdint>

namespace tessera::kernels::impl {

// Positions of a row's scores (or their gradients) a team holds in scratch at once.
constexpr std::int64_t attention_column_chunk = 256;

// Pairs (t, j <= t) of the causal score blocks of every (sample, head): the
// terms of each product over positions (the host path's blocks of
// block_rows rows visit up to block_rows - 1 more a row, the zeros after t).
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

// P(t, j) from the score S(t, j) and row t's statistics: what forward's
// softmax computes and backward recomputes, with the same bits.
KOKKOS_INLINE_FUNCTION float attention_probability(float score, float max, float inverse) {
  return exp_nonpositive(score - max) * inverse;
}

// sum + the sum over i < count, in order, of w[i] b[i ld].
KOKKOS_INLINE_FUNCTION float weighted_column_sum(float sum, const float* w, std::int64_t count,
                                                 const float* b, std::int64_t ld) {
  for (std::int64_t i = 0; i < count; ++i) sum += w[i] * b[i * ld];
  return sum;
}

// What the teams read: the fused projection (rows ld apart), the row
// statistics and the scratch row, the dropout, the scale and the layout
// (T positions, H heads of D, C channels). Each function computes its
// value the same way wherever it is called, so that every launch sees
// the same bits.
template <class QKV>
struct AttentionRows {
  QKV qkv;
  AttentionScores stats, scratch;
  AttentionDropout dropout;
  float scale;
  std::int64_t T, H, D, C, ld;

  // S(t, j) of sample n, head h.
  KOKKOS_INLINE_FUNCTION float score(std::int64_t n, std::int64_t h, std::int64_t t,
                                     std::int64_t j) const {
    return scale * lane_dot(&qkv(n * T + t, h * D), &qkv(n * T + j, C + h * D), D);
  }
  // P(t, j) of (sample, head) nh = n H + h, from S and the statistics.
  KOKKOS_INLINE_FUNCTION float probability(std::int64_t nh, std::int64_t t, std::int64_t j) const {
    return attention_probability(score(nh / H, nh % H, t, j), stats(nh, 0, t), stats(nh, 1, t));
  }
  // The dropout's factor of (nh, t, j): 1 without dropout.
  KOKKOS_INLINE_FUNCTION float keep(std::int64_t nh, std::int64_t t, std::int64_t j) const {
    return dropout.rate > 0 ? dropout.scale((nh * T + t) * T + j) : 1.0f;
  }
  // dP(t, j) = dY(t).V(j) times the dropout's factor.
  template <class DHeads>
  KOKKOS_INLINE_FUNCTION float probability_gradient(const DHeads& dheads, std::int64_t nh,
                                                    std::int64_t t, std::int64_t j,
                                                    float keep) const {
    const std::int64_t n = nh / H, h = nh % H;
    return lane_dot(&dheads(n * T + t, h * D), &qkv(n * T + j, 2 * C + h * D), D) * keep;
  }
  // dS(t, j) from P, dP and row t's sum of P dP.
  KOKKOS_INLINE_FUNCTION float score_gradient(float p, float dp, float dot) const {
    return scale * p * (dp - dot);
  }

  // out(d, sum) for d < D, with sum = the sum over i < count of w(i) b(i, d)
  // for i in order, where b(i, d) = *(base + i ld + d) and w(i) fills the
  // team's chunk of scratch attention_column_chunk positions at a time;
  // partial: D floats of scratch carrying the sums across chunks.
  template <class Member, class Weight, class Out>
  KOKKOS_INLINE_FUNCTION void weighted_rows(const Member& m, std::int64_t count, float* chunk,
                                            float* partial, const float* base, std::int64_t base_ld,
                                            const Weight& w, const Out& out) const {
    for (std::int64_t i0 = 0; i0 < count; i0 += attention_column_chunk) {
      const std::int64_t n =
          count - i0 < attention_column_chunk ? count - i0 : attention_column_chunk;
      const bool last = i0 + n == count;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n),
                           [&](const std::int64_t i) { chunk[i] = w(i0 + i); });
      m.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(m, D), [&](const std::int64_t d) {
        const float sum = weighted_column_sum(i0 == 0 ? 0.0f : partial[d], chunk, n,
                                              base + i0 * base_ld + d, base_ld);
        if (last)
          out(d, sum);
        else
          partial[d] = sum;
      });
      m.team_barrier();
    }
  }

  // Forward for query row (n, h, t) (row (n H + h) T + t) into heads.
  template <class Member, class Heads>
  KOKKOS_INLINE_FUNCTION void forward(const Member& m, std::int64_t row, const Heads& heads) const {
    const std::int64_t nh = row / T, t = row % T;
    const std::int64_t n = nh / H, h = nh % H;
    MaxAt<float>* max_lanes = team_lanes_scratch<MaxAt<float>>(m);
    float* sum_lanes = team_lanes_scratch<float>(m);
    float* chunk = static_cast<float*>(m.team_scratch(0).get_shmem(chunk_bytes()));
    const float max = team_sum<MaxAt<float>>(m, max_lanes, t + 1, [&](const std::int64_t j) {
                        return MaxAt<float>{score(n, h, t, j), j};
                      }).value;
    const float sum = team_sum<float>(m, sum_lanes, t + 1, [&](const std::int64_t j) {
      return exp_nonpositive(score(n, h, t, j) - max);
    });
    const float inverse = 1.0f / sum;
    Kokkos::single(Kokkos::PerTeam(m), [&]() {
      stats(nh, 0, t) = max;
      stats(nh, 1, t) = inverse;
    });
    weighted_rows(
        m, t + 1, chunk, chunk + attention_column_chunk, &qkv(n * T, 2 * C + h * D), ld,
        [&](const std::int64_t j) {
          return attention_probability(score(n, h, t, j), max, inverse) * keep(nh, t, j);
        },
        [&](const std::int64_t d, const float v) { heads(n * T + t, h * D + d) = v; });
  }

  // Backward for query row (n, h, t): the row's sum of P dP into the
  // scratch row, dQ into dqkv.
  template <class Member, class DHeads, class DQKV>
  KOKKOS_INLINE_FUNCTION void backward(const Member& m, std::int64_t row, const DHeads& dheads,
                                       const DQKV& dqkv) const {
    const std::int64_t nh = row / T, t = row % T;
    const std::int64_t n = nh / H, h = nh % H;
    float* lanes = team_lanes_scratch<float>(m);
    float* chunk = static_cast<float*>(m.team_scratch(0).get_shmem(chunk_bytes()));
    const float dot = team_sum<float>(m, lanes, t + 1, [&](const std::int64_t j) {
      return probability(nh, t, j) * probability_gradient(dheads, nh, t, j, keep(nh, t, j));
    });
    Kokkos::single(Kokkos::PerTeam(m), [&]() { scratch(nh, 0, t) = dot; });
    weighted_rows(
        m, t + 1, chunk, chunk + attention_column_chunk, &qkv(n * T, C + h * D), ld,
        [&](const std::int64_t j) {
          return score_gradient(probability(nh, t, j),
                                probability_gradient(dheads, nh, t, j, keep(nh, t, j)), dot);
        },
        [&](const std::int64_t d, const float v) { dqkv(n * T + t, h * D + d) = v; });
  }

  // Team scratch for a chunk of weights and D partial sums.
  KOKKOS_INLINE_FUNCTION std::size_t chunk_bytes() const {
    return sizeof(float) * static_cast<std::size_t>(attention_column_chunk + D);
  }
};

template <class QKV>
AttentionRows<QKV> attention_rows(const AttentionLayout& l, float scale,
                                  const AttentionDropout& dropout, const QKV& qkv,
                                  const AttentionScores& stats, const AttentionScores& scratch) {
  return AttentionRows<QKV>{
      qkv,         stats,   scratch,    dropout,      scale,
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
                              const AttentionScores& stats, const AttentionScores& scratch,
                              const Heads& heads, TeamShape shape = {},
                              const TeamPart<More>&... more) {
  check_attention("tessera::kernels::attention_forward", l, qkv, stats, scratch,
                  attention_device_scratch_rows(l), heads);
  const std::int64_t T = l.positions, H = l.heads, D = l.head_dim;
  const bool drop = dropout.rate > 0;
  // qkv read (Q and K three times over the pairs, V once), stats and heads
  // written; per pair the scores twice more (2 D + 1 each) beside
  // forward's FLOPs.
  const std::int64_t heads_size = attention_head_elements(l);
  const Work work{bytes_of<typename QKV::non_const_value_type>(3 * heads_size) +
                      bytes_of<float>(l.batch * H * attention_stat_rows * T) +
                      bytes_of<typename Heads::non_const_value_type>(heads_size),
                  attention_forward_flops(l, drop) + double(attention_pairs(l)) * (4.0 * D + 2)};
  const auto rows = attention_rows(l, scale, dropout, qkv, stats, scratch);
  parallel_teams(
      "tessera::kernels::attention_forward::query_rows", exec, shape,
      team_part(l.batch * H * T, work, AttentionQueryRows<QKV, Heads>{rows, heads},
                team_sum_bytes<MaxAt<float>>() + team_sum_bytes<float>() + rows.chunk_bytes()),
      more...);
}

// The work of backward's launches. Query rows: dY, Q, K and V read, stats
// read, the dots written, dQ written; per pair S and P twice (2 D + 4
// each), dP twice (2 D + 1 each), P dP's multiply-add into the dot (2), dS
// (3) and dQ's multiply-add (2 D), and the dropout twice. Key rows: the
// same reads and the dots, dK and dV written; per pair S, P, dP and dS
// once (4 D + 8) and the multiply-adds of dK and dV (2 D each), and the
// dropout.
template <class QKV, class DHeads, class DQKV>
Work attention_backward_work(const AttentionLayout& l, bool drop, bool query_rows) {
  const std::int64_t heads_size = attention_head_elements(l), pairs = attention_pairs(l);
  const double dropout_flops = drop ? attention_dropout_flops : 0;
  const double dheads = bytes_of<typename DHeads::non_const_value_type>(heads_size);
  const double qkv = bytes_of<typename QKV::non_const_value_type>(heads_size);
  const double dqkv = bytes_of<typename DQKV::non_const_value_type>(heads_size);
  const double stats = bytes_of<float>(l.batch * l.heads * (attention_stat_rows + 1) * l.positions);
  if (query_rows)
    return {dheads + 3 * qkv + stats + dqkv,
            double(pairs) * (10.0 * l.head_dim + 15 + 2 * dropout_flops)};
  return {dheads + 3 * qkv + stats + 2 * dqkv,
          double(pairs) * (8.0 * l.head_dim + 8 + dropout_flops)};
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

// Backward's team for key row (n, h, j) (rank (n H + h) T + j): dK(j) and
// dV(j) over the positions t >= j that see it.
template <class QKV, class DHeads, class DQKV>
struct AttentionGradientKeyRows {
  AttentionRows<QKV> rows;
  DHeads dheads;
  DQKV dqkv;

  // Team scratch: a chunk of dS(t, j), one of P'(t, j), and the partial
  // sums of dK and dV.
  KOKKOS_INLINE_FUNCTION std::size_t scratch_bytes() const {
    return sizeof(float) * static_cast<std::size_t>(2 * attention_column_chunk + 2 * rows.D);
  }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& m, std::int64_t row) const {
    const std::int64_t T = rows.T, H = rows.H, D = rows.D, C = rows.C;
    const std::int64_t nh = row / T, j = row % T;
    const std::int64_t n = nh / H, h = nh % H;
    float* column = static_cast<float*>(m.team_scratch(0).get_shmem(scratch_bytes()));
    float* kept = column + attention_column_chunk;
    float* partial = kept + attention_column_chunk;
    for (std::int64_t t0 = j; t0 < T; t0 += attention_column_chunk) {
      const std::int64_t count = T - t0 < attention_column_chunk ? T - t0 : attention_column_chunk;
      const bool last = t0 + count == T;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(m, count), [&](const std::int64_t i) {
        const std::int64_t t = t0 + i;
        const float p = rows.probability(nh, t, j), keep = rows.keep(nh, t, j);
        column[i] = rows.score_gradient(p, rows.probability_gradient(dheads, nh, t, j, keep),
                                        rows.scratch(nh, 0, t));
        kept[i] = p * keep;
      });
      m.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(m, 2 * D), [&](const std::int64_t k) {
        const bool value = k >= D;
        const std::int64_t d = value ? k - D : k;
        const float start = t0 == j ? 0.0f : partial[k];
        const float sum =
            value ? weighted_column_sum(start, kept, count, &dheads(n * T + t0, h * D + d),
                                        std::int64_t(dheads.stride(0)))
                  : weighted_column_sum(start, column, count, &rows.qkv(n * T + t0, h * D + d),
                                        rows.ld);
        if (!last)
          partial[k] = sum;
        else
          dqkv(n * T + j, (value ? 2 * C : C) + h * D + d) = sum;
      });
      m.team_barrier();
    }
  }
};

// Backward's two launches; `more`: independent parts the caller adds to
// the first (e.g. the output projection's bias gradient).
template <class ExecSpace, class QKV, class DHeads, class DQKV, class... More>
void attention_backward_device(const ExecSpace& exec, const AttentionLayout& l, float scale,
                               const AttentionDropout& dropout, const QKV& qkv,
                               const AttentionScores& stats, const AttentionScores& scratch,
                               const DHeads& dheads, const DQKV& dqkv, TeamShape shape = {},
                               const TeamPart<More>&... more) {
  const char* fn = "tessera::kernels::attention_backward";
  const std::int64_t scratch_rows = attention_device_scratch_rows(l);
  check_attention(fn, l, qkv, stats, scratch, scratch_rows, dheads);
  check_attention(fn, l, dqkv, stats, scratch, scratch_rows, dheads);
  const std::int64_t league = l.batch * l.heads * l.positions;
  const bool drop = dropout.rate > 0;
  const auto rows = attention_rows(l, scale, dropout, qkv, stats, scratch);
  parallel_teams("tessera::kernels::attention_backward::query_rows", exec, shape,
                 team_part(league, attention_backward_work<QKV, DHeads, DQKV>(l, drop, true),
                           AttentionGradientQueryRows<QKV, DHeads, DQKV>{rows, dheads, dqkv},
                           team_sum_bytes<float>() + rows.chunk_bytes()),
                 more...);
  const AttentionGradientKeyRows<QKV, DHeads, DQKV> key_rows{rows, dheads, dqkv};
  parallel_teams("tessera::kernels::attention_backward::key_rows", exec, shape,
                 team_part(league, attention_backward_work<QKV, DHeads, DQKV>(l, drop, false),
                           key_rows, key_rows.scratch_bytes()));
}

}  // namespace tessera::kernels::impl
