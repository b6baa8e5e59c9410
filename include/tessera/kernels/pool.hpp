// 2-D max and average pooling over NCHW tensors, on the sliding-window
// geometry of conv.hpp. One forward driver visits every output window and
// one backward driver gathers, for every input row, the windows that cover
// it; a small op (MaxWindow, AvgWindow) says what a window computes and what
// gradient it passes back. Gathering keeps backward free of atomics and
// independent of the thread count.
#pragma once

#include <tessera/kernels/conv.hpp>

#include <cstdint>

namespace tessera::kernels {

// Pooling of `planes` (batch x channels) independent images.
struct Pool2dGeometry {
  std::int64_t planes = 0;
  WindowAxis rows, cols;

  std::int64_t input_size() const { return planes * rows.in * cols.in; }
  std::int64_t output_size() const { return planes * rows.out * cols.out; }
};

// PyTorch semantics: padding takes no part in the maximum; ties go to the
// first maximum in row-major window order (unlike PyTorch, a NaN wins only
// when it comes first). argmax(o) records the position (h * W + w) within
// the plane for backward.
template <class Index>
struct MaxWindow {
  Index argmax;

  template <class X>
  KOKKOS_INLINE_FUNCTION float forward(const X& x, std::int64_t plane, int width, int h_lo,
                                       int h_hi, int w_lo, int w_hi, std::int64_t out) const {
    int best_at = h_lo * width + w_lo;
    float best = x(plane + best_at);
    for (int h = h_lo; h < h_hi; ++h)
      for (int w = w_lo; w < w_hi; ++w) {
        const float v = x(plane + h * width + w);
        if (v > best) {
          best = v;
          best_at = h * width + w;
        }
      }
    argmax(out) = best_at;
    return best;
  }
  // Adds window out's gradient to the part of it in one input row: the row
  // of `width` positions starting at plane position row_start.
  template <class DY, class T>
  KOKKOS_INLINE_FUNCTION void backward(const DY& dy, std::int64_t out, T* line, int row_start,
                                       int width, int /*w_lo*/, int /*w_hi*/) const {
    const int w = argmax(out) - row_start;
    if (w >= 0 && w < width) line[w] += dy(out);
  }
};

// count_include_pad = true: every window divides by kernel_h * kernel_w.
struct AvgWindow {
  float scale = 1;

  template <class X>
  KOKKOS_INLINE_FUNCTION float forward(const X& x, std::int64_t plane, int width, int h_lo,
                                       int h_hi, int w_lo, int w_hi, std::int64_t /*out*/) const {
    float sum = 0;
    for (int h = h_lo; h < h_hi; ++h)
      for (int w = w_lo; w < w_hi; ++w) sum += x(plane + h * width + w);
    return sum * scale;
  }
  template <class DY, class T>
  KOKKOS_INLINE_FUNCTION void backward(const DY& dy, std::int64_t out, T* line, int /*row_start*/,
                                       int /*width*/, int w_lo, int w_hi) const {
    const T share = dy(out) * scale;
    for (int w = w_lo; w < w_hi; ++w) line[w] += share;
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

// y(o) = op.forward(window o clipped to the input); one thread per output row.
template <class ExecSpace, class Op, class X, class Y>
void pool_forward(const ExecSpace& exec, const char* fn, const Pool2dGeometry& g, const Op& op,
                  const X& x, const Y& y) {
  check_pool2d(fn, g, x, y);
  const WindowAxis rows = g.rows, cols = g.cols;
  Kokkos::parallel_for(
      fn, Kokkos::RangePolicy<ExecSpace>(exec, 0, g.planes * rows.out),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const int ho = static_cast<int>(r % rows.out);
        const std::int64_t plane = (r / rows.out) * rows.in * cols.in;
        int h_lo, h_hi;
        rows.clipped(ho, h_lo, h_hi);
        for (int wo = 0; wo < cols.out; ++wo) {
          int w_lo, w_hi;
          cols.clipped(wo, w_lo, w_hi);
          const std::int64_t out = r * cols.out + wo;
          y(out) = op.forward(x, plane, cols.in, h_lo, h_hi, w_lo, w_hi, out);
        }
      });
}

// dx += each window's gradient (op.backward) over the input it covers. One
// thread owns each input row and walks the windows that cross it in a fixed
// order, so no two threads write one element.
template <class ExecSpace, class Op, class DY, class DX>
void pool_backward(const ExecSpace& exec, const char* fn, const Pool2dGeometry& g, const Op& op,
                   const DY& dy, const DX& dx) {
  check_pool2d(fn, g, dx, dy);
  const WindowAxis rows = g.rows, cols = g.cols;
  Kokkos::parallel_for(
      fn, Kokkos::RangePolicy<ExecSpace>(exec, 0, g.planes * rows.in),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const int h = static_cast<int>(r % rows.in);
        const std::int64_t plane = r / rows.in;
        auto* line = &dx(0) + r * cols.in;
        int ho_lo, ho_hi;
        rows.covering(h, ho_lo, ho_hi);
        for (int ho = ho_lo; ho < ho_hi; ++ho) {
          const std::int64_t out_row = (plane * rows.out + ho) * cols.out;
          for (int wo = 0; wo < cols.out; ++wo) {
            int w_lo, w_hi;
            cols.clipped(wo, w_lo, w_hi);
            op.backward(dy, out_row + wo, line, h * cols.in, cols.in, w_lo, w_hi);
          }
        }
      });
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

// dx += dy routed to each window's argmax.
template <class ExecSpace, class Index, class DY, class DX>
void max_pool2d_backward(const ExecSpace& exec, const Pool2dGeometry& g, const Index& argmax,
                         const DY& dy, const DX& dx) {
  ScopedRegion region("tessera::kernels::max_pool2d_backward");
  TESSERA_REQUIRE(static_cast<std::int64_t>(argmax.size()) >= g.output_size(),
                  "tessera::kernels::max_pool2d_backward: argmax holds "
                      << argmax.size() << " entries, the output " << g.output_size());
  impl::pool_backward(exec, "tessera::kernels::max_pool2d_backward", g, MaxWindow<Index>{argmax},
                      dy, dx);
}

template <class ExecSpace, class X, class Y>
void avg_pool2d_forward(const ExecSpace& exec, const Pool2dGeometry& g, const X& x, const Y& y) {
  ScopedRegion region("tessera::kernels::avg_pool2d_forward");
  impl::pool_forward(exec, "tessera::kernels::avg_pool2d_forward", g,
                     AvgWindow{1.0f / (g.rows.kernel * g.cols.kernel)}, x, y);
}

// dx += dy / (kernel_h * kernel_w) over each window.
template <class ExecSpace, class DY, class DX>
void avg_pool2d_backward(const ExecSpace& exec, const Pool2dGeometry& g, const DY& dy,
                         const DX& dx) {
  ScopedRegion region("tessera::kernels::avg_pool2d_backward");
  impl::pool_backward(exec, "tessera::kernels::avg_pool2d_backward", g,
                      AvgWindow{1.0f / (g.rows.kernel * g.cols.kernel)}, dy, dx);
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
