// 2-D max and average pooling over NCHW tensors, on the sliding-window
// geometry of window.hpp. One forward driver visits every output window and
// one backward driver hands each window's gradient back to the input it
// covers; a small op (MaxWindow, AvgWindow) says what a window computes and
// what gradient it passes back. Backward gives each thread a part of the
// input no other thread's windows reach (a plane, or a band of rows when
// the windows do not overlap vertically), and that thread adds its windows
// in output order, so no atomics are needed and every input element
// receives its terms in the same order for any thread count.
//
// Global pooling (each window a whole plane) takes a block of planes per
// host thread; on a GPU, where a thread per plane would read strided, a
// team pools a plane through impl::team_sum (impl::pool_forward_planes_teams;
// a NaN wins a maximum there, the first one), and average pooling's
// backward runs flat over the input's elements.
//
// x, y and their gradients may be bf16 or fp16: a window computes in float
// and its result is rounded once; backward rounds an input gradient once
// per window that adds to it (once where windows do not overlap).
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/impl/lanes.hpp>
#include <tessera/kernels/impl/team.hpp>
#include <tessera/kernels/impl/team_max.hpp>
#include <tessera/kernels/window.hpp>

#include <cstdint>
#include <string>
#include <type_traits>

namespace tessera::kernels {

// Pooling of `planes` (batch x channels) independent images.
struct Pool2dGeometry {
  std::int64_t planes = 0;
  WindowAxis rows, cols;

