// 2-D convolution kernels over NCHW tensors, and the sliding-window geometry
// that convolution and pooling share. Forward lowers a block of samples to
// columns (im2col) and multiplies by the weights with KokkosBlas::gemm, one
// product per block rather than per sample; backward multiplies again and
// folds the columns back in gather form (one thread owns each input plane and
// collects every tap that read it), so no atomics are needed and results do
// not depend on the thread count. Backward accumulates into dx, dW and db.
// An empty bias (extent 0) means a convolution without one: forward adds
// nothing and backward computes no bias gradient.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/reduce.hpp>

#include <cstdint>

namespace tessera::kernels {

// One spatial axis of a sliding window: `in` positions, windows of `kernel`
// taps placed every `stride` positions over the input padded by `pad` on
// both sides. `out` is 0 when not even one window fits.
struct WindowAxis {
  int in = 0, kernel = 1, stride = 1, pad = 0, out = 0;

  WindowAxis() = default;
  WindowAxis(std::int64_t in_, std::int64_t kernel_, std::int64_t stride_, std::int64_t pad_)
      : in(static_cast<int>(in_)),
        kernel(static_cast<int>(kernel_)),
        stride(static_cast<int>(stride_)),
        pad(static_cast<int>(pad_)),
        out(in_ + 2 * pad_ >= kernel_ && stride_ > 0
                ? static_cast<int>((in_ + 2 * pad_ - kernel_) / stride_ + 1)
                : 0) {}

  // Input position of tap 0 of window o (negative inside the padding).
  KOKKOS_INLINE_FUNCTION int start(int o) const { return o * stride - pad; }

  // Input positions [lo, hi) of window o, without the padding.
  KOKKOS_INLINE_FUNCTION void clipped(int o, int& lo, int& hi) const {
    lo = start(o) < 0 ? 0 : start(o);
    hi = start(o) + kernel > in ? in : start(o) + kernel;
  }

  // Windows [lo, hi) that contain input position i.
  KOKKOS_INLINE_FUNCTION void covering(int i, int& lo, int& hi) const {
    const int first = i + pad - kernel + 1;  // o * stride >= first
    lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    hi = (i + pad) / stride + 1;
    if (hi > out) hi = out;
  }

  // Windows [lo, hi) whose tap `tap` lands inside the input (not padding).
  KOKKOS_INLINE_FUNCTION void inside(int tap, int& lo, int& hi) const {
    const int first = pad - tap;  // o * stride >= first
    lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    const int last = in - 1 + pad - tap;  // o * stride <= last
    hi = last < 0 ? 0 : last / stride + 1;
    if (hi > out) hi = out;
    if (hi < lo) hi = lo;
  }
};

// A convolution of `batch` samples: [batch, in_channels, rows.in, cols.in]
// -> [batch, out_channels, rows.out, cols.out] with weights
// [out_channels, in_channels, rows.kernel, cols.kernel].
struct Conv2dGeometry {
  std::int64_t batch = 0, in_channels = 0, out_channels = 0;
  WindowAxis rows, cols;

