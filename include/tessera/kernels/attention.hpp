// Causal multi-head attention kernels: the part between the fused QKV
// projection and the output projection (both dense products).
//
// For sample n and head h, with Q, K, V the [T, D] blocks of the fused
// projection qkv [N * T, 3 C] (columns h D.., C + h D.., 2 C + h D..; the
// layout of PyTorch's qkv.split(C, dim=2) then view(N, T, H, D)):
//   S = scale Q K^T, P = softmax over j <= t of S(t, j) (0 for j > t),
//   P' = P with dropout (mask / (1 - rate)), Y = P' V,
// Y written to columns h D.. of heads [N * T, C]. Neither path holds the
// [T, T] scores or probabilities whole (flash-attention style): forward
// keeps each query's largest score and the inverse of its exponentials'
// sum (stats, 2 floats per query), and backward recomputes S and
// P = exp(S - max) inverse from them, a block of rows at a time; the
// dropout mask is drawn again from counters rather than stored. The
// memory is O(T) per (sample, head), not O(T^2).
//
// Two paths, chosen by host_fast_paths_v. The device path (what CUDA and
// HIP run, and the host in device-path builds) takes one team per query
// row and one per key row: impl/attention_device.hpp.
//
// The host path: each (sample, head) is one work item that reads its columns
// of qkv in place (no copies into [N, H, T, D]) and takes its query
// positions in blocks of 16 (block_rows): every product (S = Q K^T, Y = P'
// V, dP = dY V^T, dV = P'^T dY, dQ = dS K, dK = dS^T Q) is computed in
// register tiles of 8 rows (6 with AVX2) by two of the host's vector
// registers (32 outputs a row with AVX-512, 16 with AVX2; impl::lane_tile in
// impl/attention_tiles.hpp), then one register, then 4 x 8
// (impl::tile_product), and a block visits only the positions j < t0 + 16
// its rows may see. A block's scores are a [16, T] row block of the item's
// scratch, so each row's softmax sees the whole row at once (no running
// maximum to rescale by) and backward's recomputed probabilities have the
// bits forward used. The head's keys (and in backward its values) are first
// copied transposed into the item's scratch, [D, T], squares of a register's
// width transposed in registers, so that every product reads contiguous
// values of one operand per step and one value of the other for each of the
// tile's rows. Each output sums its terms in order of k, one accumulator
// each (dV and dK start from what the earlier blocks left in dqkv, or from 0
// where no earlier block reached them, and add the block's 16 terms in order
// of t), so the results have the same bits for any thread count, tile shape
// and block size. Tiles that start from 0 or from float rows, and write
// float rows, move their accumulators a register at a time (RowsStart,
// RowsOut); value by value through an array on the stack, an AVX2 build's
// backward took 2.3 times as long (tiny GPT, 7.4 against 3.3 ms a layer). On
// the tiny GPT (N 32, T 128, 4 heads of 32, 2 threads, AVX2) 4 x 8 tiles
// over blocks of 4 took 5.8 ms forward and 11 to 12.5 backward per layer
// (with the probabilities kept whole), where rows of dot products over D
// took 13 and 19; docs/benchmarks.md ("The tiny GPT") has the wider tiles
// and blocks. Computing the scores and probabilities again costs backward
// about 16 % (AVX-512, medians of 5 interleaved runs: 6.0 to 7.0 ms a layer;
// forward 2.6 ms either way). KokkosBatched's serial blocked GEMMs over the
// full T x T block on the same strided views had taken 1.9 and 2.3 times as
// long as those dot products.
#pragma once

#include <tessera/core/host_paths.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/attention_layout.hpp>
#include <tessera/kernels/dense.hpp>
#include <tessera/kernels/impl/attention_device.hpp>
#include <tessera/kernels/impl/attention_tiles.hpp>
#include <tessera/kernels/impl/lanes.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/math.hpp>
#include <tessera/kernels/reduce.hpp>

#include <cstdint>

