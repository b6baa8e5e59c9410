// ConvSchedule::direct: each host thread takes whole blocks of samples,
// lays their input out channel-last ([row][column][channel], padding
// included) and computes the convolution's three products as register
// tiles (direct_tile), with neither columns nor a BLAS:
//
//   forward          y(p, o)       = sum over taps t, channels c of
//                                    x(p + t, c) W_t(c, o)
//                    a tile of output positions by output channels;
//   input gradient   dx(p + t, c) += sum over output channels o of
//                                    dy(p, o) W_t(o, c), a tap at a time
//                    (taps in order), positions by input channels;
//   weight gradient  dW_t(c, o)   += sum over positions p of
//                                    x(p + t, c) dy(p, o)
//                    a tile of (tap, input channel) pairs by output
//                    channels.
//
// A tile's rows are read one float at a time (broadcast) and its
// columns as whole vectors of weights or of the output gradient, each
// product in a register; the sums run in a fixed order (taps, then
// channels; output channels; positions), the same for any block size,
// thread count and tiling, so only the weight gradient's partials
// (summed in block and group order, as ConvSchedule::threads sums them)
// depend on the geometry's blocks. NCHW goes to the channel-last layout
// and back once per block; the weights are laid out once per call
// ([tap][in][out] for the forward, [tap][out][in] for the input gradient).
// At most four input channels at stride 1 take the planar form instead
// (impl/conv_planar.hpp): its forward, and its weight gradient where the
// input gradient is not wanted. The tiles: impl/register_tiles.hpp.
#pragma once

#include <tessera/kernels/impl/conv_planar.hpp>
#include <tessera/kernels/impl/conv_threads.hpp>
#include <tessera/kernels/impl/lanes.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/register_tiles.hpp>

#include <cstdint>
#include <type_traits>

