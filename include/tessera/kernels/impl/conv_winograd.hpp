// ConvSchedule::winograd: the threads schedule with the forward,
// input-gradient and weight-gradient products in the form of Winograd's
// F(m x m, r x r) (the transforms are in winograd.hpp): each thread lays a
// block of samples out channel-last, transforms its tiles, multiplies them
// with t^2 register-tile products (tile_product, register_tiles.hpp) and
// transforms the products back.
#pragma once

#include <tessera/kernels/impl/conv_threads.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/register_tiles.hpp>
#include <tessera/kernels/impl/winograd.hpp>

#include <cstdint>
#include <type_traits>

namespace tessera::kernels::impl {

// f(std::integral_constant<int, M>()) for wg's output tile m (t is
// Winograd::max_t for both), and what f returns.
template <class F>
decltype(auto) with_winograd_tile(const Winograd& wg, const F& f) {
  if (wg.m == 4) return f(std::integral_constant<int, 4>());
  return f(std::integral_constant<int, 2>());
}

// FLOPs of winograd.hpp's transforms of a channel's tile, t x t (t = 6;
// the terms of their nonzero coefficients): the input tile B^T d B, the
// output tile A^T M A and the output-gradient tile A d A^T of wg's m.
inline double winograd_input_flops(const Winograd&) {
  return winograd_input_tile_flops<Winograd::max_t>();
}
inline double winograd_output_flops(const Winograd& wg) {
  return with_winograd_tile(wg, [](auto m) {
    return double(winograd_output_tile_flops<Winograd::max_t, decltype(m)::value>());
  });
}
inline double winograd_gradient_flops(const Winograd& wg) {
  return with_winograd_tile(wg, [](auto m) {
    return double(winograd_gradient_tile_flops<Winograd::max_t, decltype(m)::value>());
  });
}
// A kernel's G g G^T or its gradient's G^T dU G, a channel pair: t r, then
// t^2 (or r^2, then t r) multiply-adds of r (or t) terms.
inline double winograd_weight_flops(const Winograd& wg) {
  return 2.0 * wg.t * wg.r * (wg.t + wg.r);
}
// The forward of g in Winograd's form, bias aside: each sample's tiles
// transformed for each input channel, the t^2 products [tiles x in] x
// [in x out], and the tiles transformed back for each output channel.
inline double winograd_forward_flops(const Conv2dGeometry& g, const Winograd& wg) {
  const double tiles = double(g.batch) * double(g.winograd_tiles());
  const double in = double(g.in_channels), out = double(g.out_channels), t = wg.t;
  return tiles *
         (in * winograd_input_flops(wg) + 2.0 * t * t * in * out + out * winograd_output_flops(wg));
}

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
  // W read (r^2 taps a channel pair), the t^2 transformed blocks written.
  const Work work{bytes_of<float>(in * out * wg.r * wg.r) + bytes_of<float>(in * out * wg.t * wg.t),
                  double(in * out) * winograd_weight_flops(wg),
                  "host schedule: an input channel and 16 output channels per task"};
  parallel_for("tessera::kernels::winograd_weights",
               Kokkos::RangePolicy<ExecSpace>(exec, 0, in * runs), work,
               [=](const std::int64_t task) {
                 const std::int64_t o0 = (task % runs) * lanes;
                 const int count = static_cast<int>(out - o0 < lanes ? out - o0 : lanes);
                 wg.transform_weights(weights, in, out, flip, task / runs, o0, count, u);
               });
}

// Where position p of a plane `cols` wide lies in a channel-last layout
// whose rows are padded_cols columns long, from row `top` and column
// `left`: its (row, column) offset in positions, stepped along the plane.
struct PlanePositions {
  std::int64_t h, w;
  const std::int64_t cols, padded_cols, top, left;
  PlanePositions(std::int64_t p, std::int64_t cols, std::int64_t padded_cols, std::int64_t top,
                 std::int64_t left)
      : h(p / cols), w(p % cols), cols(cols), padded_cols(padded_cols), top(top), left(left) {}
  std::int64_t at() const { return (h + top) * padded_cols + left + w; }
  void next() {
    if (++w == cols) w = 0, ++h;
  }
};

