// The window ops of 2-D pooling (kernels/pool.hpp): what a max or average
// window computes forward, in general (clipped windows, padding), for the
// common unpadded 2 x 2 window at stride 2 (eight windows to a vector on
// the host), for whole planes (global pooling, a block of planes per host
// thread or a team per plane on a GPU), and what gradient it hands back.
#pragma once

#include <tessera/core/precision.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/impl/lanes.hpp>
#include <tessera/kernels/impl/team.hpp>
#include <tessera/kernels/impl/team_max.hpp>

#include <cstdint>
#include <type_traits>

namespace tessera::kernels {

namespace impl {
#ifdef TESSERA_HOST_VECTORS
// Outputs a 2 x 2 max window of stride 2 takes at a time on the host: 8,
// from the 16 floats of each input row, loaded as two whole AVX registers.
constexpr int max_2x2_lanes = 8;

// count <= max_2x2_lanes windows of MaxWindow::forward_2x2 from the 16
// floats at p and at p + width (which must all be readable; those past the
// windows are not used): the taps of every window in lanes, compared in the
// scalar code's order with its strict >, so results and argmax positions
// (p at plane position at0) are the same. `whole`: all max_2x2_lanes values
// of out and at may be written (those past count are written again later
// by the caller), so a short row is stored as two vectors, not value by
// value.
inline void max_2x2_windows(const float* p, int at0, int width, float* out, int* at, int count,
                            bool whole) {
  typedef float lanes __attribute__((vector_size(max_2x2_lanes * sizeof(float))));
  typedef int index_lanes __attribute__((vector_size(max_2x2_lanes * sizeof(int))));
  const float* const q = p + width;
  const lanes upper[2] = {load_lanes<lanes>(p), load_lanes<lanes>(p + max_2x2_lanes)};
  const lanes lower[2] = {load_lanes<lanes>(q), load_lanes<lanes>(q + max_2x2_lanes)};
  const lanes taps[4] = {__builtin_shufflevector(upper[0], upper[1], 0, 2, 4, 6, 8, 10, 12, 14),
                         __builtin_shufflevector(upper[0], upper[1], 1, 3, 5, 7, 9, 11, 13, 15),
                         __builtin_shufflevector(lower[0], lower[1], 0, 2, 4, 6, 8, 10, 12, 14),
                         __builtin_shufflevector(lower[0], lower[1], 1, 3, 5, 7, 9, 11, 13, 15)};
  const int offsets[4] = {0, 1, width, width + 1};
  const index_lanes first = at0 + index_lanes{0, 2, 4, 6, 8, 10, 12, 14};
  lanes best = taps[0];
  index_lanes best_at = first;
  for (int t = 1; t < 4; ++t) {
    const index_lanes better = taps[t] > best;
    best = (lanes)(((index_lanes)taps[t] & better) | ((index_lanes)best & ~better));
    best_at = ((first + offsets[t]) & better) | (best_at & ~better);
  }
  if (count == max_2x2_lanes || whole) {
    __builtin_memcpy(out, &best, sizeof best);
    __builtin_memcpy(at, &best_at, sizeof best_at);
    return;
  }
  for (int lane = 0; lane < count; ++lane) {
    out[lane] = best[lane];
    at[lane] = best_at[lane];
  }
}
#endif
}  // namespace impl

// PyTorch semantics: padding takes no part in the maximum; ties go to the
// first maximum in row-major window order (unlike PyTorch, a NaN wins only
// when it comes first). argmax(o) records the position (h * W + w) within
// the plane for backward.
template <class Index>
struct MaxWindow {
  Index argmax;