namespace tessera::kernels {

namespace impl {
// Why a host path's launch takes one (sample, head) a work item.
constexpr const char* attention_host_narrow =
    "host schedule: one (sample, head) per task, its products in register tiles";

// The positions a row's loops below visit: 0..t, rounded up to whole
// vectors of native_lanes where the block's rows have room (j < end), so
// that no loop ends in a scalar remainder (the exponentials' stood out in
// backward's profile); the values past t are then zeroed.
KOKKOS_INLINE_FUNCTION std::int64_t row_lanes_end(std::int64_t t, std::int64_t end) {
  const std::int64_t rounded = (t + native_lanes) / native_lanes * native_lanes;
  return rounded <= end ? rounded : t + 1;
}

// f(j) for j < n: whole vectors of native_lanes, then one at a time.
template <class F>
KOKKOS_INLINE_FUNCTION void for_each_lane(std::int64_t n, const F& f) {
  std::int64_t j = 0;
  for (; j + native_lanes <= n; j += native_lanes)
    for (int l = 0; l < native_lanes; ++l) f(j + l);
  for (; j < n; ++j) f(j);
}

// Row t of the probabilities from its scores (columns 0..t), and the row's
// statistics: the row maximum first, so exp never overflows; the
// exponentials without library calls (so the loop vectorises), summed in
// lane_sum's fixed order (the zeros past t add nothing to it); exact zeros
// from t + 1 to end.
KOKKOS_INLINE_FUNCTION void causal_softmax_row(float* row, std::int64_t t, std::int64_t end,
                                               float& max_out, float& inverse_out) {
  const float max = lane_max(row, t + 1);
  const std::int64_t n = row_lanes_end(t, end);
  for_each_lane(n, [&](std::int64_t j) { row[j] = exp_nonpositive(row[j] - max); });
  for (std::int64_t j = t + 1; j < end; ++j) row[j] = 0.0f;
  const float inverse = 1.0f / lane_sum(row, n);
  for_each_lane(n, [&](std::int64_t j) { row[j] *= inverse; });
  max_out = max;
  inverse_out = inverse;
}

// Row t of the probabilities again, from its scores and its statistics.
KOKKOS_INLINE_FUNCTION void causal_probability_row(float* row, std::int64_t t, std::int64_t end,
                                                   float max, float inverse) {
  for_each_lane(row_lanes_end(t, end),
                [&](std::int64_t j) { row[j] = attention_probability(row[j], max, inverse); });
  for (std::int64_t j = t + 1; j < end; ++j) row[j] = 0.0f;
}

// The item's scratch rows: its keys transposed, [D, T]; its values
// transposed (backward only); and three blocks of block_rows rows of T.
struct AttentionHostScratch {
  float *keys, *values, *p, *ds, *kept;
  KOKKOS_INLINE_FUNCTION AttentionHostScratch(const AttentionScores& scratch, std::int64_t nh,
                                              std::int64_t D, std::int64_t T)
      : keys(&scratch(nh, 0, 0)),
        values(&scratch(nh, D, 0)),
        p(&scratch(nh, 2 * D, 0)),
        ds(p + block_rows * T),
        kept(ds + block_rows * T) {}
};

// Rows t0.. (rows of them) of the block's scores, S = scale Q K^T over the
// positions j < end, into s's rows of T.
template <class QKV>
KOKKOS_INLINE_FUNCTION void attention_block_scores(const QKV& qkv, std::int64_t ld,
                                                   std::int64_t row0, std::int64_t col0,
                                                   const float* keys, std::int64_t T,
                                                   std::int64_t D, std::int64_t rows,
                                                   std::int64_t end, float scale, float* s) {
  tiled_product(&qkv(row0, col0), ld, 1, keys, T, D, rows, end, ZeroStart{}, RowsOut{s, T, scale});
}

template <class ExecSpace, class QKV, class Heads>
void attention_forward_host(const ExecSpace& exec, const AttentionLayout& l, float scale,
                            const AttentionDropout& dropout, const QKV& qkv,
                            const AttentionScores& stats, const AttentionScores& scratch,
                            const Heads& heads) {
  impl::check_attention("tessera::kernels::attention_forward", l, qkv, stats, scratch,
                        attention_host_scratch_rows(l), heads);
  const std::int64_t T = l.positions, H = l.heads, D = l.head_dim, C = l.channels();
  const bool drop = dropout.rate > 0;
  const std::int64_t ld = qkv.stride(0);
  // qkv read; the keys transposed into scratch, read per block of rows;
  // the blocks of scores (and with dropout of P') written and read within
  // the item, about the causal half; stats and heads written.
  const std::int64_t heads_size = attention_head_elements(l);
  const Work work{bytes_of<typename QKV::non_const_value_type>(3 * heads_size) +
                      bytes_of<float>(l.batch * H * D * T) +
                      bytes_of<float>((drop ? 4 : 2) * attention_pairs(l)) +
                      bytes_of<float>(l.batch * H * attention_stat_rows * T) +
                      bytes_of<typename Heads::non_const_value_type>(heads_size),
                  attention_forward_flops(l, drop), attention_host_narrow};
  parallel_for(
      "tessera::kernels::attention_forward", Kokkos::RangePolicy<ExecSpace>(exec, 0, l.batch * H),
      work, KOKKOS_LAMBDA(const std::int64_t nh) {
        const std::int64_t n = nh / H, h = nh % H;
        const AttentionHostScratch at(scratch, nh, D, T);
        impl::transpose_head(qkv, n * T, C + h * D, T, D, at.keys);
        for (std::int64_t t0 = 0; t0 < T; t0 += impl::block_rows) {
          // Rows t0.. of the block see the positions j < end.
          const std::int64_t rows = impl::at_most(impl::block_rows, T - t0), end = t0 + rows;
          // S = scale Q K^T, then each row's softmax and statistics.
          attention_block_scores(qkv, ld, n * T + t0, h * D, at.keys, T, D, rows, end, scale, at.p);
          for (std::int64_t r = 0; r < rows; ++r)
            impl::causal_softmax_row(at.p + r * T, t0 + r, end, stats(nh, 0, t0 + r),
                                     stats(nh, 1, t0 + r));
          // Y = P' V over j < end (P' is 0 after each row's t).
          const float* p = at.p;
          if (drop) {
            for (std::int64_t r = 0; r < rows; ++r)
              for (std::int64_t j = 0; j < end; ++j)
                at.kept[r * T + j] = at.p[r * T + j] * dropout.scale((nh * T + t0 + r) * T + j);
            p = at.kept;
          }
          impl::tiled_product(p, T, 1, &qkv(n * T, 2 * C + h * D), ld, end, rows, D,
                              impl::ZeroStart{}, impl::view_out(heads, n * T + t0, h * D));
        }
      });
}

// What the host path's backward moves and computes.
template <class QKV, class DHeads, class DQKV>
Work attention_backward_host_work(const AttentionLayout& l, bool drop) {
  // qkv, stats and dheads read, the keys and values transposed into
  // scratch and read per block, the blocks of P, dS and with dropout P'
  // written and read within the item (about the causal half each), dqkv
  // written (the adds to dK and dV re-read what the launch's earlier blocks
  // wrote). Per pair: S again (2 D + 1) and P from it (3), dP's dot product
  // (2 D), the multiply-adds of dV, dQ and dK (2 D each; dV and dK add
  // onto dqkv's values), P dP's multiply-add into the dot (2), dS (3), and
  // with dropout the decision and its products with P and dP (5).
  const std::int64_t heads_size = attention_head_elements(l), T = l.positions, H = l.heads,
                     D = l.head_dim;
  return Work{
      bytes_of<typename QKV::non_const_value_type>(3 * heads_size) +
          bytes_of<typename DHeads::non_const_value_type>(heads_size) +
          bytes_of<float>(l.batch * H * (attention_stat_rows + 2 * D) * T) +
          bytes_of<float>((drop ? 6 : 4) * attention_pairs(l)) +
          bytes_of<typename DQKV::non_const_value_type>(3 * heads_size),
      double(attention_pairs(l)) * (10.0 * D + 9 + (drop ? attention_dropout_flops + 1 : 0)),
      attention_host_narrow};
}

template <class ExecSpace, class QKV, class DHeads, class DQKV>
void attention_backward_host(const ExecSpace& exec, const AttentionLayout& l, float scale,
                             const AttentionDropout& dropout, const QKV& qkv,
                             const AttentionScores& stats, const AttentionScores& scratch,
                             const DHeads& dheads, const DQKV& dqkv) {
  const char* fn = "tessera::kernels::attention_backward";
  impl::check_attention(fn, l, qkv, stats, scratch, attention_host_scratch_rows(l), dheads);
  impl::check_attention(fn, l, dqkv, stats, scratch, attention_host_scratch_rows(l), dheads);
  const std::int64_t T = l.positions, H = l.heads, D = l.head_dim, C = l.channels();
  const bool drop = dropout.rate > 0;
  const std::int64_t ld = qkv.stride(0), ldh = dheads.stride(0);
  const Work work = attention_backward_host_work<QKV, DHeads, DQKV>(l, drop);
  parallel_for(
      "tessera::kernels::attention_backward", Kokkos::RangePolicy<ExecSpace>(exec, 0, l.batch * H),
      work, KOKKOS_LAMBDA(const std::int64_t nh) {
        const std::int64_t n = nh / H, h = nh % H;
        const AttentionHostScratch at(scratch, nh, D, T);
        float* const ds = at.ds;
        impl::transpose_head(qkv, n * T, C + h * D, T, D, at.keys);
        impl::transpose_head(qkv, n * T, 2 * C + h * D, T, D, at.values);
        // out(j) = the sum over t < end of A(t, j) B(t) for j < end, where
        // a block adds its rows' terms, A(t0 + k, j) = a[j + k T] and
        // B(t0 + k) = b + k ldb: the outputs j < t0 start from what the
        // earlier blocks left in dqkv's columns col.., those from t0 on
        // from 0 (no block before this one reaches them).
        const auto add_block_terms = [&](std::int64_t t0, std::int64_t rows, const float* a,
                                         const float* b, std::int64_t ldb, std::int64_t col) {
          impl::tiled_product(a, 1, T, b, ldb, rows, t0, D, impl::view_start(dqkv, n * T, col),
                              impl::view_out(dqkv, n * T, col));
          impl::tiled_product(a + t0, 1, T, b, ldb, rows, rows, D, impl::ZeroStart{},
                              impl::view_out(dqkv, n * T + t0, col));
        };
        for (std::int64_t t0 = 0; t0 < T; t0 += impl::block_rows) {
          const std::int64_t rows = impl::at_most(impl::block_rows, T - t0), end = t0 + rows;
          // P again: forward's scores and probabilities, bit for bit.
          attention_block_scores(qkv, ld, n * T + t0, h * D, at.keys, T, D, rows, end, scale, at.p);
          for (std::int64_t r = 0; r < rows; ++r)
            impl::causal_probability_row(at.p + r * T, t0 + r, end, stats(nh, 0, t0 + r),
                                         stats(nh, 1, t0 + r));
          // dP' = dY V^T over j < end; dP = dP' .* mask.
          impl::tiled_product(&dheads(n * T + t0, h * D), ldh, 1, at.values, T, D, rows, end,
                              impl::ZeroStart{}, impl::RowsOut{ds, T, 1.0f});
          const float* p = at.p;
          if (drop) {
            for (std::int64_t r = 0; r < rows; ++r)
              for (std::int64_t j = 0; j < end; ++j) {
                const float keep = dropout.scale((nh * T + t0 + r) * T + j);
                at.kept[r * T + j] = at.p[r * T + j] * keep;
                ds[r * T + j] *= keep;
              }
            p = at.kept;
          }
          // dV(j) += P'(t, j) dY(t) for the block's t in order, j < end:
          // each dV(j) adds its terms in order of t, whatever the blocks.
          add_block_terms(t0, rows, p, &dheads(n * T + t0, h * D), ldh, 2 * C + h * D);
          // dS(t, j) = scale P (dP - sum_j P dP), 0 after t.
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t t = t0 + r;
            const float* pt = at.p + r * T;
            float* dst = ds + r * T;
            const float dot = lane_dot(pt, dst, t + 1);
            for (std::int64_t j = 0; j <= t; ++j) dst[j] = scale * pt[j] * (dst[j] - dot);
            for (std::int64_t j = t + 1; j < end; ++j) dst[j] = 0.0f;
          }
          // dQ(t) = sum over j < end of dS(t, j) K(j).
          impl::tiled_product(ds, T, 1, &qkv(n * T, C + h * D), ld, end, rows, D, impl::ZeroStart{},
                              impl::view_out(dqkv, n * T + t0, h * D));
          // dK(j) += dS(t, j) Q(t) for the block's t in order, j < end.
          add_block_terms(t0, rows, ds, &qkv(n * T + t0, h * D), ld, C + h * D);
        }
      });
}

}  // namespace impl