// A sample's `channels` planes of rows x cols (NCHW) channel-last into
// laid [row][column][channel] (rows padded_cols columns long) from row
// `top` and column `left`; the rest of laid is left as it is. Float planes
// of whole vectors of channels go a square of native_lanes channels by as
// many positions at a time, transposed in registers, each position's
// channels one store (one value a store, they took half of Winograd's time
// outside its products); the last square of a plane ends at its end,
// writing some positions a second time with the same values.
template <class S>
void lay_out_channel_last(const S* x, std::int64_t channels, int rows, int cols, int top, int left,
                          std::int64_t padded_cols, float* laid) {
  const std::int64_t plane = std::int64_t(rows) * cols;
#ifdef TESSERA_HOST_VECTORS
  if constexpr (std::is_same<S, float>::value) {
    if (channels % native_lanes == 0 && plane >= native_lanes) {
      for (std::int64_t c0 = 0; c0 < channels; c0 += native_lanes)
        for (std::int64_t p = 0; p < plane; p += native_lanes) {
          const std::int64_t first = p + native_lanes <= plane ? p : plane - native_lanes;
          NativeLanes v[native_lanes];
          for (int i = 0; i < native_lanes; ++i)
            v[i] = load_lanes<NativeLanes>(x + (c0 + i) * plane + first);
          transpose_lanes<native_lanes / 2>(v);
          PlanePositions at(first, cols, padded_cols, top, left);
          for (int i = 0; i < native_lanes; ++i, at.next())
            store_lanes(laid + at.at() * channels + c0, v[i]);
        }
      return;
    }
  }
#endif
  for (std::int64_t c = 0; c < channels; ++c)
    for (int h = 0; h < rows; ++h) {
      const S* source = x + (c * rows + h) * cols;
      float* line = laid + ((h + top) * padded_cols + left) * channels + c;
      for (int w = 0; w < cols; ++w) line[w * channels] = widen(source[w]);
    }
}

// A sample's output planes y [out][rows x cols] (+)= the tiles' outputs
// laid channel-last in tile_out (rows m * tile columns wide), plus the
// bias where not adding (null: none): lay_out_channel_last's transpose.
// Float outputs of whole vectors of channels go a square at a time; a
// plane's last positions that fill no square go one by one where adding.
template <class D>
void scatter_channel_last(const float* tile_out, std::int64_t out, int rows, int cols,
                          std::int64_t tile_cols, const float* bias, bool add, D* y) {
  const std::int64_t plane = std::int64_t(rows) * cols;
  std::int64_t scalar_from = 0;  // positions from here on go one by one
#ifdef TESSERA_HOST_VECTORS
  if constexpr (std::is_same<D, float>::value) {
    if (out % native_lanes == 0 && plane >= native_lanes) {
      const std::int64_t squares_end = add ? plane / native_lanes * native_lanes : plane;
      for (std::int64_t o0 = 0; o0 < out; o0 += native_lanes)
        for (std::int64_t p = 0; p < squares_end; p += native_lanes) {
          const std::int64_t first = p + native_lanes <= plane ? p : plane - native_lanes;
          NativeLanes v[native_lanes];
          PlanePositions at(first, cols, tile_cols, 0, 0);
          for (int i = 0; i < native_lanes; ++i, at.next())
            v[i] = load_lanes<NativeLanes>(tile_out + at.at() * out + o0);
          transpose_lanes<native_lanes / 2>(v);
          for (int i = 0; i < native_lanes; ++i) {
            float* const target = y + (o0 + i) * plane + first;
            if (add)
              store_lanes(target, load_lanes<NativeLanes>(target) + v[i]);
            else
              store_lanes(target, v[i] + (bias != nullptr ? bias[o0 + i] : 0.0f));
          }
        }
      scalar_from = squares_end;
    }
  }
#endif
  for (std::int64_t o = 0; o < out; ++o) {
    const float b = bias != nullptr ? bias[o] : 0.0f;
    D* const plane_out = y + o * plane;
    PlanePositions at(scalar_from, cols, tile_cols, 0, 0);
    for (std::int64_t p = scalar_from; p < plane; ++p, at.next()) {
      const float value = tile_out[at.at() * out + o];
      if (add)
        add_rounded(plane_out[p], value);
      else
        plane_out[p] = narrow<D>(value + b);
    }
  }
}

