// The host path's products of the causal attention (kernels/attention.hpp):
// a head's keys or values copied transposed, and C = start + A B in
// register tiles, each output summing its terms in order of k whatever the
// tile's shape (impl::tiled_product). The tiles' start and output are
// functors of (row, column), or rows of floats in memory (RowsStart,
// RowsOut) that the wide tiles move a register at a time.
#pragma once

#include <tessera/core/host_paths.hpp>
#include <tessera/kernels/attention_layout.hpp>
#include <tessera/kernels/impl/lanes.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>

namespace tessera::kernels::impl {

// dst(d, j) = src(row0 + j, col0 + d) for j < T, d < D: a head's keys or
// values, transposed into rows of T.
template <class QKV>
KOKKOS_INLINE_FUNCTION void transpose_head(const QKV& qkv, std::int64_t row0, std::int64_t col0,
                                           std::int64_t T, std::int64_t D, float* dst) {
  const float* src = &qkv(row0, col0);
  const std::int64_t ld = qkv.stride(0);
  std::int64_t rows = 0, cols = 0;  // the part transposed in registers
#ifdef TESSERA_HOST_VECTORS
  // Squares of native_lanes rows by as many values, each row one load and
  // one store (element by element, every load waited on its row's cache
  // line: 1.5 % of the tiny GPT's step).
  rows = T / native_lanes * native_lanes;
  cols = D / native_lanes * native_lanes;
  for (std::int64_t j0 = 0; j0 < rows; j0 += native_lanes)
    for (std::int64_t d0 = 0; d0 < cols; d0 += native_lanes) {
      NativeLanes x[native_lanes];
      for (int i = 0; i < native_lanes; ++i)
        x[i] = load_lanes<NativeLanes>(src + (j0 + i) * ld + d0);
      transpose_lanes<native_lanes / 2>(x);
      for (int i = 0; i < native_lanes; ++i) store_lanes(dst + (d0 + i) * T + j0, x[i]);
    }
#endif
  // The rest column by column: the writes contiguous, and each row's
  // values read from L1 after the first column.
  for (std::int64_t d = 0; d < D; ++d)
    for (std::int64_t j = d < cols ? rows : 0; j < T; ++j) dst[d * T + j] = src[j * ld + d];
}

// A tile's first values: none (the products written), or what the output
// holds (the products added to it, each output's terms after it in order).
struct ZeroStart {
  KOKKOS_INLINE_FUNCTION float operator()(std::int64_t, std::int64_t) const { return 0.0f; }
};

// A tile's first values read from rows of floats (row r at p + r ld, its
// columns contiguous), and its results written to such rows times factor
// (the scores' scale, or 1). The host's wide tiles move these a register
// at a time, where other starts and outputs go value by value through an
// array on the stack.
struct RowsStart {
  const float* p;
  std::int64_t ld;
  KOKKOS_INLINE_FUNCTION float operator()(std::int64_t r, std::int64_t c) const {
    return p[r * ld + c];
  }
};
struct RowsOut {
  float* p;
  std::int64_t ld;
  float factor;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t r, std::int64_t c, float v) const {
    p[r * ld + c] = factor * v;
  }
};

// Start and output of a tile over view(row0 + r, col0 + c): RowsStart and
// RowsOut on float rows, value by value otherwise.
template <class View>
KOKKOS_INLINE_FUNCTION auto view_start(const View& view, std::int64_t row0, std::int64_t col0) {
  if constexpr (std::is_same<typename View::non_const_value_type, float>::value)
    return RowsStart{&view(row0, col0), std::int64_t(view.stride(0))};
  else
    return [=](std::int64_t r, std::int64_t c) { return float(view(row0 + r, col0 + c)); };
}
template <class View>
KOKKOS_INLINE_FUNCTION auto view_out(const View& view, std::int64_t row0, std::int64_t col0) {
  if constexpr (std::is_same<typename View::non_const_value_type, float>::value)
    return RowsOut{&view(row0, col0), std::int64_t(view.stride(0)), 1.0f};
  else
    return [=](std::int64_t r, std::int64_t c, float v) { view(row0 + r, col0 + c) = v; };
}

