// Causal multi-head attention kernels: the part between the fused QKV
// projection and the output projection (both dense products).
//
// For sample n and head h, with Q, K, V the [T, D] blocks of the fused
// projection qkv [N * T, 3 C] (columns h D.., C + h D.., 2 C + h D..; the
// layout of PyTorch's qkv.split(C, dim=2) then view(N, T, H, D)):
//   S = scale Q K^T, P = softmax over j <= t of S(t, j) (0 for j > t),
//   P' = P with dropout (mask / (1 - rate)), Y = P' V,
// Y written to columns h D.. of heads [N * T, C]. P is kept for backward;
// the dropout mask is drawn again from counters rather than stored.
//
// Each (sample, head) is one work item that reads its columns of qkv in
// place (no copies into [N, H, T, D]) and visits only the positions j <= t
// each t may see; the masked half costs nothing. Its keys (and, backward,
// its values) are first copied transposed into the item's scratch, [D, T],
// so that a row of scores is D passes over contiguous keys, each adding
// q(d) K(d, j) for all j <= t at once: the loop vectorises across keys with
// no sum across vector lanes (dot products over the D = 32 values of a
// head took a horizontal sum per score, and ran 1.6 times as long
// forward). Updates of Y, dV, dQ and dK run over a head's D values,
// contiguous in rows of qkv. Every sum runs in a fixed order, so the
// results have the same bits for any thread count. KokkosBatched's serial
// blocked GEMMs over the full T x T block on the same strided views took
// 1.9 times as long forward and 2.3 times backward as dot products did
// (N 32, T 128, 4 heads of 32, one thread, both versions interleaved in
// one run on a busy 2-core machine).
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/random.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/math.hpp>
#include <tessera/kernels/reduce.hpp>

#include <cstdint>

namespace tessera::kernels {

struct AttentionLayout {
  std::int64_t batch = 0, positions = 0, heads = 0, head_dim = 0;
  KOKKOS_INLINE_FUNCTION std::int64_t channels() const { return heads * head_dim; }
};

// Attention dropout: element (n, h, t, j) is kept iff
// counter_uniform(seed, stream, first_counter + ((n H + h) T + t) T + j) >= rate.
struct AttentionDropout {
  float rate = 0;
  std::uint64_t seed = 0, stream = 0, first_counter = 0;