namespace tessera::kernels::impl {

// The forward's runs: one a kernel tap (its offset in the laid input),
// over the input channels; the weights [tap][in][out_lanes].
struct TapRuns {
  const std::int64_t* tap_at;
  std::int64_t count, length, b_step, a_step = 1;
  template <class F>
  void each(const F& f) const {
    for (std::int64_t k = 0; k < count; ++k) f(tap_at[k], k * length * b_step);
  }
};
// The weight gradient's runs: one an output row of a sample (samples,
// then rows, in order), over its positions (a_step apart in the laid
// input); dy [position][out_lanes].
struct RowRuns {
  std::int64_t samples, length, a_step, b_step;
  std::int64_t out_rows, sample_floats, row_floats;
  template <class F>
  void each(const F& f) const {
    std::int64_t b = 0;
    for (std::int64_t n = 0; n < samples; ++n)
      for (std::int64_t h = 0; h < out_rows; ++h, b += length * b_step)
        f(n * sample_floats + h * row_floats, b);
  }
};
// One block of `count` samples in a thread's slot
// (Conv2dGeometry::direct_per_sample floats a sample): the input laid out
// channel-last over the rows and columns the windows cover, padding
// included ([sample][row][column][in]); the output gradient position-major
// ([sample * P + p][out_lanes]); the input gradient laid out as the input
// ([sample][row][column][in_lanes]).
struct DirectBlock {
  std::int64_t count, cols, plane, in, in_lanes, out, out_lanes, positions;
  float* x;
  float* dy;
  float* dx;
  std::int64_t taps;
  std::int64_t tap_at[Conv2dGeometry::direct_max_taps];     // in x, a tap's offset
  std::int64_t tap_at_dx[Conv2dGeometry::direct_max_taps];  // in dx
  DirectBlock(const Conv2dGeometry& g, std::int64_t count, float* slot)
      : count(count),
        cols(g.direct_cols()),
        plane(g.direct_plane()),
        in(g.in_channels),
        in_lanes(Conv2dGeometry::lanes_up(g.in_channels)),
        out(g.out_channels),
        out_lanes(Conv2dGeometry::lanes_up(g.out_channels)),
        positions(g.positions()),
        x(slot),
        dy(slot + count * plane * in),
        dx(dy + count * positions * out_lanes),
        taps(g.taps()) {
    for (int ki = 0; ki < g.rows.kernel; ++ki)
      for (int kj = 0; kj < g.cols.kernel; ++kj) {
        tap_at[ki * g.cols.kernel + kj] = (ki * cols + kj) * in;
        tap_at_dx[ki * g.cols.kernel + kj] = (ki * cols + kj) * in_lanes;
      }
  }
  // Offset in x (per_channel = in) or dx (in_lanes) of output position p
  // of the block (samples one after another) under the kernel's first tap.
  std::int64_t window(const Conv2dGeometry& g, std::int64_t p, std::int64_t per_channel) const {
    const std::int64_t n = p / positions, q = p % positions;
    const std::int64_t ho = q / g.cols.out, wo = q % g.cols.out;
    return (n * plane + ho * g.rows.stride * cols + wo * g.cols.stride) * per_channel;
  }
};

// Laid [count][rows][cols][in] from `count` NCHW samples at x: the rows
// and columns the windows read, zero where they read padding.
template <class S>
void direct_lay_out(const Conv2dGeometry& g, const S* x, std::int64_t count, float* laid) {
  const std::int64_t rows = g.direct_rows(), cols = g.direct_cols(), top = g.rows.pad,
                     left = g.cols.pad, in = g.in_channels;
  const std::int64_t in_rows = g.rows.in < rows - top ? g.rows.in : rows - top;
  const std::int64_t in_cols = g.cols.in < cols - left ? g.cols.in : cols - left;
  for (std::int64_t n = 0; n < count; ++n) {
    float* const sample = laid + n * rows * cols * in;
    for (std::int64_t h = 0; h < rows; ++h) {
      float* const line = sample + h * cols * in;
      if (h < top || h >= top + in_rows) {
        for (std::int64_t i = 0; i < cols * in; ++i) line[i] = 0;
        continue;
      }
      for (std::int64_t i = 0; i < left * in; ++i) line[i] = 0;
      for (std::int64_t i = (left + in_cols) * in; i < cols * in; ++i) line[i] = 0;
    }
    const S* const planes = x + n * in * g.input_positions();
    for (std::int64_t c = 0; c < in; ++c)
      for (std::int64_t h = 0; h < in_rows; ++h) {
        const S* source = planes + (c * g.rows.in + h) * g.cols.in;
        float* target = sample + ((h + top) * cols + left) * in + c;
        for (std::int64_t w = 0; w < in_cols; ++w) target[w * in] = widen(source[w]);
      }
  }
}

// dx (NCHW, `count` samples) += the laid input gradient, rounded once an
// element; input rows and columns no window reads get nothing.
template <class D>
void direct_add_input_gradient(const Conv2dGeometry& g, const DirectBlock& b, D* dx) {
  const std::int64_t rows = g.direct_rows(), top = g.rows.pad, left = g.cols.pad;
  const std::int64_t in_rows = g.rows.in < rows - top ? g.rows.in : rows - top;
  const std::int64_t in_cols = g.cols.in < b.cols - left ? g.cols.in : b.cols - left;
  for (std::int64_t n = 0; n < b.count; ++n)
    for (std::int64_t c = 0; c < b.in; ++c)
      for (std::int64_t h = 0; h < in_rows; ++h) {
        D* target = dx + ((n * b.in + c) * g.rows.in + h) * g.cols.in;
        const float* source = b.dx + (n * b.plane + (h + top) * b.cols + left) * b.in_lanes + c;
        for (std::int64_t w = 0; w < in_cols; ++w) add_rounded(target[w], source[w * b.in_lanes]);
      }
}

// The block's output gradient position-major (zero beyond out), with
// row_sums: row_sums[n * out + o] = the lane_sum of sample n's plane o.
template <class G>
void direct_lay_out_gradient(const DirectBlock& b, const G* dy, float* row_sums) {
  for (std::int64_t n = 0; n < b.count; ++n) {
    float* const rows = b.dy + n * b.positions * b.out_lanes;
    for (std::int64_t p = 0; p < b.positions; ++p)
      for (std::int64_t o = b.out; o < b.out_lanes; ++o) rows[p * b.out_lanes + o] = 0;
    for (std::int64_t o = 0; o < b.out; ++o) {
      const G* const plane = dy + (n * b.out + o) * b.positions;
      if (row_sums != nullptr) row_sums[n * b.out + o] = lane_sum(plane, b.positions);
      for (std::int64_t p = 0; p < b.positions; ++p) rows[p * b.out_lanes + o] = widen(plane[p]);
    }
  }
}

// The weights of tap t as the direct products read them: forward u[(t *
// in + c) * out_lanes + o] = W(o, c, t), input gradient u[(t * out + o) *
// in_lanes + c] (`flip`); zero in the lanes beyond the channels. A task a
// row (t, c) or (t, o).
template <class ExecSpace, class W>
void direct_weights(const ExecSpace& exec, const Conv2dGeometry& g, const W& w, bool flip,
                    float* u) {
  const std::int64_t taps = g.taps(), patch = g.patch();
  const std::int64_t rows = flip ? g.out_channels : g.in_channels;
  const std::int64_t lanes = Conv2dGeometry::lanes_up(flip ? g.in_channels : g.out_channels);
  const std::int64_t valid = flip ? g.in_channels : g.out_channels;
  const float* const weights = w.data();
  const Work work{bytes_of<float>(g.out_channels * patch) + bytes_of<float>(taps * rows * lanes),
                  0.0, "host schedule: a row of laid-out weights per task"};
  parallel_for("tessera::kernels::direct_weights",
               Kokkos::RangePolicy<ExecSpace>(exec, 0, taps * rows), work,
               [=](const std::int64_t task) {
                 const std::int64_t t = task / rows, i = task % rows;
                 float* const row = u + task * lanes;
                 for (std::int64_t l = 0; l < valid; ++l) {
                   const std::int64_t o = flip ? i : l, c = flip ? l : i;
                   row[l] = weights[o * patch + c * taps + t];
                 }
                 for (std::int64_t l = valid; l < lanes; ++l) row[l] = 0;
               });
}

// y (NCHW, from the block's first sample) = the forward's tiles of
// output channels [first, first + width) + bias (may be null).
template <int V, class D>
void direct_forward_tiles(const Conv2dGeometry& g, const DirectBlock& b, const float* u,
                          const float* bias, std::int64_t first, std::int64_t width, D* y) {
  constexpr int R = direct_tile_rows;
  const std::int64_t all = b.count * b.positions, positions = b.positions;
  const TapRuns runs{b.tap_at, b.taps, b.in, b.out_lanes};
  for (std::int64_t p0 = 0; p0 < all; p0 += R) {
    const float* a[R];
    for (int r = 0; r < R; ++r) a[r] = b.x + b.window(g, p0 + r < all ? p0 + r : all - 1, b.in);
    NativeLanes acc[R][V];
    direct_tile<R, V>(a, runs, u + first, acc);
    float tile[R][V * native_lanes];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) store_lanes(tile[r] + v * native_lanes, acc[r][v]);
    const int rows = static_cast<int>(all - p0 < R ? all - p0 : R);
    D* target[R];
    for (int r = 0; r < rows; ++r) {
      const std::int64_t p = p0 + r, n = p / positions;
      target[r] = y + (n * b.out + first) * positions + p % positions;
    }
    for (std::int64_t o = 0; o < width; ++o) {
      const float add = bias != nullptr ? bias[first + o] : 0.0f;
      for (int r = 0; r < rows; ++r) target[r][o * positions] = narrow<D>(tile[r][o] + add);
    }
  }
}