  std::int64_t input_size() const { return planes * rows.in * cols.in; }
  std::int64_t output_size() const { return planes * rows.out * cols.out; }
};

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
  // The common 2 x 2 window at stride 2 without padding, for `n` outputs
  // from the input rows at plane positions top and top + width; the same
  // result as forward(), in a form that vectorises. `readable`: how many
  // values from plane on may be read (a host thread reads whole vectors,
  // past a short row's end while the tensor goes on); `writable`: how many
  // outputs from out on (and argmax from first on) may be written, n or
  // more (a host thread writes whole vectors past a short row's end into
  // the next row of its span, which it writes after).
  template <class T>
  KOKKOS_INLINE_FUNCTION void forward_2x2(const T* KOKKOS_RESTRICT plane, int top, int width,
                                          std::int64_t readable, T* KOKKOS_RESTRICT out,
                                          std::int64_t first, int n, std::int64_t writable) const {
    auto* KOKKOS_RESTRICT at = &argmax(first);
    int o = 0;
#ifdef TESSERA_HOST_VECTORS
    if constexpr (std::is_same<T, float>::value &&
                  std::is_same<typename Index::value_type, int>::value &&
                  impl::runs_on_host<typename Index::execution_space>)
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
  template <class T>
  KOKKOS_INLINE_FUNCTION void forward_2x2(const T* KOKKOS_RESTRICT plane, int top, int width,
                                          std::int64_t /*readable*/, T* KOKKOS_RESTRICT out,
                                          std::int64_t /*first*/, int n,
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

namespace impl {

template <class In, class Out>
void check_pool2d(const char* fn, const Pool2dGeometry& g, const In& in, const Out& out) {
  TESSERA_REQUIRE(g.rows.out > 0 && g.cols.out > 0 && 2 * g.rows.pad <= g.rows.kernel &&
                      2 * g.cols.pad <= g.cols.kernel,
                  fn << ": input " << g.rows.in << " x " << g.cols.in << ", kernel "
                     << g.rows.kernel << " x " << g.cols.kernel << ", stride " << g.rows.stride
                     << " x " << g.cols.stride << ", padding " << g.rows.pad << " x " << g.cols.pad
                     << ": expected at least one window and padding at most half the kernel");
  TESSERA_REQUIRE(static_cast<std::int64_t>(in.size()) == g.input_size() &&
                      static_cast<std::int64_t>(out.size()) == g.output_size(),
                  fn << ": input has " << in.size() << " elements, output " << out.size()
                     << "; expected " << g.planes << " planes of " << g.rows.in << " x "
                     << g.cols.in << " -> " << g.rows.out << " x " << g.cols.out);
}

// Host tasks of at least this many outputs in pooling's backward: short
// rows (7 outputs after a second 2 x 2 pooling) cost more to set up than
// to compute, so a host thread takes a span of them.
constexpr std::int64_t pool_outputs_per_task = 256;

// Planes a host thread pools at once when each window is a whole plane.
constexpr int pool_planes_per_task = 16;

// Whether each window is a whole plane (global pooling).
inline bool whole_planes(const Pool2dGeometry& g) {
  return g.rows.out == 1 && g.cols.out == 1 && g.rows.pad == 0 && g.cols.pad == 0 &&
         g.rows.kernel == g.rows.in && g.cols.kernel == g.cols.in;
}

// Bytes of a maximum's argmax over `outputs` windows (an average keeps none).
template <class Index>
double argmax_bytes(const MaxWindow<Index>&, std::int64_t outputs) {
  return bytes_of<typename Index::non_const_value_type>(outputs);
}
inline double argmax_bytes(const AvgWindow&, std::int64_t) { return 0; }

// Work of pooling's forward (every schedule): the input the windows cover
// read, y and a maximum's argmax written; an average adds each window's
// taps inside the input and scales the sum, a maximum only compares.
template <class X, class Y, class Op>
Work pool_forward_work(const Pool2dGeometry& g, const Op& op, const char* narrow = nullptr) {
  const std::int64_t outputs = g.output_size();
  const double flops =
      std::is_same<Op, AvgWindow>::value
          ? double(g.planes) * double(g.rows.taps()) * double(g.cols.taps()) + double(outputs)
          : 0.0;
  return Work{
      bytes_of<typename X::non_const_value_type>(g.planes * g.rows.covered() * g.cols.covered()) +
          bytes_of<typename Y::non_const_value_type>(outputs) + argmax_bytes(op, outputs),
      flops, narrow};
}

// Of pooling's backward (every schedule but average pooling's flat one on a
// GPU): dy read; a maximum reads its argmax and adds each window's gradient
// to one input gradient (read and written, counted once a window), an
// average scales each window's gradient once and adds it to every tap
// inside the input (each covered input gradient read and written). Without
// `add`, every input gradient is written once instead (zeroed in cache,
// then added to).
template <class DY, class DX, class Op>
Work pool_backward_work(const Pool2dGeometry& g, const Op& op, bool add,
                        const char* narrow = nullptr) {
  const std::int64_t outputs = g.output_size();
  const bool average = std::is_same<Op, AvgWindow>::value;
  const std::int64_t touched = average ? g.planes * g.rows.covered() * g.cols.covered() : outputs;
  const double flops =
      average ? double(g.planes) * double(g.rows.taps()) * double(g.cols.taps()) + double(outputs)
              : double(outputs);
  const double dx_bytes = add ? 2 * bytes_of<typename DX::non_const_value_type>(touched)
                              : bytes_of<typename DX::non_const_value_type>(g.input_size());
  return Work{
      bytes_of<typename DY::non_const_value_type>(outputs) + argmax_bytes(op, outputs) + dx_bytes,
      flops, narrow};
}

// Why a host thread takes a block of planes of global pooling.
constexpr const char* pool_planes_narrow = "host schedule: a block of 16 planes per task";

// Planes a task of global pooling takes: a plane of 16 values is less work
// than a host task's set-up; a GPU thread takes one.
template <class ExecSpace>
constexpr int plane_block = runs_on_host<ExecSpace> ? pool_planes_per_task : 1;

// body(p0, count) over blocks of `count` <= plane_block planes from plane p0 on.
// work: the whole sweep's.
template <class ExecSpace, class Body>
void for_each_plane_block(const ExecSpace& exec, const char* fn, std::int64_t planes,
                          const Work& work, const Body& body) {
  constexpr int block = plane_block<ExecSpace>;
  parallel_for(
      fn, Kokkos::RangePolicy<ExecSpace>(exec, 0, (planes + block - 1) / block), work,
      KOKKOS_LAMBDA(const std::int64_t b) {
        const std::int64_t p0 = b * block;
        body(p0, static_cast<int>(planes - p0 < block ? planes - p0 : block));
      });
}

// Global pooling on a GPU: a team per plane (work items: planes x team
// size; 16384 teams for the ResNet deck's 128 x 128 planes of 4 x 4).
template <class ExecSpace, class Op, class X, class Y>
void pool_forward_planes_teams(const ExecSpace& exec, const char* fn, const Pool2dGeometry& g,
                               const Op& op, const X& x, const Y& y, TeamShape shape = {}) {
  using T = typename Y::non_const_value_type;
  using V = typename Op::template team_value<accumulator_t<T>>;
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const std::int64_t plane_size = g.rows.in * g.cols.in;
  parallel_for(
      std::string(fn) + "_teams", team_policy(exec, g.planes, shape, team_sum_bytes<V>()),
      pool_forward_work<X, Y>(g, op), KOKKOS_LAMBDA(const Member& member) {
        const std::int64_t p = member.league_rank();
        const auto v = op.forward_plane_team(member, team_lanes_scratch<V>(member),
                                             x.data() + p * plane_size, plane_size, p);
        Kokkos::single(Kokkos::PerTeam(member), [&] { y(p) = narrow<T>(v); });
      });
}

// y(o) = op.forward(window o clipped to the input); one thread per output
// row. The 2 x 2 window at stride 2 without padding (the usual pooling)
// takes op.forward_2x2, whose results are the same, a span of output rows
// per host thread (the max's 8-window vectors then stored whole, also
// across the end of a short row); windows that are whole
// planes (global pooling) op.forward_planes, a block of planes per host
// thread, or on a GPU pool_forward_planes_teams.
template <class ExecSpace, class Op, class X, class Y>
void pool_forward(const ExecSpace& exec, const char* fn, const Pool2dGeometry& g, const Op& op,
                  const X& x, const Y& y) {
  check_pool2d(fn, g, x, y);
  const WindowAxis rows = g.rows, cols = g.cols;
  if (whole_planes(g) && !runs_on_host<ExecSpace>) {
    pool_forward_planes_teams(exec, fn, g, op, x, y);
    return;
  }
  if (whole_planes(g)) {
    const int plane_size = rows.in * cols.in;
    for_each_plane_block(
        exec, fn, g.planes, pool_forward_work<X, Y>(g, op, pool_planes_narrow),
        KOKKOS_LAMBDA(const std::int64_t p0, const int count) {
          op.template forward_planes<plane_block<ExecSpace>>(x.data() + p0 * plane_size, plane_size,
                                                             y.data() + p0, p0, count);
        });
    return;
  }
  const bool two_by_two = rows.kernel == 2 && cols.kernel == 2 && rows.stride == 2 &&
                          cols.stride == 2 && rows.pad == 0 && cols.pad == 0;
  const std::int64_t input_size = g.input_size();
  if constexpr (runs_on_host<ExecSpace>) {
    if (two_by_two) {
      // A span of output rows a task, stepped through without dividing: a
      // short row's last vector is stored whole over the start of the next
      // row, which the task then writes (the span's last row exactly).
      const std::int64_t plane_size = rows.in * cols.in;
      for_each_span(
          exec, fn, g.planes * rows.out,
          pool_forward_work<X, Y>(g, op, "host schedule: a span of output rows per task"),
          KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
            std::int64_t plane_at = (begin / rows.out) * plane_size;
            int ho = static_cast<int>(begin % rows.out);
            for (std::int64_t r = begin; r < end; ++r) {
              op.forward_2x2(x.data() + plane_at, 2 * ho * cols.in, cols.in, input_size - plane_at,
                             y.data() + r * cols.out, r * cols.out, cols.out, (end - r) * cols.out);
              if (++ho == rows.out) {
                ho = 0;
                plane_at += plane_size;
              }
            }
          },
          (host_span + cols.out - 1) / cols.out);
      return;
    }
  }
  parallel_for(
      fn, Kokkos::RangePolicy<ExecSpace>(exec, 0, g.planes * rows.out),
      pool_forward_work<X, Y>(g, op, "one thread per output row"),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const int ho = static_cast<int>(r % rows.out);
        const std::int64_t plane_at = (r / rows.out) * rows.in * cols.in;
        const auto* plane = x.data() + plane_at;
        auto* out = y.data() + r * cols.out;
        if (two_by_two) {
          op.forward_2x2(plane, 2 * ho * cols.in, cols.in, input_size - plane_at, out, r * cols.out,
                         cols.out, cols.out);
          return;
        }
        int h_lo, h_hi;
        rows.clipped(ho, h_lo, h_hi);
        for (int wo = 0; wo < cols.out; ++wo) {
          int w_lo, w_hi;
          cols.clipped(wo, w_lo, w_hi);
          out[wo] = narrow<typename Y::non_const_value_type>(
              op.forward(plane, cols.in, h_lo, h_hi, w_lo, w_hi, r * cols.out + wo));
        }
      });
}

// dx += each window's gradient (op.backward) over the input it covers.
// Whole-plane windows (global pooling) go a block of planes to a task
// (op.backward_planes; on a GPU, average pooling's one element to a thread). Windows that do not
// overlap vertically (stride >= kernel) reach disjoint bands of input rows, so each output row is a
// task of its own; otherwise each plane is. Within a task the windows go in output order; a host
// thread takes a span of consecutive tasks. Without `add` a span first
// zeroes the input gradients its tasks own (their planes, or their bands of
// rows: the rows a task's windows reach and those before the next task's),
// so dx is written whole, the bits of adding into a zeroed dx.
template <class ExecSpace, class Op, class DY, class DX>
void pool_backward(const ExecSpace& exec, const char* fn, const Pool2dGeometry& g, const Op& op,
                   const DY& dy, const DX& dx, bool add) {
  check_pool2d(fn, g, dx, dy);
  using T = typename DX::non_const_value_type;
  const WindowAxis rows = g.rows, cols = g.cols;
  if constexpr (!runs_on_host<ExecSpace> && std::is_same<Op, AvgWindow>::value) {
    if (whole_planes(g)) {  // on a GPU a thread per input element: the same sums
      const std::int64_t plane_size = rows.in * cols.in;
      // dy read, dx read (when added to) and written; a product and an add an element.
      const std::int64_t n = g.input_size();
      const Work work{bytes_of<typename DY::non_const_value_type>(g.output_size()) +
                          (add ? 2 : 1) * bytes_of<T>(n),
                      2.0 * double(n)};
      for_each_span(
          exec, fn, n, work, KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
            for (std::int64_t i = begin; i < end; ++i)
              put_rounded(dx.data()[i], widen(dy.data()[i / plane_size]) * op.scale, add);
          });
      return;
    }
  }
  if (whole_planes(g)) {
    const int plane_size = rows.in * cols.in;
    for_each_plane_block(
        exec, fn, g.planes,
        pool_backward_work<DY, DX>(g, op, add,
                                   runs_on_host<ExecSpace> ? pool_planes_narrow : nullptr),
        KOKKOS_LAMBDA(const std::int64_t p0, const int count) {
          if (!add) zero_elements(dx.data() + p0 * plane_size, std::int64_t(count) * plane_size);
          op.template backward_planes<plane_block<ExecSpace>>(
              dy.data() + p0, dx.data() + p0 * plane_size, plane_size, p0, count);
        });
    return;
  }
  const int rows_per_task = rows.stride >= rows.kernel ? 1 : rows.out;
  const int tasks_per_plane = rows.out / rows_per_task;
  const std::int64_t outputs_per_task = std::int64_t(rows_per_task) * cols.out;
  const std::int64_t span =
      outputs_per_task < pool_outputs_per_task ? pool_outputs_per_task / outputs_per_task : 1;
  for_each_span(
      exec, fn, g.planes * tasks_per_plane,
      pool_backward_work<DY, DX>(g, op, add,
                                 "one thread per band of input rows: each input gradient's terms "
                                 "are added by one thread in output order, without atomics"),
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        // Consecutive tasks own one run of dx (owned rows, plane after plane).
        const auto owned = [&](std::int64_t t, bool last) {
          int lo, hi;
          rows.owned(static_cast<int>(t % tasks_per_plane) * rows_per_task, rows_per_task, lo, hi);
          return (t / tasks_per_plane * rows.in + (last ? hi : lo)) * std::int64_t(cols.in);
        };
        if (!add) {
          const std::int64_t from = owned(begin, false);
          zero_elements<T>(dx.data() + from, owned(end - 1, true) - from);
        }
        for (std::int64_t t = begin; t < end; ++t) {
          const std::int64_t plane = t / tasks_per_plane;
          const int first = static_cast<int>(t % tasks_per_plane) * rows_per_task;
          auto* grad = dx.data() + plane * rows.in * cols.in;
          const auto* g_out = dy.data() + plane * rows.out * cols.out;
          for (int ho = first; ho < first + rows_per_task; ++ho) {
            int h_lo, h_hi;
            rows.clipped(ho, h_lo, h_hi);
            for (int wo = 0; wo < cols.out; ++wo) {
              int w_lo, w_hi;
              cols.clipped(wo, w_lo, w_hi);
              const std::int64_t o = std::int64_t(ho) * cols.out + wo;
              op.backward(widen(g_out[o]), plane * rows.out * cols.out + o, grad, cols.in, h_lo,
                          h_hi, w_lo, w_hi);
            }
          }
        }
      },
      span);
}

}  // namespace impl

