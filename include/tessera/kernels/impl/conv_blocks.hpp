// ConvSchedule::blocks: blocks of samples one after another, each block's
// copies (conv_lowering.hpp) on all threads of the execution space and its
// products one gemm on the whole space (impl::gemm: Kokkos Kernels, or
// the vendor BLAS it calls). Any execution space; the schedule CUDA and HIP
// run, where the copies take their device paths (a team per row or plane,
// a thread per element) and Conv2D's scratch holds larger blocks (device_block_scratch_bytes:
// the decks' whole batches, so one block of launches per pass).
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/kernels/impl/conv_lowering.hpp>
#include <tessera/kernels/impl/launch.hpp>

#include <cstdint>

namespace tessera::kernels::impl {

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

// y = conv(x, W) + b, ConvSchedule::blocks: the batch in blocks of as many
// samples as scratch holds (at least g.scratch_size(1) floats).
template <class ExecSpace, class X, class W, class B, class Y, class Scratch>
void conv2d_forward_blocks(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                           const B& b, const Y& y, const Scratch& scratch) {
  constexpr const char* fn = "tessera::kernels::conv2d_forward";
  const std::int64_t max_block = check_scratch(fn, g, scratch, g.scratch_per_sample());
  using T = typename Scratch::non_const_value_type;
  using Space = typename Scratch::memory_space;
  const std::int64_t k = g.patch(), positions = g.positions();
  T* const blocks = scratch.data() + g.scratch_fixed();
  for_each_block(g.batch, max_block, [&](std::int64_t first, std::int64_t count) {
    ColumnMatrix<T, Space> col(blocks, k, count * positions);
    ColumnMatrix<T, Space> out(blocks + k * count * positions, g.out_channels, count * positions);
    im2col(exec, g, x, first, count, col);
    impl::gemm(exec, "N", "N", T(1), w, col, T(0), out);
    channel_major(exec, out, y, b, first, count, g.out_channels, positions, Transfer::to_nchw);
  });
}

// Backward's copies before its products: the columns of x and dy's block
// in channel-major form (with its rows' sums for the bias gradient). On
// the device path one launch holds both.
template <class ExecSpace, class X, class DY, class DB, class Col, class Grad, class T>
void lower_for_gradients(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const DY& dy,
                         const DB& db, std::int64_t first, std::int64_t count, const Col& col,
                         const Grad& grad, T* row_sums) {
  if constexpr (!host_fast_paths_v<ExecSpace>) {
    parallel_teams("tessera::kernels::conv2d_backward_lower", exec, TeamShape{},
                   im2col_part(g, x, first, count, col),
                   channel_major_part(grad, dy, db, first, count, g.out_channels, g.positions(),
                                      Transfer::from_nchw, row_sums));
  } else {
    im2col(exec, g, x, first, count, col);
    channel_major(exec, grad, dy, db, first, count, g.out_channels, g.positions(),
                  Transfer::from_nchw, row_sums);
  }
}

// Backward's work after its products: the columns' gradient folded into
// dx (when dx is not empty), and, after the last block (row_sums not
// null), the bias gradient from the rows' sums of the whole batch. On the
// device path one launch holds both.
template <class ExecSpace, class Col, class DX, class T, class DB>
void fold_gradients(const ExecSpace& exec, const Conv2dGeometry& g, const Col& col,
                    std::int64_t first, std::int64_t count, const DX& dx, const T* row_sums,
                    const DB& db) {
  const bool with_dx = dx.size() > 0;
  if constexpr (!host_fast_paths_v<ExecSpace>) {
    parallel_teams("tessera::kernels::conv2d_backward_fold", exec, TeamShape{},
                   col2im_add_part(g, col, first, with_dx ? count : 0, dx),
                   bias_gradient_part(row_sums, g.batch, g.out_channels, db));
  } else {
    if (with_dx) col2im_add(exec, g, col, first, count, dx);
    if (row_sums != nullptr) add_bias_gradient(exec, row_sums, g.batch, g.out_channels, db);
  }
}

// dW += dy * cols(x)^T, db += the sums of dy, and dx += col2im(W^T dy),
// ConvSchedule::blocks. A block is four launches on the device path: the
// copies (lower_for_gradients), two products, and the fold with, after
// the last block, the bias gradient (fold_gradients).
template <class ExecSpace, class X, class W, class DY, class DX, class DW, class DB, class Scratch>
void conv2d_backward_blocks(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                            const DY& dy, const DX& dx, const DW& dw, const DB& db,
                            const Scratch& scratch) {
  constexpr const char* fn = "tessera::kernels::conv2d_backward";
  const bool with_dx = dx.size() > 0;
  const std::int64_t max_block = check_scratch(fn, g, scratch, g.scratch_per_sample());
  using T = typename DW::non_const_value_type;
  using Space = typename Scratch::memory_space;
  const std::int64_t k = g.patch(), positions = g.positions(), channels = g.out_channels;
  const std::int64_t batch = g.batch;

  // The sum of each row (n, c) of dy, taken by the copy of dy below.
  T* const row_sums = db.extent(0) > 0 ? scratch.data() : nullptr;
  T* const blocks = scratch.data() + g.scratch_fixed();
  for_each_block(batch, max_block, [&](std::int64_t first, std::int64_t count) {
    ColumnMatrix<T, Space> col(blocks, k, count * positions);
    ColumnMatrix<T, Space> grad(blocks + k * count * positions, channels, count * positions);
    lower_for_gradients(exec, g, x, dy, db, first, count, col, grad, row_sums);
    impl::gemm(exec, "N", "T", T(1), grad, col, T(1), dw);
    if (with_dx) impl::gemm(exec, "T", "N", T(1), w, grad, T(0), col);
    fold_gradients(exec, g, col, first, count, dx, first + count == batch ? row_sums : nullptr, db);
  });
}

}  // namespace tessera::kernels::impl
