// 2-D convolution kernels over NCHW tensors, on the sliding-window geometry
// of window.hpp. Forward lowers a block of samples to
// columns (im2col) and multiplies by the weights, one product per block
// rather than per sample; backward multiplies again and folds the columns
// back in gather form (each input plane's taps collected by one thread), so
// no atomics are needed and results do not depend on the thread count.
// Backward accumulates into dx, dW and db. Two schedules (ConvSchedule):
// blocks one after another, each product a KokkosBlas::gemm on the whole
// execution space (any space), or, on the OpenMP and Serial spaces, blocks
// that each thread lowers, multiplies with a one-thread BLAS gemm and folds
// alone while its columns are in that core's cache, the latter also with
// Winograd's F(2 x 2, r x r) for the forward, input-gradient and
// weight-gradient products of 3 x 3 and 5 x 5 kernels at stride 1
// (impl/winograd.hpp; conv2d_schedule chooses).
// An empty bias (extent 0) means a convolution without one: forward adds
// nothing and backward computes no bias gradient.
//
// x, y, dy and dx may be bf16 or fp16 (the weights, their gradients and the
// scratch stay float): the columns hold the values widened to float, the
// products are float, and each output or input gradient is rounded once.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/machine.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/winograd.hpp>
#include <tessera/kernels/reduce.hpp>
#include <tessera/kernels/window.hpp>

#include <cstdint>
#include <type_traits>

namespace tessera::kernels {

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
  std::int64_t input_positions() const { return std::int64_t(rows.in) * cols.in; }
  std::int64_t input_size() const { return batch * in_channels * input_positions(); }
  std::int64_t output_size() const { return batch * out_channels * positions(); }

  // With both strides 1, the input gradient is itself a convolution: of dy
  // with the weights flipped in space and with in and out channels
  // swapped, padded by kernel - 1 - pad. Backward computes it so (an
  // im2col of dy and one product whose inner dimension is out_channels x
  // the kernel) instead of the product W^T dy, whose inner dimension is
  // only out_channels, and the fold back: on 2 cores OpenBLAS ran that thin
  // product at half the speed (32 x 3x3 channels: 40 against 87 GFLOP/s).
  // The columns of dy are out_channels / in_channels times those of x, so
  // it pays only up to out_channels = in_channels (the 3x3 blocks of a
  // ResNet); with more output channels (the CNN deck's 32 -> 64) the extra
  // copying costs what the better product saves.
  bool transposed_input_gradient() const {
    return rows.stride == 1 && cols.stride == 1 && rows.pad < rows.kernel &&
           cols.pad < cols.kernel && out_channels <= in_channels;
  }
  // That convolution: dy [batch, out_channels, rows.out, cols.out] -> dx.
  Conv2dGeometry transposed() const {
    Conv2dGeometry t;
    t.batch = batch;
    t.in_channels = out_channels;
    t.out_channels = in_channels;
    t.rows = WindowAxis(rows.out, rows.kernel, 1, rows.kernel - 1 - rows.pad);
    t.cols = WindowAxis(cols.out, cols.kernel, 1, cols.kernel - 1 - cols.pad);
    return t;
  }

  // Scratch floats one sample's columns and output block take in forward
  // (and in backward for dW).
  std::int64_t forward_per_sample() const { return (patch() + out_channels) * positions(); }
  // The same for forward and backward, the larger of the two.
  std::int64_t scratch_per_sample() const {
    const std::int64_t lowered = forward_per_sample();
    if (!transposed_input_gradient()) return lowered;
    const std::int64_t gradient = transposed().forward_per_sample();
    return lowered > gradient ? lowered : gradient;
  }
  // Floats of the flipped weights in scratch (transposed input gradient only).
  std::int64_t flipped_weights_size() const {
    return transposed_input_gradient() ? in_channels * out_channels * rows.kernel * cols.kernel : 0;
  }
  // Scratch floats besides the samples': the flipped weights, and the bias
  // gradient's sum of each (sample, output channel) row, which backward
  // takes while it copies dy anyway instead of reading dy once more.
  std::int64_t scratch_fixed() const { return flipped_weights_size() + batch * out_channels; }
  // Scratch floats for blocks of `samples` samples.
  std::int64_t scratch_size(std::int64_t samples) const {
    return scratch_fixed() + samples * scratch_per_sample();
  }

  // ConvSchedule::threads. A thread's block has as many samples as make at
  // least 256 columns (a gemm wide enough for the BLAS's kernels), as long
  // as its columns and output stay within thread_block_floats (in a core's
  // L2 cache); at least one sample, at most the batch.
  static constexpr std::int64_t thread_block_floats = std::int64_t(192) << 10;
  std::int64_t thread_block_samples() const {
    const std::int64_t per_sample = forward_per_sample() > 0 ? forward_per_sample() : 1;
    const std::int64_t p = positions() > 0 ? positions() : 1;
    std::int64_t samples = (256 + p - 1) / p;
    if (samples * per_sample > thread_block_floats) samples = thread_block_floats / per_sample;
    if (samples > batch) samples = batch;
    return samples < 1 ? 1 : samples;
  }
  std::int64_t thread_blocks() const {
    const std::int64_t s = thread_block_samples();
    return (batch + s - 1) / s;
  }
  // Backward sums dW over groups of consecutive blocks, each group's blocks
  // in order into a partial of its own, then the partials in group order:
  // at most thread_groups_max groups (tasks for as many threads, and
  // as many partials of the size of W). The groups depend on the geometry
  // alone, so dW does not depend on the thread count.
  static constexpr std::int64_t thread_groups_max = 16;
  static std::int64_t group_blocks(std::int64_t blocks) {
    const std::int64_t per_group = (blocks + thread_groups_max - 1) / thread_groups_max;
    return per_group < 1 ? 1 : per_group;
  }
  static std::int64_t groups(std::int64_t blocks) {
    const std::int64_t per_group = group_blocks(blocks);
    return (blocks + per_group - 1) / per_group;
  }
  std::int64_t thread_group_blocks() const { return group_blocks(thread_blocks()); }
  std::int64_t thread_groups() const { return groups(thread_blocks()); }

