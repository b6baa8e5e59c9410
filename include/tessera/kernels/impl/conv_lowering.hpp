// The lowering of conv.hpp's products: a block of samples copied
// to columns (im2col) so that one gemm covers it, the columns' gradient
// folded back in gather form (each input plane's taps collected by one
// thread, so no atomics and no dependence on the thread count), the moves
// between NCHW and the channel-major blocks a gemm reads and writes, the
// flipped weights of the transposed input gradient, and the bias
// gradient's ordered sums. Every schedule of conv.hpp runs on these.
#pragma once

#include <tessera/core/precision.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/conv_geometry.hpp>
#include <tessera/kernels/reduce.hpp>

#include <cstdint>

namespace tessera::kernels::impl {

template <class T, class Space>
using ColumnMatrix =
    Kokkos::View<T**, Kokkos::LayoutRight, Space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Copies and sums along one row, converting between the element types
// (one rounding per stored value into a 16-bit row); restrict parameters
// let the compiler vectorise the short rows of a convolution without
// checking for overlap.
template <class T, class S>
KOKKOS_INLINE_FUNCTION void copy_row(T* KOKKOS_RESTRICT out, const S* KOKKOS_RESTRICT in, int n,
                                     int stride) {
  if (stride == 1)
    for (int i = 0; i < n; ++i) out[i] = narrow<T>(widen(in[i]));
  else
    for (int i = 0; i < n; ++i) out[i] = narrow<T>(widen(in[i * stride]));
}
template <class T, class S>
KOKKOS_INLINE_FUNCTION void add_row(T* KOKKOS_RESTRICT out, const S* KOKKOS_RESTRICT in, int n,
                                    int stride) {
  if (stride == 1)
    for (int i = 0; i < n; ++i) add_rounded(out[i], widen(in[i]));
  else
    for (int i = 0; i < n; ++i) add_rounded(out[i * stride], widen(in[i]));
}
template <class T>
KOKKOS_INLINE_FUNCTION void zero_row(T* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = 0;
}

// Kernel tap (ki, kj) of a "same" convolution at stride 1 (output rows as
// long as the input rows, `flat`): its column row is the input plane
// shifted by a constant offset, so the outputs [lo, hi) read the inputs
// [lo + offset, hi + offset) in one run, except where an output row wraps
// into the next: those outputs (the seams) read padding. lo == hi when the
// tap reads padding only.
struct FlatTap {
  int lo = 0, hi = 0, offset = 0;
  int ho_lo, ho_hi, wo_lo, wo_hi, width;