  // plane: the input plane; the window is rows [h_lo, h_hi), columns
  // [w_lo, w_hi) of rows `width` long; out: the output's flat index.
  template <class T>
  KOKKOS_INLINE_FUNCTION accumulator_t<T> forward(const T* plane, int width, int h_lo, int h_hi,
                                                  int w_lo, int w_hi, std::int64_t out) const {
    int best_at = h_lo * width + w_lo;
    accumulator_t<T> best = widen(plane[best_at]);
    // Selects rather than a branch: which tap wins is data, and a branch on
    // it is mispredicted about every other window.
    for (int h = h_lo; h < h_hi; ++h)
      for (int w = w_lo; w < w_hi; ++w) {
        const accumulator_t<T> v = widen(plane[h * width + w]);
        const bool better = v > best;
        best = better ? v : best;
        best_at = better ? h * width + w : best_at;
      }
    argmax(out) = best_at;
    return best;
  }
  using Position = typename Index::non_const_value_type;
  // Where the argmax position of output `first` goes (forward_2x2's `at`).
  KOKKOS_INLINE_FUNCTION Position* positions(std::int64_t first) const { return &argmax(first); }
  // Outputs of elements T that forward_2x2 stores at once on the host's
  // vector path, whole, also past a short row's end (0: it has no such
  // path for T); a row shorter than that would be stored twice over, so
  // pool_forward stages it.
  template <class T>
  static constexpr int whole_stores =
#ifdef TESSERA_HOST_VECTORS
      std::is_same<T, float>::value&& std::is_same<Position, int>::value&&
              impl::runs_on_host<typename Index::execution_space>
          ? impl::max_2x2_lanes
          : 0;
#else
      0;
#endif
  // The common 2 x 2 window at stride 2 without padding, for `n` outputs
  // from the input rows at plane positions top and top + width; the same
  // result as forward(), in a form that vectorises. `readable`: how many
  // values from plane on may be read (a host thread reads whole vectors,
  // past a short row's end while the tensor goes on); `writable`: how many
  // outputs from out on (and positions from at on) may be written, n or
  // more (a host thread writes whole vectors past a short row's end into
  // what it writes next).
  template <class T>
  KOKKOS_INLINE_FUNCTION void forward_2x2(const T* KOKKOS_RESTRICT plane, int top, int width,
                                          std::int64_t readable, T* KOKKOS_RESTRICT out,
                                          Position* KOKKOS_RESTRICT at, int n,
                                          std::int64_t writable) const {
    int o = 0;
#ifdef TESSERA_HOST_VECTORS
    if constexpr (whole_stores < T >> 0)
      for (; o < n && top + width + 2 * o + 2 * impl::max_2x2_lanes <= readable;
           o += impl::max_2x2_lanes)
        impl::max_2x2_windows(plane + top + 2 * o, top + 2 * o, width, out + o, at + o,
                              n - o < impl::max_2x2_lanes ? n - o : impl::max_2x2_lanes,
                              o + impl::max_2x2_lanes <= writable);
#else
    (void)readable;  // only the host's vector path reads and writes ahead
    (void)writable;
#endif
    for (; o < n; ++o) {
      const int p = top + 2 * o;
      accumulator_t<T> best = widen(plane[p]);
      int best_at = p;
      const int taps[3] = {p + 1, p + width, p + width + 1};
      for (int t = 0; t < 3; ++t) {
        const accumulator_t<T> v = widen(plane[taps[t]]);
        const bool better = v > best;
        best = better ? v : best;
        best_at = better ? taps[t] : best_at;
      }
      out[o] = narrow<T>(best);
      at[o] = best_at;
    }
  }
  // Whole planes of plane_size values as windows (global pooling): count
  // <= Block outputs from the planes at x, the first output `first`.
  template <int Block, class T>
  KOKKOS_INLINE_FUNCTION void forward_planes(const T* x, int plane_size, T* out, std::int64_t first,
                                             int count) const {
    for (int p = 0; p < count; ++p)
      out[p] = narrow<T>(
          forward(x + std::int64_t(p) * plane_size, plane_size, 0, 1, 0, plane_size, first + p));
  }
  // A whole plane of plane_size values as output `out`, by a team whose
  // team_sum lanes are `lanes`.
  template <class A>
  using team_value = impl::MaxAt<A>;
  template <class Member, class T>
  KOKKOS_INLINE_FUNCTION accumulator_t<T> forward_plane_team(const Member& member,
                                                             team_value<accumulator_t<T>>* lanes,
                                                             const T* plane,
                                                             std::int64_t plane_size,
                                                             std::int64_t out) const {
    using A = accumulator_t<T>;
    const team_value<A> best =
        impl::team_sum<team_value<A>>(member, lanes, plane_size, [&](const std::int64_t i) {
          return team_value<A>{widen(plane[i]), i};
        });
    Kokkos::single(Kokkos::PerTeam(member), [&] { argmax(out) = best.at; });
    return best.value;
  }
  // Adds window out's gradient g to the input plane's gradient.
  template <class T>
  KOKKOS_INLINE_FUNCTION void backward(accumulator_t<T> g, std::int64_t out, T* plane,
                                       int /*width*/, int /*h_lo*/, int /*h_hi*/, int /*w_lo*/,
                                       int /*w_hi*/) const {
    add_rounded(plane[argmax(out)], g);
  }
  // backward() of count <= Block whole-plane windows: the gradients g of
  // outputs first.. to the planes at dx.
  template <int Block, class T>
  KOKKOS_INLINE_FUNCTION void backward_planes(const T* g, T* dx, int plane_size, std::int64_t first,
                                              int count) const {
    for (int p = 0; p < count; ++p)
      add_rounded(dx[std::int64_t(p) * plane_size + argmax(first + p)], widen(g[p]));
  }
};

// count_include_pad = true: every window divides by kernel_h * kernel_w.
struct AvgWindow {
  float scale = 1;

