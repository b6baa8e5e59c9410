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
//                           Winograd's F(4 x 4, 3 x 3) and F(2 x 2, 5 x 5)
//                           products at stride 1 (transforms: impl/winograd.hpp)
//   impl/conv_direct.hpp    ConvSchedule::direct: a block of samples per host
//                           thread, laid out channel-last, its products as
//                           register tiles (OpenMP, Serial)
//   impl/conv_planar.hpp    its planar form, a plane per channel, for at most
//                           4 input channels at stride 1
//   impl/register_tiles.hpp the register tiles of both and Winograd's products
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/machine.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/kernels/conv_geometry.hpp>
#include <tessera/kernels/impl/conv_blocks.hpp>
#include <tessera/kernels/impl/conv_direct.hpp>
#include <tessera/kernels/impl/conv_threads.hpp>
#include <tessera/kernels/impl/conv_winograd.hpp>
#include <tessera/kernels/init.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

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

// The schedules that compute g's products themselves on ExecSpace, in the
// order a tie between their times goes: ConvSchedule::blocks alone where
// conv2d_schedule is blocks (device paths, or a BLAS without a gemm for
// each thread); otherwise threads, then winograd where g.winograd() holds
// and direct where g.direct() holds. Each gives the same values up to
// rounding; each its own bits.
template <class ExecSpace>
std::vector<ConvSchedule> conv2d_schedules(const Conv2dGeometry& g) {
  if (conv2d_schedule<ExecSpace>() == ConvSchedule::blocks) return {ConvSchedule::blocks};
  std::vector<ConvSchedule> schedules{ConvSchedule::threads};
  if (g.winograd()) schedules.push_back(ConvSchedule::winograd);
  if (g.direct()) schedules.push_back(ConvSchedule::direct);
  return schedules;
}

// The schedule for g by a rule of the geometry alone, the same on every
// machine of a backend (kernels.conv2d = "fixed"): Winograd's where it
// applies, else the direct products for kernels of several taps over at
// least 16 input channels (the ResNet deck's downsampling 3 x 3
// convolutions ran 1.3 to 1.5 times as fast so as through the columns,
// with AVX-512 and with AVX2) or in the direct schedule's planar form
// (the one-channel stems: their weight gradient 1.1 to 1.3 times as fast,
// the forward as fast), else the threads schedule (1 x 1 projections).
template <class ExecSpace>
ConvSchedule conv2d_fixed_schedule(const Conv2dGeometry& g) {
  if (conv2d_schedule<ExecSpace>() == ConvSchedule::blocks) return ConvSchedule::blocks;
  if (g.winograd()) return ConvSchedule::winograd;
  if (g.direct() && g.taps() > 1 && (g.in_channels >= 16 || g.direct_planar()))
    return ConvSchedule::direct;
  return ConvSchedule::threads;
}

// A schedule's name as decks, reports and checkpoints write it.
inline const char* conv_schedule_name(ConvSchedule schedule) {
  switch (schedule) {
    case ConvSchedule::blocks:
      return "blocks";
    case ConvSchedule::threads:
      return "threads";
    case ConvSchedule::winograd:
      return "winograd";
    case ConvSchedule::direct:
      return "direct";
  }
  return "?";
}
// The schedule a name names; false when it names none.
inline bool conv_schedule_from_name(const std::string& name, ConvSchedule& schedule) {
  for (const ConvSchedule s :
       {ConvSchedule::blocks, ConvSchedule::threads, ConvSchedule::winograd, ConvSchedule::direct})
    if (name == conv_schedule_name(s)) {
      schedule = s;
      return true;
    }
  return false;
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
  else if (schedule == ConvSchedule::direct && g.direct())
    impl::conv2d_forward_direct(exec, g, x, w, b, y, scratch);
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
  else if (schedule == ConvSchedule::direct && g.direct())
    impl::conv2d_backward_direct(exec, g, x, w, dy, dx, dw, db, scratch);
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

// Seconds one forward and one backward pass of g take on exec under each
// of `schedules` (with the input gradient where with_dx; all of them with
// the bias): the best of `repetitions`, the schedules taking turns within
// each repetition after a warm-up pass each, on values of their own
// (uniform in [-1, 1)) and scratch for every host schedule. For choosing a
// schedule by measurement (kernels.conv2d = "measured"): it allocates.
template <class ExecSpace>
std::vector<double> conv2d_seconds(const ExecSpace& exec, const Conv2dGeometry& g,
                                   const std::vector<ConvSchedule>& schedules, bool with_dx,
                                   int repetitions) {
  ScopedRegion region("tessera::kernels::conv2d_seconds");
  using Memory = typename ExecSpace::memory_space;
  using Flat = Kokkos::View<float*, Kokkos::LayoutRight, Memory>;
  using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, Memory>;
  const Flat x("tessera::conv2d_seconds::x", g.input_size()),
      y("tessera::conv2d_seconds::y", g.output_size()),
      dy("tessera::conv2d_seconds::dy", g.output_size()),
      dx("tessera::conv2d_seconds::dx", with_dx ? g.input_size() : 0),
      b("tessera::conv2d_seconds::b", g.out_channels),
      db("tessera::conv2d_seconds::db", g.out_channels);
  const Matrix w("tessera::conv2d_seconds::w", g.out_channels, g.patch()),
      dw("tessera::conv2d_seconds::dw", g.out_channels, g.patch());
  // ConvSchedule::blocks runs blocks of as many samples as this holds.
  std::int64_t floats = g.scratch_size(1);
  for (const ConvSchedule s : schedules)
    if (s != ConvSchedule::blocks) {
      const std::int64_t threads = g.thread_scratch_size(conv2d_thread_slots<ExecSpace>());
      floats = floats > threads ? floats : threads;
    }
  const Flat scratch("tessera::conv2d_seconds::scratch", floats);
  init_uniform(exec, x, 1.0f, 1, 1);
  init_uniform(exec, dy, 1.0f, 1, 2);
  init_uniform(exec, Flat(w.data(), w.size()), 1.0f, 1, 3);
  init_uniform(exec, b, 1.0f, 1, 4);
  const auto pass = [&](ConvSchedule s) {
    exec.fence();
    const auto start = std::chrono::steady_clock::now();
    conv2d_forward(exec, g, x, w, b, y, scratch, s);
    conv2d_backward(exec, g, x, w, dy, dx, dw, db, scratch, s);
    exec.fence();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (const ConvSchedule s : schedules) pass(s);
  std::vector<double> best(schedules.size(), 0.0);
  for (int r = 0; r < repetitions; ++r)
    for (std::size_t i = 0; i < schedules.size(); ++i) {
      const double t = pass(schedules[i]);
      best[i] = r == 0 || t < best[i] ? t : best[i];
    }
  return best;
}

}  // namespace tessera::kernels
