// The geometry of a 2-D convolution over NCHW tensors (Conv2dGeometry), on
// the sliding-window axes of window.hpp, with the sizes of each schedule's
// blocks and scratch, and the schedules themselves (ConvSchedule). The
// kernels are in conv.hpp; this header is what a layer needs to size its
// buffers and choose.
#pragma once

#include <tessera/kernels/impl/winograd.hpp>
#include <tessera/kernels/window.hpp>

#include <cstdint>

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
  // swapped, padded by kernel - 1 - pad (Winograd's backward computes it
  // so).
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
  // (backward: the columns, which then take their gradient, and dy's block).
  std::int64_t forward_per_sample() const { return (patch() + out_channels) * positions(); }
  // The same for ConvSchedule::blocks' forward and backward.
  std::int64_t scratch_per_sample() const { return forward_per_sample(); }
  // Scratch floats besides the samples': the bias gradient's sum of each
  // (sample, output channel) row, which backward takes while it copies dy
  // anyway instead of reading dy once more.
  std::int64_t scratch_fixed() const { return batch * out_channels; }
  // Scratch floats for blocks of `samples` samples.
  std::int64_t scratch_size(std::int64_t samples) const {
    return scratch_fixed() + samples * scratch_per_sample();
  }

  // ConvSchedule::threads. A thread's block has as many samples as make at
  // least 256 columns (a gemm wide enough for the BLAS's kernels), as long
  // as its columns and output stay within thread_block_floats (in a core's
  // L2 cache); at least one sample, at most the batch.
  static constexpr std::int64_t thread_block_floats = std::int64_t(192) << 10;
  // A Winograd block's work may be larger (3 MiB, beyond L2 into L3): its
  // t^2 products read t^2 blocks of in x out transformed weights (36 x 128
  // x 128 floats at F(4 x 4, 3 x 3) with 128 channels, 2.4 MB) for every
  // block, and too few rows a block (12 tiles within 192 Ki floats) leave
  // the products bound by reading them.
  static constexpr std::int64_t winograd_block_floats = 4 * thread_block_floats;
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
  // Partials that `groups` groups on `threads` threads hold at once: the
  // groups run in waves of as many as the threads, and past one wave one
  // more partial holds the sum of the waves before
  // (impl::PartialWaves), so that the partials still add in group order.
  static std::int64_t partials_held(std::int64_t groups, std::int64_t threads) {
    if (threads < 1) threads = 1;
    return groups <= threads ? groups : threads + 1;
  }

  // ConvSchedule::winograd: Winograd's F(m x m, r x r) (impl/winograd.hpp)
  // for the forward and input-gradient products of square 3 x 3 and 5 x 5
  // kernels at stride 1 with padding below the kernel, when both channel
  // counts are multiples of impl::winograd_lanes (the transforms' vectors).
  bool winograd() const {
    return rows.kernel == cols.kernel && impl::Winograd::supports(rows.kernel) &&
           rows.stride == 1 && cols.stride == 1 && rows.pad < rows.kernel &&
           cols.pad < cols.kernel && in_channels % impl::winograd_lanes == 0 &&
           out_channels % impl::winograd_lanes == 0 && in_channels > 0 && out_channels > 0;
  }
  // Output tiles of m x m positions per sample and channel.
  std::int64_t winograd_tiles() const {
    return std::int64_t(impl::Winograd::tiles(rows.out, rows.kernel)) *
           impl::Winograd::tiles(cols.out, cols.kernel);
  }
  // Floats of one pass's work for `samples` samples: the input laid out
  // channel-last and padded to whole tiles, and the output tiles
  // channel-last (one sample at a time); the t^2 transformed inputs and
  // products of every tile of the samples (impl::WinogradLayout).
  std::int64_t winograd_floats(std::int64_t samples) const {
    return impl::WinogradLayout(rows.out, cols.out, rows.kernel, in_channels, out_channels, samples)
        .floats;
  }
  // Samples whose tiles go through one set of t^2 products: at least 64
  // tiles (rows enough to reuse each product's tile of weights), as long as
  // the work stays within winograd_block_floats; at least one, at most the
  // batch.
  std::int64_t winograd_block_samples() const {
    const std::int64_t tiles = winograd_tiles() > 0 ? winograd_tiles() : 1;
    std::int64_t samples = (64 + tiles - 1) / tiles;
    while (samples > 1 && winograd_floats(samples) > winograd_block_floats) --samples;
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
    const std::int64_t t = impl::Winograd::tile_size(rows.kernel);
    return t * t * in_channels * out_channels;
  }
  // Floats of the transformed weights: t^2 in_channels x out_channels for
  // the forward and as many for the input gradient (0 without Winograd).
  std::int64_t winograd_weights_size() const {
    return winograd() ? 2 * winograd_partial_size() : 0;
  }

  // ConvSchedule::direct: the three products as register tiles over the
  // input laid out channel-last (impl/conv_direct.hpp), for kernels of at
  // most direct_max_taps taps at any stride and padding below the kernel.
  static constexpr std::int64_t direct_max_taps = 64;
  bool direct() const {
    return rows.kernel * cols.kernel <= direct_max_taps && rows.pad < rows.kernel &&
           cols.pad < cols.kernel && in_channels > 0 && out_channels > 0;
  }
  std::int64_t taps() const { return std::int64_t(rows.kernel) * cols.kernel; }
  // A sample's input as the direct schedule reads it: the rows and columns
  // its windows cover, padding included, channel-last.
  std::int64_t direct_rows() const {
    return std::int64_t(rows.out - 1) * rows.stride + rows.kernel;
  }
  std::int64_t direct_cols() const {
    return std::int64_t(cols.out - 1) * cols.stride + cols.kernel;
  }
  std::int64_t direct_plane() const { return direct_rows() * direct_cols(); }
  // The planar form of the direct schedule (impl/conv_planar.hpp), for at
  // most direct_planar_max_in input channels at stride 1 (the one-channel
  // stems), where a channel-last tile has too few channels to sum over:
  // each channel's plane laid out alone, its rows direct_cols() apart, and
  // output position (row, column) at flat index row * direct_cols() +
  // column of the plane (the columns from cols.out to direct_cols() are
  // positions no output has).
  static constexpr std::int64_t direct_planar_max_in = 4;
  bool direct_planar() const {
    return direct() && in_channels <= direct_planar_max_in && rows.stride == 1 && cols.stride == 1;
  }
  // Flat positions of a plane, rounded up to the 8 lanes of the planar
  // weight gradient's sums.
  std::int64_t direct_flat_positions() const {
    return (std::int64_t(rows.out) * direct_cols() + 7) / 8 * 8;
  }
  // Floats of a laid channel plane in the planar form: the windows of every
  // flat position (the last reading kernel - 1 columns past its row).
  std::int64_t direct_planar_plane() const {
    return direct_flat_positions() + std::int64_t(rows.kernel - 1) * direct_cols() + cols.kernel -
           1;
  }
  // Channel counts rounded up to whole vectors of impl::float_lanes: the
  // output gradient's rows and the transformed weights (dy [P][O]; the
  // forward's [taps][in][O], the input gradient's [taps][out][C]).
  static std::int64_t lanes_up(std::int64_t n) { return (n + 15) / 16 * 16; }
  // Floats of one sample in a thread's slot: its input (forward and
  // backward), then its output gradient and input gradient (backward); in
  // the planar form, its input planes and then its output gradient's
  // (out_channels planes of direct_flat_positions()), if that is more.
  std::int64_t direct_per_sample() const {
    const std::int64_t laid = direct_plane() * (in_channels + lanes_up(in_channels)) +
                              positions() * lanes_up(out_channels);
    if (!direct_planar()) return laid;
    const std::int64_t planar =
        in_channels * direct_planar_plane() + out_channels * direct_flat_positions();
    return laid > planar ? laid : planar;
  }
  // Samples a block: a sixteenth of the batch, so that the blocks make
  // thread_groups_max groups of the weight gradient and as many tasks
  // (whole waves for 2, 4, 8 or 16 threads), as long as their floats stay
  // within thread_block_floats; at least one.
  std::int64_t direct_block_samples() const {
    std::int64_t samples = (batch + thread_groups_max - 1) / thread_groups_max;
    if (samples * direct_per_sample() > thread_block_floats)
      samples = thread_block_floats / direct_per_sample();
    if (samples > batch) samples = batch;
    return samples < 1 ? 1 : samples;
  }
  std::int64_t direct_blocks() const {
    const std::int64_t s = direct_block_samples();
    return (batch + s - 1) / s;
  }
  std::int64_t direct_group_blocks() const { return group_blocks(direct_blocks()); }
  std::int64_t direct_groups() const { return groups(direct_blocks()); }
  // Floats of a group's weight gradient: [taps][in][out_lanes], the
  // forward's weights' layout.
  std::int64_t direct_partial_size() const { return taps() * in_channels * lanes_up(out_channels); }
  // Floats of the transformed weights: the forward's, then the input
  // gradient's (0 where the direct schedule does not apply).
  std::int64_t direct_weights_size() const {
    return direct() ? taps() * (in_channels * lanes_up(out_channels) +
                                out_channels * lanes_up(in_channels))
                    : 0;
  }

  // Scratch floats of ConvSchedule::threads, ::winograd and ::direct on
  // `threads` threads besides the threads' blocks: the rows' sums for the
  // bias gradient and the groups' dW partials (or dU partials, with
  // Winograd), room for the partials_held of min(blocks, thread_groups_max)
  // groups, then the transformed weights. One scratch serves all three, so
  // that a layer may run any of them. That grows with the batch while the
  // number of groups need not (22 blocks make 11 groups of 2, 16 blocks 16
  // groups of 1), so scratch for a batch holds every smaller batch.
  std::int64_t thread_scratch_fixed(std::int64_t threads) const {
    const auto room = [threads](std::int64_t blocks) {
      return partials_held(blocks < thread_groups_max ? blocks : thread_groups_max, threads);
    };
    std::int64_t partials = room(thread_blocks()) * out_channels * patch();
    if (winograd()) {
      const std::int64_t transformed = room(winograd_blocks()) * winograd_partial_size();
      partials = partials > transformed ? partials : transformed;
    }
    if (direct()) {
      const std::int64_t held = room(direct_blocks()) * direct_partial_size();
      partials = partials > held ? partials : held;
    }
    return batch * out_channels + partials + transformed_weights_size();
  }
  // The transformed weights' floats: Winograd's or the direct schedule's,
  // whichever is larger.
  std::int64_t transformed_weights_size() const {
    const std::int64_t w = winograd_weights_size(), d = direct_weights_size();
    return w > d ? w : d;
  }
  // Scratch floats of one thread: its block's columns and output (or output
  // gradient), Winograd's work for the forward (which the weight
  // gradient's takes too) or the input gradient, or the direct schedule's
  // block, whichever is largest.
  std::int64_t thread_slot_size() const {
    std::int64_t floats = thread_block_samples() * forward_per_sample();
    if (winograd()) {
      const std::int64_t forward = winograd_floats(winograd_block_samples());
      const Conv2dGeometry t = transposed();
      const std::int64_t gradient = t.winograd_floats(t.winograd_block_samples());
      floats = floats > forward ? floats : forward;
      floats = floats > gradient ? floats : gradient;
    }
    if (direct()) {
      const std::int64_t block = direct_block_samples() * direct_per_sample();
      floats = floats > block ? floats : block;
    }
    return floats;
  }
  // Scratch floats of ConvSchedule::threads and ::winograd on `threads`
  // threads.
  std::int64_t thread_scratch_size(std::int64_t threads) const {
    return thread_scratch_fixed(threads) + threads * thread_slot_size();
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
  // Conv2dGeometry::winograd() holds (F(4 x 4, 3 x 3): 4x fewer
  // multiplications for 3 x 3 kernels; F(2 x 2, 5 x 5): 2.78x for 5 x 5):
  // each thread transforms the tiles of a
  // block of samples, multiplies them with t^2 register-tile products
  // (impl::tile_product, no BLAS) and transforms the products back. The
  // same scratch and spaces as threads.
  winograd,
  // Each host thread takes whole blocks of samples
  // (Conv2dGeometry::direct_block_samples), lays their input out
  // channel-last and computes each product as register tiles of output
  // positions by output channels (forward), of positions by input
  // channels a kernel tap at a time (input gradient) and of (tap, input
  // channel) pairs by output channels (weight gradient), without columns or
  // a BLAS; with at most direct_planar_max_in input channels at stride 1,
  // a plane per channel instead (Conv2dGeometry::direct_planar). Geometries
  // without Conv2dGeometry::direct() run the threads schedule. The same
  // scratch as threads; the OpenMP and Serial spaces.
  direct
};