// One block's Winograd work in a thread's scratch `work`, laid out as
// WinogradLayout says (its `floats` is Conv2dGeometry::winograd_floats).
struct WinogradWork : WinogradLayout {
  float* laid;      // [padded rows][padded cols][in]
  float* tile_out;  // [m rows][m cols][out] a tile
  float* v;         // [t^2][n][in]
  float* m;         // [t^2][n][out]
  WinogradWork(const Conv2dGeometry& g, std::int64_t count, float* work)
      : WinogradLayout(g.rows.out, g.cols.out, g.rows.kernel, g.in_channels, g.out_channels, count),
        laid(work),
        tile_out(work + tile_out_at),
        v(work + v_at),
        m(work + m_at) {}
  // Lays each sample of the block (x: the first one's NCHW planes) out in
  // laid and transforms its tiles into v. The padding is zeroed once: each
  // sample overwrites the same interior.
  template <int T, int M, class S>
  void transform_inputs(const Conv2dGeometry& g, const S* x) const {
    const std::int64_t in = g.in_channels, plane = g.input_positions();
    zero_row(laid, static_cast<int>(padded * in));
    for (std::int64_t s = 0; s < n / tiles; ++s) {
      lay_out_channel_last(x + s * in * plane, in, g.rows.in, g.cols.in, g.rows.pad, g.cols.pad,
                           padded_cols, laid);
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j)
          winograd_input_tile<T>(laid + (M * i * padded_cols + M * j) * in, padded_cols * in, in,
                                 v + (s * tiles + i * cols + j) * in, n * in);
    }
  }
};

// y (+)= conv(x, W) (+ bias) for `count` samples by Winograd's F(M x M,
// r x r), t = M + r - 1, on the calling thread: x and y point at the first
// sample's NCHW planes, u at the transformed weights, bias may be null;
// `add` adds to y (input gradients) instead of storing. `work` holds
// g.winograd_floats(count).
template <int T, int M, class S, class D>
void winograd_samples(const Conv2dGeometry& g, const S* x, std::int64_t count, const float* u,
                      const float* bias, D* y, bool add, float* work) {
  const std::int64_t in = g.in_channels, out = g.out_channels, positions = g.positions();
  const WinogradWork b(g, count, work);
  const int rows = b.rows, cols = b.cols;
  const std::int64_t tiles = b.tiles, n = b.n;
  float *const tile_out = b.tile_out, *const v = b.v, *const m = b.m;
  b.template transform_inputs<T, M>(g, x);
  for (int k = 0; k < T * T; ++k)
    tile_product(n, out, in, v + k * n * in, in, 1, u + k * in * out, out, 0, m + k * n * out, out);
  for (std::int64_t s = 0; s < count; ++s) {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        winograd_output_tile<T, M>(m + (s * tiles + i * cols + j) * out, n * out, out,
                                   tile_out + (M * i * M * cols + M * j) * out, M * cols * out);
    scatter_channel_last(tile_out, out, g.rows.out, g.cols.out, M * cols, bias, add,
                         y + s * out * positions);
  }
}

// winograd_samples for g's kernel size.
template <class S, class D>
void winograd_block(const Winograd& wg, const Conv2dGeometry& g, const S* x, std::int64_t count,
                    const float* u, const float* bias, D* y, bool add, float* work) {
  with_winograd_tile(wg, [&](auto m) {
    winograd_samples<Winograd::max_t, decltype(m)::value>(g, x, count, u, bias, y, add, work);
  });
}