// acc(r, c) = start(r, c) + the sum over k < k_count, in order, of
// A(r, k) B(k, c) for r < rows <= 4 and c < cols <= 8, with A(r, k) =
// a[r a_row + k a_k] (a matrix or a transposed one) and B(k, c) =
// b[k b_k + c] (8 contiguous values per k).
template <class Start>
KOKKOS_INLINE_FUNCTION void tile_product(const float* a, std::int64_t a_row, std::int64_t a_k,
                                         const float* b, std::int64_t b_k, std::int64_t k_count,
                                         std::int64_t rows, std::int64_t cols, const Start& start,
                                         float (&acc)[tile_rows][tile_cols]) {
  for (int r = 0; r < tile_rows; ++r)
    for (int c = 0; c < tile_cols; ++c) acc[r][c] = r < rows && c < cols ? start(r, c) : 0.0f;
#ifdef TESSERA_HOST_VECTORS
  // Host compilers with vector extensions: each row's 8 sums in one vector
  // register. Written as plain loops, the tile's 32 sums are reductions
  // over k to GCC, which it vectorises across k as in-order reductions,
  // one add after another (slower than the rows of dot products this
  // replaced). The sums are the same: each element adds its terms in order
  // of k, as the loops below do for edge tiles and on other compilers.
  if (rows == tile_rows && cols == tile_cols) {
    typedef float row_vector __attribute__((vector_size(tile_cols * sizeof(float))));
    row_vector sum[tile_rows];
    __builtin_memcpy(sum, acc, sizeof sum);
    for (std::int64_t k = 0; k < k_count; ++k) {
      row_vector bk;
      __builtin_memcpy(&bk, b + k * b_k, sizeof bk);
      for (int r = 0; r < tile_rows; ++r) sum[r] += a[r * a_row + k * a_k] * bk;
    }
    __builtin_memcpy(acc, sum, sizeof sum);
    return;
  }
#endif
  for (std::int64_t k = 0; k < k_count; ++k) {
    const float* bk = b + k * b_k;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float ar = a[r * a_row + k * a_k];
      for (std::int64_t c = 0; c < cols; ++c) acc[r][c] += ar * bk[c];
    }
  }
}

#ifdef TESSERA_HOST_VECTORS
// The host's wide tiles: rows r0 .. r0 + R by columns c0 .. c0 + V
// native_lanes, each row's sums in V of the host's vector registers (8
// accumulators of 16 floats with AVX-512 at V = 2): per step of the sum V
// loads of B and R broadcasts of A for R V vector multiply-adds. Each
// output starts from start(r, c) and adds its terms in order of k, as
// tile_product's do, so the tile's shape leaves the bits as they are.
template <int R, int V, class Start, class Out>
inline void lane_tile(const float* a, std::int64_t a_row, std::int64_t a_k, const float* b,
                      std::int64_t b_k, std::int64_t k_count, std::int64_t r0, std::int64_t c0,
                      const Start& start, const Out& out) {
  constexpr int width = V * native_lanes;
  NativeLanes sum[R][V];
  if constexpr (std::is_same<Start, ZeroStart>::value) {
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) sum[r][v] = zero_lanes<NativeLanes>();
  } else if constexpr (std::is_same<Start, RowsStart>::value) {
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v)
        sum[r][v] = load_lanes<NativeLanes>(start.p + (r0 + r) * start.ld + c0 + v * native_lanes);
  } else {
    float values[R][width];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < width; ++c) values[r][c] = start(r0 + r, c0 + c);
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) sum[r][v] = load_lanes<NativeLanes>(values[r] + v * native_lanes);
  }
  const float* const ar = a + r0 * a_row;
  const float* const bc = b + c0;
  for (std::int64_t k = 0; k < k_count; ++k) {
    NativeLanes column[V];
    for (int v = 0; v < V; ++v) {
      column[v] = load_lanes<NativeLanes>(bc + k * b_k + v * native_lanes);
      keep_in_register(column[v]);
    }
    for (int r = 0; r < R; ++r) {
      const float value = ar[r * a_row + k * a_k];
      for (int v = 0; v < V; ++v) sum[r][v] += value * column[v];
    }
  }
  if constexpr (std::is_same<Out, RowsOut>::value) {
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v)
        store_lanes(out.p + (r0 + r) * out.ld + c0 + v * native_lanes, out.factor * sum[r][v]);
  } else {
    float values[R][width];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) store_lanes(values[r] + v * native_lanes, sum[r][v]);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < width; ++c) out(r0 + r, c0 + c, values[r][c]);
  }
}