// The scratch ceiling of ConvSchedule::blocks where the kernels take their
// device paths (host_fast_paths_v false): a GPU wants few launches, each
// with many work items, and has the memory, so blocks as large as this
// allows: the whole batch of every convolution of the decks (the CNN's
// second, 32 -> 64 channels at 14 x 14, batch 128: 87 MB). The host paths
// keep blocks that stay in cache (Conv2D::max_scratch_bytes). Device-path
// mode on the host keeps the GPU's blocks, so that it runs what the GPU
// runs, at a cost: the CNN deck trained at 198 samples/s on 2 cores, 242
// with 4 MiB blocks.
constexpr std::int64_t device_block_scratch_bytes = std::int64_t(256) << 20;

// Samples per block so that the scratch stays within max_bytes (at least one).
inline std::int64_t conv2d_block_samples(const Conv2dGeometry& g, std::int64_t max_bytes) {
  const std::int64_t per_sample = g.scratch_per_sample() * std::int64_t(sizeof(float));
  const std::int64_t room = max_bytes - g.scratch_fixed() * std::int64_t(sizeof(float));
  std::int64_t block = per_sample > 0 ? room / per_sample : g.batch;
  if (block > g.batch) block = g.batch;
  return block < 1 ? 1 : block;
}

}  // namespace tessera::kernels
