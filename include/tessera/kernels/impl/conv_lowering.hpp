// The lowering of conv.hpp's products: a block of samples copied
// to columns (im2col) so that one gemm covers it, the columns' gradient
// folded back in gather form (each input element's taps collected in a
// fixed order, so no atomics and no dependence on the thread count), the
// moves between NCHW and the channel-major blocks a gemm reads and writes,
// and the bias gradient's ordered sums. Every schedule of conv.hpp runs on these.
//
// Each copy has two paths, chosen by host_fast_paths_v<ExecSpace>. The
// host path gives a thread a whole input plane or row (long copies the
// compiler vectorises, in one core's cache). The device path (CUDA, HIP,
// and the host in device-path mode) gives a team each row or plane and a
// thread each element of it: im2col a team per column row segment (k, n),
// the fold a team per input plane (n, c) whose threads each sum one
// element's taps, channel_major a team per row (n, c), which also sums the
// row for the bias gradient (impl::team_sum). Neighbouring threads touch
// neighbouring addresses; at the CNN deck's sizes (batch 128) the league
// alone is 3,200 to 102,400 teams of 196 or 784 elements, where the host
// path had one thread per plane (32 threads for a block of 32
// one-channel samples). Both paths store the same values, except for the
// rows' sums: the copies are exact, and the fold adds each element's taps
// in the same order.
#pragma once

#include <tessera/core/host_paths.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/conv_geometry.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/team.hpp>
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

// The work of im2col for `count` samples: their input planes read, the
// patch x count * P entries of the columns written (zeros included); copies
// only.
template <class X, class Col>
Work im2col_work(const Conv2dGeometry& g, std::int64_t count, const char* why = nullptr) {
  return Work{bytes_of<typename X::value_type>(count * g.in_channels * g.input_positions()) +
                  bytes_of<typename Col::value_type>(g.patch() * count * g.positions()),
              0, why};
}

// Columns of samples [first, first + count): col(k, n * P + p) with k =
// (c * kh + ki) * kw + kj, so one gemm covers the whole block. The device
// path: a team per segment (k, n) of a column row (rank k * count + n),
// its threads over the P positions (coalesced writes; reads along an input
// row at stride 1). Index arithmetic per position is 32-bit: a 64-bit
// division per entry cost more than the copy.
template <class X, class Col>
struct Im2colTeams {
  WindowAxis rows, cols;
  X x;
  Col col;
  std::int64_t first, count, channels, plane, ld;
  int positions;

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member, std::int64_t rank) const {
    using T = typename Col::non_const_value_type;
    const std::int64_t k = rank / count, n = rank % count;
    const int kj = static_cast<int>(k % cols.kernel);
    const int ki = static_cast<int>((k / cols.kernel) % rows.kernel);
    const auto* in = x.data() + ((first + n) * channels + k / (rows.kernel * cols.kernel)) * plane;
    T* out = col.data() + k * ld + n * positions;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, positions), [&](const int p) {
      const int h = rows.start(p / cols.out) + ki, w = cols.start(p % cols.out) + kj;
      out[p] = h >= 0 && h < rows.in && w >= 0 && w < cols.in
                   ? narrow<T>(widen(in[h * cols.in + w]))
                   : T(0);
    });
  }
};

template <class X, class Col>
TeamPart<Im2colTeams<X, Col>> im2col_part(const Conv2dGeometry& g, const X& x, std::int64_t first,
                                          std::int64_t count, const Col& col) {
  return team_part(
      g.patch() * count, im2col_work<X, Col>(g, count),
      Im2colTeams<X, Col>{g.rows, g.cols, x, col, first, count, g.in_channels, g.input_positions(),
                          std::int64_t(col.stride(0)), static_cast<int>(g.positions())});
}

template <class ExecSpace, class X, class Col>
void im2col_device(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, std::int64_t first,
                   std::int64_t count, const Col& col, TeamShape shape = {}) {
  parallel_teams("tessera::kernels::im2col_device", exec, shape,
                 im2col_part(g, x, first, count, col));
}