// Y = P' V into heads [N T, C], each query's statistics into stats
// [N H, attention_stat_rows, T]; scratch is overwritten.
template <class ExecSpace, class QKV, class Heads>
void attention_forward(const ExecSpace& exec, const AttentionLayout& l, float scale,
                       const AttentionDropout& dropout, const QKV& qkv,
                       const AttentionScores& stats, const AttentionScores& scratch,
                       const Heads& heads) {
  ScopedRegion region("tessera::kernels::attention_forward");
  if constexpr (host_fast_paths_v<ExecSpace>)
    impl::attention_forward_host(exec, l, scale, dropout, qkv, stats, scratch, heads);
  else
    impl::attention_forward_device(exec, l, scale, dropout, qkv, stats, scratch, heads);
}

// dqkv (written, not accumulated) from dheads [N T, C], the qkv and
// statistics of forward and the same dropout; scratch is overwritten.
template <class ExecSpace, class QKV, class DHeads, class DQKV>
void attention_backward(const ExecSpace& exec, const AttentionLayout& l, float scale,
                        const AttentionDropout& dropout, const QKV& qkv,
                        const AttentionScores& stats, const AttentionScores& scratch,
                        const DHeads& dheads, const DQKV& dqkv) {
  ScopedRegion region("tessera::kernels::attention_backward");
  if constexpr (host_fast_paths_v<ExecSpace>)
    impl::attention_backward_host(exec, l, scale, dropout, qkv, stats, scratch, dheads, dqkv);
  else
    impl::attention_backward_device(exec, l, scale, dropout, qkv, stats, scratch, dheads, dqkv);
}