// Rows a wide tile takes: 8 by two registers are 16 accumulators, half of
// AVX-512's 32 registers; AVX's 16 registers hold 6 by two (12), beside the
// two values of B and the broadcast of A.
constexpr int lane_tile_rows = native_lanes >= 16 ? 8 : 6;

// lane_tile for the nr <= R rows left at r0: the tile nr rows tall.
template <int R, int V, class Start, class Out>
inline void lane_tile_rows_upto(std::int64_t nr, const float* a, std::int64_t a_row,
                                std::int64_t a_k, const float* b, std::int64_t b_k,
                                std::int64_t k_count, std::int64_t r0, std::int64_t c0,
                                const Start& start, const Out& out) {
  if constexpr (R > 1) {
    if (nr < R) {
      lane_tile_rows_upto<R - 1, V>(nr, a, a_row, a_k, b, b_k, k_count, r0, c0, start, out);
      return;
    }
  }
  lane_tile<R, V>(a, a_row, a_k, b, b_k, k_count, r0, c0, start, out);
}
#endif

KOKKOS_INLINE_FUNCTION std::int64_t at_most(std::int64_t v, std::int64_t limit) {
  return v < limit ? v : limit;
}

// out(r, c, start(r, c) + sum over k < k_count of A(r, k) B(k, c)) for
// r < rows and c < cols, in register tiles (with vector extensions two
// or one of the host's registers wide, then 8 columns at a time); A and
// B as for tile_product.
template <class Start, class Out>
KOKKOS_INLINE_FUNCTION void tiled_product(const float* a, std::int64_t a_row, std::int64_t a_k,
                                          const float* b, std::int64_t b_k, std::int64_t k_count,
                                          std::int64_t rows, std::int64_t cols, const Start& start,
                                          const Out& out) {
  std::int64_t lane_cols = 0;
#ifdef TESSERA_HOST_VECTORS
  for (std::int64_t r0 = 0; r0 < rows; r0 += lane_tile_rows) {
    const std::int64_t nr = at_most(lane_tile_rows, rows - r0);
    std::int64_t c0 = 0;
    for (; c0 + 2 * native_lanes <= cols; c0 += 2 * native_lanes)
      lane_tile_rows_upto<lane_tile_rows, 2>(nr, a, a_row, a_k, b, b_k, k_count, r0, c0, start,
                                             out);
    if (c0 + native_lanes <= cols) {
      lane_tile_rows_upto<lane_tile_rows, 1>(nr, a, a_row, a_k, b, b_k, k_count, r0, c0, start,
                                             out);
      c0 += native_lanes;
    }
    lane_cols = c0;
  }
#endif
  float acc[tile_rows][tile_cols];
  for (std::int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
    const std::int64_t nr = at_most(tile_rows, rows - r0);
    for (std::int64_t c0 = lane_cols; c0 < cols; c0 += tile_cols) {
      const std::int64_t nc = at_most(tile_cols, cols - c0);
      tile_product(
          a + r0 * a_row, a_row, a_k, b + c0, b_k, k_count, nr, nc,
          [&](std::int64_t r, std::int64_t c) { return start(r0 + r, c0 + c); }, acc);
      for (std::int64_t r = 0; r < nr; ++r)
        for (std::int64_t c = 0; c < nc; ++c) out(r0 + r, c0 + c, acc[r][c]);
    }
  }
}

}  // namespace tessera::kernels::impl
