// Floats that one host operation handles at once, for the host kernels
// that write their arithmetic on whole vectors (Winograd's transforms, the
// direct convolution's register tiles), so that GCC emits one vector
// operation per step instead of vectorising (or not) a scalar loop:
//
// - FloatLanes: 16 floats, whatever the host's vectors; the Winograd
//   transforms' channel step (an AVX-512 register, two AVX ones).
// - NativeLanes: the host's own register, native_lanes floats (16 with
//   AVX-512, 8 with AVX, 4 otherwise). Register tiles and transforms take
//   these: GCC keeps a 16-float vector in two AVX registers poorly (it
//   moved a tile's accumulators through the stack and ran a tenth as
//   fast; Winograd's transforms ran at half speed in an AVX2 build).
// - EightFloats and EightDoubles: the lanes of ordered sums.
//
// Where the compiler has no vector extensions (TESSERA_HOST_VECTORS,
// core/host_paths.hpp) an array of floats gives the same values, one lane
// at a time (FloatLanes, NativeLanes and EightFloats alike).
#pragma once

#include <tessera/core/host_paths.hpp>

#include <cstddef>
#include <cstring>
#include <utility>

namespace tessera::kernels::impl {

constexpr int float_lanes = 16;
#if defined(__AVX512F__)
constexpr int native_lanes = 16;
#elif defined(__AVX__)
constexpr int native_lanes = 8;
#else
constexpr int native_lanes = 4;
#endif

#ifdef TESSERA_HOST_VECTORS
typedef float FloatLanes __attribute__((vector_size(float_lanes * sizeof(float))));
typedef float NativeLanes __attribute__((vector_size(native_lanes * sizeof(float))));
#else
template <int N>
struct LaneArray {
  float v[N];
  friend LaneArray operator*(float f, const LaneArray& x) {
    LaneArray y;
    for (int l = 0; l < N; ++l) y.v[l] = f * x.v[l];
    return y;
  }
  friend LaneArray operator*(const LaneArray& x, const LaneArray& y) {
    LaneArray z;
    for (int l = 0; l < N; ++l) z.v[l] = x.v[l] * y.v[l];
    return z;
  }
  LaneArray& operator+=(const LaneArray& x) {
    for (int l = 0; l < N; ++l) v[l] += x.v[l];
    return *this;
  }
  float& operator[](int l) { return v[l]; }
  float operator[](int l) const { return v[l]; }
};
using FloatLanes = LaneArray<float_lanes>;
using NativeLanes = LaneArray<native_lanes>;
using EightFloats = LaneArray<8>;
#endif

#ifdef TESSERA_HOST_VECTORS
// Eight floats, and the eight doubles they widen to: the lanes of the
// ordered sums of impl/norm_sums.hpp. The doubles are one register with
// AVX-512 and a pair elsewhere (held as one 64-byte vector in an AVX
// build, GCC moved them through the stack piece by piece, and BatchNorm's
// sums ran 9 times slower); the same operations in each lane either way.
typedef float EightFloats __attribute__((vector_size(8 * sizeof(float))));
#if defined(__AVX512F__)
typedef double EightDoubles __attribute__((vector_size(8 * sizeof(double))));
inline EightDoubles widen_lanes(EightFloats v) { return __builtin_convertvector(v, EightDoubles); }
#else
struct EightDoubles {
  typedef double Half __attribute__((vector_size(4 * sizeof(double))));
  union {
    Half half[2];
    double lane[8];
  };
  EightDoubles& operator+=(const EightDoubles& o) {
    half[0] += o.half[0];
    half[1] += o.half[1];
    return *this;
  }
  EightDoubles& operator*=(const EightDoubles& o) {
    half[0] *= o.half[0];
    half[1] *= o.half[1];
    return *this;
  }
  friend EightDoubles operator*(EightDoubles a, const EightDoubles& b) { return a *= b; }
  double& operator[](int i) { return lane[i]; }
};
inline EightDoubles widen_lanes(EightFloats v) {
  EightDoubles w;
  w.half[0] =
      __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), EightDoubles::Half);
  w.half[1] =
      __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), EightDoubles::Half);
  return w;
}
#endif
#endif

#ifdef TESSERA_HOST_VECTORS
// One step of a register transpose of native_lanes rows: rows i and i + b
// (i without the bit b) exchange blocks of b values, row i taking the
// first block of each pair of blocks from both, row i + b the second.
// After the steps b = native_lanes / 2, ..., 2, 1, row i holds what was
// column i. Each step is one two-register permute a row.
constexpr int transpose_index(int k, int b, bool second) {
  const int pair = k / (2 * b) * (2 * b), w = k % (2 * b);
  return (w < b ? pair + w : native_lanes + pair + w - b) + (second ? b : 0);
}
template <int b, std::size_t... K>
inline void transpose_pair(NativeLanes& x, NativeLanes& y, std::index_sequence<K...>) {
  const NativeLanes first = __builtin_shufflevector(x, y, transpose_index(int(K), b, false)...);
  const NativeLanes second = __builtin_shufflevector(x, y, transpose_index(int(K), b, true)...);
  x = first;
  y = second;
}
template <int b>
inline void transpose_lanes(NativeLanes (&x)[native_lanes]) {
  for (int i = 0; i < native_lanes; ++i)
    if ((i & b) == 0)
      transpose_pair<b>(x[i], x[i + b], std::make_index_sequence<std::size_t(native_lanes)>());
  if constexpr (b > 1) transpose_lanes<b / 2>(x);
}
#endif

// Lanes from p and to p (any alignment), and all lanes zero.
template <class L>
inline L load_lanes(const float* p) {
  L x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
template <class L>
inline void store_lanes(float* p, const L& x) {
  std::memcpy(p, &x, sizeof x);
}
// Keeps x in a register: GCC otherwise folds a value loaded once into
// every multiply-add that reads it, one load each (an x86 core issues
// those loads beside the broadcasts, and a register tile's loop waits on
// its load ports instead of its multiply-adds).
template <class L>
inline void keep_in_register(L& x) {
#if defined(TESSERA_HOST_VECTORS) && defined(__AVX__)
  __asm__("" : "+v"(x));
#else
  (void)x;
#endif
}

template <class L>
inline L zero_lanes() {
  L z;
  std::memset(&z, 0, sizeof z);
  return z;
}

}  // namespace tessera::kernels::impl