  KOKKOS_INLINE_FUNCTION float scale(std::int64_t index) const {
    return counter_uniform(seed, stream, first_counter + static_cast<std::uint64_t>(index)) >= rate
               ? 1.0f / (1.0f - rate)
               : 0.0f;
  }
};

using AttentionScores = Kokkos::View<float***, Kokkos::LayoutRight, MemSpace>;

// Rows of T floats of scratch each (sample, head) needs: its keys and
// values transposed (D rows each) and one row of dP. Allocate
// AttentionScores(label, N H, attention_scratch_rows(l), T).
KOKKOS_INLINE_FUNCTION std::int64_t attention_scratch_rows(const AttentionLayout& l) {
  return 2 * l.head_dim + 1;
}

namespace impl {
template <class QKV, class Scores, class Heads>
void check_attention(const char* fn, const AttentionLayout& l, const QKV& qkv, const Scores& probs,
                     const Scores& scratch, const Heads& heads) {
  const std::int64_t rows = l.batch * l.positions, c = l.channels();
  const auto fits = [&](const Scores& s, std::int64_t rows_per_item) {
    return static_cast<std::int64_t>(s.extent(0)) == l.batch * l.heads &&
           static_cast<std::int64_t>(s.extent(1)) == rows_per_item &&
           static_cast<std::int64_t>(s.extent(2)) == l.positions;
  };
  TESSERA_REQUIRE(
      l.heads > 0 && l.head_dim > 0 && static_cast<std::int64_t>(qkv.extent(0)) == rows &&
          static_cast<std::int64_t>(qkv.extent(1)) == 3 * c &&
          static_cast<std::int64_t>(heads.extent(0)) == rows &&
          static_cast<std::int64_t>(heads.extent(1)) == c && fits(probs, l.positions) &&
          fits(scratch, attention_scratch_rows(l)) &&
          (rows == 0 || (qkv.stride(1) == 1 && heads.stride(1) == 1)),
      fn << ": qkv [" << qkv.extent(0) << ", " << qkv.extent(1) << "], scores [" << probs.extent(0)
         << ", " << probs.extent(1) << ", " << probs.extent(2) << "], scratch ["
         << scratch.extent(0) << ", " << scratch.extent(1) << ", " << scratch.extent(2)
         << "], heads [" << heads.extent(0) << ", " << heads.extent(1) << "] for batch " << l.batch
         << ", " << l.positions << " positions, " << l.heads << " heads of " << l.head_dim
         << "; expected qkv [N T, 3 C], scores [N H, T, T], scratch [N H, 2 D + 1, T] "
         << "(attention_scratch_rows), heads [N T, C], rows of qkv and heads contiguous");
}

// dst(d, j) = src(row0 + j, col0 + d) for j < T, d < D: a head's keys or
// values, transposed into rows of T.
template <class QKV>
KOKKOS_INLINE_FUNCTION void transpose_head(const QKV& qkv, std::int64_t row0, std::int64_t col0,
                                           std::int64_t T, std::int64_t D, float* dst) {
  for (std::int64_t j = 0; j < T; ++j) {
    const float* src = &qkv(row0 + j, col0);
    for (std::int64_t d = 0; d < D; ++d) dst[d * T + j] = src[d];
  }
}

// out[j] = scale sum_d a[d] bt(d, j) for j < count, summed over d in order;
// bt holds D rows of T.
KOKKOS_INLINE_FUNCTION void row_times_transposed(const float* a, float scale, const float* bt,
                                                 std::int64_t T, std::int64_t D, std::int64_t count,
                                                 float* out) {
  for (std::int64_t j = 0; j < count; ++j) out[j] = 0.0f;
  for (std::int64_t d = 0; d < D; ++d) {
    const float ad = scale * a[d];
    const float* b = bt + d * T;
    for (std::int64_t j = 0; j < count; ++j) out[j] += ad * b[j];
  }
}

}  // namespace impl

template <class ExecSpace, class QKV, class Heads>
void attention_forward(const ExecSpace& exec, const AttentionLayout& l, float scale,
                       const AttentionDropout& dropout, const QKV& qkv,
                       const AttentionScores& probs, const AttentionScores& scratch,
                       const Heads& heads) {
  ScopedRegion region("tessera::kernels::attention_forward");
  impl::check_attention("tessera::kernels::attention_forward", l, qkv, probs, scratch, heads);
  const std::int64_t T = l.positions, H = l.heads, D = l.head_dim, C = l.channels();
  const bool drop = dropout.rate > 0;
  Kokkos::parallel_for(
      "tessera::kernels::attention_forward", Kokkos::RangePolicy<ExecSpace>(exec, 0, l.batch * H),
      KOKKOS_LAMBDA(const std::int64_t nh) {
        const std::int64_t n = nh / H, h = nh % H;
        float* keys = &scratch(nh, 0, 0);
        impl::transpose_head(qkv, n * T, C + h * D, T, D, keys);
        for (std::int64_t t = 0; t < T; ++t) {
          // Scores of the positions t may see; the row maximum first, so
          // exp never overflows.
          float* row = &probs(nh, t, 0);
          impl::row_times_transposed(&qkv(n * T + t, h * D), scale, keys, T, D, t + 1, row);
          float max = row[0];
          for (std::int64_t j = 1; j <= t; ++j) max = row[j] > max ? row[j] : max;
          // The row's exponentials (of arguments <= 0, without library
          // calls, so the loop vectorises), summed in lane_sum's fixed order.
          for (std::int64_t j = 0; j <= t; ++j) row[j] = impl::exp_nonpositive(row[j] - max);
          const float inverse = 1.0f / lane_sum(row, t + 1);
          for (std::int64_t j = 0; j <= t; ++j) row[j] *= inverse;
          for (std::int64_t j = t + 1; j < T; ++j) row[j] = 0.0f;
          // Y(t) = sum over j <= t of P'(t, j) V(j), in order of j.
          float* y = &heads(n * T + t, h * D);
          for (std::int64_t d = 0; d < D; ++d) y[d] = 0.0f;
          for (std::int64_t j = 0; j <= t; ++j) {
            const float w =
                drop ? probs(nh, t, j) * dropout.scale((nh * T + t) * T + j) : probs(nh, t, j);
            const float* v = &qkv(n * T + j, 2 * C + h * D);
            for (std::int64_t d = 0; d < D; ++d) y[d] += w * v[d];
          }
        }
      });
}

// dqkv (written, not accumulated) from dheads [N T, C], the qkv and
// probabilities of forward and the same dropout; scratch is overwritten.
template <class ExecSpace, class QKV, class DHeads, class DQKV>
void attention_backward(const ExecSpace& exec, const AttentionLayout& l, float scale,
                        const AttentionDropout& dropout, const QKV& qkv,
                        const AttentionScores& probs, const AttentionScores& scratch,
                        const DHeads& dheads, const DQKV& dqkv) {
  ScopedRegion region("tessera::kernels::attention_backward");
  impl::check_attention("tessera::kernels::attention_backward", l, qkv, probs, scratch, dheads);
  impl::check_attention("tessera::kernels::attention_backward", l, dqkv, probs, scratch, dheads);
  const std::int64_t T = l.positions, H = l.heads, D = l.head_dim, C = l.channels();
  const bool drop = dropout.rate > 0;
  Kokkos::parallel_for(
      "tessera::kernels::attention_backward", Kokkos::RangePolicy<ExecSpace>(exec, 0, l.batch * H),
      KOKKOS_LAMBDA(const std::int64_t nh) {
        const std::int64_t n = nh / H, h = nh % H;
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t d = 0; d < D; ++d) {
            dqkv(n * T + t, h * D + d) = 0.0f;
            dqkv(n * T + t, C + h * D + d) = 0.0f;
            dqkv(n * T + t, 2 * C + h * D + d) = 0.0f;
          }
        float* values = &scratch(nh, 0, 0);
        float* dp = &scratch(nh, 2 * D, 0);
        impl::transpose_head(qkv, n * T, 2 * C + h * D, T, D, values);
        for (std::int64_t t = 0; t < T; ++t) {
          const float* q = &qkv(n * T + t, h * D);
          const float* dy = &dheads(n * T + t, h * D);
          const float* p = &probs(nh, t, 0);
          // dP'(t, j) = dY(t) . V(j); dV(j) += P'(t, j) dY(t); dP = dP' .* mask.
          impl::row_times_transposed(dy, 1.0f, values, T, D, t + 1, dp);
          for (std::int64_t j = 0; j <= t; ++j) {
            float* dv = &dqkv(n * T + j, 2 * C + h * D);
            const float keep = drop ? dropout.scale((nh * T + t) * T + j) : 1.0f;
            const float w = p[j] * keep;
            for (std::int64_t d = 0; d < D; ++d) dv[d] += w * dy[d];
            dp[j] *= keep;
          }
          const float dot = lane_dot(p, dp, t + 1);
          // dS(t, j) = P (dP - sum_j P dP); dQ(t) = scale sum_j dS K(j);
          // dK(j) += scale dS Q(t).
          float* dq = &dqkv(n * T + t, h * D);
          for (std::int64_t j = 0; j <= t; ++j) {
            const float ds = scale * p[j] * (dp[j] - dot);
            const float* k = &qkv(n * T + j, C + h * D);
            float* dk = &dqkv(n * T + j, C + h * D);
            for (std::int64_t d = 0; d < D; ++d) {
              dq[d] += ds * k[d];
              dk[d] += ds * q[d];
            }
          }
        }
      });
}

}  // namespace tessera::kernels
