// 16-bit floating-point storage types for mixed-precision training: bf16
// (bfloat16: float's 8 exponent bits, 7 fraction bits) and fp16 (IEEE
// binary16: 5 exponent bits, 10 fraction bits, subnormals down to 2^-24).
// Kernels keep values in them and compute in float (accumulator_t).
//
// They are Tessera's own rather than Kokkos' half_t and bhalf_t: those are
// plain floats on the Serial and OpenMP backends in every Kokkos version
// (so they would halve no memory there), and Kokkos 3.4 has no bhalf_t.
// Here both are two bytes on every backend, and every conversion from float
// rounds to nearest, ties to even, in integer arithmetic that runs the same
// in host and device code: a value converts to the same bits on any
// backend. Infinities stay infinite, NaN stays NaN (made quiet), values
// beyond the largest finite fp16 (65504) round to infinity as IEEE
// rounding does, and fp16 keeps its subnormals. Host code built for a CPU
// with F16C (`-march=native` on any x86-64 since 2013) converts fp16 with
// its instructions instead, which give the same bits for every number
// (tests/test_precision.cpp compares both); the integer code is
// fp16_format::portable_to_bits and portable_from_bits.
#pragma once

#include <tessera/core/float_format.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>

#if defined(__F16C__) && !defined(__CUDACC__) && !defined(__HIPCC__)
#include <immintrin.h>
#define TESSERA_F16C 1
#else
#define TESSERA_F16C 0
#endif

namespace tessera {

namespace impl {

// A float's bits and back. Type punning through a union is defined by GCC,
// Clang and NVCC, and unlike memcpy it is available in device code on
// every backend.
union FloatBits {
  float f;
  std::uint32_t u;
};
KOKKOS_INLINE_FUNCTION std::uint32_t float_bits(float f) {
  FloatBits b{};
  b.f = f;
  return b.u;
}
KOKKOS_INLINE_FUNCTION float bits_float(std::uint32_t u) {
  FloatBits b{};
  b.u = u;
  return b.f;
}

// q + 1 if the `dropped` low bits of a value whose kept part is q are more
// than half of q's last place, or exactly half and q odd; else q.
KOKKOS_INLINE_FUNCTION std::uint32_t round_half_even(std::uint32_t q, std::uint32_t remainder,
                                                     std::uint32_t half) {
  return q + ((remainder > half || (remainder == half && (q & 1u))) ? 1u : 0u);
}

// The encodings: to_bits rounds a float to nearest, ties to even;
// from_bits is exact.
struct bf16_format {
  KOKKOS_INLINE_FUNCTION static std::uint16_t to_bits(float f) {
    const std::uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    // The upper 16 bits, rounded on the lower 16; a carry out of the fraction
    // moves into the exponent, up to infinity, as it should.
    return static_cast<std::uint16_t>(round_half_even(u >> 16, u & 0xffffu, 0x8000u));
  }
  KOKKOS_INLINE_FUNCTION static float from_bits(std::uint16_t h) {
    return bits_float(static_cast<std::uint32_t>(h) << 16);
  }
};

struct fp16_format {
  KOKKOS_INLINE_FUNCTION static std::uint16_t to_bits(float f) {
#if TESSERA_F16C
    return static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
    return portable_to_bits(f);
#endif
  }
  KOKKOS_INLINE_FUNCTION static float from_bits(std::uint16_t h) {
#if TESSERA_F16C
    return _cvtsh_ss(h);
#else
    return portable_from_bits(h);
#endif
  }

