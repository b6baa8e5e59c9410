// The shapes of causal multi-head attention (AttentionLayout), its dropout
// (AttentionDropout), the row statistics and scratch buffers a layer
// allocates, and their checks. The kernels are in attention.hpp (interface
// and host path) and impl/attention_device.hpp (device path); this header
// is what a layer needs to size its buffers.
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/host_paths.hpp>
#include <tessera/core/random.hpp>
#include <tessera/core/types.hpp>

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

// Per (sample, head) rows of T floats: the row statistics forward keeps
// for backward, [N H, attention_stat_rows, T] (row 0 each query's largest
// score, row 1 the inverse of its exponentials' sum: P(t, j) =
// exp(S(t, j) - max_t) inverse_t, recomputed from S in backward), and the
// kernels' scratch, [N H, attention_scratch_rows(l), T]. Neither holds the
// [T, T] scores whole: the memory is O(T) per head for any T.
using AttentionScores = Kokkos::View<float***, Kokkos::LayoutRight, MemSpace>;
constexpr std::int64_t attention_stat_rows = 2;

namespace impl {
// Register tiles of the host path's products: 4 rows by 8 columns, or
// with vector extensions 8 rows (6 with AVX2) by two of the host's vector
// registers (impl::lane_tile_rows, attention.hpp).
constexpr int tile_rows = 4, tile_cols = 8;
// Query rows the host path takes a block at a time: the sums over the
// block's positions (dV = P'^T dY, dK = dS^T Q) run over 16 terms a load
// of their outputs.
constexpr int block_rows = 16;

// Scratch rows of T floats per (sample, head) of the host path: its keys
// and values transposed (D rows each), and three blocks of block_rows rows
// (the block's scores, then probabilities; dP, then dS; the probabilities
// with dropout applied).
inline std::int64_t attention_host_scratch_rows(const AttentionLayout& l) {
  return 2 * l.head_dim + 3 * block_rows;
}

// Of the device path: one row, each query's sum over j of P dP (written by
// backward's query rows, read by its key rows).
inline std::int64_t attention_device_scratch_rows(const AttentionLayout&) { return 1; }
}  // namespace impl

// Rows of T floats of scratch each (sample, head) needs on ExecSpace's
// path. Allocate AttentionScores(label, N H, attention_scratch_rows(l), T).
template <class ExecSpace = tessera::ExecSpace>
std::int64_t attention_scratch_rows(const AttentionLayout& l) {
  if constexpr (host_fast_paths_v<ExecSpace>)
    return impl::attention_host_scratch_rows(l);
  else
    return impl::attention_device_scratch_rows(l);
}

namespace impl {
template <class QKV, class Scores, class Heads>
void check_attention(const char* fn, const AttentionLayout& l, const QKV& qkv, const Scores& stats,
                     const Scores& scratch, std::int64_t scratch_rows, const Heads& heads) {
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
          static_cast<std::int64_t>(heads.extent(1)) == c && fits(stats, attention_stat_rows) &&
          fits(scratch, scratch_rows) &&
          (rows == 0 || (qkv.stride(1) == 1 && heads.stride(1) == 1)),
      fn << ": qkv [" << qkv.extent(0) << ", " << qkv.extent(1) << "], stats [" << stats.extent(0)
         << ", " << stats.extent(1) << ", " << stats.extent(2) << "], scratch ["
         << scratch.extent(0) << ", " << scratch.extent(1) << ", " << scratch.extent(2)
         << "], heads [" << heads.extent(0) << ", " << heads.extent(1) << "] for batch " << l.batch
         << ", " << l.positions << " positions, " << l.heads << " heads of " << l.head_dim
         << "; expected qkv [N T, 3 C], stats [N H, " << attention_stat_rows
         << ", T], scratch [N H, " << scratch_rows
         << ", T] (attention_scratch_rows on this path), heads [N T, C], rows of qkv and heads "
         << "contiguous");
}
}  // namespace impl

}  // namespace tessera::kernels
