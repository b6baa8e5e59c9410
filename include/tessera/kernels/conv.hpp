// 2-D convolution over NCHW tensors: forward lowers a block of samples to
// columns (im2col) and multiplies by the weights, one product per block
// rather than per sample; backward multiplies again and folds the columns
// back in gather form, so no atomics are needed and results do not depend
// on the thread count. Backward accumulates into dx, dW and db. An empty
// bias (extent 0) means a convolution without one: forward adds nothing
// and backward computes no bias gradient.
//
// x, y, dy and dx may be bf16 or fp16 (the weights, their gradients and the
// scratch stay float): the columns hold the values widened to float, the
// products are float, and each output or input gradient is rounded once.
//
// This file is the interface: the argument checks and the dispatch to a
// schedule (ConvSchedule; conv2d_schedule chooses). The pieces:
//   conv_geometry.hpp       Conv2dGeometry (block and scratch sizes), ConvSchedule
//   impl/conv_lowering.hpp  im2col, the fold, moves between NCHW and gemm blocks
//   impl/conv_blocks.hpp    ConvSchedule::blocks: each product one gemm on the
//                           whole execution space (any space)
//   impl/conv_threads.hpp   ConvSchedule::threads: a block of samples per host
//                           thread, with a one-thread BLAS gemm (OpenMP, Serial)
//   impl/conv_winograd.hpp  ConvSchedule::winograd: the threads schedule with
//                           Winograd's F(2 x 2, r x r) products for 3 x 3 and
//                           5 x 5 kernels at stride 1 (transforms: impl/winograd.hpp)
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/machine.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/kernels/conv_geometry.hpp>
#include <tessera/kernels/impl/conv_blocks.hpp>
#include <tessera/kernels/impl/conv_threads.hpp>
#include <tessera/kernels/impl/conv_winograd.hpp>

#include <cstdint>

namespace tessera::kernels {

namespace impl {

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

}  // namespace impl

// The schedule conv2d_forward and conv2d_backward run best on ExecSpace
// (any of its instances): ConvSchedule::winograd (the threads schedule,
// with Winograd's products where the geometry allows) on the OpenMP and
// Serial spaces where thread_sgemm() has a gemm, ConvSchedule::blocks
// otherwise.
template <class ExecSpace>
ConvSchedule conv2d_schedule() {
  if constexpr (impl::thread_gemm_space_v<ExecSpace>)
    return thread_sgemm() != nullptr ? ConvSchedule::winograd : ConvSchedule::blocks;
  return ConvSchedule::blocks;
}
template <class ExecSpace>
ConvSchedule conv2d_schedule(const ExecSpace& /*exec*/) {
  return conv2d_schedule<ExecSpace>();
}

// Threads the threads schedule's scratch must serve, allocated once for
// every instance of ExecSpace a layer may run on: the whole space's
// (an instance from partition_space has fewer).
template <class ExecSpace>
std::int64_t conv2d_thread_slots() {
  return Kokkos::Experimental::UniqueToken<ExecSpace>().size();
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
  if (schedule == ConvSchedule::winograd && g.winograd())
    impl::conv2d_forward_winograd(exec, g, x, w, b, y, scratch);
  else if (schedule != ConvSchedule::blocks)
    impl::conv2d_forward_threads(exec, g, x, w, b, y, scratch);
  else
    impl::conv2d_forward_blocks(exec, g, x, w, b, y, scratch);
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
  TESSERA_REQUIRE(dx.size() == 0 || static_cast<std::int64_t>(dx.size()) == g.input_size(),
                  fn << ": dx has " << dx.size() << " elements, x " << x.size());
  if (schedule == ConvSchedule::winograd && g.winograd())
    impl::conv2d_backward_winograd(exec, g, x, w, dy, dx, dw, db, scratch);
  else if (schedule != ConvSchedule::blocks)
    impl::conv2d_backward_threads(exec, g, x, w, dy, dx, dw, db, scratch);
  else
    impl::conv2d_backward_blocks(exec, g, x, w, dy, dx, dw, db, scratch);
}

template <class X, class W, class DY, class DX, class DW, class DB, class Scratch>
void conv2d_backward(const Conv2dGeometry& g, const X& x, const W& w, const DY& dy, const DX& dx,
                     const DW& dw, const DB& db, const Scratch& scratch) {
  conv2d_backward(typename DW::execution_space(), g, x, w, dy, dx, dw, db, scratch);
}

}  // namespace tessera::kernels