// du (+)= dL/dU, the gradient of the transformed weights, from `count`
// samples by Winograd's F(M x M, r x r), t = M + r - 1, on the calling thread
// (beta 0 stores, 1 adds): x and dy point at the first sample's NCHW
// planes, du holds t^2 blocks [out][in]. With row_sums, also
// row_sums[s * out + o] = the lane_sum of sample s's plane o of dy (the
// bias gradient's terms). `work` holds g.winograd_floats(count).
template <int T, int M, class S, class G>
void winograd_weight_samples(const Conv2dGeometry& g, const S* x, const G* dy, std::int64_t count,
                             float beta, float* du, float* row_sums, float* work) {
  const std::int64_t in = g.in_channels, out = g.out_channels, positions = g.positions();
  const WinogradWork b(g, count, work);
  const int rows = b.rows, cols = b.cols;
  const std::int64_t tiles = b.tiles, n = b.n;
  // grad holds the output gradient's tiles channel-last.
  float *const grad = b.tile_out, *const v = b.v, *const m = b.m;
  b.template transform_inputs<T, M>(g, x);
  // dy's tiles beyond the output's last rows and columns stay zero.
  zero_row(grad, static_cast<int>(M * M * tiles * out));
  for (std::int64_t s = 0; s < count; ++s) {
    const G* const sample = dy + s * out * positions;
    lay_out_channel_last(sample, out, g.rows.out, g.cols.out, 0, 0, M * cols, grad);
    if (row_sums != nullptr)
      for (std::int64_t o = 0; o < out; ++o)
        row_sums[s * out + o] = lane_sum(sample + o * positions, positions);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        winograd_gradient_tile<T, M>(grad + (M * i * M * cols + M * j) * out, M * cols * out, out,
                                     m + (s * tiles + i * cols + j) * out, n * out);
  }
  for (int k = 0; k < T * T; ++k)
    tile_product(out, in, n, m + k * n * out, 1, out, v + k * n * in, in, beta, du + k * out * in,
                 in);
}

// winograd_weight_samples for g's kernel size.
template <class S, class G>
void winograd_weight_block(const Winograd& wg, const Conv2dGeometry& g, const S* x, const G* dy,
                           std::int64_t count, float beta, float* du, float* row_sums,
                           float* work) {
  with_winograd_tile(wg, [&](auto m) {
    winograd_weight_samples<Winograd::max_t, decltype(m)::value>(g, x, dy, count, beta, du,
                                                                 row_sums, work);
  });
}

// y = conv(x, W) + b, ConvSchedule::winograd (g.winograd() holds): the
// weights are transformed once, then each block of samples is
// transformed, multiplied and transformed back by the thread that takes it.
template <class ExecSpace, class X, class W, class B, class Y, class Scratch>
void conv2d_forward_winograd(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                             const B& b, const Y& y, const Scratch& scratch) {
  if constexpr (thread_gemm_space_v<ExecSpace>) {
    Kokkos::Experimental::UniqueToken<ExecSpace> token(exec);
    check_threads("tessera::kernels::conv2d_forward", exec, g, scratch, token.size());
    const ThreadScratch ts(g, scratch.data(), token.size());
    float* const u = ts.forward_weights;
    const Winograd wg(g.rows.kernel);
    winograd_weights(exec, wg, g, w, false, u);
    const std::int64_t samples = g.winograd_block_samples();
    const std::int64_t in = g.in_channels * g.input_positions();
    const std::int64_t out = g.out_channels * g.positions();
    const float* const bias = b.extent(0) > 0 ? b.data() : nullptr;
    // x, the transformed weights and b read, y written; the transforms and
    // products, and an add of the bias (a zero one too) an output.
    const Work work{bytes_of<typename X::value_type>(g.input_size()) +
                        bytes_of<float>(g.winograd_partial_size()) +
                        bytes_of<typename B::value_type>(b.extent(0)) +
                        bytes_of<typename Y::value_type>(g.output_size()),
                    winograd_forward_flops(g, wg) + double(g.output_size()),
                    "host schedule: one block of samples per task, transformed and multiplied "
                    "on its thread"};
    run_sample_blocks(exec, "tessera::kernels::conv2d_forward_winograd", g.batch, samples, token,
                      work, [=](std::int64_t first, std::int64_t count, int id) {
                        winograd_block(wg, g, x.data() + first * in, count, u, bias,
                                       y.data() + first * out, false, ts.slot(id));
                      });
  } else {
    check_threads("tessera::kernels::conv2d_forward", exec, g, scratch, 1);
    (void)x, (void)w, (void)b, (void)y;
  }
}