  KOKKOS_INLINE_FUNCTION static std::uint16_t portable_to_bits(float f) {
    const std::uint32_t u = float_bits(f);
    const std::uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    std::uint32_t h;
    if (a > 0x7f800000u) {
      h = 0x7e00u | ((a >> 13) & 0x3ffu);  // NaN, quiet, keeping the payload's top bits
    } else if (a >= 0x477ff000u) {
      h = 0x7c00u;  // infinity, or at least 65520: halfway to 2^16 and beyond rounds up
    } else if (a >= 0x38800000u) {
      // Normal: rebias the exponent (127 to 15) and round off 13 fraction bits.
      const std::uint32_t r = a - 0x38000000u;
      h = round_half_even(r >> 13, r & 0x1fffu, 0x1000u);
    } else if (a > 0x33000000u) {
      // Subnormal: the value in units of 2^-24, the significand m 2^(e - 150)
      // shifted right by 126 - e (14 to 24) places. Rounding up the largest
      // one gives 0x400, the smallest normal, as it should.
      const std::uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
      h = round_half_even(m >> shift, m & ((1u << shift) - 1u), 1u << (shift - 1u));
    } else {
      h = 0;  // at most 2^-25: half the smallest subnormal, a tie, goes to even 0
    }
    return static_cast<std::uint16_t>(sign | h);
  }
  KOKKOS_INLINE_FUNCTION static float portable_from_bits(std::uint16_t h) {
    const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
    const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return bits_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
      // m 2^-24, exact in float.
      return bits_float(sign | float_bits(static_cast<float>(m) * 5.9604644775390625e-8f));
    }
    return bits_float(sign | ((e + 112u) << 23) | (m << 13));
  }
};

}  // namespace impl

// A 16-bit floating-point value in the encoding Format. storage16(x) rounds x
// to nearest, ties to even; float(h) is exact.
template <class Format>
struct storage16 {
  std::uint16_t bits;

  storage16() = default;
  KOKKOS_INLINE_FUNCTION explicit storage16(float f) : bits(Format::to_bits(f)) {}
  KOKKOS_INLINE_FUNCTION explicit operator float() const { return Format::from_bits(bits); }
  KOKKOS_INLINE_FUNCTION static storage16 from_bits(std::uint16_t b) {
    storage16 v;
    v.bits = b;
    return v;
  }
};

using bf16 = storage16<impl::bf16_format>;  // bfloat16
using fp16 = storage16<impl::fp16_format>;  // IEEE binary16

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2, "16-bit storage types take 2 bytes");
static_assert(std::is_trivially_copyable<bf16>::value && std::is_trivially_copyable<fp16>::value,
              "16-bit storage types copy as bytes (views, MPI, HDF5)");

// The type a kernel computes and sums in for values stored as T: float for
// the 16-bit types, T itself otherwise.
template <class T>
struct accumulator {
  using type = T;
};
template <class Format>
struct accumulator<storage16<Format>> {
  using type = float;
};
template <class T>
using accumulator_t = typename accumulator<T>::type;

// A stored value in its accumulator type, and an accumulator value stored
// as T (rounded to nearest, ties to even, for the 16-bit types).
template <class T>
KOKKOS_INLINE_FUNCTION accumulator_t<T> widen(T v) {
  return static_cast<accumulator_t<T>>(v);
}
template <class T>
KOKKOS_INLINE_FUNCTION T narrow(accumulator_t<T> v) {
  return T(v);
}
// dst += v in the accumulator type, the sum stored rounded once.
template <class T>
KOKKOS_INLINE_FUNCTION void add_rounded(T& dst, accumulator_t<T> v) {
  dst = narrow<T>(widen(dst) + v);
}

// add_rounded (add) or dst = 0 + v, rounded once: the bits of adding into
// a zeroed dst, without reading it.
template <class T>
KOKKOS_INLINE_FUNCTION void put_rounded(T& dst, accumulator_t<T> v, bool add) {
  if (add)
    add_rounded(dst, v);
  else
    dst = narrow<T>(accumulator_t<T>(0) + v);
}

// True for bf16 and fp16.
template <class T>
struct is_storage16 : std::false_type {};
template <class Format>
struct is_storage16<storage16<Format>> : std::true_type {};
template <class T>
constexpr bool is_storage16_v = is_storage16<T>::value;

// The format of an element type.
template <class T>
constexpr FloatFormat format_of() {
  static_assert(
      std::is_same<T, float>::value || std::is_same<T, bf16>::value || std::is_same<T, fp16>::value,
      "tessera::format_of: float, bf16 or fp16");
  return std::is_same<T, bf16>::value   ? FloatFormat::bf16
         : std::is_same<T, fp16>::value ? FloatFormat::fp16
                                        : FloatFormat::fp32;
}
// Calls f(T()) with T the element type of `format`: code written once for
// every format, chosen at run time.
template <class F>
decltype(auto) with_format(FloatFormat format, F&& f) {
  switch (format) {
    case FloatFormat::bf16:
      return f(bf16());
    case FloatFormat::fp16:
      return f(fp16());
    default:
      return f(float());
  }
}

}  // namespace tessera