  // ConvSchedule::winograd: Winograd's F(2 x 2, r x r) (impl/winograd.hpp)
  // for the forward and input-gradient products of square 3 x 3 and 5 x 5
  // kernels at stride 1 with padding below the kernel, when both channel
  // counts are multiples of impl::winograd_lanes (the transforms' vectors).
  bool winograd() const {
    return rows.kernel == cols.kernel && impl::Winograd::supports(rows.kernel) &&
           rows.stride == 1 && cols.stride == 1 && rows.pad < rows.kernel &&
           cols.pad < cols.kernel && in_channels % impl::winograd_lanes == 0 &&
           out_channels % impl::winograd_lanes == 0 && in_channels > 0 && out_channels > 0;
  }
  // Output tiles of 2 x 2 positions per sample and channel.
  std::int64_t winograd_tiles() const {
    return std::int64_t(impl::Winograd::tiles(rows.out)) * impl::Winograd::tiles(cols.out);
  }
  // Floats of one pass's work for `samples` samples: the input laid out
  // channel-last and padded to whole tiles, and the output tiles
  // channel-last (one sample at a time); the t^2 transformed inputs and
  // products of every tile of the samples (impl::WinogradWork, below).
  std::int64_t winograd_floats(std::int64_t samples) const;
  // Samples whose tiles go through one set of t^2 products: at least 64
  // tiles (the BLAS's kernels want that many rows), as long as the work
  // stays within thread_block_floats; at least one, at most the batch.
  std::int64_t winograd_block_samples() const {
    const std::int64_t tiles = winograd_tiles() > 0 ? winograd_tiles() : 1;
    std::int64_t samples = (64 + tiles - 1) / tiles;
    while (samples > 1 && winograd_floats(samples) > thread_block_floats) --samples;
    if (samples > batch) samples = batch;
    return samples < 1 ? 1 : samples;
  }
  std::int64_t winograd_blocks() const {
    const std::int64_t s = winograd_block_samples();
    return (batch + s - 1) / s;
  }
  // Backward sums the weight gradient's transform dU over groups of
  // consecutive Winograd blocks, as the threads schedule sums dW.
  std::int64_t winograd_group_blocks() const { return group_blocks(winograd_blocks()); }
  std::int64_t winograd_groups() const { return groups(winograd_blocks()); }
  // Floats of one group's dU: t^2 blocks of out_channels x in_channels.
  std::int64_t winograd_partial_size() const {
    const std::int64_t t = rows.kernel + 1;
    return t * t * in_channels * out_channels;
  }
  // Floats of the transformed weights: t^2 in_channels x out_channels for
  // the forward and as many for the input gradient (0 without Winograd).
  std::int64_t winograd_weights_size() const {
    return winograd() ? 2 * winograd_partial_size() : 0;
  }

  // Scratch floats of ConvSchedule::threads and ::winograd besides the
  // threads' blocks: the rows' sums for the bias gradient and the groups'
  // dW partials (or dU partials, with Winograd), room for
  // min(blocks, thread_groups_max) of them, then the transformed weights.
  // That grows with the batch while the number of groups need not (22
  // blocks make 11 groups of 2, 16 blocks 16 groups of 1), so scratch for a
  // batch holds every smaller batch.
  std::int64_t thread_scratch_fixed() const {
    const auto room = [](std::int64_t blocks) {
      return blocks < thread_groups_max ? blocks : thread_groups_max;
    };
    std::int64_t partials = room(thread_blocks()) * out_channels * patch();
    if (winograd()) {
      const std::int64_t transformed = room(winograd_blocks()) * winograd_partial_size();
      partials = partials > transformed ? partials : transformed;
    }
    return batch * out_channels + partials + winograd_weights_size();
  }
  // Scratch floats of one thread: its block's columns and output (or output
  // gradient), or Winograd's work for the forward (which the weight
  // gradient's takes too) or the input gradient, whichever is larger.
  std::int64_t thread_slot_size() const {
    std::int64_t floats = thread_block_samples() * forward_per_sample();
    if (winograd()) {
      const std::int64_t forward = winograd_floats(winograd_block_samples());
      const Conv2dGeometry t = transposed();
      const std::int64_t gradient = t.winograd_floats(t.winograd_block_samples());
      floats = floats > forward ? floats : forward;
      floats = floats > gradient ? floats : gradient;
    }
    return floats;
  }
  // Scratch floats of ConvSchedule::threads and ::winograd on `threads`
  // threads.
  std::int64_t thread_scratch_size(std::int64_t threads) const {
    return thread_scratch_fixed() + threads * thread_slot_size();
  }
};