// y = max over each window; argmax: one int per output, kept for backward.
template <class ExecSpace, class X, class Y, class Index>
void max_pool2d_forward(const ExecSpace& exec, const Pool2dGeometry& g, const X& x, const Y& y,
                        const Index& argmax) {
  ScopedRegion region("tessera::kernels::max_pool2d_forward");
  TESSERA_REQUIRE(static_cast<std::int64_t>(argmax.size()) >= g.output_size(),
                  "tessera::kernels::max_pool2d_forward: argmax holds "
                      << argmax.size() << " entries, the output " << g.output_size());
  impl::pool_forward(exec, "tessera::kernels::max_pool2d_forward", g, MaxWindow<Index>{argmax}, x,
                     y);
}

// dx += dy routed to each window's argmax (add false: dx written whole,
// as if zeroed first).
template <class ExecSpace, class Index, class DY, class DX>
void max_pool2d_backward(const ExecSpace& exec, const Pool2dGeometry& g, const Index& argmax,
                         const DY& dy, const DX& dx, bool add = true) {
  ScopedRegion region("tessera::kernels::max_pool2d_backward");
  TESSERA_REQUIRE(static_cast<std::int64_t>(argmax.size()) >= g.output_size(),
                  "tessera::kernels::max_pool2d_backward: argmax holds "
                      << argmax.size() << " entries, the output " << g.output_size());
  impl::pool_backward(exec, "tessera::kernels::max_pool2d_backward", g, MaxWindow<Index>{argmax},
                      dy, dx, add);
}