  template <class T>
  KOKKOS_INLINE_FUNCTION accumulator_t<T> forward(const T* plane, int width, int h_lo, int h_hi,
                                                  int w_lo, int w_hi, std::int64_t /*out*/) const {
    accumulator_t<T> sum = 0;
    for (int h = h_lo; h < h_hi; ++h)
      for (int w = w_lo; w < w_hi; ++w) sum += widen(plane[h * width + w]);
    return sum * scale;
  }
  using Position = int;
  // An average keeps no positions.
  KOKKOS_INLINE_FUNCTION Position* positions(std::int64_t /*first*/) const { return nullptr; }
  template <class T>
  static constexpr int whole_stores = 0;
  template <class T>
  KOKKOS_INLINE_FUNCTION void forward_2x2(const T* KOKKOS_RESTRICT plane, int top, int width,
                                          std::int64_t /*readable*/, T* KOKKOS_RESTRICT out,
                                          Position* /*at*/, int n,
                                          std::int64_t /*writable*/) const {
    for (int o = 0; o < n; ++o) {
      const int p = top + 2 * o;
      accumulator_t<T> sum = 0;  // the order of forward(): row by row
      sum += widen(plane[p]);
      sum += widen(plane[p + 1]);
      sum += widen(plane[p + width]);
      sum += widen(plane[p + width + 1]);
      out[o] = narrow<T>(sum * scale);
    }
  }
  // The planes summed in lockstep, each in forward()'s order (one chain
  // of adds per plane is bound by the latency of each add). On the host,
  // float planes go native_lanes at a time, a plane a lane: native_lanes
  // values of each plane loaded as a vector and transposed in registers,
  // then the columns added in order (the same sums).
  template <int Block, class T>
  KOKKOS_INLINE_FUNCTION void forward_planes(const T* x, int plane_size, T* out,
                                             std::int64_t /*first*/, int count) const {
    int p0 = 0;
#ifdef TESSERA_HOST_VECTORS
    if constexpr (std::is_same<T, float>::value)
      for (; p0 + impl::native_lanes <= count; p0 += impl::native_lanes) {
        const float* const planes = x + std::int64_t(p0) * plane_size;
        impl::NativeLanes sum = impl::zero_lanes<impl::NativeLanes>();
        int i = 0;
        for (; i + impl::native_lanes <= plane_size; i += impl::native_lanes) {
          impl::NativeLanes v[impl::native_lanes];
          for (int p = 0; p < impl::native_lanes; ++p)
            v[p] = impl::load_lanes<impl::NativeLanes>(planes + std::int64_t(p) * plane_size + i);
          impl::transpose_lanes<impl::native_lanes / 2>(v);
          for (int c = 0; c < impl::native_lanes; ++c) sum += v[c];
        }
        for (; i < plane_size; ++i) {
          impl::NativeLanes column;
          for (int p = 0; p < impl::native_lanes; ++p)
            column[p] = planes[std::int64_t(p) * plane_size + i];
          sum += column;
        }
        impl::store_lanes(out + p0, sum * scale);
      }
#endif
    accumulator_t<T> sum[Block] = {};
    for (int i = 0; i < plane_size; ++i)
      for (int p = p0; p < count; ++p) sum[p] += widen(x[std::int64_t(p) * plane_size + i]);
    for (int p = p0; p < count; ++p) out[p] = narrow<T>(sum[p] * scale);
  }
  template <class A>
  using team_value = A;
  template <class Member, class T>
  KOKKOS_INLINE_FUNCTION accumulator_t<T> forward_plane_team(const Member& member,
                                                             accumulator_t<T>* lanes,
                                                             const T* plane,
                                                             std::int64_t plane_size,
                                                             std::int64_t /*out*/) const {
    return impl::team_sum<accumulator_t<T>>(member, lanes, plane_size,
                                            [&](const std::int64_t i) { return widen(plane[i]); }) *
           scale;
  }
  template <class T>
  KOKKOS_INLINE_FUNCTION void backward(accumulator_t<T> g, std::int64_t /*out*/, T* plane,
                                       int width, int h_lo, int h_hi, int w_lo, int w_hi) const {
    const accumulator_t<T> share = g * scale;
    if (w_lo == 0 && w_hi == width) {  // whole rows: one contiguous run
      int i = h_lo * width;
#ifdef TESSERA_HOST_VECTORS
      // Whole vectors without the loop peeling a vectoriser adds: a run is
      // short (16 values in a global pooling of 4 x 4 planes).
      if constexpr (std::is_same<T, float>::value) {
        typedef float lanes __attribute__((vector_size(8 * sizeof(float))));
        for (; i + 8 <= h_hi * width; i += 8) {
          lanes v;
          __builtin_memcpy(&v, plane + i, sizeof v);
          v += share;
          __builtin_memcpy(plane + i, &v, sizeof v);
        }
      }
#endif
      for (; i < h_hi * width; ++i) add_rounded(plane[i], share);
      return;
    }
    for (int h = h_lo; h < h_hi; ++h)
      for (int w = w_lo; w < w_hi; ++w) add_rounded(plane[h * width + w], share);
  }
  // backward() of count <= Block whole-plane windows, one plane after the
  // other: the same sums, without the window set-up of each plane.
  template <int Block, class T>
  KOKKOS_INLINE_FUNCTION void backward_planes(const T* g, T* dx, int plane_size,
                                              std::int64_t /*first*/, int count) const {
    for (int p = 0; p < count; ++p) {
      const accumulator_t<T> share = widen(g[p]) * scale;
      T* plane = dx + std::int64_t(p) * plane_size;
      for (int i = 0; i < plane_size; ++i) add_rounded(plane[i], share);
    }
  }
};

}  // namespace tessera::kernels