// The laid input gradient (zeroed here) += dy times each tap's weights,
// the taps in order, for input channels [first, first + width).
template <int V>
void direct_input_gradient_tiles(const Conv2dGeometry& g, const DirectBlock& b, const float* u,
                                 std::int64_t first) {
  constexpr int R = direct_tile_rows;
  const std::int64_t all = b.count * b.positions;
  for (std::int64_t t = 0; t < b.taps; ++t) {
    const ChannelRun run{b.out, 1, b.in_lanes, t * b.out * b.in_lanes};
    for (std::int64_t p0 = 0; p0 < all; p0 += R) {
      const float* a[R];
      for (int r = 0; r < R; ++r) a[r] = b.dy + (p0 + r < all ? p0 + r : all - 1) * b.out_lanes;
      NativeLanes acc[R][V];
      direct_tile<R, V>(a, run, u + first, acc);
      const int rows = static_cast<int>(all - p0 < R ? all - p0 : R);
      for (int r = 0; r < rows; ++r) {
        float* const target = b.dx + b.window(g, p0 + r, b.in_lanes) + b.tap_at_dx[t] + first;
        for (int v = 0; v < V; ++v) {
          NativeLanes sum = load_lanes<NativeLanes>(target + v * native_lanes);
          sum += acc[r][v];
          store_lanes(target + v * native_lanes, sum);
        }
      }
    }
  }
}