  // Rows of the column matrix: one per (input channel, kernel row, kernel column).
  std::int64_t patch() const { return in_channels * rows.kernel * cols.kernel; }
  // Output positions per sample and channel.
  std::int64_t positions() const { return std::int64_t(rows.out) * cols.out; }
  std::int64_t input_size() const { return batch * in_channels * rows.in * cols.in; }
  std::int64_t output_size() const { return batch * out_channels * positions(); }
  // Scratch floats one sample needs (columns, plus the output block).
  std::int64_t scratch_per_sample() const { return (patch() + out_channels) * positions(); }
};

// Samples per block so that the scratch stays within max_bytes (at least one).
inline std::int64_t conv2d_block_samples(const Conv2dGeometry& g, std::int64_t max_bytes) {
  const std::int64_t per_sample = g.scratch_per_sample() * std::int64_t(sizeof(float));
  std::int64_t block = per_sample > 0 ? max_bytes / per_sample : g.batch;
  if (block > g.batch) block = g.batch;
  return block < 1 ? 1 : block;
}

namespace impl {

template <class T, class Space>
using ColumnMatrix =
    Kokkos::View<T**, Kokkos::LayoutRight, Space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Copies and sums along one row; restrict parameters let the compiler
// vectorise the short rows of a convolution without checking for overlap.
template <class T>
KOKKOS_INLINE_FUNCTION void copy_row(T* KOKKOS_RESTRICT out, const T* KOKKOS_RESTRICT in, int n,
                                     int stride) {
  if (stride == 1)
    for (int i = 0; i < n; ++i) out[i] = in[i];
  else
    for (int i = 0; i < n; ++i) out[i] = in[i * stride];
}
template <class T>
KOKKOS_INLINE_FUNCTION void add_row(T* KOKKOS_RESTRICT out, const T* KOKKOS_RESTRICT in, int n,
                                    int stride) {
  if (stride == 1)
    for (int i = 0; i < n; ++i) out[i] += in[i];
  else
    for (int i = 0; i < n; ++i) out[i * stride] += in[i];
}
template <class T>
KOKKOS_INLINE_FUNCTION void zero_row(T* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = 0;
}

// Columns of samples [first, first + count): col(k, n * P + p) with k =
// (c * kh + ki) * kw + kj, so one gemm covers the whole block. One thread
// per input plane (n, c) writes that plane's kh * kw rows of P entries.
template <class ExecSpace, class X, class Col>
void im2col(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, std::int64_t first,
            std::int64_t count, const Col& col) {
  const WindowAxis rows = g.rows, cols = g.cols;
  const std::int64_t channels = g.in_channels, positions = g.positions();
  const std::int64_t plane = std::int64_t(rows.in) * cols.in, ld = col.stride(0);
  Kokkos::parallel_for(
      "tessera::kernels::im2col", Kokkos::RangePolicy<ExecSpace>(exec, 0, count * channels),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t n = r / channels, c = r % channels;
        const auto* in = x.data() + (first * channels + r) * plane;
        auto* block = col.data() + n * positions;
        for (int ki = 0; ki < rows.kernel; ++ki) {
          int ho_lo, ho_hi;
          rows.inside(ki, ho_lo, ho_hi);
          for (int kj = 0; kj < cols.kernel; ++kj) {
            auto* out = block + ((c * rows.kernel + ki) * cols.kernel + kj) * ld;
            int wo_lo, wo_hi;
            cols.inside(kj, wo_lo, wo_hi);
            // Input column of output wo: wo * stride + (kj - pad).
            const int shift = kj - cols.pad;
            zero_row(out, ho_lo * cols.out);
            for (int ho = ho_lo; ho < ho_hi; ++ho) {
              auto* line = out + std::int64_t(ho) * cols.out;
              const auto* source = in + std::int64_t(rows.start(ho) + ki) * cols.in;
              zero_row(line, wo_lo);
              copy_row(line + wo_lo, source + wo_lo * cols.stride + shift, wo_hi - wo_lo,
                       cols.stride);
              zero_row(line + wo_hi, cols.out - wo_hi);
            }
            zero_row(out + std::int64_t(ho_hi) * cols.out, (rows.out - ho_hi) * cols.out);
          }
        }
      });
}

// dx(n, c) += the entries of col that im2col copied from input plane
// (n, c): one thread owns each plane and adds the taps in a fixed order
// (kernel row, kernel column, output row), so no two threads write one
// element and the sums do not depend on the thread count.
template <class ExecSpace, class Col, class DX>
void col2im_add(const ExecSpace& exec, const Conv2dGeometry& g, const Col& col, std::int64_t first,
                std::int64_t count, const DX& dx) {
  const WindowAxis rows = g.rows, cols = g.cols;
  const std::int64_t channels = g.in_channels, positions = g.positions();
  const std::int64_t plane = std::int64_t(rows.in) * cols.in, ld = col.stride(0);
  Kokkos::parallel_for(
      "tessera::kernels::col2im_add", Kokkos::RangePolicy<ExecSpace>(exec, 0, count * channels),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t n = r / channels, c = r % channels;
        auto* grad = dx.data() + (first * channels + r) * plane;
        const auto* block = col.data() + n * positions;
        for (int ki = 0; ki < rows.kernel; ++ki) {
          int ho_lo, ho_hi;
          rows.inside(ki, ho_lo, ho_hi);
          for (int kj = 0; kj < cols.kernel; ++kj) {
            const auto* taps = block + ((c * rows.kernel + ki) * cols.kernel + kj) * ld;
            int wo_lo, wo_hi;
            cols.inside(kj, wo_lo, wo_hi);
            const int shift = kj - cols.pad;
            for (int ho = ho_lo; ho < ho_hi; ++ho)
              add_row(
                  grad + std::int64_t(rows.start(ho) + ki) * cols.in + wo_lo * cols.stride + shift,
                  taps + std::int64_t(ho) * cols.out + wo_lo, wo_hi - wo_lo, cols.stride);
          }
        }
      });
}