// attention_forward, and y [N T, out] = the output projection's bias b
// broadcast (0 where b is empty), so that the projection adds its product
// onto it (dense_accumulate): on the device path in the same launch.
template <class ExecSpace, class QKV, class Heads, class Y, class B>
void attention_forward(const ExecSpace& exec, const AttentionLayout& l, float scale,
                       const AttentionDropout& dropout, const QKV& qkv,
                       const AttentionScores& stats, const AttentionScores& scratch,
                       const Heads& heads, const Y& y, const B& b) {
  ScopedRegion region("tessera::kernels::attention_forward");
  if constexpr (host_fast_paths_v<ExecSpace>) {
    impl::attention_forward_host(exec, l, scale, dropout, qkv, stats, scratch, heads);
    impl::broadcast_rows(exec, y, b);
  } else {
    impl::attention_forward_device(exec, l, scale, dropout, qkv, stats, scratch, heads, TeamShape{},
                                   impl::broadcast_rows_part(y, b));
  }
}

// attention_backward, and db += the column sums of the output's gradient
// dy (the output projection's bias gradient, as dense_backward sums it):
// on the device path in the launch of the query rows, so dy may not share
// memory with dqkv.
template <class ExecSpace, class QKV, class DHeads, class DQKV, class DY, class DB>
void attention_backward(const ExecSpace& exec, const AttentionLayout& l, float scale,
                        const AttentionDropout& dropout, const QKV& qkv,
                        const AttentionScores& stats, const AttentionScores& scratch,
                        const DHeads& dheads, const DQKV& dqkv, const DY& dy, const DB& db) {
  ScopedRegion region("tessera::kernels::attention_backward");
  if constexpr (host_fast_paths_v<ExecSpace>) {
    impl::attention_backward_host(exec, l, scale, dropout, qkv, stats, scratch, dheads, dqkv);
    if (db.extent(0) > 0) impl::dense_bias_gradient(exec, dy, db);
  } else {
    impl::attention_backward_device(exec, l, scale, dropout, qkv, stats, scratch, dheads, dqkv,
                                    TeamShape{}, impl::dense_bias_gradient_part(dy, db));
  }
}

}  // namespace tessera::kernels