// partial ([taps][in][out_lanes]) = (beta 0) or += (beta 1) the block's
// weight gradient of output channels [first, first + width): tiles of
// (tap, input channel) rows, each summed over the block's positions.
template <int V>
void direct_weight_gradient_tiles(const Conv2dGeometry& g, const DirectBlock& b, float beta,
                                  std::int64_t first, float* partial) {
  constexpr int R = direct_tile_rows;
  const std::int64_t rows_all = b.taps * b.in;
  const RowRuns runs{b.count,    g.cols.out,     g.cols.stride * b.in,         b.out_lanes,
                     g.rows.out, b.plane * b.in, g.rows.stride * b.cols * b.in};
  for (std::int64_t i0 = 0; i0 < rows_all; i0 += R) {
    const float* a[R];
    for (int r = 0; r < R; ++r) {
      const std::int64_t i = i0 + r < rows_all ? i0 + r : rows_all - 1;
      a[r] = b.x + b.tap_at[i / b.in] + i % b.in;
    }
    NativeLanes acc[R][V];
    direct_tile<R, V>(a, runs, b.dy + first, acc);
    const int rows = static_cast<int>(rows_all - i0 < R ? rows_all - i0 : R);
    for (int r = 0; r < rows; ++r) {
      float* const row = partial + (i0 + r) * b.out_lanes + first;
      for (int v = 0; v < V; ++v) {
        NativeLanes sum = acc[r][v];
        if (beta != 0) sum += load_lanes<NativeLanes>(row + v * native_lanes);
        store_lanes(row + v * native_lanes, sum);
      }
    }
  }
}

// The layout of a partial of ConvSchedule::direct, [taps][in][out_lanes]:
// entry o < out of row t * in + c is dW(o, c * taps + t) (the lanes beyond
// are padding).
struct PartialsByTap {
  std::int64_t rows, length, taps, in, out;
  explicit PartialsByTap(const Conv2dGeometry& g)
      : rows(g.taps() * g.in_channels),
        length(Conv2dGeometry::lanes_up(g.out_channels)),
        taps(g.taps()),
        in(g.in_channels),
        out(g.out_channels) {}
  std::int64_t entries(std::int64_t /*row*/) const { return out; }
  void of_dw(std::int64_t row, std::int64_t l, std::int64_t& o, std::int64_t& k) const {
    o = l;
    k = (row % in) * taps + row / in;
  }
};

// f(first, width) for the blocks of `channels` channels the tiles take.
template <class F>
void for_each_channel_block(std::int64_t channels, const F& f) {
  for (std::int64_t first = 0; first < channels; first += direct_tile_width)
    f(first, channels - first < direct_tile_width ? channels - first : direct_tile_width);
}