// How conv2d_forward and conv2d_backward spread a batch over the execution
// space. Both give the same values up to rounding; either gives the same
// bits for any thread count.
enum class ConvSchedule {
  // Blocks of samples one after another: each block's copies run on all
  // threads and its products are one gemm on the whole execution space
  // (scratch: Conv2dGeometry::scratch_size). Any execution space.
  blocks,
  // Each host thread takes whole blocks of samples (thread_block_samples)
  // and lowers, multiplies with a one-thread BLAS gemm and folds back each
  // alone, so that a block's columns stay in that core's cache (scratch:
  // Conv2dGeometry::thread_scratch_size). The OpenMP and Serial spaces,
  // with a BLAS that thread_sgemm() returns.
  threads,
  // ConvSchedule::threads, with all three products (forward, input
  // gradient, weight gradient) in Winograd's form where
  // Conv2dGeometry::winograd() holds (2.25x fewer multiplications for
  // 3 x 3 kernels, 2.78x for 5 x 5): each thread transforms the tiles of a
  // block of samples, multiplies them with t^2 one-thread gemms and
  // transforms the products back. The same scratch and spaces as threads.
  winograd
};

// Samples per block so that the scratch stays within max_bytes (at least one).
inline std::int64_t conv2d_block_samples(const Conv2dGeometry& g, std::int64_t max_bytes) {
  const std::int64_t per_sample = g.scratch_per_sample() * std::int64_t(sizeof(float));
  const std::int64_t room = max_bytes - g.scratch_fixed() * std::int64_t(sizeof(float));
  std::int64_t block = per_sample > 0 ? room / per_sample : g.batch;
  if (block > g.batch) block = g.batch;
  return block < 1 ? 1 : block;
}