  KOKKOS_INLINE_FUNCTION static bool flat(const WindowAxis& rows, const WindowAxis& cols) {
    return rows.stride == 1 && cols.stride == 1 && cols.out == cols.in;
  }
  KOKKOS_INLINE_FUNCTION FlatTap(const WindowAxis& rows, const WindowAxis& cols, int ki, int kj)
      : width(cols.out) {
    rows.inside(ki, ho_lo, ho_hi);
    cols.inside(kj, wo_lo, wo_hi);
    if (ho_lo >= ho_hi || wo_lo >= wo_hi) {
      ho_hi = ho_lo;  // no seams either
      return;
    }
    lo = ho_lo * width + wo_lo;
    hi = (ho_hi - 1) * width + wo_hi;
    offset = (ki - rows.pad) * cols.in + kj - cols.pad;
  }
  // Zeroes the seams of a column row.
  template <class T>
  KOKKOS_INLINE_FUNCTION void zero_seams(T* row) const {
    for (int ho = ho_lo; ho + 1 < ho_hi; ++ho)
      zero_row(row + ho * width + wo_hi, width - wo_hi + wo_lo);
  }
};

// The kernel taps of input plane c of one sample (`in`) as rows of the
// columns: row (c * kh + ki) * kw + kj of `block`, rows ld apart, one entry
// per output position. When the output rows are as long as the input rows
// at stride 1 (the "same" convolutions), a column row is the input plane
// shifted by a constant offset: one long copy, then zeros where a row
// wrapped into its neighbour, instead of a short copy per output row.
template <class S, class T>
KOKKOS_INLINE_FUNCTION void im2col_plane(const Conv2dGeometry& g, const S* in, T* block,
                                         std::int64_t c, std::int64_t ld) {
  const WindowAxis& rows = g.rows;
  const WindowAxis& cols = g.cols;
  const std::int64_t positions = std::int64_t(rows.out) * cols.out;
  const bool flat = FlatTap::flat(rows, cols);
  for (int ki = 0; ki < rows.kernel; ++ki) {
    int ho_lo, ho_hi;
    rows.inside(ki, ho_lo, ho_hi);
    for (int kj = 0; kj < cols.kernel; ++kj) {
      auto* out = block + ((c * rows.kernel + ki) * cols.kernel + kj) * ld;
      if (flat) {
        const FlatTap tap(rows, cols, ki, kj);
        zero_row(out, tap.lo);
        copy_row(out + tap.lo, in + tap.lo + tap.offset, tap.hi - tap.lo, 1);
        zero_row(out + tap.hi, static_cast<int>(positions) - tap.hi);
        tap.zero_seams(out);
        continue;
      }
      int wo_lo, wo_hi;
      cols.inside(kj, wo_lo, wo_hi);
      // Input column of output wo: wo * stride + (kj - pad).
      const int shift = kj - cols.pad;
      zero_row(out, ho_lo * cols.out);
      for (int ho = ho_lo; ho < ho_hi; ++ho) {
        auto* line = out + std::int64_t(ho) * cols.out;
        const auto* source = in + std::int64_t(rows.start(ho) + ki) * cols.in;
        zero_row(line, wo_lo);
        copy_row(line + wo_lo, source + wo_lo * cols.stride + shift, wo_hi - wo_lo, cols.stride);
        zero_row(line + wo_hi, cols.out - wo_hi);
      }
      zero_row(out + std::int64_t(ho_hi) * cols.out, (rows.out - ho_hi) * cols.out);
    }
  }
}

// Columns of samples [first, first + count): col(k, n * P + p) with k =
// (c * kh + ki) * kw + kj, so one gemm covers the whole block. One thread
// per input plane (n, c) writes that plane's kh * kw rows of P entries.
template <class ExecSpace, class X, class Col>
void im2col(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, std::int64_t first,
            std::int64_t count, const Col& col) {
  const std::int64_t channels = g.in_channels, positions = g.positions();
  const std::int64_t plane = g.input_positions(), ld = col.stride(0);
  Kokkos::parallel_for(
      "tessera::kernels::im2col", Kokkos::RangePolicy<ExecSpace>(exec, 0, count * channels),
      KOKKOS_LAMBDA(const std::int64_t r) {
        im2col_plane(g, x.data() + (first * channels + r) * plane,
                     col.data() + (r / channels) * positions, r % channels, ld);
      });
}

// grad (input plane c) += the taps im2col copied from it, which start at
// block (one sample's columns, rows ld apart). Float: the taps are added in
// a fixed order (kernel row, kernel column, output row), a row at a time;
// in the "same" convolutions at stride 1 (im2col's flat case) each kernel
// tap's rows are one long add, after zeroing the taps that read padding
// where a row wraps into the next (so block is scratch it overwrites).
// 16 bits: each element gathers its taps in float, in the same order
// (kernel row, then kernel column: the covering windows from the last to
// the first), onto its widened value, and is rounded once.
template <class T, class S>
KOKKOS_INLINE_FUNCTION void fold_plane(T* grad, S* block, std::int64_t c, const WindowAxis& rows,
                                       const WindowAxis& cols, std::int64_t ld) {
  if constexpr (is_storage16_v<T>) {
    for (int h = 0; h < rows.in; ++h) {
      int ho_lo, ho_hi;
      rows.covering(h, ho_lo, ho_hi);
      for (int w = 0; w < cols.in; ++w) {
        int wo_lo, wo_hi;
        cols.covering(w, wo_lo, wo_hi);
        accumulator_t<T> sum = widen(grad[h * cols.in + w]);
        for (int ho = ho_hi - 1; ho >= ho_lo; --ho) {
          const int ki = h - rows.start(ho);
          for (int wo = wo_hi - 1; wo >= wo_lo; --wo) {
            const int kj = w - cols.start(wo);
            sum += block[((c * rows.kernel + ki) * cols.kernel + kj) * ld +
                         std::int64_t(ho) * cols.out + wo];
          }
        }
        grad[h * cols.in + w] = narrow<T>(sum);
      }
    }
  } else {
    const bool flat = FlatTap::flat(rows, cols);
    for (int ki = 0; ki < rows.kernel; ++ki) {
      int ho_lo, ho_hi;
      rows.inside(ki, ho_lo, ho_hi);
      for (int kj = 0; kj < cols.kernel; ++kj) {
        S* taps = block + ((c * rows.kernel + ki) * cols.kernel + kj) * ld;
        if (flat) {
          const FlatTap tap(rows, cols, ki, kj);
          tap.zero_seams(taps);
          add_row(grad + tap.lo + tap.offset, taps + tap.lo, tap.hi - tap.lo, 1);
          continue;
        }
        int wo_lo, wo_hi;
        cols.inside(kj, wo_lo, wo_hi);
        const int shift = kj - cols.pad;
        for (int ho = ho_lo; ho < ho_hi; ++ho)
          add_row(grad + std::int64_t(rows.start(ho) + ki) * cols.in + wo_lo * cols.stride + shift,
                  taps + std::int64_t(ho) * cols.out + wo_lo, wo_hi - wo_lo, cols.stride);
      }
    }
  }
}

// dx(n, c) += the entries of col that im2col copied from input plane
// (n, c): one thread owns each plane (fold_plane), so no two threads write
// one element and the sums do not depend on the thread count.
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
        fold_plane(dx.data() + (first * channels + r) * plane, col.data() + n * positions, c, rows,
                   cols, ld);
      });
}

