// ConvSchedule::direct's planar form (Conv2dGeometry::direct_planar: at most
// direct_planar_max_in input channels, stride 1). The channel-last tiles
// would sum over one to four channels a tap and store a value at a time
// into NCHW; here each channel's plane is laid out alone
// ([sample][in][direct_planar_plane()], padding included, its rows
// direct_cols() apart, zero past the windows), so that the positions of a
// row are consecutive floats:
//
//   forward          a tile of output channels (rows, the weights
//                    broadcast) by positions of one output row (vectors of
//                    the laid planes), stored as vectors into y's row; the
//                    sums in the channel-last tiles' order (taps, then
//                    channels), so the bits are theirs;
//   weight gradient  (without the input gradient) a tile of output
//                    channels by taps of one input channel, each an
//                    EightFloats of sums over the flat positions (position
//                    q in lane q % 8, in order of sample and position,
//                    then the lanes added as lane_total adds them), dy laid
//                    out a plane per output channel with zeros at the flat
//                    positions no output has.
// With the input gradient, the weight gradient takes the channel-last
// tiles, whose output gradient layout the input gradient reads.
#pragma once

#include <tessera/kernels/conv_geometry.hpp>
#include <tessera/kernels/impl/conv_threads.hpp>
#include <tessera/kernels/impl/lanes.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/register_tiles.hpp>
#include <tessera/kernels/reduce.hpp>

#include <cstdint>
#include <type_traits>

