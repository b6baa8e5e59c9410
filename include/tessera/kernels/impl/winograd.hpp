// Winograd's minimal filtering F(m x m, r x r) for square r x r
// convolutions at stride 1, on the host threads of ConvSchedule::winograd:
// F(4 x 4, 3 x 3) and F(2 x 2, 5 x 5), both on tiles of t = m + r - 1 = 6.
// An output tile of m x m positions is A^T [(G g G^T) * (B^T d B)] A,
// where d is the t x t input tile and g the kernel: the t^2 element-wise
// products of all channels are t^2 matrix products (tiles x in_channels
// times in_channels x out_channels), t^2 / (m^2 r^2) times the
// multiplications of the direct form (4x fewer for 3 x 3, 2.78x for
// 5 x 5). The weight gradient is that computation's transpose: dU = the sum
// over tiles of (A dy A^T) * (B^T d B), again t^2 products (out_channels x
// tiles times tiles x in_channels), and dW = G^T dU G.
//
// The matrices come from the Toom-Cook interpolation points 0, 1, -1, 2,
// -2 and infinity: G is the evaluation of the kernel at the points, A^T
// that of the output, and B^T the transposed inverse of the evaluation of
// the tile; each row of B^T is divided by its smallest nonzero magnitude
// and the row of G multiplied by it, so that B^T holds small integers (1,
// 2, 4, 5), exact in float, and the fractions are in the weights'
// transform, which runs in double. A^T holds the points' powers up to
// m - 1 (1, 2, 4, 8), exact too.
//
// The transforms run over a tile's channels a host vector at a time
// (NativeLanes: 16 channels with AVX-512, 8 with AVX): the input is first
// laid out channel-last ([row][column][channel], padded), so that each
// step of a transform is one vector operation, and the products' output
// is [tile][out channel].
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/impl/lanes.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tessera::kernels::impl {

// The transforms need channel counts that are multiples of this (the
// weights' transforms take this many channels a task; impl/lanes.hpp).
constexpr int winograd_lanes = float_lanes;

struct Winograd {
  static constexpr int max_t = 6, max_m = 4;
  int r = 0, m = 0, t = 0;
  float bt[max_t][max_t] = {};  // t x t: V = B^T d B
  float g[max_t][5] = {};       // t x r: U = G g G^T
  float at[max_m][max_t] = {};  // m x t: Y = A^T M A

  // The kernel sizes it has points for.
  static bool supports(int kernel) { return kernel == 3 || kernel == 5; }
  // The output tile's side m of a kernel's F(m x m, r x r): 4 for 3 x 3,
  // 2 for 5 x 5 (the six points either way).
  static constexpr int output_tile(int kernel) { return kernel == 3 ? 4 : 2; }
  // The tile F(m x m, r x r) transforms: t x t.
  static constexpr int tile_size(int kernel) { return output_tile(kernel) + kernel - 1; }

  explicit Winograd(int kernel)
      : r(supports(kernel) ? kernel : 3), m(output_tile(r)), t(tile_size(r)) {
    TESSERA_REQUIRE(supports(kernel), "tessera::kernels::impl::Winograd: a "
                                          << kernel << " x " << kernel
                                          << " kernel; F(m x m, r x r) is defined for r = 3 and 5 "
                                             "(Conv2dGeometry::winograd)");
    const double points[4] = {0, 1, -1, 2};  // then -2, then infinity (t = 6)
    double p[max_t];
    for (int j = 0; j + 1 < t; ++j) p[j] = j < 4 ? points[j] : -2.0;
    // e: t x t evaluation of a polynomial of degree t - 1 (coefficients) at
    // the points, the last row its leading coefficient (infinity).
    double e[max_t][max_t] = {}, inv[max_t][max_t] = {};
    for (int j = 0; j + 1 < t; ++j) {
      double power = 1;
      for (int i = 0; i < t; ++i, power *= p[j]) e[j][i] = power;
    }
    e[t - 1][t - 1] = 1;
    // inv = e^{-1} by Gauss-Jordan elimination with partial pivoting.
    double a[max_t][2 * max_t] = {};
    for (int i = 0; i < t; ++i) {
      for (int j = 0; j < t; ++j) a[i][j] = e[i][j];
      a[i][t + i] = 1;
    }
    for (int col = 0; col < t; ++col) {
      int pivot = col;
      for (int i = col + 1; i < t; ++i)
        if (std::fabs(a[i][col]) > std::fabs(a[pivot][col])) pivot = i;
      for (int j = 0; j < 2 * t; ++j) {
        const double tmp = a[col][j];
        a[col][j] = a[pivot][j];
        a[pivot][j] = tmp;
      }
      const double d = a[col][col];
      for (int j = 0; j < 2 * t; ++j) a[col][j] /= d;
      for (int i = 0; i < t; ++i) {
        if (i == col || a[i][col] == 0) continue;
        const double f = a[i][col];
        for (int j = 0; j < 2 * t; ++j) a[i][j] -= f * a[col][j];
      }
    }
    for (int i = 0; i < t; ++i)  // zeros that cancelled to a rounding error are zeros
      for (int j = 0; j < t; ++j) inv[i][j] = std::fabs(a[i][t + j]) < 1e-12 ? 0.0 : a[i][t + j];
    // Correlation is the transpose of the polynomial product: output
    // y = A^T [(G g) * (B^T d)] with A^T the evaluation of a polynomial of
    // degree m - 1, G that of degree r - 1, B^T = inv^T.
    for (int j = 0; j < t; ++j) {
      double scale = 0;  // the smallest magnitude in row j of B^T
      for (int i = 0; i < t; ++i)
        if (inv[i][j] != 0 && (scale == 0 || std::fabs(inv[i][j]) < scale))
          scale = std::fabs(inv[i][j]);
      for (int i = 0; i < t; ++i) bt[j][i] = static_cast<float>(inv[i][j] / scale);
      for (int k = 0; k < r; ++k) {
        const double value = j + 1 < t ? std::pow(p[j], k) : (k == r - 1 ? 1.0 : 0.0);
        g[j][k] = static_cast<float>(value * scale);
      }
      for (int i = 0; i < m; ++i)
        at[i][j] = j + 1 < t ? static_cast<float>(std::pow(p[j], i)) : (i + 1 == m ? 1.0f : 0.0f);
    }
  }

  // Output tiles of an axis of `out` positions under a kernel's tiles.
  static int tiles(int out, int kernel) {
    return (out + output_tile(kernel) - 1) / output_tile(kernel);
  }
  // Input positions those tiles read along the axis, padding included.
  static int padded(int out, int kernel) {
    return output_tile(kernel) * tiles(out, kernel) + kernel - 1;
  }

  // u[(i * t + j) * in * out + c * out + o] = (G w(o, c) G^T)(i, j) for
  // input channel c and output channels [o0, o0 + count), count at most
  // winograd_lanes, from the weights [out, in, r, r]; with `flip`, w is [in, out, r, r]
  // and is read as the weights of the transposed convolution (flipped in
  // space, in and out swapped), for the input gradient. Each of the t^2
  // blocks gets one run of `count` floats (the blocks lie in*out floats
  // apart, often a multiple of the cache's way size: value by value, their
  // t^2 lines would evict each other).
  void transform_weights(const float* w, std::int64_t in, std::int64_t out, bool flip,
                         std::int64_t c, std::int64_t o0, int count, float* u) const {
    constexpr int L = winograd_lanes;  // each step runs over the lanes at once
    double k[5][5][L] = {}, tmp[max_t][5][L], s[L];
    for (int l = 0; l < count; ++l) {
      const std::int64_t o = o0 + l;
      const float* kernel = flip ? w + (c * out + o) * r * r : w + (o * in + c) * r * r;
      for (int a = 0; a < r; ++a)
        for (int b = 0; b < r; ++b)
          k[a][b][l] = flip ? kernel[(r - 1 - a) * r + r - 1 - b] : kernel[a * r + b];
    }
    for (int i = 0; i < t; ++i)  // G g
      for (int b = 0; b < r; ++b) {
        for (int l = 0; l < L; ++l) s[l] = 0;
        for (int a = 0; a < r; ++a)
          for (int l = 0; l < L; ++l) s[l] += double(g[i][a]) * k[a][b][l];
        for (int l = 0; l < L; ++l) tmp[i][b][l] = s[l];
      }
    const std::int64_t plane = in * out;
    for (int i = 0; i < t; ++i)
      for (int j = 0; j < t; ++j) {
        for (int l = 0; l < L; ++l) s[l] = 0;
        for (int b = 0; b < r; ++b)
          for (int l = 0; l < L; ++l) s[l] += tmp[i][b][l] * double(g[j][b]);
        float* const row = u + (i * t + j) * plane + c * out + o0;
        for (int l = 0; l < count; ++l) row[l] = static_cast<float>(s[l]);
      }
  }

  // The weight gradient of winograd_lanes (output, input) channel pairs
  // from that of their transformed weights, du[i * t + j][l] = dL/dU(i, j)
  // of pair l: dw[a * r + b][l] = (G^T dU G)(a, b), the transpose of the
  // weights' transform.
  void transform_weight_gradient(const double (*du)[winograd_lanes],
                                 double (*dw)[winograd_lanes]) const {
    constexpr int L = winograd_lanes;
    double tmp[max_t][5][L];  // dU G
    for (int i = 0; i < t; ++i)
      for (int b = 0; b < r; ++b) {
        double* const s = tmp[i][b];
        for (int l = 0; l < L; ++l) s[l] = 0;
        for (int j = 0; j < t; ++j)
          for (int l = 0; l < L; ++l) s[l] += du[i * t + j][l] * double(g[j][b]);
      }
    for (int a = 0; a < r; ++a)
      for (int b = 0; b < r; ++b) {
        double* const s = dw[a * r + b];
        for (int l = 0; l < L; ++l) s[l] = 0;
        for (int i = 0; i < t; ++i)
          for (int l = 0; l < L; ++l) s[l] += double(g[i][a]) * tmp[i][b][l];
      }
  }
};
static_assert(Winograd::tile_size(3) == Winograd::max_t &&
                  Winograd::tile_size(5) == Winograd::max_t,
              "both kernels' tiles are t = 6: the transforms are instantiated for it alone");

// A transform step's channels: the host's own vector (impl/lanes.hpp),
// so that each step is one register operation; channel counts are
// multiples of winograd_lanes, hence of it.
using WinogradLanes = NativeLanes;
static_assert(winograd_lanes % native_lanes == 0, "a vector step divides winograd_lanes");

// Unrolls the loop it precedes (GCC and Clang), so that the coefficients
// below are constants in each of its steps; nvcc's front end does not know
// the pragma, and its builds run these transforms on no device.
#if defined(__NVCC__)
#define TESSERA_WINOGRAD_UNROLL
#else
#define TESSERA_WINOGRAD_UNROLL _Pragma("GCC unroll 8")
#endif

// B^T and A^T of F(m x m, r x r), t = 6 (m = 4 and 2), as constants:
// the matrices Winograd's constructor derives from the interpolation
// points (tests/test_conv.cpp checks that they agree). The transforms below
// run over them unrolled, so each step compiles to the terms of its
// nonzero coefficients only, and coefficients 1 and -1 multiply nothing:
// B^T d B takes 336 FLOPs a channel, where the whole products of its
// matrices take 792.
template <int T>
struct WinogradInputMatrix;
template <int T, int M>
struct WinogradMatrices;
template <>
struct WinogradInputMatrix<6> {
  static constexpr float bt[6][6] = {{4, 0, -5, 0, 1, 0},  {0, 4, 4, -1, -1, 0},
                                     {0, -4, 4, 1, -1, 0}, {0, -2, -1, 2, 1, 0},
                                     {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
};
template <>
struct WinogradMatrices<6, 2> : WinogradInputMatrix<6> {
  static constexpr float at[2][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 1}};
};
template <>
struct WinogradMatrices<6, 4> : WinogradInputMatrix<6> {
  static constexpr float at[4][6] = {
      {1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
};

// The sum over k < N, in order of k, of c[k] x(k) for constant
// coefficients c, the terms of zero coefficients left out: for finite x the
// value of the whole sum (a zero term added leaves a sum as it is). A first
// term of a coefficient other than 1 and -1 is added to 0, so that the
// compiler fuses each later product with the sum before it (fusing the
// first product with the second instead would round a different product).
template <int N, class L, class X>
inline L constant_combination(const float (&c)[N], const X& x) {
  L s{};
  bool first = true;
  TESSERA_WINOGRAD_UNROLL
  for (int k = 0; k < N; ++k) {
    if (c[k] == 0.0f) continue;
    if (first && (c[k] == 1.0f || c[k] == -1.0f))
      s = c[k] * x(k);
    else
      s += c[k] * x(k);
    first = false;
  }
  return s;
}

// FLOPs of constant_combination over a row of N coefficients: an add a
// term after the first, a multiply a coefficient other than 0, 1 and -1.
template <int N>
constexpr int combination_flops(const float (&c)[N]) {
  int terms = 0, products = 0;
  for (int k = 0; k < N; ++k) {
    terms += c[k] != 0.0f;
    products += c[k] != 0.0f && c[k] != 1.0f && c[k] != -1.0f;
  }
  return (terms > 0 ? terms - 1 : 0) + products;
}

// FLOPs of a transform of one channel's tile, t x t (t = 6): B^T d B
// (t columns, then t rows, through B^T), A^T M A (t columns, then m rows,
// through A^T) and A d A^T (m columns of d to t rows, then t rows, through
// the columns of A^T).
template <int T>
constexpr int winograd_input_tile_flops() {
  int rows = 0;
  for (int i = 0; i < T; ++i) rows += combination_flops(WinogradInputMatrix<T>::bt[i]);
  return 2 * T * rows;
}
template <int T, int M>
constexpr int winograd_output_tile_flops() {
  int rows = 0;
  for (int a = 0; a < M; ++a) rows += combination_flops(WinogradMatrices<T, M>::at[a]);
  return (T + M) * rows;
}
template <int T, int M>
constexpr int winograd_gradient_tile_flops() {
  int columns = 0;
  for (int i = 0; i < T; ++i) {
    float column[M] = {};
    for (int a = 0; a < M; ++a) column[a] = WinogradMatrices<T, M>::at[a][i];
    columns += combination_flops(column);
  }
  return (M + T) * columns;
}

// V[(i * t + j)][tile][c] = (B^T d B)(i, j) of one tile of `channels`
// channels, d read channel-last from `in` (rows `row` floats apart,
// columns `channels`); V's (i, j) blocks are `block` floats apart.
template <int T>
inline void winograd_input_tile(const float* in, std::int64_t row, std::int64_t channels, float* v,
                                std::int64_t block) {
  using W = WinogradInputMatrix<T>;
  for (std::int64_t c0 = 0; c0 < channels; c0 += native_lanes) {
    WinogradLanes tmp[T][T];  // tmp[i][b] = sum_a bt[i][a] d[a][b]
    for (int b = 0; b < T; ++b) {
      WinogradLanes d[T];
      for (int a = 0; a < T; ++a)
        std::memcpy(&d[a], in + a * row + b * channels + c0, sizeof(WinogradLanes));
      TESSERA_WINOGRAD_UNROLL
      for (int i = 0; i < T; ++i)
        tmp[i][b] = constant_combination<T, WinogradLanes>(W::bt[i], [&](int a) { return d[a]; });
    }
    TESSERA_WINOGRAD_UNROLL
    for (int i = 0; i < T; ++i) {
      TESSERA_WINOGRAD_UNROLL
      for (int j = 0; j < T; ++j) {
        const WinogradLanes s =
            constant_combination<T, WinogradLanes>(W::bt[j], [&](int b) { return tmp[i][b]; });
        std::memcpy(v + (i * T + j) * block + c0, &s, sizeof s);
      }
    }
  }
}

// The output transform's transpose, for the weight gradient:
// m[(i * t + j)][tile][o] = (A d A^T)(i, j) of the M x M output-gradient
// tile d of `channels` channels read channel-last from `in` (rows `row`
// floats apart, columns `channels`); m's (i, j) blocks are `block` floats
// apart.
template <int T, int M>
inline void winograd_gradient_tile(const float* in, std::int64_t row, std::int64_t channels,
                                   float* m, std::int64_t block) {
  using W = WinogradMatrices<T, M>;
  for (std::int64_t o0 = 0; o0 < channels; o0 += native_lanes) {
    WinogradLanes d[M][M];
    for (int a = 0; a < M; ++a)
      for (int b = 0; b < M; ++b)
        std::memcpy(&d[a][b], in + a * row + b * channels + o0, sizeof(WinogradLanes));
    WinogradLanes tmp[T][M];  // tmp[i][b] = sum_a at[a][i] d[a][b]
    TESSERA_WINOGRAD_UNROLL
    for (int i = 0; i < T; ++i) {
      float column[M];
      for (int a = 0; a < M; ++a) column[a] = W::at[a][i];
      for (int b = 0; b < M; ++b)
        tmp[i][b] = constant_combination<M, WinogradLanes>(column, [&](int a) { return d[a][b]; });
    }
    TESSERA_WINOGRAD_UNROLL
    for (int i = 0; i < T; ++i) {
      TESSERA_WINOGRAD_UNROLL
      for (int j = 0; j < T; ++j) {
        float column[M];
        for (int b = 0; b < M; ++b) column[b] = W::at[b][j];
        const WinogradLanes s =
            constant_combination<M, WinogradLanes>(column, [&](int b) { return tmp[i][b]; });
        std::memcpy(m + (i * T + j) * block + o0, &s, sizeof s);
      }
    }
  }
}

// out[a][b][o] = (A^T M A)(a, b) of one tile, a, b < M: M[(i * t +
// j)][tile][o] at m, (i, j) blocks `block` floats apart; out's rows `row`
// floats apart, its columns `channels`.
template <int T, int M>
inline void winograd_output_tile(const float* m, std::int64_t block, std::int64_t channels,
                                 float* out, std::int64_t row) {
  using W = WinogradMatrices<T, M>;
  for (std::int64_t o0 = 0; o0 < channels; o0 += native_lanes) {
    WinogradLanes tmp[M][T];  // tmp[a][j] = sum_i at[a][i] m[i][j]
    TESSERA_WINOGRAD_UNROLL
    for (int j = 0; j < T; ++j) {
      WinogradLanes x[T];
      for (int i = 0; i < T; ++i)
        std::memcpy(&x[i], m + (i * T + j) * block + o0, sizeof(WinogradLanes));
      TESSERA_WINOGRAD_UNROLL
      for (int a = 0; a < M; ++a)
        tmp[a][j] = constant_combination<T, WinogradLanes>(W::at[a], [&](int i) { return x[i]; });
    }
    TESSERA_WINOGRAD_UNROLL
    for (int a = 0; a < M; ++a) {
      TESSERA_WINOGRAD_UNROLL
      for (int b = 0; b < M; ++b) {
        const WinogradLanes s =
            constant_combination<T, WinogradLanes>(W::at[b], [&](int j) { return tmp[a][j]; });
        std::memcpy(out + a * row + b * channels + o0, &s, sizeof s);
      }
    }
  }
}

// Where one block's Winograd work lies in a thread's scratch, for `count`
// samples of a convolution with out_rows x out_cols outputs, an r x r
// kernel and in -> out channels: the input laid out channel-last and padded
// to whole tiles, the output (or output gradient) tiles channel-last, one
// sample at a time; then the t^2 transformed inputs and products of all
// the block's tiles. Offsets and `floats` (the total) in floats.
struct WinogradLayout {
  int rows, cols;  // output tiles along each axis
  std::int64_t tiles, n, padded_cols, padded;
  std::int64_t tile_out_at, v_at, m_at, floats;
  WinogradLayout(int out_rows, int out_cols, int r, std::int64_t in, std::int64_t out,
                 std::int64_t count)
      : rows(Winograd::tiles(out_rows, r)), cols(Winograd::tiles(out_cols, r)) {
    const std::int64_t t = Winograd::tile_size(r), m = Winograd::output_tile(r);
    const std::int64_t widest = in > out ? in : out;
    tiles = std::int64_t(rows) * cols;
    n = count * tiles;
    padded_cols = Winograd::padded(out_cols, r);
    padded = Winograd::padded(out_rows, r) * padded_cols;
    tile_out_at = padded * widest;
    v_at = tile_out_at + m * m * tiles * widest;
    m_at = v_at + t * t * n * in;
    floats = m_at + t * t * n * out;
  }
};

}  // namespace tessera::kernels::impl