// Directions of channel_major.
enum class Transfer {
  to_nchw,      // nchw = block + bias(c) (+ 0 when bias is empty)
  add_to_nchw,  // nchw += block; bias is not read
  from_nchw     // block = nchw; bias is not read
};

// One row of a channel_major transfer: `row` (a channel's positions in the
// block) and `sample` (the same positions in NCHW), `bias` the channel's
// bias for to_nchw. from_nchw with row_sum: also *row_sum = the lane_sum of
// the row.
template <class T, class S>
KOKKOS_INLINE_FUNCTION void move_row(T* row, S* sample, T bias, std::int64_t positions,
                                     Transfer transfer, T* row_sum = nullptr) {
  if (transfer == Transfer::to_nchw) {
    using Stored = std::remove_const_t<S>;
    for (std::int64_t p = 0; p < positions; ++p) sample[p] = narrow<Stored>(row[p] + bias);
  } else if (transfer == Transfer::add_to_nchw) {
    add_row(sample, row, static_cast<int>(positions), 1);
  } else {
    copy_row(row, sample, static_cast<int>(positions), 1);
    if (row_sum != nullptr) *row_sum = lane_sum(row, positions);  // in cache now, widened
  }
}

// Moves a block of samples between NCHW [count, C, P] (at sample `first` of
// `nchw`) and the channel-major [C, count * P] that one gemm per block reads
// and writes. from_nchw with row_sums: also row_sums[n * C + c] = the
// lane_sum of row (n, c) of nchw, for every sample n of the block.
// to_nchw and add_to_nchw round each value they store into a 16-bit nchw once.
template <class ExecSpace, class Block, class NCHW, class B>
void channel_major(const ExecSpace& exec, const Block& block, const NCHW& nchw, const B& bias,
                   std::int64_t first, std::int64_t count, std::int64_t channels,
                   std::int64_t positions, Transfer transfer,
                   typename Block::non_const_value_type* row_sums = nullptr) {
  using T = typename Block::non_const_value_type;
  const std::int64_t ld = block.stride(0);
  Kokkos::parallel_for(
      "tessera::kernels::channel_major", Kokkos::RangePolicy<ExecSpace>(exec, 0, count * channels),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t c = r % channels, n = r / channels;
        const T b = transfer == Transfer::to_nchw && bias.extent(0) > 0 ? T(bias(c)) : T(0);
        move_row(block.data() + c * ld + n * positions,
                 nchw.data() + ((first + n) * channels + c) * positions, b, positions, transfer,
                 row_sums != nullptr ? row_sums + (first + n) * channels + c : nullptr);
      });
}

// Wt(c, (o * kh + ki) * kw + kj) = W(o, (c * kh + kh - 1 - ki) * kw + kw - 1 - kj):
// the weights of Conv2dGeometry::transposed().
template <class ExecSpace, class W, class WT>
void flip_weights(const ExecSpace& exec, const Conv2dGeometry& g, const W& w, const WT& wt) {
  const std::int64_t in = g.in_channels, out = g.out_channels;
  const int kh = g.rows.kernel, kw = g.cols.kernel;
  Kokkos::parallel_for(
      "tessera::kernels::flip_weights", Kokkos::RangePolicy<ExecSpace>(exec, 0, in * out),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t c = r / out, o = r % out;
        for (int ki = 0; ki < kh; ++ki)
          for (int kj = 0; kj < kw; ++kj)
            wt(c, (o * kh + ki) * kw + kj) = w(o, (c * kh + kh - 1 - ki) * kw + kw - 1 - kj);
      });
}

// Columns of samples [first, first + count) of x into col (rows ld apart),
// as im2col lays them out, on the calling thread.
template <class X, class T>
void lower_samples(const Conv2dGeometry& g, const X& x, std::int64_t first, std::int64_t count,
                   T* col, std::int64_t ld) {
  const std::int64_t in = g.in_channels, plane = g.input_positions(), positions = g.positions();
  for (std::int64_t r = 0; r < count * in; ++r)
    im2col_plane(g, x.data() + (first * in + r) * plane, col + (r / in) * positions, r % in, ld);
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

// db(c) += the rows' sums (row_sums[n * channels + c]), samples in order:
// the same sums in the same order for any block size and thread count.
template <class ExecSpace, class T, class DB>
void add_bias_gradient(const ExecSpace& exec, const T* row_sums, std::int64_t batch,
                       std::int64_t channels, const DB& db) {
  Kokkos::parallel_for(
      "tessera::kernels::conv2d_bias_grad", Kokkos::RangePolicy<ExecSpace>(exec, 0, channels),
      KOKKOS_LAMBDA(const std::int64_t c) {
        T sum = 0;
        for (std::int64_t n = 0; n < batch; ++n) sum += row_sums[n * channels + c];
        db(c) += sum;
      });
}

}  // namespace tessera::kernels::impl