// The host path: one thread per input plane (n, c) writes that plane's
// kh * kw rows of P entries (im2col_plane).
template <class ExecSpace, class X, class Col>
void im2col(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, std::int64_t first,
            std::int64_t count, const Col& col) {
  if constexpr (!host_fast_paths_v<ExecSpace>) {
    im2col_device(exec, g, x, first, count, col);
  } else {
    const std::int64_t channels = g.in_channels, positions = g.positions();
    const std::int64_t plane = g.input_positions(), ld = col.stride(0);
    parallel_for(
        "tessera::kernels::im2col", Kokkos::RangePolicy<ExecSpace>(exec, 0, count * channels),
        im2col_work<X, Col>(g, count, "host schedule: one input plane per task"),
        KOKKOS_LAMBDA(const std::int64_t r) {
          im2col_plane(g, x.data() + (first * channels + r) * plane,
                       col.data() + (r / channels) * positions, r % channels, ld);
        });
  }
}

// sum + the taps im2col copied from input element (h, w) of plane c, in
// one sample's columns `block` (rows ld apart), in a fixed order: kernel
// row, then kernel column (the covering windows from the last to the
// first), each add in A. The 16-bit fold and the device path's fold both
// take this order, which is also the order of the host path's float fold.
template <class A, class S>
KOKKOS_INLINE_FUNCTION A gather_taps(A sum, const S* block, std::int64_t c, int h, int w,
                                     const WindowAxis& rows, const WindowAxis& cols,
                                     std::int64_t ld) {
  int ho_lo, ho_hi, wo_lo, wo_hi;
  rows.covering(h, ho_lo, ho_hi);
  cols.covering(w, wo_lo, wo_hi);
  for (int ho = ho_hi - 1; ho >= ho_lo; --ho) {
    const int ki = h - rows.start(ho);
    for (int wo = wo_hi - 1; wo >= wo_lo; --wo) {
      const int kj = w - cols.start(wo);
      sum += block[((c * rows.kernel + ki) * cols.kernel + kj) * ld + std::int64_t(ho) * cols.out +
                   wo];
    }
  }
  return sum;
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
    for (int h = 0; h < rows.in; ++h)
      for (int w = 0; w < cols.in; ++w) {
        T& element = grad[h * cols.in + w];
        element = narrow<T>(gather_taps(widen(element), block, c, h, w, rows, cols, ld));
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

// The work of col2im_add for `count` samples: each tap of the columns read
// and added once (the taps that read padding are neither, a border's worth
// at most), the samples' input planes of dx read and written.
template <class Col, class DX>
Work col2im_work(const Conv2dGeometry& g, std::int64_t count, const char* why = nullptr) {
  const std::int64_t taps = g.patch() * count * g.positions();
  return Work{
      bytes_of<typename Col::value_type>(taps) +
          2 * bytes_of<typename DX::value_type>(count * g.in_channels * g.input_positions()),
      double(taps), why};
}

// dx(n, c) += the entries of col that im2col copied from input plane
// (n, c). The device path: a team per input plane (rank n * C + c), its
// threads over the plane's elements; each element sums its taps
// (gather_taps) onto its widened value and is stored rounded once. No two
// threads write one element, and each sum's order is fixed.
template <class Col, class DX>
struct Col2imTeams {
  WindowAxis rows, cols;
  Col col;
  DX dx;
  std::int64_t first, channels, positions, ld;
  int plane;

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member, std::int64_t r) const {
    using Stored = typename DX::non_const_value_type;
    const std::int64_t c = r % channels;
    Stored* grad = dx.data() + (first * channels + r) * plane;
    const auto* block = col.data() + (r / channels) * positions;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, plane), [&](const int e) {
      grad[e] = narrow<Stored>(
          gather_taps(widen(grad[e]), block, c, e / cols.in, e % cols.in, rows, cols, ld));
    });
  }
};