// y = conv(x, W) + b, ConvSchedule::direct (g.direct() holds): the weights
// laid out once, then each block of samples laid out channel-last and
// multiplied by the thread that takes it.
template <class ExecSpace, class X, class W, class B, class Y, class Scratch>
void conv2d_forward_direct(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                           const B& b, const Y& y, const Scratch& scratch) {
  if constexpr (thread_gemm_space_v<ExecSpace>) {
    Kokkos::Experimental::UniqueToken<ExecSpace> token(exec);
    check_threads("tessera::kernels::conv2d_forward", exec, g, scratch, token.size());
    const ThreadScratch ts(g, scratch.data(), token.size());
    if (g.direct_planar() && planar_row_vectors(g) > 0) {
      conv2d_forward_planar(exec, g, x, w, b, y, ts, token);
      return;
    }
    float* const u = ts.forward_weights;
    direct_weights(exec, g, w, false, u);
    const std::int64_t samples = g.direct_block_samples();
    const std::int64_t in = g.in_channels * g.input_positions();
    const std::int64_t out = g.out_channels * g.positions();
    const float* const bias = b.extent(0) > 0 ? b.data() : nullptr;
    // x, the laid-out weights and b read, y written; the direct form's
    // products and an add of the bias (a zero one too) an output.
    const Work work{
        bytes_of<typename X::value_type>(g.input_size()) +
            bytes_of<float>(g.taps() * g.in_channels * Conv2dGeometry::lanes_up(g.out_channels)) +
            bytes_of<typename B::value_type>(b.extent(0)) +
            bytes_of<typename Y::value_type>(g.output_size()),
        lowered_product_flops(g) + double(g.output_size()),
        "host schedule: one block of samples per task, laid out and multiplied on "
        "its thread"};
    const auto* const xs = x.data();
    auto* const ys = y.data();
    run_sample_blocks(exec, "tessera::kernels::conv2d_forward_direct", g.batch, samples, token,
                      work, [=](std::int64_t first, std::int64_t count, int id) {
                        const DirectBlock blk(g, count, ts.slot(id));
                        direct_lay_out(g, xs + first * in, count, blk.x);
                        for_each_channel_block(
                            g.out_channels, [&](std::int64_t o0, std::int64_t width) {
                              with_tile_vectors(width, [&](auto vectors) {
                                direct_forward_tiles<decltype(vectors)::value>(
                                    g, blk, u, bias, o0, width, ys + first * out);
                              });
                            });
                      });
  } else {
    check_threads("tessera::kernels::conv2d_forward", exec, g, scratch, 1);
    (void)x, (void)w, (void)b, (void)y;
  }
}

