// Register tiles for the host's products (ConvSchedule::direct's
// channel-last and planar forms, Winograd's t^2 products): R rows, each
// value read one float at a time (broadcast), by V vectors of NativeLanes,
// R x V sums in registers, each over its terms in order.
#pragma once

#include <tessera/kernels/impl/lanes.hpp>

#include <cstdint>
#include <type_traits>

namespace tessera::kernels::impl {

// The register tile: direct_tile_rows rows by up to direct_tile_vectors
// NativeLanes, that many accumulators in registers (24 of AVX-512's 32,
// 12 of AVX's and SSE's 16) beside the vectors of one step.
constexpr int direct_tile_rows = 6;
constexpr int direct_tile_vectors = native_lanes == 16 ? 4 : 2;
// Channels of a whole tile.
constexpr int direct_tile_width = direct_tile_vectors * native_lanes;

// acc[r][v] = the sum over runs k (runs.each(f) calls f(a_k, b_k) for
// each, in order) and j < runs.length of a[r][a_k + j runs.a_step] *
// b[b_k + j runs.b_step + v native_lanes .. + native_lanes), each lane's
// terms in that order.
template <int R, int V, class Runs>
inline void direct_tile(const float* const (&a)[R], const Runs& runs, const float* b,
                        NativeLanes (&acc)[R][V]) {
  NativeLanes s[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) s[r][v] = zero_lanes<NativeLanes>();
  const std::int64_t length = runs.length, a_step = runs.a_step, b_step = runs.b_step;
  runs.each([&](const std::int64_t a_at, const std::int64_t b_at) {
    const float* ar[R];
    for (int r = 0; r < R; ++r) ar[r] = a[r] + a_at;
    const float* const w = b + b_at;
    for (std::int64_t j = 0; j < length; ++j) {
      NativeLanes column[V];
      for (int v = 0; v < V; ++v)
        column[v] = load_lanes<NativeLanes>(w + j * b_step + v * native_lanes);
      for (int r = 0; r < R; ++r) {
        const float value = ar[r][j * a_step];
        for (int v = 0; v < V; ++v) s[r][v] += value * column[v];
      }
    }
  });
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = s[r][v];
}

// f(std::integral_constant<int, V>()) for the vectors of a tile `width`
// channels wide (at most direct_tile_width).
template <class F>
void with_tile_vectors(std::int64_t width, const F& f) {
  constexpr int three = direct_tile_vectors > 2 ? 3 : 2;  // never 3 where a tile holds 2
  const std::int64_t vectors = (width + native_lanes - 1) / native_lanes;
  if (vectors <= 1)
    f(std::integral_constant<int, 1>());
  else if (vectors == 2 || direct_tile_vectors == 2)
    f(std::integral_constant<int, 2>());
  else if (vectors == 3)
    f(std::integral_constant<int, three>());
  else
    f(std::integral_constant<int, direct_tile_vectors>());
}

// The input gradient's one run, over the output channels: dy's row times
// tap `tap`'s weights [out][in_lanes].
struct ChannelRun {
  std::int64_t length, a_step = 1, b_step, b_at;
  template <class F>
  void each(const F& f) const {
    f(0, b_at);
  }
};

// acc[r][v] = the sum over j < length of a[r lda + j a_step] *
// b[j ldb + v native_lanes .. + native_lanes], in order of j: direct_tile
// over rows a fixed stride apart, one pointer for all of them (lda may be
// a compile-time constant, 1 for rows side by side).
template <int R, int V, class Stride>
inline void strided_tile(const float* a, Stride lda, std::int64_t a_step, std::int64_t length,
                         const float* b, std::int64_t ldb, NativeLanes (&acc)[R][V]) {
  NativeLanes s[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) s[r][v] = zero_lanes<NativeLanes>();
  for (std::int64_t j = 0; j < length; ++j) {
    NativeLanes column[V];
    for (int v = 0; v < V; ++v) column[v] = load_lanes<NativeLanes>(b + j * ldb + v * native_lanes);
    const float* const step = a + j * a_step;
    for (int r = 0; r < R; ++r) {
      const float value = step[r * lda];
      for (int v = 0; v < V; ++v) s[r][v] += value * column[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = s[r][v];
}

// c (rows x cols, row-major, rows ldc apart) = (beta 0) or += (beta 1)
// a times b: row r of a at a + r lda, its `length` terms a_step apart; b
// `length` rows of cols floats, ldb apart; cols a multiple of
// native_lanes. Register tiles of direct_tile_rows rows by up to
// direct_tile_width columns, each sum over the length in order: a
// one-thread product of the small shapes Winograd's t^2 products have,
// without a BLAS's packing of its operands or its pass over c for beta.
// The last tile of rows ends at the last row (overlapping the tile before,
// whose rows it computes again to the same values and does not store).
inline void tile_product(std::int64_t rows, std::int64_t cols, std::int64_t length, const float* a,
                         std::int64_t lda, std::int64_t a_step, const float* b, std::int64_t ldb,
                         float beta, float* c, std::int64_t ldc) {
  constexpr int R = direct_tile_rows;
  for (std::int64_t first = 0; first < cols; first += direct_tile_width) {
    const std::int64_t width = cols - first < direct_tile_width ? cols - first : direct_tile_width;
    with_tile_vectors(width, [&](auto vectors) {
      constexpr int V = decltype(vectors)::value;
      for (std::int64_t done = 0; done < rows;) {
        const std::int64_t r0 = rows < R ? 0 : (done + R <= rows ? done : rows - R);
        NativeLanes acc[R][V];
        if (rows < R) {
          const float* ar[R];
          for (int r = 0; r < R; ++r) ar[r] = a + (r < rows ? r : rows - 1) * lda;
          direct_tile<R, V>(ar, ChannelRun{length, a_step, ldb, first}, b, acc);
        } else if (lda == 1) {
          strided_tile<R, V>(a + r0, std::integral_constant<std::int64_t, 1>(), a_step, length,
                             b + first, ldb, acc);
        } else {
          strided_tile<R, V>(a + r0 * lda, lda, a_step, length, b + first, ldb, acc);
        }
        const std::int64_t end = rows < R ? rows : r0 + R;
        for (std::int64_t r = done; r < end; ++r) {
          float* const target = c + r * ldc + first;
          for (int v = 0; v < V; ++v) {
            NativeLanes sum = acc[r - r0][v];
            if (beta != 0.0f) sum += load_lanes<NativeLanes>(target + v * native_lanes);
            store_lanes(target + v * native_lanes, sum);
          }
        }
        done = end;
      }
    });
  }
}

}  // namespace tessera::kernels::impl