template <class Col, class DX>
TeamPart<Col2imTeams<Col, DX>> col2im_add_part(const Conv2dGeometry& g, const Col& col,
                                               std::int64_t first, std::int64_t count,
                                               const DX& dx) {
  return team_part(
      count * g.in_channels, col2im_work<Col, DX>(g, count),
      Col2imTeams<Col, DX>{g.rows, g.cols, col, dx, first, g.in_channels, g.positions(),
                           std::int64_t(col.stride(0)), static_cast<int>(g.input_positions())});
}

template <class ExecSpace, class Col, class DX>
void col2im_add_device(const ExecSpace& exec, const Conv2dGeometry& g, const Col& col,
                       std::int64_t first, std::int64_t count, const DX& dx, TeamShape shape = {}) {
  parallel_teams("tessera::kernels::col2im_add_device", exec, shape,
                 col2im_add_part(g, col, first, count, dx));
}

// The host path: one thread owns each plane (fold_plane).
template <class ExecSpace, class Col, class DX>
void col2im_add(const ExecSpace& exec, const Conv2dGeometry& g, const Col& col, std::int64_t first,
                std::int64_t count, const DX& dx) {
  if constexpr (!host_fast_paths_v<ExecSpace>) {
    col2im_add_device(exec, g, col, first, count, dx);
  } else {
    const WindowAxis rows = g.rows, cols = g.cols;
    const std::int64_t channels = g.in_channels, positions = g.positions();
    const std::int64_t plane = std::int64_t(rows.in) * cols.in, ld = col.stride(0);
    parallel_for(
        "tessera::kernels::col2im_add", Kokkos::RangePolicy<ExecSpace>(exec, 0, count * channels),
        col2im_work<Col, DX>(g, count, "host schedule: one input plane per task"),
        KOKKOS_LAMBDA(const std::int64_t r) {
          const std::int64_t n = r / channels, c = r % channels;
          fold_plane(dx.data() + (first * channels + r) * plane, col.data() + n * positions, c,
                     rows, cols, ld);
        });
  }
}

// Directions of channel_major.
enum class Transfer {
  to_nchw,      // nchw = block + bias(c) (+ 0 when bias is empty)
  add_to_nchw,  // nchw += block; bias is not read
  from_nchw     // block = nchw; bias is not read
};

// One entry of a channel_major transfer: `cell` in the block, `value` in
// NCHW, `bias` the channel's bias for to_nchw.
template <class T, class S>
KOKKOS_INLINE_FUNCTION void move_entry(T& cell, S& value, T bias, Transfer transfer) {
  if (transfer == Transfer::to_nchw)
    value = narrow<std::remove_const_t<S>>(cell + bias);
  else if (transfer == Transfer::add_to_nchw)
    add_rounded(value, widen(cell));
  else
    cell = narrow<T>(widen(value));
}

// One row of a channel_major transfer: `row` (a channel's positions in the
// block) and `sample` (the same positions in NCHW), `bias` the channel's
// bias for to_nchw. from_nchw with row_sum: also *row_sum = the lane_sum of
// the row. Whole rows, so that the host compiler vectorises the copies.
template <class T, class S>
KOKKOS_INLINE_FUNCTION void move_row(T* row, S* sample, T bias, std::int64_t positions,
                                     Transfer transfer, T* row_sum = nullptr) {
  if (transfer == Transfer::to_nchw) {
    for (std::int64_t p = 0; p < positions; ++p)
      move_entry(row[p], sample[p], bias, Transfer::to_nchw);
  } else if (transfer == Transfer::add_to_nchw) {
    add_row(sample, row, static_cast<int>(positions), 1);
  } else {
    copy_row(row, sample, static_cast<int>(positions), 1);
    if (row_sum != nullptr) *row_sum = lane_sum(row, positions);  // in cache now, widened
  }
}