namespace impl {

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

// Samples per block the scratch holds for a pass that needs per_sample
// floats a sample (at least one, or an error).
template <class Scratch>
std::int64_t check_scratch(const char* fn, const Conv2dGeometry& g, const Scratch& scratch,
                           std::int64_t per_sample) {
  const std::int64_t room = static_cast<std::int64_t>(scratch.size()) - g.scratch_fixed();
  const std::int64_t block = room / (per_sample > 0 ? per_sample : 1);
  TESSERA_REQUIRE(block >= 1 || g.batch == 0,
                  fn << ": scratch of " << scratch.size() << " floats is below one sample's "
                     << g.scratch_size(1) << " (Conv2dGeometry::scratch_size(1): columns and "
                     << "output block of a sample, for patch " << g.patch() << ", "
                     << g.out_channels << " output channels, " << g.positions() << " positions)");
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

// The spaces whose threads may each call thread_sgemm(): OpenMP's threads
// (inside a parallel region the BLAS runs on the calling thread) and
// Serial's one (outside any, the BLAS may use its own threads).
template <class ExecSpace>
constexpr bool thread_gemm_space_v =
#ifdef KOKKOS_ENABLE_OPENMP
    std::is_same<ExecSpace, Kokkos::OpenMP>::value ||
#endif
#ifdef KOKKOS_ENABLE_SERIAL
    std::is_same<ExecSpace, Kokkos::Serial>::value ||
#endif
    false;

// Row-major C = op(A) op(B) + beta C on the calling thread; `gemm` is
// column-major, so it computes C^T = op(B)^T op(A)^T.
inline void thread_gemm(HostSgemm* gemm, char trans_a, char trans_b, std::int64_t m, std::int64_t n,
                        std::int64_t k, const float* a, std::int64_t lda, const float* b,
                        std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  const int m_ = static_cast<int>(m), n_ = static_cast<int>(n), k_ = static_cast<int>(k);
  const int lda_ = static_cast<int>(lda), ldb_ = static_cast<int>(ldb);
  const int ldc_ = static_cast<int>(ldc);
  const float one = 1;
  gemm(&trans_b, &trans_a, &n_, &m_, &k_, &one, b, &ldb_, a, &lda_, &beta, c, &ldc_);
}

// The one-thread gemm for ConvSchedule::threads on exec, after checking
// that exec is an OpenMP or Serial space, that there is such a gemm and
// that the scratch holds a block for each thread.
template <class ExecSpace, class Scratch>
HostSgemm* check_threads(const char* fn, const ExecSpace& exec, const Conv2dGeometry& g,
                         const Scratch& scratch, std::int64_t threads) {
  HostSgemm* const gemm = thread_gemm_space_v<ExecSpace> ? thread_sgemm() : nullptr;
  TESSERA_REQUIRE(gemm != nullptr,
                  fn << ": ConvSchedule::threads needs the OpenMP or Serial execution space and a "
                        "BLAS whose gemm runs on its calling thread inside a parallel region "
                        "(thread_sgemm); "
                     << ExecSpace::name() << " with this BLAS has none: use "
                     << "conv2d_schedule(exec) to choose the schedule");
  const std::int64_t needed = g.thread_scratch_size(threads);
  TESSERA_REQUIRE(static_cast<std::int64_t>(scratch.size()) >= needed,
                  fn << ": scratch of " << scratch.size() << " floats is below the " << needed
                     << " of ConvSchedule::threads on " << threads
                     << " threads (Conv2dGeometry::thread_scratch_size(" << threads << "))");
  (void)exec;
  return gemm;
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

// Samples [first, first + count) of block `block` in ConvSchedule::threads.
struct ThreadBlock {
  std::int64_t first, count;
  ThreadBlock(const Conv2dGeometry& g, std::int64_t block) {
    const std::int64_t samples = g.thread_block_samples();
    first = block * samples;
    count = g.batch - first < samples ? g.batch - first : samples;
  }
};

// Winograd's weights of g for the forward (u) or, with `flip`, of
// g.transposed() for the input gradient: t^2 blocks [in][out] of the
// transformed kernels, one input channel and winograd_lanes output
// channels a task.
template <class ExecSpace, class W>
void winograd_weights(const ExecSpace& exec, const Winograd wg, const Conv2dGeometry& g, const W& w,
                      bool flip, float* u) {
  const std::int64_t in = flip ? g.out_channels : g.in_channels;
  const std::int64_t out = flip ? g.in_channels : g.out_channels;
  const std::int64_t lanes = winograd_lanes, runs = (out + lanes - 1) / lanes;
  const float* const weights = w.data();
  Kokkos::parallel_for("tessera::kernels::winograd_weights",
                       Kokkos::RangePolicy<ExecSpace>(exec, 0, in * runs),
                       [=](const std::int64_t task) {
                         const std::int64_t o0 = (task % runs) * lanes;
                         const int count = static_cast<int>(out - o0 < lanes ? out - o0 : lanes);
                         wg.transform_weights(weights, in, out, flip, task / runs, o0, count, u);
                       });
}

// A sample's `channels` planes of rows x cols (NCHW) channel-last into
// laid [row][column][channel] (rows padded_cols columns long) from row
// `top` and column `left`; the rest of laid is left as it is.
template <class S>
void lay_out_channel_last(const S* x, std::int64_t channels, int rows, int cols, int top, int left,
                          std::int64_t padded_cols, float* laid) {
  for (std::int64_t c = 0; c < channels; ++c)
    for (int h = 0; h < rows; ++h) {
      const S* source = x + (c * rows + h) * cols;
      float* line = laid + ((h + top) * padded_cols + left) * channels + c;
      for (int w = 0; w < cols; ++w) line[w * channels] = widen(source[w]);
    }
}

// One block's Winograd work in a thread's scratch: the input laid out
// channel-last and padded to whole tiles, the output (or output gradient)
// tiles channel-last, one sample at a time; the t^2 transformed inputs and
// products of all the block's tiles. `floats` is their size
// (Conv2dGeometry::winograd_floats); without `work`, the pointers are null.
struct WinogradWork {
  int rows, cols;  // output tiles along each axis
  std::int64_t tiles, n, padded_cols, padded, floats;
  float* laid = nullptr;      // [padded rows][padded cols][in]
  float* tile_out = nullptr;  // [2 rows][2 cols][out]
  float* v = nullptr;         // [t^2][n][in]
  float* m = nullptr;         // [t^2][n][out]
  WinogradWork(const Conv2dGeometry& g, std::int64_t count, float* work)
      : rows(Winograd::tiles(g.rows.out)), cols(Winograd::tiles(g.cols.out)) {
    const std::int64_t in = g.in_channels, out = g.out_channels, t = g.rows.kernel + 1;
    const std::int64_t widest = in > out ? in : out;
    tiles = std::int64_t(rows) * cols;
    n = count * tiles;
    padded_cols = Winograd::padded(g.cols.out, g.cols.kernel);
    padded = Winograd::padded(g.rows.out, g.rows.kernel) * padded_cols;
    const std::int64_t tile_out_at = padded * widest, v_at = tile_out_at + 4 * tiles * widest;
    const std::int64_t m_at = v_at + t * t * n * in;
    floats = m_at + t * t * n * out;
    if (work == nullptr) return;
    laid = work;
    tile_out = work + tile_out_at;
    v = work + v_at;
    m = work + m_at;
  }
  // Lays each sample of the block (x: the first one's NCHW planes) out in
  // laid and transforms its tiles into v. The padding is zeroed once: each
  // sample overwrites the same interior.
  template <int T, class S>
  void transform_inputs(const Winograd& wg, const Conv2dGeometry& g, const S* x) const {
    const std::int64_t in = g.in_channels, plane = g.input_positions();
    zero_row(laid, static_cast<int>(padded * in));
    for (std::int64_t s = 0; s < n / tiles; ++s) {
      lay_out_channel_last(x + s * in * plane, in, g.rows.in, g.cols.in, g.rows.pad, g.cols.pad,
                           padded_cols, laid);
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j)
          winograd_input_tile<T>(wg, laid + (2 * i * padded_cols + 2 * j) * in, padded_cols * in,
                                 in, v + (s * tiles + i * cols + j) * in, n * in);
    }
  }
};

}  // namespace impl

inline std::int64_t Conv2dGeometry::winograd_floats(std::int64_t samples) const {
  return impl::WinogradWork(*this, samples, nullptr).floats;
}

namespace impl {

// y (+)= conv(x, W) (+ bias) for `count` samples by Winograd's F(2 x 2,
// r x r), t = r + 1, on the calling thread: x and y point at the first
// sample's NCHW planes, u at the transformed weights, bias may be null;
// `add` adds to y (input gradients) instead of storing. `work` holds
// g.winograd_floats(count).
template <int T, class S, class D>
void winograd_samples(HostSgemm* gemm, const Winograd& wg, const Conv2dGeometry& g, const S* x,
                      std::int64_t count, const float* u, const float* bias, D* y, bool add,
                      float* work) {
  const std::int64_t in = g.in_channels, out = g.out_channels, positions = g.positions();
  const WinogradWork b(g, count, work);
  const int rows = b.rows, cols = b.cols;
  const std::int64_t tiles = b.tiles, n = b.n;
  float *const tile_out = b.tile_out, *const v = b.v, *const m = b.m;
  b.transform_inputs<T>(wg, g, x);
  for (int k = 0; k < T * T; ++k)
    thread_gemm(gemm, 'N', 'N', n, out, in, v + k * n * in, in, u + k * in * out, out, 0,
                m + k * n * out, out);
  for (std::int64_t s = 0; s < count; ++s) {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        winograd_output_tile<T>(wg, m + (s * tiles + i * cols + j) * out, n * out, out,
                                tile_out + (2 * i * 2 * cols + 2 * j) * out, 2 * cols * out);
    for (std::int64_t o = 0; o < out; ++o) {
      const float b = bias != nullptr ? bias[o] : 0.0f;
      D* const plane_out = y + (s * out + o) * positions;
      for (int h = 0; h < g.rows.out; ++h) {
        const float* line = tile_out + std::int64_t(h) * 2 * cols * out + o;
        D* target = plane_out + std::int64_t(h) * g.cols.out;
        if (add)
          for (int w = 0; w < g.cols.out; ++w) add_rounded(target[w], line[w * out]);
        else
          for (int w = 0; w < g.cols.out; ++w) target[w] = narrow<D>(line[w * out] + b);
      }
    }
  }
}

// winograd_samples for g's kernel size.
template <class S, class D>
void winograd_block(HostSgemm* gemm, const Winograd& wg, const Conv2dGeometry& g, const S* x,
                    std::int64_t count, const float* u, const float* bias, D* y, bool add,
                    float* work) {
  if (wg.t == 4)
    winograd_samples<4>(gemm, wg, g, x, count, u, bias, y, add, work);
  else
    winograd_samples<6>(gemm, wg, g, x, count, u, bias, y, add, work);
}

// du (+)= dL/dU, the gradient of the transformed weights, from `count`
// samples by Winograd's F(2 x 2, r x r), t = r + 1, on the calling thread
// (beta 0 stores, 1 adds): x and dy point at the first sample's NCHW
// planes, du holds t^2 blocks [out][in]. With row_sums, also
// row_sums[s * out + o] = the lane_sum of sample s's plane o of dy (the
// bias gradient's terms). `work` holds g.winograd_floats(count).
template <int T, class S, class G>
void winograd_weight_samples(HostSgemm* gemm, const Winograd& wg, const Conv2dGeometry& g,
                             const S* x, const G* dy, std::int64_t count, float beta, float* du,
                             float* row_sums, float* work) {
  const std::int64_t in = g.in_channels, out = g.out_channels, positions = g.positions();
  const WinogradWork b(g, count, work);
  const int rows = b.rows, cols = b.cols;
  const std::int64_t tiles = b.tiles, n = b.n;
  // grad holds the output gradient's tiles channel-last.
  float *const grad = b.tile_out, *const v = b.v, *const m = b.m;
  b.transform_inputs<T>(wg, g, x);
  // dy's tiles beyond odd output sizes stay zero.
  zero_row(grad, static_cast<int>(4 * tiles * out));
  for (std::int64_t s = 0; s < count; ++s) {
    const G* const sample = dy + s * out * positions;
    lay_out_channel_last(sample, out, g.rows.out, g.cols.out, 0, 0, 2 * cols, grad);
    if (row_sums != nullptr)
      for (std::int64_t o = 0; o < out; ++o)
        row_sums[s * out + o] = lane_sum(sample + o * positions, positions);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        winograd_gradient_tile<T>(wg, grad + (2 * i * 2 * cols + 2 * j) * out, 2 * cols * out, out,
                                  m + (s * tiles + i * cols + j) * out, n * out);
  }
  for (int k = 0; k < T * T; ++k)
    thread_gemm(gemm, 'T', 'N', out, in, n, m + k * n * out, out, v + k * n * in, in, beta,
                du + k * out * in, in);
}

// winograd_weight_samples for g's kernel size.
template <class S, class G>
void winograd_weight_block(HostSgemm* gemm, const Winograd& wg, const Conv2dGeometry& g, const S* x,
                           const G* dy, std::int64_t count, float beta, float* du, float* row_sums,
                           float* work) {
  if (wg.t == 4)
    winograd_weight_samples<4>(gemm, wg, g, x, dy, count, beta, du, row_sums, work);
  else
    winograd_weight_samples<6>(gemm, wg, g, x, dy, count, beta, du, row_sums, work);
}

// y = conv(x, W) + b, ConvSchedule::threads: each block of samples is
// lowered, multiplied and stored by the thread that takes it.
template <class ExecSpace, class X, class W, class B, class Y, class Scratch>
void conv2d_forward_threads(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                            const B& b, const Y& y, const Scratch& scratch) {
  if constexpr (thread_gemm_space_v<ExecSpace>) {
    Kokkos::Experimental::UniqueToken<ExecSpace> token(exec);
    HostSgemm* const gemm =
        check_threads("tessera::kernels::conv2d_forward", exec, g, scratch, token.size());
    const std::int64_t k = g.patch(), positions = g.positions();
    const std::int64_t out = g.out_channels, lda = w.stride(0);
    const std::int64_t per_thread = g.thread_slot_size();
    float* const slots = scratch.data() + g.thread_scratch_fixed();
    Kokkos::parallel_for(
        "tessera::kernels::conv2d_forward_threads",
        Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(exec, 0,
                                                                          g.thread_blocks()),
        [=](const std::int64_t block) {
          const int id = token.acquire();
          const ThreadBlock s(g, block);
          const std::int64_t n = s.count * positions;
          float* const col = slots + id * per_thread;
          float* const product = col + k * n;
          lower_samples(g, x, s.first, s.count, col, n);
          thread_gemm(gemm, 'N', 'N', out, n, k, w.data(), lda, col, n, 0, product, n);
          for (std::int64_t r = 0; r < s.count * out; ++r) {
            const std::int64_t c = r % out;
            move_row(product + c * n + (r / out) * positions,
                     y.data() + (s.first * out + r) * positions,
                     b.extent(0) > 0 ? float(b(c)) : 0.0f, positions, Transfer::to_nchw);
          }
          token.release(id);
        });
  } else {
    check_threads("tessera::kernels::conv2d_forward", exec, g, scratch, 1);
    (void)x, (void)w, (void)b, (void)y;
  }
}

// y = conv(x, W) + b, ConvSchedule::winograd (g.winograd() holds): the
// weights are transformed once, then each block of samples is
// transformed, multiplied and transformed back by the thread that takes it.
template <class ExecSpace, class X, class W, class B, class Y, class Scratch>
void conv2d_forward_winograd(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                             const B& b, const Y& y, const Scratch& scratch) {
  if constexpr (thread_gemm_space_v<ExecSpace>) {
    Kokkos::Experimental::UniqueToken<ExecSpace> token(exec);
    HostSgemm* const gemm =
        check_threads("tessera::kernels::conv2d_forward", exec, g, scratch, token.size());
    float* const slots = scratch.data() + g.thread_scratch_fixed();
    float* const u = slots - g.winograd_weights_size();
    const Winograd wg(g.rows.kernel);
    winograd_weights(exec, wg, g, w, false, u);
    const std::int64_t per_thread = g.thread_slot_size(), samples = g.winograd_block_samples();
    const std::int64_t in = g.in_channels * g.input_positions();
    const std::int64_t out = g.out_channels * g.positions();
    const float* const bias = b.extent(0) > 0 ? b.data() : nullptr;
    Kokkos::parallel_for("tessera::kernels::conv2d_forward_winograd",
                         Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(
                             exec, 0, g.winograd_blocks()),
                         [=](const std::int64_t block) {
                           const int id = token.acquire();
                           const std::int64_t first = block * samples;
                           const std::int64_t count =
                               g.batch - first < samples ? g.batch - first : samples;
                           winograd_block(gemm, wg, g, x.data() + first * in, count, u, bias,
                                          y.data() + first * out, false, slots + id * per_thread);
                           token.release(id);
                         });
  } else {
    check_threads("tessera::kernels::conv2d_forward", exec, g, scratch, 1);
    (void)x, (void)w, (void)b, (void)y;
  }
}

// dW += dy * cols(x)^T, db += sums of dy, dx += col2im(W^T dy) (when dx is
// not empty), ConvSchedule::threads: each group of blocks (one task) sums
// its dW into a partial of its own; the partials are added in group order.
// With `winograd` (ConvSchedule::winograd where g.winograd() holds), the
// groups are of Winograd blocks and sum dU (winograd_weight_samples), the
// partials' sum is transformed into dW, and dx += conv(dy, flipped W)
// (Conv2dGeometry::transposed) in Winograd's form too, in blocks of
// t.winograd_block_samples() within each block.
template <class ExecSpace, class X, class W, class DY, class DX, class DW, class DB, class Scratch>
void conv2d_backward_threads(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                             const DY& dy, const DX& dx, const DW& dw, const DB& db,
                             const Scratch& scratch, bool winograd) {
  if constexpr (thread_gemm_space_v<ExecSpace>) {
    Kokkos::Experimental::UniqueToken<ExecSpace> token(exec);
    HostSgemm* const gemm =
        check_threads("tessera::kernels::conv2d_backward", exec, g, scratch, token.size());
    const std::int64_t k = g.patch(), positions = g.positions(), plane = g.input_positions();
    const std::int64_t in = g.in_channels, out = g.out_channels, lda = w.stride(0);
    const std::int64_t per_thread = g.thread_slot_size();
    const bool with_dx = dx.size() > 0, with_db = db.extent(0) > 0;
    float* const row_sums = scratch.data();
    float* const partials = row_sums + g.batch * out;
    float* const slots = scratch.data() + g.thread_scratch_fixed();
    if (winograd) {
      const Conv2dGeometry t = g.transposed();
      const Winograd wg(g.rows.kernel);
      float* const u = slots - g.winograd_weights_size() / 2;
      if (with_dx) winograd_weights(exec, wg, g, w, true, u);
      const std::int64_t samples = g.winograd_block_samples(), blocks = g.winograd_blocks();
      const std::int64_t per_group = g.winograd_group_blocks(), groups = g.winograd_groups();
      const std::int64_t size = g.winograd_partial_size(), transformed = t.winograd_block_samples();
      Kokkos::parallel_for(
          "tessera::kernels::conv2d_backward_winograd",
          Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(exec, 0, groups),
          [=](const std::int64_t group) {
            const int id = token.acquire();
            float* const work = slots + id * per_thread;
            const std::int64_t last =
                (group + 1) * per_group < blocks ? (group + 1) * per_group : blocks;
            for (std::int64_t block = group * per_group; block < last; ++block) {
              const std::int64_t first = block * samples;
              const std::int64_t end = g.batch - first < samples ? g.batch : first + samples;
              winograd_weight_block(
                  gemm, wg, g, x.data() + first * in * plane, dy.data() + first * out * positions,
                  end - first, block == group * per_group ? 0.0f : 1.0f, partials + group * size,
                  with_db ? row_sums + first * out : nullptr, work);
              if (!with_dx) continue;
              for (std::int64_t from = first; from < end; from += transformed)
                winograd_block(gemm, wg, t, dy.data() + from * out * positions,
                               end - from < transformed ? end - from : transformed, u, nullptr,
                               dx.data() + from * in * plane, true, work);
            }
            token.release(id);
          });
      // The groups' dU summed into the first group's partial, each value's
      // terms in group order, in one pass over long runs (reading the t^2
      // blocks of every group at once, out * in floats apart, had the
      // cache evict its own lines).
      const std::int64_t run = 1024, runs = (size + run - 1) / run;
      if (groups > 1)
        Kokkos::parallel_for(
            "tessera::kernels::conv2d_weight_grad", Kokkos::RangePolicy<ExecSpace>(exec, 0, runs),
            [=](const std::int64_t r) {
              const std::int64_t begin = r * run;
              const int count = static_cast<int>(size - begin < run ? size - begin : run);
              float* const sum = partials + begin;
              for (std::int64_t group = 1; group < groups; ++group)
                add_row(sum, partials + group * size + begin, count, 1);
            });
      // dW(o, c) += G^T dU(o, c) G, winograd_lanes (o, c) pairs a task.
      const std::int64_t pairs = out * in, tt = std::int64_t(wg.t) * wg.t, rr = k / in;
      Kokkos::parallel_for("tessera::kernels::conv2d_weight_grad",
                           Kokkos::RangePolicy<ExecSpace>(exec, 0, pairs / winograd_lanes),
                           [=](const std::int64_t task) {
                             const std::int64_t first = task * winograd_lanes;
                             double du[Winograd::max_t * Winograd::max_t][winograd_lanes],
                                 d[25][winograd_lanes];
                             for (std::int64_t j = 0; j < tt; ++j)
                               for (int l = 0; l < winograd_lanes; ++l)
                                 du[j][l] = partials[j * pairs + first + l];
                             wg.transform_weight_gradient(du, d);
                             for (int l = 0; l < winograd_lanes; ++l) {
                               const std::int64_t i = first + l;
                               for (std::int64_t j = 0; j < rr; ++j)
                                 dw(i / in, (i % in) * rr + j) += static_cast<float>(d[j][l]);
                             }
                           });
      if (with_db) add_bias_gradient(exec, row_sums, g.batch, out, db);
      return;
    }
    const std::int64_t blocks = g.thread_blocks(), per_group = g.thread_group_blocks();
    const std::int64_t groups = g.thread_groups();
    Kokkos::parallel_for(
        "tessera::kernels::conv2d_backward_threads",
        Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(exec, 0, groups),
        [=](const std::int64_t group) {
          const int id = token.acquire();
          float* const partial = partials + group * out * k;
          const std::int64_t last =
              (group + 1) * per_group < blocks ? (group + 1) * per_group : blocks;
          for (std::int64_t block = group * per_group; block < last; ++block) {
            const ThreadBlock s(g, block);
            const std::int64_t n = s.count * positions;
            float* const col = slots + id * per_thread;
            float* const grad = col + k * n;
            lower_samples(g, x, s.first, s.count, col, n);
            for (std::int64_t r = 0; r < s.count * out; ++r)
              move_row(grad + (r % out) * n + (r / out) * positions,
                       dy.data() + (s.first * out + r) * positions, 0.0f, positions,
                       Transfer::from_nchw, with_db ? row_sums + s.first * out + r : nullptr);
            const float beta = block == group * per_group ? 0.0f : 1.0f;
            thread_gemm(gemm, 'N', 'T', out, k, n, grad, n, col, n, beta, partial, k);
            if (!with_dx) continue;
            thread_gemm(gemm, 'T', 'N', k, n, out, w.data(), lda, grad, n, 0, col, n);
            for (std::int64_t r = 0; r < s.count * in; ++r)
              fold_plane(dx.data() + (s.first * in + r) * plane, col + (r / in) * positions, r % in,
                         g.rows, g.cols, n);
          }
          token.release(id);
        });
    Kokkos::parallel_for("tessera::kernels::conv2d_weight_grad",
                         Kokkos::RangePolicy<ExecSpace>(exec, 0, out * k),
                         [=](const std::int64_t i) {
                           float sum = 0;
                           for (std::int64_t group = 0; group < groups; ++group)
                             sum += partials[group * out * k + i];
                           dw(i / k, i % k) += sum;
                         });
    if (with_db) add_bias_gradient(exec, row_sums, g.batch, out, db);
  } else {
    check_threads("tessera::kernels::conv2d_backward", exec, g, scratch, 1);
    (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)db, (void)winograd;
  }
}

}  // namespace impl

// The schedule conv2d_forward and conv2d_backward run best on exec:
// ConvSchedule::winograd (the threads schedule, with Winograd's products
// where the geometry allows) on the OpenMP and Serial spaces where
// thread_sgemm() has a gemm, ConvSchedule::blocks otherwise.
template <class ExecSpace>
ConvSchedule conv2d_schedule(const ExecSpace& /*exec*/) {
  if constexpr (impl::thread_gemm_space_v<ExecSpace>)
    return thread_sgemm() != nullptr ? ConvSchedule::winograd : ConvSchedule::blocks;
  return ConvSchedule::blocks;
}

// y = conv(x, W) + b. x, y: flat NCHW; W: [out_channels, patch]. scratch: a
// flat buffer of floats; ConvSchedule::blocks: at least g.scratch_size(1),
// and the batch runs in blocks of as many samples as it holds;
// ConvSchedule::threads: g.thread_scratch_size(threads of exec).
template <class ExecSpace, class X, class W, class B, class Y, class Scratch>
void conv2d_forward(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                    const B& b, const Y& y, const Scratch& scratch,
                    ConvSchedule schedule = ConvSchedule::blocks) {
  ScopedRegion region("tessera::kernels::conv2d_forward");
  constexpr const char* fn = "tessera::kernels::conv2d_forward";
  impl::check_conv2d(fn, g, x, w, b, y);
  if (schedule == ConvSchedule::winograd && g.winograd()) {
    impl::conv2d_forward_winograd(exec, g, x, w, b, y, scratch);
    return;
  }
  if (schedule != ConvSchedule::blocks) {
    impl::conv2d_forward_threads(exec, g, x, w, b, y, scratch);
    return;
  }
  // Forward needs less scratch per sample than backward may: larger blocks.
  const std::int64_t max_block = impl::check_scratch(fn, g, scratch, g.forward_per_sample());
  using T = typename Scratch::non_const_value_type;
  using Space = typename Scratch::memory_space;
  const std::int64_t k = g.patch(), positions = g.positions();
  T* const blocks = scratch.data() + g.scratch_fixed();
  impl::for_each_block(g.batch, max_block, [&](std::int64_t first, std::int64_t count) {
    impl::ColumnMatrix<T, Space> col(blocks, k, count * positions);
    impl::ColumnMatrix<T, Space> out(blocks + k * count * positions, g.out_channels,
                                     count * positions);
    impl::im2col(exec, g, x, first, count, col);
    compat::gemm(exec, "N", "N", T(1), w, col, T(0), out);
    impl::channel_major(exec, out, y, b, first, count, g.out_channels, positions,
                        impl::Transfer::to_nchw);
  });
}

template <class X, class W, class B, class Y, class Scratch>
void conv2d_forward(const Conv2dGeometry& g, const X& x, const W& w, const B& b, const Y& y,
                    const Scratch& scratch) {
  conv2d_forward(typename Y::execution_space(), g, x, w, b, y, scratch);
}

// dW += dy * cols(x)^T, db += sum of dy over samples and positions,
// dx += conv(dy, flipped W) at stride 1 (Conv2dGeometry::transposed), else
// col2im(W^T dy), each in Winograd's form with ConvSchedule::winograd where
// g.winograd() holds; dx may be empty (the model input needs no gradient),
// and db too (no bias).
template <class ExecSpace, class X, class W, class DY, class DX, class DW, class DB, class Scratch>
void conv2d_backward(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                     const DY& dy, const DX& dx, const DW& dw, const DB& db, const Scratch& scratch,
                     ConvSchedule schedule = ConvSchedule::blocks) {
  ScopedRegion region("tessera::kernels::conv2d_backward");
  constexpr const char* fn = "tessera::kernels::conv2d_backward";
  impl::check_conv2d(fn, g, x, w, db, dy);
  TESSERA_REQUIRE(dw.extent(0) == w.extent(0) && dw.extent(1) == w.extent(1),
                  fn << ": dW [" << dw.extent(0) << ", " << dw.extent(1) << "] differs from W ["
                     << w.extent(0) << ", " << w.extent(1) << "]");
  const bool with_dx = dx.size() > 0;
  TESSERA_REQUIRE(!with_dx || static_cast<std::int64_t>(dx.size()) == g.input_size(),
                  fn << ": dx has " << dx.size() << " elements, x " << x.size());
  if (schedule != ConvSchedule::blocks) {
    impl::conv2d_backward_threads(exec, g, x, w, dy, dx, dw, db, scratch,
                                  schedule == ConvSchedule::winograd && g.winograd());
    return;
  }
  const std::int64_t max_block = impl::check_scratch(fn, g, scratch, g.scratch_per_sample());
  using T = typename DW::non_const_value_type;
  using Space = typename Scratch::memory_space;
  const std::int64_t k = g.patch(), positions = g.positions(), channels = g.out_channels;
  const std::int64_t batch = g.batch;

  // The sum of each row (n, c) of dy, taken by the copy of dy below.
  T* const row_sums = db.extent(0) > 0 ? scratch.data() + g.flipped_weights_size() : nullptr;
  T* const blocks = scratch.data() + g.scratch_fixed();
  const bool transposed = with_dx && g.transposed_input_gradient();
  const Conv2dGeometry t = g.transposed();
  impl::ColumnMatrix<T, Space> flipped(scratch.data(), transposed ? g.in_channels : 0,
                                       transposed ? t.patch() : 0);
  if (transposed) impl::flip_weights(exec, g, w, flipped);
  impl::for_each_block(batch, max_block, [&](std::int64_t first, std::int64_t count) {
    impl::ColumnMatrix<T, Space> col(blocks, k, count * positions);
    impl::ColumnMatrix<T, Space> grad(blocks + k * count * positions, channels, count * positions);
    impl::im2col(exec, g, x, first, count, col);
    impl::channel_major(exec, grad, dy, db, first, count, channels, positions,
                        impl::Transfer::from_nchw, row_sums);
    compat::gemm(exec, "N", "T", T(1), grad, col, T(1), dw);
    if (!with_dx) return;
    if (!transposed) {
      compat::gemm(exec, "T", "N", T(1), w, grad, T(0), col);
      impl::col2im_add(exec, g, col, first, count, dx);
      return;
    }
    // dx += conv(dy, flipped weights): the columns of dy, one product, and
    // an add into dx (no fold).
    const std::int64_t inputs = t.positions();
    impl::ColumnMatrix<T, Space> dy_col(blocks, t.patch(), count * inputs);
    impl::ColumnMatrix<T, Space> dx_block(blocks + t.patch() * count * inputs, g.in_channels,
                                          count * inputs);
    impl::im2col(exec, t, dy, first, count, dy_col);
    compat::gemm(exec, "N", "N", T(1), flipped, dy_col, T(0), dx_block);
    impl::channel_major(exec, dx_block, dx, db, first, count, g.in_channels, inputs,
                        impl::Transfer::add_to_nchw);
  });

  if (row_sums != nullptr) impl::add_bias_gradient(exec, row_sums, batch, channels, db);
}

template <class X, class W, class DY, class DX, class DW, class DB, class Scratch>
void conv2d_backward(const Conv2dGeometry& g, const X& x, const W& w, const DY& dy, const DX& dx,
                     const DW& dw, const DB& db, const Scratch& scratch) {
  conv2d_backward(typename DW::execution_space(), g, x, w, dy, dx, dw, db, scratch);
}

}  // namespace tessera::kernels