// Moves a block of samples between NCHW [count, C, P] (at sample `first` of
// `nchw`) and the channel-major [C, count * P] that one gemm per block reads
// and writes. to_nchw: nchw = block + bias(c) (+ 0 when bias is empty);
// otherwise block = nchw and bias is not read.
template <class ExecSpace, class Block, class NCHW, class B>
void channel_major(const ExecSpace& exec, const Block& block, const NCHW& nchw, const B& bias,
                   std::int64_t first, std::int64_t count, std::int64_t channels,
                   std::int64_t positions, bool to_nchw) {
  Kokkos::parallel_for(
      "tessera::kernels::channel_major", Kokkos::RangePolicy<ExecSpace>(exec, 0, count * channels),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t c = r % channels, n = r / channels;
        auto* sample = &nchw(0) + ((first + n) * channels + c) * positions;
        auto* row = &block(c, n * positions);
        if (to_nchw) {
          const auto b = bias.extent(0) > 0 ? bias(c) : 0;
          for (std::int64_t p = 0; p < positions; ++p) sample[p] = row[p] + b;
        } else {
          for (std::int64_t p = 0; p < positions; ++p) row[p] = sample[p];
        }
      });
}

template <class X, class W, class B, class Y>
void check_conv2d(const char* fn, const Conv2dGeometry& g, const X& x, const W& w, const B& b,
                  const Y& y) {
  TESSERA_REQUIRE(g.rows.out > 0 && g.cols.out > 0 && g.batch >= 0,
                  fn << ": no output for input " << g.rows.in << " x " << g.cols.in << ", kernel "
                     << g.rows.kernel << " x " << g.cols.kernel << ", stride " << g.rows.stride
                     << " x " << g.cols.stride << ", padding " << g.rows.pad << " x "
                     << g.cols.pad);
  TESSERA_REQUIRE(
      static_cast<std::int64_t>(x.size()) == g.input_size() &&
          static_cast<std::int64_t>(y.size()) == g.output_size() &&
          static_cast<std::int64_t>(w.extent(0)) == g.out_channels &&
          static_cast<std::int64_t>(w.extent(1)) == g.patch() &&
          (b.extent(0) == 0 || static_cast<std::int64_t>(b.extent(0)) == g.out_channels),
      fn << ": x has " << x.size() << " elements, W [" << w.extent(0) << ", " << w.extent(1)
         << "], b [" << b.extent(0) << "], y " << y.size() << " elements; expected x [" << g.batch
         << ", " << g.in_channels << ", " << g.rows.in << ", " << g.cols.in << "], W ["
         << g.out_channels << ", " << g.patch() << "], b [" << g.out_channels
         << "] or [0] (no bias), y [" << g.batch << ", " << g.out_channels << ", " << g.rows.out
         << ", " << g.cols.out << "]");
}

template <class Scratch>
std::int64_t check_scratch(const char* fn, const Conv2dGeometry& g, const Scratch& scratch) {
  const std::int64_t block = static_cast<std::int64_t>(scratch.size()) /
                             (g.scratch_per_sample() > 0 ? g.scratch_per_sample() : 1);
  TESSERA_REQUIRE(block >= 1 || g.batch == 0,
                  fn << ": scratch of " << scratch.size() << " floats is below one sample's "
                     << g.scratch_per_sample() << " ((patch " << g.patch() << " + out channels "
                     << g.out_channels << ") x positions " << g.positions() << ")");
  return block;
}

// Splits the batch into equal blocks of at most max_block samples.
template <class F>
void for_each_block(std::int64_t batch, std::int64_t max_block, const F& f) {
  if (batch == 0) return;
  const std::int64_t blocks = (batch + max_block - 1) / max_block;
  const std::int64_t size = (batch + blocks - 1) / blocks;
  for (std::int64_t first = 0; first < batch; first += size)
    f(first, first + size <= batch ? size : batch - first);
}

}  // namespace impl

