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
  // Forward needs less scratch per sample than backward may: larger blocks.
  const std::int64_t max_block = check_scratch(fn, g, scratch, g.forward_per_sample());
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

// dW += dy * cols(x)^T, db += the sums of dy, and dx += conv(dy, flipped
// W) where g.transposed_input_gradient() holds, else col2im(W^T dy),
// ConvSchedule::blocks.
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
  T* const row_sums = db.extent(0) > 0 ? scratch.data() + g.flipped_weights_size() : nullptr;
  T* const blocks = scratch.data() + g.scratch_fixed();
  const bool transposed = with_dx && g.transposed_input_gradient();
  const Conv2dGeometry t = g.transposed();
  ColumnMatrix<T, Space> flipped(scratch.data(), transposed ? g.in_channels : 0,
                                 transposed ? t.patch() : 0);
  if (transposed) flip_weights(exec, g, w, flipped);
  for_each_block(batch, max_block, [&](std::int64_t first, std::int64_t count) {
    ColumnMatrix<T, Space> col(blocks, k, count * positions);
    ColumnMatrix<T, Space> grad(blocks + k * count * positions, channels, count * positions);
    im2col(exec, g, x, first, count, col);
    channel_major(exec, grad, dy, db, first, count, channels, positions, Transfer::from_nchw,
                  row_sums);
    impl::gemm(exec, "N", "T", T(1), grad, col, T(1), dw);
    if (!with_dx) return;
    if (!transposed) {
      impl::gemm(exec, "T", "N", T(1), w, grad, T(0), col);
      col2im_add(exec, g, col, first, count, dx);
      return;
    }
    // dx += conv(dy, flipped weights): the columns of dy, one product, and
    // an add into dx (no fold).
    const std::int64_t inputs = t.positions();
    ColumnMatrix<T, Space> dy_col(blocks, t.patch(), count * inputs);
    ColumnMatrix<T, Space> dx_block(blocks + t.patch() * count * inputs, g.in_channels,
                                    count * inputs);
    im2col(exec, t, dy, first, count, dy_col);
    impl::gemm(exec, "N", "N", T(1), flipped, dy_col, T(0), dx_block);
    channel_major(exec, dx_block, dx, db, first, count, g.in_channels, inputs,
                  Transfer::add_to_nchw);
  });

  if (row_sums != nullptr) add_bias_gradient(exec, row_sums, batch, channels, db);
}

}  // namespace tessera::kernels::impl