// The work of a channel_major transfer of `rows` rows (n, c) of
// `positions` entries: to_nchw reads the block and the bias (`bias_size`
// entries) and writes nchw, an add an entry (of a zero bias too);
// add_to_nchw reads the block and reads and writes nchw, an add an entry;
// from_nchw reads nchw and writes the block, and with row sums writes a sum
// a row, an add an entry.
template <class Block, class NCHW, class B>
Work channel_major_work(Transfer transfer, std::int64_t rows, std::int64_t positions,
                        std::int64_t bias_size, bool with_sums, const char* why = nullptr) {
  const std::int64_t n = rows * positions;
  const double block = bytes_of<typename Block::value_type>(n);
  const double nchw = bytes_of<typename NCHW::value_type>(n);
  if (transfer == Transfer::to_nchw)
    return Work{block + nchw + bytes_of<typename B::value_type>(bias_size), double(n), why};
  if (transfer == Transfer::add_to_nchw) return Work{block + 2 * nchw, double(n), why};
  return Work{nchw + block + (with_sums ? bytes_of<typename Block::value_type>(rows) : 0),
              with_sums ? double(n) : 0, why};
}

// channel_major's device path: a team per row (n, c) (rank n * C + c), its
// threads over the row's positions (neighbouring threads touch neighbouring
// addresses in both layouts). from_nchw with row_sums: the copy runs inside
// team_sum, so that the row's sum (widened) takes no pass of its own; its
// bits depend on neither the team size nor the thread count.
template <class Block, class NCHW, class B>
struct ChannelMajorTeams {
  using T = typename Block::non_const_value_type;
  Block block;
  NCHW nchw;
  B bias;
  T* row_sums;
  std::int64_t first, channels, positions, ld;
  Transfer transfer;
  bool with_bias, with_sums;

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member, std::int64_t r) const {
    const std::int64_t c = r % channels;
    T* row = block.data() + c * ld + (r / channels) * positions;
    auto* sample = nchw.data() + (first * channels + r) * positions;
    if (with_sums) {
      const T sum =
          team_sum<T>(member, team_lanes_scratch<T>(member), positions, [&](std::int64_t p) {
            row[p] = narrow<T>(widen(sample[p]));
            return row[p];
          });
      Kokkos::single(Kokkos::PerTeam(member), [&] { row_sums[first * channels + r] = sum; });
      return;
    }
    const T b = with_bias ? T(bias(c)) : T(0);
    const Transfer how = transfer;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, positions),
                         [&](const std::int64_t p) { move_entry(row[p], sample[p], b, how); });
  }
};

template <class Block, class NCHW, class B>
TeamPart<ChannelMajorTeams<Block, NCHW, B>> channel_major_part(
    const Block& block, const NCHW& nchw, const B& bias, std::int64_t first, std::int64_t count,
    std::int64_t channels, std::int64_t positions, Transfer transfer,
    typename Block::non_const_value_type* row_sums = nullptr) {
  using T = typename Block::non_const_value_type;
  const bool with_bias = transfer == Transfer::to_nchw && bias.extent(0) > 0;
  const bool with_sums = transfer == Transfer::from_nchw && row_sums != nullptr;
  return team_part(count * channels,
                   channel_major_work<Block, NCHW, B>(transfer, count * channels, positions,
                                                      with_bias ? channels : 0, with_sums),
                   ChannelMajorTeams<Block, NCHW, B>{block, nchw, bias, row_sums, first, channels,
                                                     positions, std::int64_t(block.stride(0)),
                                                     transfer, with_bias, with_sums},
                   with_sums ? team_sum_bytes<T>() : 0);
}

template <class ExecSpace, class Block, class NCHW, class B>
void channel_major_device(const ExecSpace& exec, const Block& block, const NCHW& nchw,
                          const B& bias, std::int64_t first, std::int64_t count,
                          std::int64_t channels, std::int64_t positions, Transfer transfer,
                          typename Block::non_const_value_type* row_sums = nullptr,
                          TeamShape shape = {}) {
  parallel_teams(
      "tessera::kernels::channel_major_device", exec, shape,
      channel_major_part(block, nchw, bias, first, count, channels, positions, transfer, row_sums));
}

