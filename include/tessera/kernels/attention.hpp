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
// Each (sample, head) is one work item: its products are KokkosBatched
// serial GEMMs on strided views of qkv (no copies into [N, H, T, D]) and its
// softmax a loop in a fixed order, so the results have the same bits for any
// thread count. The causal products compute the full T x T block (the
// blocked GEMM is faster than skipping the masked half one entry at a time).
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/random.hpp>
#include <tessera/core/types.hpp>

#include <KokkosBatched_Gemm_Decl.hpp>
#include <KokkosBatched_Gemm_Serial_Impl.hpp>

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

namespace impl {
template <class QKV, class Scores, class Heads>
void check_attention(const char* fn, const AttentionLayout& l, const QKV& qkv, const Scores& probs,
                     const Scores& scratch, const Heads& heads) {
  const std::int64_t rows = l.batch * l.positions, c = l.channels();
  const auto scores_fit = [&](const Scores& s) {
    return static_cast<std::int64_t>(s.extent(0)) == l.batch * l.heads &&
           static_cast<std::int64_t>(s.extent(1)) == l.positions &&
           static_cast<std::int64_t>(s.extent(2)) == l.positions;
  };
  TESSERA_REQUIRE(
      l.heads > 0 && l.head_dim > 0 && static_cast<std::int64_t>(qkv.extent(0)) == rows &&
          static_cast<std::int64_t>(qkv.extent(1)) == 3 * c &&
          static_cast<std::int64_t>(heads.extent(0)) == rows &&
          static_cast<std::int64_t>(heads.extent(1)) == c && scores_fit(probs) &&
          scores_fit(scratch),
      fn << ": qkv [" << qkv.extent(0) << ", " << qkv.extent(1) << "], scores [" << probs.extent(0)
         << ", " << probs.extent(1) << ", " << probs.extent(2) << "], scratch ["
         << scratch.extent(0) << ", " << scratch.extent(1) << ", " << scratch.extent(2)
         << "], heads [" << heads.extent(0) << ", " << heads.extent(1) << "] for batch " << l.batch
         << ", " << l.positions << " positions, " << l.heads << " heads of " << l.head_dim
         << "; expected qkv [N T, 3 C], scores and scratch "
         << "[N H, T, T], heads [N T, C]");
}

using Pair = Kokkos::pair<std::int64_t, std::int64_t>;
}  // namespace impl