// y = conv(x, W) + b. x, y: flat NCHW; W: [out_channels, patch]; scratch: a
// flat buffer of at least one sample's scratch_per_sample() floats; the
// batch runs in blocks of as many samples as it holds.
template <class ExecSpace, class X, class W, class B, class Y, class Scratch>
void conv2d_forward(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                    const B& b, const Y& y, const Scratch& scratch) {
  ScopedRegion region("tessera::kernels::conv2d_forward");
  constexpr const char* fn = "tessera::kernels::conv2d_forward";
  impl::check_conv2d(fn, g, x, w, b, y);
  const std::int64_t max_block = impl::check_scratch(fn, g, scratch);
  using T = typename Y::non_const_value_type;
  using Space = typename Scratch::memory_space;
  const std::int64_t k = g.patch(), positions = g.positions();
  impl::for_each_block(g.batch, max_block, [&](std::int64_t first, std::int64_t count) {
    impl::ColumnMatrix<T, Space> col(scratch.data(), k, count * positions);
    impl::ColumnMatrix<T, Space> out(scratch.data() + k * count * positions, g.out_channels,
                                     count * positions);
    impl::im2col(exec, g, x, first, count, col);
    compat::gemm(exec, "N", "N", T(1), w, col, T(0), out);
    impl::channel_major(exec, out, y, b, first, count, g.out_channels, positions, true);
  });
}

template <class X, class W, class B, class Y, class Scratch>
void conv2d_forward(const Conv2dGeometry& g, const X& x, const W& w, const B& b, const Y& y,
                    const Scratch& scratch) {
  conv2d_forward(typename Y::execution_space(), g, x, w, b, y, scratch);
}

// dW += dy * cols(x)^T, db += sum of dy over samples and positions,
// dx += col2im(W^T dy); dx may be empty (the model input needs no gradient),
// and db too (no bias).
template <class ExecSpace, class X, class W, class DY, class DX, class DW, class DB, class Scratch>
void conv2d_backward(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                     const DY& dy, const DX& dx, const DW& dw, const DB& db,
                     const Scratch& scratch) {
  ScopedRegion region("tessera::kernels::conv2d_backward");
  constexpr const char* fn = "tessera::kernels::conv2d_backward";
  impl::check_conv2d(fn, g, x, w, db, dy);
  TESSERA_REQUIRE(dw.extent(0) == w.extent(0) && dw.extent(1) == w.extent(1),
                  fn << ": dW [" << dw.extent(0) << ", " << dw.extent(1) << "] differs from W ["
                     << w.extent(0) << ", " << w.extent(1) << "]");
  const bool with_dx = dx.size() > 0;
  TESSERA_REQUIRE(!with_dx || static_cast<std::int64_t>(dx.size()) == g.input_size(),
                  fn << ": dx has " << dx.size() << " elements, x " << x.size());
  const std::int64_t max_block = impl::check_scratch(fn, g, scratch);
  using T = typename DW::non_const_value_type;
  using Space = typename Scratch::memory_space;
  const std::int64_t k = g.patch(), positions = g.positions(), channels = g.out_channels;
  const std::int64_t batch = g.batch;

  // One thread per output channel, summing samples in order.
  Kokkos::parallel_for(
      "tessera::kernels::conv2d_bias_grad",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, db.extent(0) > 0 ? channels : 0),
      KOKKOS_LAMBDA(const std::int64_t c) {
        T sum = 0;
        for (std::int64_t n = 0; n < batch; ++n)
          sum += lane_sum(&dy(0) + (n * channels + c) * positions, positions);
        db(c) += sum;
      });

  impl::for_each_block(batch, max_block, [&](std::int64_t first, std::int64_t count) {
    impl::ColumnMatrix<T, Space> col(scratch.data(), k, count * positions);
    impl::ColumnMatrix<T, Space> grad(scratch.data() + k * count * positions, channels,
                                      count * positions);
    impl::im2col(exec, g, x, first, count, col);
    impl::channel_major(exec, grad, dy, db, first, count, channels, positions, false);
    compat::gemm(exec, "N", "T", T(1), grad, col, T(1), dw);
    if (!with_dx) return;
    compat::gemm(exec, "T", "N", T(1), w, grad, T(0), col);
    impl::col2im_add(exec, g, col, first, count, dx);
  });
}

template <class X, class W, class DY, class DX, class DW, class DB, class Scratch>
void conv2d_backward(const Conv2dGeometry& g, const X& x, const W& w, const DY& dy, const DX& dx,
                     const DW& dw, const DB& db, const Scratch& scratch) {
  conv2d_backward(typename DW::execution_space(), g, x, w, dy, dx, dw, db, scratch);
}

}  // namespace tessera::kernels