// Partials [1, count) of dU (each Conv2dGeometry::winograd_partial_size()
// floats, t^2 blocks [out][in]) added into partial 0, each value's terms
// in order: a wave of conv2d_backward_winograd's groups (PartialWaves).
template <class ExecSpace>
void add_winograd_partials(const ExecSpace& exec, const Conv2dGeometry& g, float* partials,
                           std::int64_t count) {
  if (count < 2) return;
  const std::int64_t size = g.winograd_partial_size();
  // In one pass over long runs (reading the t^2 blocks of every group at
  // once, out * in floats apart, had the cache evict its own lines).
  const std::int64_t run = 1024, runs = (size + run - 1) / run;
  // The partials read, the first written; an add a later partial's value.
  const Work sums{bytes_of<float>(count * size) + bytes_of<float>(size),
                  double(count - 1) * double(size),
                  "host schedule: runs of 1024 values per task, on the host only"};
  parallel_for("tessera::kernels::conv2d_weight_grad",
               Kokkos::RangePolicy<ExecSpace>(exec, 0, runs), sums, [=](const std::int64_t r) {
                 const std::int64_t begin = r * run;
                 const int count_in_run = static_cast<int>(size - begin < run ? size - begin : run);
                 float* const sum = partials + begin;
                 for (std::int64_t slot = 1; slot < count; ++slot)
                   add_row(sum, partials + slot * size + begin, count_in_run, 1);
               });
}