template <class ExecSpace, class QKV, class Heads>
void attention_forward(const ExecSpace& exec, const AttentionLayout& l, float scale,
                       const AttentionDropout& dropout, const QKV& qkv,
                       const AttentionScores& probs, const AttentionScores& scratch,
                       const Heads& heads) {
  ScopedRegion region("tessera::kernels::attention_forward");
  impl::check_attention("tessera::kernels::attention_forward", l, qkv, probs, scratch, heads);
  using namespace KokkosBatched;
  using impl::Pair;
  const std::int64_t T = l.positions, H = l.heads, D = l.head_dim, C = l.channels();
  const bool drop = dropout.rate > 0;
  Kokkos::parallel_for(
      "tessera::kernels::attention_forward", Kokkos::RangePolicy<ExecSpace>(exec, 0, l.batch * H),
      KOKKOS_LAMBDA(const std::int64_t nh) {
        const std::int64_t n = nh / H, h = nh % H;
        const Pair rows(n * T, n * T + T);
        const auto q = Kokkos::subview(qkv, rows, Pair(h * D, h * D + D));
        const auto k = Kokkos::subview(qkv, rows, Pair(C + h * D, C + h * D + D));
        const auto v = Kokkos::subview(qkv, rows, Pair(2 * C + h * D, 2 * C + h * D + D));
        const auto p = Kokkos::subview(probs, nh, Kokkos::ALL(), Kokkos::ALL());
        const auto kept = Kokkos::subview(scratch, nh, Kokkos::ALL(), Kokkos::ALL());
        SerialGemm<Trans::NoTranspose, Trans::Transpose, Algo::Gemm::Blocked>::invoke(scale, q, k,
                                                                                      0.0f, p);
        for (std::int64_t t = 0; t < T; ++t) {
          float max = p(t, 0);
          for (std::int64_t j = 1; j <= t; ++j) max = p(t, j) > max ? p(t, j) : max;
          float sum = 0;
          for (std::int64_t j = 0; j <= t; ++j) {
            const float e = compat::exp(p(t, j) - max);
            p(t, j) = e;
            sum += e;
          }
          const float inverse = 1.0f / sum;
          for (std::int64_t j = 0; j <= t; ++j) p(t, j) *= inverse;
          for (std::int64_t j = t + 1; j < T; ++j) p(t, j) = 0.0f;
          if (drop)
            for (std::int64_t j = 0; j < T; ++j)
              kept(t, j) = p(t, j) * dropout.scale((nh * T + t) * T + j);
        }
        const auto y = Kokkos::subview(heads, rows, Pair(h * D, h * D + D));
        if (drop)
          SerialGemm<Trans::NoTranspose, Trans::NoTranspose, Algo::Gemm::Blocked>::invoke(
              1.0f, kept, v, 0.0f, y);
        else
          SerialGemm<Trans::NoTranspose, Trans::NoTranspose, Algo::Gemm::Blocked>::invoke(
              1.0f, p, v, 0.0f, y);
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
  using namespace KokkosBatched;
  using impl::Pair;
  const std::int64_t T = l.positions, H = l.heads, D = l.head_dim, C = l.channels();
  const bool drop = dropout.rate > 0;
  Kokkos::parallel_for(
      "tessera::kernels::attention_backward", Kokkos::RangePolicy<ExecSpace>(exec, 0, l.batch * H),
      KOKKOS_LAMBDA(const std::int64_t nh) {
        const std::int64_t n = nh / H, h = nh % H;
        const Pair rows(n * T, n * T + T), qc(h * D, h * D + D), kc(C + h * D, C + h * D + D),
            vc(2 * C + h * D, 2 * C + h * D + D);
        const auto q = Kokkos::subview(qkv, rows, qc);
        const auto k = Kokkos::subview(qkv, rows, kc);
        const auto v = Kokkos::subview(qkv, rows, vc);
        const auto dq = Kokkos::subview(dqkv, rows, qc);
        const auto dk = Kokkos::subview(dqkv, rows, kc);
        const auto dv = Kokkos::subview(dqkv, rows, vc);
        const auto dy = Kokkos::subview(dheads, rows, qc);
        const auto p = Kokkos::subview(probs, nh, Kokkos::ALL(), Kokkos::ALL());
        const auto g = Kokkos::subview(scratch, nh, Kokkos::ALL(), Kokkos::ALL());
        // dV = P'^T dY, with P' drawn again into the scratch.
        if (drop) {
          for (std::int64_t t = 0; t < T; ++t)
            for (std::int64_t j = 0; j < T; ++j)
              g(t, j) = p(t, j) * dropout.scale((nh * T + t) * T + j);
          SerialGemm<Trans::Transpose, Trans::NoTranspose, Algo::Gemm::Blocked>::invoke(1.0f, g, dy,
                                                                                        0.0f, dv);
        } else {
          SerialGemm<Trans::Transpose, Trans::NoTranspose, Algo::Gemm::Blocked>::invoke(1.0f, p, dy,
                                                                                        0.0f, dv);
        }
        // dP' = dY V^T; dP = dP' .* mask; dS = P .* (dP - sum_j P dP), row by row.
        SerialGemm<Trans::NoTranspose, Trans::Transpose, Algo::Gemm::Blocked>::invoke(1.0f, dy, v,
                                                                                      0.0f, g);
        for (std::int64_t t = 0; t < T; ++t) {
          float dot = 0;
          for (std::int64_t j = 0; j <= t; ++j) {
            if (drop) g(t, j) *= dropout.scale((nh * T + t) * T + j);
            dot += p(t, j) * g(t, j);
          }
          for (std::int64_t j = 0; j <= t; ++j) g(t, j) = p(t, j) * (g(t, j) - dot);
          for (std::int64_t j = t + 1; j < T; ++j) g(t, j) = 0.0f;
        }
        // dQ = scale dS K, dK = scale dS^T Q.
        SerialGemm<Trans::NoTranspose, Trans::NoTranspose, Algo::Gemm::Blocked>::invoke(scale, g, k,
                                                                                        0.0f, dq);
        SerialGemm<Trans::Transpose, Trans::NoTranspose, Algo::Gemm::Blocked>::invoke(scale, g, q,
                                                                                      0.0f, dk);
      });
}

}  // namespace tessera::kernels