template <class ExecSpace, class X, class Y>
void avg_pool2d_forward(const ExecSpace& exec, const Pool2dGeometry& g, const X& x, const Y& y) {
  ScopedRegion region("tessera::kernels::avg_pool2d_forward");
  impl::pool_forward(exec, "tessera::kernels::avg_pool2d_forward", g,
                     AvgWindow{1.0f / (g.rows.kernel * g.cols.kernel)}, x, y);
}

// dx += dy / (kernel_h * kernel_w) over each window (add false: dx
// written whole, as if zeroed first).
template <class ExecSpace, class DY, class DX>
void avg_pool2d_backward(const ExecSpace& exec, const Pool2dGeometry& g, const DY& dy, const DX& dx,
                         bool add = true) {
  ScopedRegion region("tessera::kernels::avg_pool2d_backward");
  impl::pool_backward(exec, "tessera::kernels::avg_pool2d_backward", g,
                      AvgWindow{1.0f / (g.rows.kernel * g.cols.kernel)}, dy, dx, add);
}

template <class X, class Y, class Index>
void max_pool2d_forward(const Pool2dGeometry& g, const X& x, const Y& y, const Index& argmax) {
  max_pool2d_forward(typename Y::execution_space(), g, x, y, argmax);
}
template <class Index, class DY, class DX>
void max_pool2d_backward(const Pool2dGeometry& g, const Index& argmax, const DY& dy, const DX& dx) {
  max_pool2d_backward(typename DX::execution_space(), g, argmax, dy, dx);
}
template <class X, class Y>
void avg_pool2d_forward(const Pool2dGeometry& g, const X& x, const Y& y) {
  avg_pool2d_forward(typename Y::execution_space(), g, x, y);
}
template <class DY, class DX>
void avg_pool2d_backward(const Pool2dGeometry& g, const DY& dy, const DX& dx) {
  avg_pool2d_backward(typename DX::execution_space(), g, dy, dx);
}

}  // namespace tessera::kernels