// dW += G^T dU G from partial 0 of dU, the sum of conv2d_backward_winograd's
// groups (add_winograd_partials).
template <class ExecSpace, class DW>
void winograd_weight_gradient(const ExecSpace& exec, const Winograd& wg, const Conv2dGeometry& g,
                              const float* partials, const DW& dw) {
  const std::int64_t in = g.in_channels, out = g.out_channels, k = g.patch();
  // dW(o, c) += G^T dU(o, c) G, winograd_lanes (o, c) pairs a task.
  const std::int64_t pairs = out * in, tt = std::int64_t(wg.t) * wg.t, rr = k / in;
  // The summed dU read (t^2 a pair), dW read and written (r^2 a pair); the
  // transform and an add into dW a tap.
  const Work transform{
      bytes_of<float>(tt * pairs) + 2 * bytes_of<typename DW::value_type>(pairs * rr),
      double(pairs) * (winograd_weight_flops(wg) + double(rr)),
      "host schedule: 16 channel pairs per task, on the host only"};
  parallel_for("tessera::kernels::conv2d_weight_grad",
               Kokkos::RangePolicy<ExecSpace>(exec, 0, pairs / winograd_lanes), transform,
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
}

// The work of conv2d_backward_winograd's groups: x and dy read, the
// groups' dU partials written, and with db the rows' sums (an add an
// element of dy). dU: x's tiles and dy's transformed, the t^2 products
// [out x tiles] x [tiles x in]. With dx: the transformed flipped weights
// read, dx read and written, and the transposed convolution's forward
// (winograd_forward_flops) with an add an element of dx.
template <class X, class DY, class DX>
Work winograd_backward_work(const Conv2dGeometry& g, const Winograd& wg, std::int64_t groups,
                            bool with_dx, bool with_db) {
  const double tiles = double(g.batch) * double(g.winograd_tiles());
  const double in = double(g.in_channels), out = double(g.out_channels), t = wg.t;
  Work work{bytes_of<typename X::value_type>(g.input_size()) +
                bytes_of<typename DY::value_type>(g.output_size()) +
                bytes_of<float>(groups * g.winograd_partial_size()),
            tiles * (in * winograd_input_flops(wg) + out * winograd_gradient_flops(wg) +
                     2.0 * t * t * in * out),
            "host schedule: one group of blocks per task, its dU partial summed in block order"};
  if (with_db) {
    work.bytes += bytes_of<float>(g.batch * g.out_channels);
    work.flops += double(g.output_size());
  }
  if (with_dx) {
    work.bytes += bytes_of<float>(g.winograd_partial_size()) +
                  2 * bytes_of<typename DX::value_type>(g.input_size());
    work.flops += winograd_forward_flops(g.transposed(), wg) + double(g.input_size());
  }
  return work;
}

// dW += dy * cols(x)^T, db += sums of dy, dx += conv(dy, flipped W)
// (Conv2dGeometry::transposed) when dx is not empty, ConvSchedule::winograd
// where g.winograd() holds: each group of Winograd blocks (one task) sums
// its dU (winograd_weight_samples) into a partial of its own and adds its
// samples' input gradient in Winograd's form too, in blocks of
// t.winograd_block_samples() within each block. The groups run in waves
// of as many as the threads (PartialWaves), each wave's partials added into
// the first (add_winograd_partials); winograd_weight_gradient then turns
// their sum into dW.
template <class ExecSpace, class X, class W, class DY, class DX, class DW, class DB, class Scratch>
void conv2d_backward_winograd(const ExecSpace& exec, const Conv2dGeometry& g, const X& x,
                              const W& w, const DY& dy, const DX& dx, const DW& dw, const DB& db,
                              const Scratch& scratch) {
  if constexpr (thread_gemm_space_v<ExecSpace>) {
    Kokkos::Experimental::UniqueToken<ExecSpace> token(exec);
    check_threads("tessera::kernels::conv2d_backward", exec, g, scratch, token.size());
    const std::int64_t positions = g.positions(), plane = g.input_positions();
    const std::int64_t in = g.in_channels, out = g.out_channels;
    const bool with_dx = dx.size() > 0, with_db = db.extent(0) > 0;
    const ThreadScratch ts(g, scratch.data(), token.size());
    float *const row_sums = ts.row_sums, *const partials = ts.partials;
    const Conv2dGeometry t = g.transposed();
    const Winograd wg(g.rows.kernel);
    float* const u = ts.gradient_weights;
    if (with_dx) winograd_weights(exec, wg, g, w, true, u);
    const std::int64_t samples = g.winograd_block_samples(), blocks = g.winograd_blocks();
    const std::int64_t per_group = g.winograd_group_blocks(), groups = g.winograd_groups();
    const std::int64_t size = g.winograd_partial_size(), transformed = t.winograd_block_samples();
    const Work work = winograd_backward_work<X, DY, DX>(g, wg, groups, with_dx, with_db);
    const PartialWaves waves(groups, token.size());
    const auto group_body = [=](std::int64_t slot, std::int64_t group, int id) {
      float* const work_slot = ts.slot(id);
      const std::int64_t last = (group + 1) * per_group < blocks ? (group + 1) * per_group : blocks;
      for (std::int64_t block = group * per_group; block < last; ++block) {
        const std::int64_t first = block * samples;
        const std::int64_t end = g.batch - first < samples ? g.batch : first + samples;
        winograd_weight_block(wg, g, x.data() + first * in * plane,
                              dy.data() + first * out * positions, end - first,
                              block == group * per_group ? 0.0f : 1.0f, partials + slot * size,
                              with_db ? row_sums + first * out : nullptr, work_slot);
        if (!with_dx) continue;
        for (std::int64_t from = first; from < end; from += transformed)
          winograd_block(wg, t, dy.data() + from * out * positions,
                         end - from < transformed ? end - from : transformed, u, nullptr,
                         dx.data() + from * in * plane, true, work_slot);
      }
    };
    // Each wave's partials added into partial 0, in group order.
    run_waves(
        exec, "tessera::kernels::conv2d_backward_winograd", waves, token, work, group_body,
        [&](std::int64_t wave) { add_winograd_partials(exec, g, partials, waves.end_slot(wave)); });
    winograd_weight_gradient(exec, wg, g, partials, dw);
    if (with_db) add_bias_gradient(exec, row_sums, g.batch, out, db);
  } else {
    check_threads("tessera::kernels::conv2d_backward", exec, g, scratch, 1);
    (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)db;
  }
}

}  // namespace tessera::kernels::impl
