// 2-D max and average pooling over NCHW tensors, on the sliding-window
// geometry of window.hpp. One forward driver visits every output window and
// one backward driver hands each window's gradient back to the input it
// covers; a small op (MaxWindow, AvgWindow: pool_windows.hpp) says what a
// window computes and what gradient it passes back. Backward gives each
// thread a part of the input no other thread's windows reach (a plane, or
// a band of rows when the windows do not overlap vertically), and that
// thread adds its windows in output order, so no atomics are needed and
// every input element receives its terms in the same order for any thread
// count.
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
#include <tessera/kernels/impl/team.hpp>
#include <tessera/kernels/pool_windows.hpp>
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

// Outputs a host task of max pooling's forward holds on its stack before
// copying them out, for rows shorter than a vector (7 outputs after a
// second 2 x 2 pooling): 512 bytes of values and 512 of positions, a copy
// long enough to stream, short enough to stay in L1.
constexpr int pool_stage = 128;

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

// body(r, plane_at, top) for the unpadded 2 x 2 pooling's output rows
// [begin, end) of planes of `rows_out` rows: row r's plane starts at input
// position plane_at, its windows' top row at top within the plane. Steps
// from row to row without dividing.
template <class Body>
KOKKOS_INLINE_FUNCTION void pool_rows_2x2(std::int64_t rows_out, int width, std::int64_t plane_size,
                                          std::int64_t begin, std::int64_t end, const Body& body) {
  std::int64_t plane_at = (begin / rows_out) * plane_size;
  int ho = static_cast<int>(begin % rows_out);
  for (std::int64_t r = begin; r < end; ++r) {
    body(r, plane_at, 2 * ho * width);
    if (++ho == rows_out) {
      ho = 0;
      plane_at += plane_size;
    }
  }
}

// pool_forward's unpadded 2 x 2 windows at stride 2 on the host: a span
// of output rows a task, stepped through without dividing. A short row's
// last vector is stored whole over the start of the next row, which the
// task then writes (the span's last row exactly). Rows shorter than such
// a vector would each be stored twice over, in stores across cache lines:
// they are computed into a stage of pool_stage outputs on the task's stack
// and copied out from there.
template <class ExecSpace, class Op, class X, class Y>
void pool_forward_2x2_spans(const ExecSpace& exec, const char* fn, const Pool2dGeometry& g,
                            const Op& op, const X& x, const Y& y) {
  const WindowAxis rows = g.rows, cols = g.cols;
  const std::int64_t input_size = g.input_size();
  using T = typename Y::non_const_value_type;
  using Position = typename Op::Position;
  constexpr int slack = Op::template whole_stores<T>;
  const std::int64_t plane_size = rows.in * cols.in, rows_out = rows.out;
  const int width = cols.in, n = cols.out;
  const Work work = pool_forward_work<X, Y>(g, op, "host schedule: a span of output rows per task");
  const std::int64_t span = (host_span + n - 1) / n;
  if (n < slack && n <= pool_stage) {
    for_each_span(
        exec, fn, g.planes * rows_out, work,
        KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
          alignas(64) T stage[pool_stage + slack];
          alignas(64) Position stage_at[pool_stage + slack];
          std::int64_t copied = begin * n;  // the outputs before it are in y
          int held = 0;                     // outputs in the stage
          const auto copy_out = [&] {
            for (int i = 0; i < held; ++i) y.data()[copied + i] = stage[i];
            if (Position* at = held > 0 ? op.positions(copied) : nullptr)
              for (int i = 0; i < held; ++i) at[i] = stage_at[i];
            copied += held;
            held = 0;
          };
          pool_rows_2x2(rows_out, width, plane_size, begin, end,
                        [&](std::int64_t, std::int64_t plane_at, int top) {
                          if (held + n > pool_stage) copy_out();
                          op.forward_2x2(x.data() + plane_at, top, width, input_size - plane_at,
                                         stage + held, stage_at + held, n,
                                         pool_stage + slack - held);
                          held += n;
                        });
          copy_out();
        },
        span);
    return;
  }
  for_each_span(
      exec, fn, g.planes * rows_out, work,
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        pool_rows_2x2(rows_out, width, plane_size, begin, end,
                      [&](std::int64_t r, std::int64_t plane_at, int top) {
                        op.forward_2x2(x.data() + plane_at, top, width, input_size - plane_at,
                                       y.data() + r * n, op.positions(r * n), n, (end - r) * n);
                      });
      },
      span);
}

// y(o) = op.forward(window o clipped to the input); one thread per output
// row. The 2 x 2 window at stride 2 without padding (the usual pooling)
// takes op.forward_2x2, whose results are the same, a span of output rows
// per host thread (the max's 8-window vectors then stored whole, also
// across the end of a short row, and rows shorter than a vector through a
// stage on the thread's stack); windows that are whole
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
      pool_forward_2x2_spans(exec, fn, g, op, x, y);
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
          op.forward_2x2(plane, 2 * ho * cols.in, cols.in, input_size - plane_at, out,
                         op.positions(r * cols.out), cols.out, cols.out);
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