// Moves a block of samples between NCHW [count, C, P] (at sample `first` of
// `nchw`) and the channel-major [C, count * P] that one gemm per block reads
// and writes. from_nchw with row_sums: also row_sums[n * C + c] = the sum
// of row (n, c) of nchw, for every sample n of the block, in the same pass
// (the host path: lane_sum; the device path: team_sum).
// to_nchw and add_to_nchw round each value they store into a 16-bit nchw once.
// The host path: one thread per row (n, c).
template <class ExecSpace, class Block, class NCHW, class B>
void channel_major(const ExecSpace& exec, const Block& block, const NCHW& nchw, const B& bias,
                   std::int64_t first, std::int64_t count, std::int64_t channels,
                   std::int64_t positions, Transfer transfer,
                   typename Block::non_const_value_type* row_sums = nullptr) {
  if constexpr (!host_fast_paths_v<ExecSpace>) {
    channel_major_device(exec, block, nchw, bias, first, count, channels, positions, transfer,
                         row_sums);
  } else {
    using T = typename Block::non_const_value_type;
    const std::int64_t ld = block.stride(0);
    const bool with_bias = transfer == Transfer::to_nchw && bias.extent(0) > 0;
    parallel_for(
        "tessera::kernels::channel_major",
        Kokkos::RangePolicy<ExecSpace>(exec, 0, count * channels),
        channel_major_work<Block, NCHW, B>(transfer, count * channels, positions,
                                           with_bias ? channels : 0, row_sums != nullptr,
                                           "host schedule: one row (n, c) per task"),
        KOKKOS_LAMBDA(const std::int64_t r) {
          const std::int64_t c = r % channels, n = r / channels;
          const T b = transfer == Transfer::to_nchw && bias.extent(0) > 0 ? T(bias(c)) : T(0);
          move_row(block.data() + c * ld + n * positions,
                   nchw.data() + ((first + n) * channels + c) * positions, b, positions, transfer,
                   row_sums != nullptr ? row_sums + (first + n) * channels + c : nullptr);
        });
  }
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
template <class T, class DB>
KOKKOS_INLINE_FUNCTION void add_channel_sum(const T* row_sums, std::int64_t batch,
                                            std::int64_t channels, const DB& db, std::int64_t c) {
  T sum = 0;
  for (std::int64_t n = 0; n < batch; ++n) sum += row_sums[n * channels + c];
  db(c) += sum;
}

// The batch x channels sums read, db read and written; an add a sum and one into db.
template <class T, class DB>
Work bias_gradient_work(std::int64_t batch, std::int64_t channels, const char* why = nullptr) {
  return Work{bytes_of<T>(batch * channels) + 2 * bytes_of<typename DB::value_type>(channels),
              double(batch + 1) * double(channels), why};
}

// The host path: a task per channel.
template <class ExecSpace, class T, class DB>
void add_bias_gradient(const ExecSpace& exec, const T* row_sums, std::int64_t batch,
                       std::int64_t channels, const DB& db) {
  parallel_for(
      "tessera::kernels::conv2d_bias_grad", Kokkos::RangePolicy<ExecSpace>(exec, 0, channels),
      bias_gradient_work<T, DB>(batch, channels),
      KOKKOS_LAMBDA(const std::int64_t c) { add_channel_sum(row_sums, batch, channels, db, c); });
}

// The device path: a team per channel (rank c), one thread of it adding
// the channel's sums in sample order.
template <class T, class DB>
struct BiasGradientTeams {
  const T* row_sums;
  DB db;
  std::int64_t batch, channels;

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member, std::int64_t c) const {
    Kokkos::single(Kokkos::PerTeam(member),
                   [&] { add_channel_sum(row_sums, batch, channels, db, c); });
  }
};

template <class T, class DB>
TeamPart<BiasGradientTeams<T, DB>> bias_gradient_part(const T* row_sums, std::int64_t batch,
                                                      std::int64_t channels, const DB& db) {
  return team_part(row_sums != nullptr ? channels : 0,
                   row_sums != nullptr ? bias_gradient_work<T, DB>(batch, channels) : Work{},
                   BiasGradientTeams<T, DB>{row_sums, db, batch, channels});
}

}  // namespace tessera::kernels::impl