namespace tessera::kernels::impl {

// The planar forward's runs over W's row of an output channel
// ([in][taps]) and the laid planes: with one input channel, a run a kernel
// row (its columns in order, one float apart in the plane); with more, a
// run a tap, over the channels (planes apart). Either way the taps come in
// order, and within a tap the channels.
struct PlanarRuns {
  std::int64_t count, length, a_step, b_step, a_run;
  const std::int64_t* b_at;  // the laid plane's offset of run k
  template <class F>
  void each(const F& f) const {
    for (std::int64_t k = 0; k < count; ++k) f(k * a_run, b_at[k]);
  }
};

// A block of `count` samples in the planar form, in a thread's slot: the
// input planes, then the output gradient's ([count][out][flat]).
struct PlanarBlock {
  std::int64_t count, in, out, cols, plane, flat;
  float* x;
  float* dy;
  std::int64_t runs_at[Conv2dGeometry::direct_max_taps];  // PlanarRuns::b_at
  std::int64_t tap_at[Conv2dGeometry::direct_max_taps];   // a tap's offset in a plane
  PlanarBlock(const Conv2dGeometry& g, std::int64_t count, float* slot)
      : count(count),
        in(g.in_channels),
        out(g.out_channels),
        cols(g.direct_cols()),
        plane(g.direct_planar_plane()),
        flat(g.direct_flat_positions()),
        x(slot),
        dy(slot + count * g.in_channels * g.direct_planar_plane()) {
    for (int ki = 0; ki < g.rows.kernel; ++ki)
      for (int kj = 0; kj < g.cols.kernel; ++kj) tap_at[ki * g.cols.kernel + kj] = ki * cols + kj;
    for (int k = 0; k < g.rows.kernel; ++k) runs_at[k] = k * cols;
  }
  PlanarRuns runs(const Conv2dGeometry& g) const {
    if (in == 1) return PlanarRuns{g.rows.kernel, g.cols.kernel, 1, 1, g.cols.kernel, runs_at};
    return PlanarRuns{g.taps(), in, g.taps(), plane, 1, tap_at};
  }
};

// The block's planes from `count` NCHW samples at x: zero where the
// windows read padding and past the last window.
template <class S>
void planar_lay_out(const Conv2dGeometry& g, const PlanarBlock& b, const S* x) {
  const std::int64_t top = g.rows.pad, left = g.cols.pad;
  const std::int64_t in_rows =
      g.rows.in < g.direct_rows() - top ? g.rows.in : g.direct_rows() - top;
  const std::int64_t in_cols = g.cols.in < b.cols - left ? g.cols.in : b.cols - left;
  for (std::int64_t s = 0; s < b.count * b.in; ++s) {
    float* const plane = b.x + s * b.plane;
    for (std::int64_t i = 0; i < b.plane; ++i) plane[i] = 0;
    const S* const source = x + s * g.input_positions();
    for (std::int64_t h = 0; h < in_rows; ++h)
      for (std::int64_t w = 0; w < in_cols; ++w)
        plane[(h + top) * b.cols + left + w] = widen(source[h * g.cols.in + w]);
  }
}

// The block's output gradient planes ([count][out][flat], zero at the flat
// positions no output has), with row_sums as direct_lay_out_gradient's.
template <class G>
void planar_lay_out_gradient(const Conv2dGeometry& g, const PlanarBlock& b, const G* dy,
                             float* row_sums) {
  const std::int64_t positions = g.positions();
  for (std::int64_t s = 0; s < b.count * b.out; ++s) {
    const G* const source = dy + s * positions;
    float* const plane = b.dy + s * b.flat;
    if (row_sums != nullptr) row_sums[s] = lane_sum(source, positions);
    for (std::int64_t i = 0; i < b.flat; ++i) plane[i] = 0;
    for (std::int64_t h = 0; h < g.rows.out; ++h)
      for (std::int64_t w = 0; w < g.cols.out; ++w)
        plane[h * b.cols + w] = widen(source[h * g.cols.out + w]);
  }
}

// target[0, native_lanes) = v + add, each rounded once to D.
template <class D>
inline void store_plus(D* target, const NativeLanes& v, float add) {
#ifdef TESSERA_HOST_VECTORS
  if constexpr (std::is_same<D, float>::value) {
    store_lanes(target, v + add);
    return;
  }
#endif
  float lanes[native_lanes];
  store_lanes(lanes, v);
  for (int l = 0; l < native_lanes; ++l) target[l] = narrow<D>(lanes[l] + add);
}

// y (NCHW, the block's sample n) = the forward's tiles + bias (may be
// null): tiles of direct_tile_rows output channels (the last tile ending
// at the last channel, overlapping the one before) by V vectors of
// positions of an output row (the last ending at the row's end); a tile's
// values are the same in every tile that computes them.
template <int V, class D>
void planar_forward_tiles(const Conv2dGeometry& g, const PlanarBlock& b, std::int64_t n,
                          const float* w, const float* bias, D* y) {
  constexpr int R = direct_tile_rows;
  constexpr std::int64_t width = V * native_lanes;
  const std::int64_t out = b.out, positions = g.positions(), patch = g.patch();
  const PlanarRuns runs = b.runs(g);
  const float* const planes = b.x + n * b.in * b.plane;
  for (std::int64_t ho = 0; ho < g.rows.out; ++ho)
    for (std::int64_t done = 0; done < out;) {
      const std::int64_t o0 = out < R ? 0 : (done + R <= out ? done : out - R);
      const float* a[R];
      for (int r = 0; r < R; ++r) a[r] = w + (o0 + r < out ? o0 + r : out - 1) * patch;
      const std::int64_t end = out < R ? out : o0 + R;
      for (std::int64_t w0 = 0;;) {
        NativeLanes acc[R][V];
        direct_tile<R, V>(a, runs, planes + ho * b.cols + w0, acc);
        for (std::int64_t o = done; o < end; ++o) {
          const float add = bias != nullptr ? bias[o] : 0.0f;
          D* const target = y + (n * out + o) * positions + ho * g.cols.out + w0;
          for (int v = 0; v < V; ++v) store_plus(target + v * native_lanes, acc[o - o0][v], add);
        }
        if (w0 + width >= g.cols.out) break;
        w0 = w0 + 2 * width <= g.cols.out ? w0 + width : g.cols.out - width;
      }
      done = end;
    }
}

// acc[r][t] = the sums over the block's samples and flat positions q of
// dy[r](q) x(q + tap_at[t]), q in lane q % 8: dy[r] the output gradient
// plane of sample 0 (the next sample's `dy_sample` floats on), x the laid
// plane of sample 0 (`x_sample` on).
template <int R, int T>
inline void planar_gradient_tile(const float* const (&dy)[R], std::int64_t dy_sample,
                                 const float* x, std::int64_t x_sample, const std::int64_t* tap_at,
                                 std::int64_t count, std::int64_t flat, EightFloats (&acc)[R][T]) {
  EightFloats s[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) s[r][t] = zero_lanes<EightFloats>();
  std::int64_t at[T];
  for (int t = 0; t < T; ++t) at[t] = tap_at[t];
  for (std::int64_t n = 0; n < count; ++n) {
    const float* const xn = x + n * x_sample;
    for (std::int64_t q = 0; q < flat; q += 8) {
      EightFloats d[R];
      for (int r = 0; r < R; ++r) d[r] = load_lanes<EightFloats>(dy[r] + n * dy_sample + q);
      for (int t = 0; t < T; ++t) {
        const EightFloats value = load_lanes<EightFloats>(xn + q + at[t]);
        for (int r = 0; r < R; ++r) s[r][t] += d[r] * value;
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = s[r][t];
}

// f(std::integral_constant<int, T>()) for a tile of `taps` taps (1 to
// direct_tile_rows).
template <class F>
void with_tile_taps(std::int64_t taps, const F& f) {
  static_assert(direct_tile_rows == 6, "with_tile_taps dispatches 1 to 6 taps");
  switch (taps) {
    case 1:
      return f(std::integral_constant<int, 1>());
    case 2:
      return f(std::integral_constant<int, 2>());
    case 3:
      return f(std::integral_constant<int, 3>());
    case 4:
      return f(std::integral_constant<int, 4>());
    case 5:
      return f(std::integral_constant<int, 5>());
    default:
      return f(std::integral_constant<int, 6>());
  }
}

// partial ([taps][in][out_lanes], PartialsByTap) = (beta 0) or += (beta
// 1) the block's weight gradient in the planar form: tiles of
// direct_tile_vectors output channels (the last ending at the last
// channel) by the taps in tiles of at most direct_tile_rows, as even as
// they go, for each input channel.
inline void planar_weight_gradient(const Conv2dGeometry& g, const PlanarBlock& b, float beta,
                                   float* partial) {
  constexpr int R = direct_tile_vectors;
  const std::int64_t taps = g.taps(), out = b.out;
  const std::int64_t out_lanes = Conv2dGeometry::lanes_up(out);
  const std::int64_t tiles = (taps + direct_tile_rows - 1) / direct_tile_rows;
  for (std::int64_t c = 0; c < b.in; ++c)
    for (std::int64_t done = 0; done < out;) {
      const std::int64_t o0 = out < R ? 0 : (done + R <= out ? done : out - R);
      const float* dy[R];
      for (int r = 0; r < R; ++r) dy[r] = b.dy + (o0 + r < out ? o0 + r : out - 1) * b.flat;
      const std::int64_t end = out < R ? out : o0 + R;
      for (std::int64_t tile = 0, t0 = 0; tile < tiles; ++tile) {
        const std::int64_t t1 = taps * (tile + 1) / tiles;
        with_tile_taps(t1 - t0, [&](auto tile_taps) {
          constexpr int T = decltype(tile_taps)::value;
          EightFloats acc[R][T];
          planar_gradient_tile<R, T>(dy, b.out * b.flat, b.x + c * b.plane, b.in * b.plane,
                                     b.tap_at + t0, b.count, b.flat, acc);
          for (std::int64_t o = done; o < end; ++o)
            for (int t = 0; t < T; ++t) {
              float* const entry = partial + ((t0 + t) * b.in + c) * out_lanes + o;
              const float sum = lane_total(acc[o - o0][t]);
              *entry = beta != 0 ? *entry + sum : sum;
            }
        });
        t0 = t1;
      }
      done = end;
    }
}

// The planar weight gradient of `count` samples from x and dy (NCHW) in a
// thread's slot: laid out, then partial (beta 0) or += (beta 1) their dW,
// and row_sums (may be null) the sums of dy's planes.
template <class S, class G>
void planar_weight_gradient_block(const Conv2dGeometry& g, std::int64_t count, float* slot,
                                  const S* x, const G* dy, float* row_sums, float beta,
                                  float* partial) {
  const PlanarBlock blk(g, count, slot);
  planar_lay_out(g, blk, x);
  planar_lay_out_gradient(g, blk, dy, row_sums);
  planar_weight_gradient(g, blk, beta, partial);
}

// The planar forward's vectors a tile: as many as an output row holds (at
// least one; Conv2dGeometry::direct_planar alone does not ensure that).
inline std::int64_t planar_row_vectors(const Conv2dGeometry& g) {
  const std::int64_t v = g.cols.out / native_lanes;
  return v < direct_tile_vectors ? v : direct_tile_vectors;
}

// The products' FLOPs the planar form executes: its forward's tiles cover
// each output row in whole vectors (the last overlapping) and the output
// channels in whole tiles; its weight gradient every flat position.
inline double planar_forward_products(const Conv2dGeometry& g) {
  const std::int64_t width = planar_row_vectors(g) * native_lanes;
  const std::int64_t per_row = (g.cols.out + width - 1) / width * width;
  const std::int64_t channels =
      g.out_channels < direct_tile_rows
          ? g.out_channels
          : (g.out_channels + direct_tile_rows - 1) / direct_tile_rows * direct_tile_rows;
  return 2.0 * double(g.patch()) * double(channels) * double(g.batch * g.rows.out * per_row);
}
inline double planar_weight_gradient_products(const Conv2dGeometry& g) {
  return 2.0 * double(g.patch()) * double(g.out_channels) *
         double(g.batch * g.direct_flat_positions());
}

// y = conv(x, W) + b in the planar form (g.direct_planar(), an output row
// of at least one vector): each block of samples laid out a plane per
// channel, then each sample's output rows as tiles, with W read as it is.
template <class ExecSpace, class X, class W, class B, class Y, class Token>
void conv2d_forward_planar(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                           const B& b, const Y& y, const ThreadScratch& ts, const Token& token) {
  const std::int64_t samples = g.direct_block_samples();
  const std::int64_t in = g.in_channels * g.input_positions();
  const std::int64_t out = g.out_channels * g.positions();
  const float* const bias = b.extent(0) > 0 ? b.data() : nullptr;
  const float* const weights = w.data();
  // x, W and b read, y written; the tiles' products and an add of the
  // bias (a zero one too) an output.
  const Work work{bytes_of<typename X::value_type>(g.input_size()) +
                      bytes_of<float>(g.out_channels * g.patch()) +
                      bytes_of<typename B::value_type>(b.extent(0)) +
                      bytes_of<typename Y::value_type>(g.output_size()),
                  planar_forward_products(g) + double(g.output_size()),
                  "host schedule: one block of samples per task, laid out a plane per channel "
                  "and multiplied on its thread"};
  const auto* const xs = x.data();
  auto* const ys = y.data();
  run_sample_blocks(exec, "tessera::kernels::conv2d_forward_direct", g.batch, samples, token, work,
                    [=](std::int64_t first, std::int64_t count, int id) {
                      const PlanarBlock blk(g, count, ts.slot(id));
                      planar_lay_out(g, blk, xs + first * in);
                      with_tile_vectors(planar_row_vectors(g) * native_lanes, [&](auto vectors) {
                        for (std::int64_t n = 0; n < count; ++n)
                          planar_forward_tiles<decltype(vectors)::value>(g, blk, n, weights, bias,
                                                                         ys + first * out);
                      });
                    });
}

}  // namespace tessera::kernels::impl