// dW += dy * cols(x)^T, db += sums of dy, dx += the transposed products
// (when dx is not empty), ConvSchedule::direct (g.direct() holds): each
// group of blocks (one task) sums its dW into a partial of its own, a
// block at a time; the partials are added in group order (the groups in
// waves of as many as the threads: PartialWaves), as in
// ConvSchedule::threads.
template <class ExecSpace, class X, class W, class DY, class DX, class DW, class DB, class Scratch>
void conv2d_backward_direct(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                            const DY& dy, const DX& dx, const DW& dw, const DB& db,
                            const Scratch& scratch) {
  if constexpr (thread_gemm_space_v<ExecSpace>) {
    Kokkos::Experimental::UniqueToken<ExecSpace> token(exec);
    check_threads("tessera::kernels::conv2d_backward", exec, g, scratch, token.size());
    const std::int64_t in = g.in_channels * g.input_positions();
    const std::int64_t out = g.out_channels * g.positions();
    const std::int64_t size = g.direct_partial_size();
    const bool with_dx = dx.size() > 0, with_db = db.extent(0) > 0;
    const bool planar = g.direct_planar() && !with_dx;
    const ThreadScratch ts(g, scratch.data(), token.size());
    float *const row_sums = ts.row_sums, *const partials = ts.partials;
    float* const u = ts.direct_gradient_weights;
    if (with_dx) direct_weights(exec, g, w, true, u);
    const std::int64_t samples = g.direct_block_samples(), blocks = g.direct_blocks();
    const std::int64_t per_group = g.direct_group_blocks(), groups = g.direct_groups();
    // x and dy read, the groups' dW partials written, and with db the rows'
    // sums (an add an element of dy); with dx, the laid-out weights read,
    // dx read and written, the input gradient's products and an add an
    // element of dx.
    const Work work{
        bytes_of<typename X::value_type>(g.input_size()) +
            bytes_of<typename DY::value_type>(g.output_size()) + bytes_of<float>(groups * size) +
            (with_db ? bytes_of<float>(g.batch * g.out_channels) : 0) +
            (with_dx ? bytes_of<float>(g.taps() * g.out_channels *
                                       Conv2dGeometry::lanes_up(g.in_channels)) +
                           2 * bytes_of<typename DX::value_type>(g.input_size())
                     : 0),
        (planar ? planar_weight_gradient_products(g) : lowered_product_flops(g)) +
            (with_db ? double(g.output_size()) : 0) +
            (with_dx ? lowered_product_flops(g) + double(g.input_size()) : 0),
        planar ? "host schedule: one group of blocks per task, laid out a plane per channel, "
                 "its dW partial summed in block order"
               : "host schedule: one group of blocks per task, its dW partial summed in block "
                 "order"};
    const auto* const xs = x.data();
    const auto* const dys = dy.data();
    auto* const dxs = dx.data();
    const PartialWaves waves(groups, token.size());
    const auto group_body = [=](std::int64_t slot, std::int64_t group, int id) {
      float* const partial = partials + slot * size;
      const std::int64_t last = (group + 1) * per_group < blocks ? (group + 1) * per_group : blocks;
      for (std::int64_t block = group * per_group; block < last; ++block) {
        const std::int64_t first = block * samples;
        const std::int64_t count = g.batch - first < samples ? g.batch - first : samples;
        const float beta = block == group * per_group ? 0.0f : 1.0f;
        if (planar) {
          planar_weight_gradient_block(g, count, ts.slot(id), xs + first * in, dys + first * out,
                                       with_db ? row_sums + first * g.out_channels : nullptr, beta,
                                       partial);
          continue;
        }
        const DirectBlock blk(g, count, ts.slot(id));
        direct_lay_out(g, xs + first * in, count, blk.x);
        direct_lay_out_gradient(blk, dys + first * out,
                                with_db ? row_sums + first * g.out_channels : nullptr);
        for_each_channel_block(g.out_channels, [&](std::int64_t o0, std::int64_t width) {
          with_tile_vectors(width, [&](auto vectors) {
            direct_weight_gradient_tiles<decltype(vectors)::value>(g, blk, beta, o0, partial);
          });
        });
        if (!with_dx) continue;
        for (std::int64_t i = 0; i < count * blk.plane * blk.in_lanes; ++i) blk.dx[i] = 0;
        for_each_channel_block(g.in_channels, [&](std::int64_t c0, std::int64_t width) {
          with_tile_vectors(width, [&](auto vectors) {
            direct_input_gradient_tiles<decltype(vectors)::value>(g, blk, u, c0);
          });
        });
        direct_add_input_gradient(g, blk, dxs + first * in);
      }
    };
    run_waves(exec, "tessera::kernels::conv2d_backward_direct", waves, token, work, group_body,
              [&](std::int64_t wave) {
                add_thread_partials(exec, g, waves, wave, partials, dw, PartialsByTap(g));
              });
    if (with_db) add_bias_gradient(exec, row_sums, g.batch, g.out_channels, db);
  } else {
    check_threads("tessera::kernels::conv2d_backward", exec, g, scratch, 1);
    (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)db;
  }
}

}  // namespace tessera::kernels::impl
