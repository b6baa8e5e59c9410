// Transcendental functions for element-wise kernels, written as plain
// arithmetic without calls or branches, so that a host loop over them
// vectorises (the C library's expf and erff are scalar calls: the exact
// GELU spent 27 % of a GPT training step in erff). The same code runs in
// device kernels.
#pragma once

#include <tessera/core/precision.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace tessera::kernels::impl {

// A float's bits as a signed integer (so that >> 31 spreads the sign) and
// back, through core/precision.hpp's punning.
KOKKOS_INLINE_FUNCTION std::int32_t bits_of(float f) {
  return static_cast<std::int32_t>(tessera::impl::float_bits(f));
}
KOKKOS_INLINE_FUNCTION float float_from_bits(std::int32_t bits) {
  return tessera::impl::bits_float(static_cast<std::uint32_t>(bits));
}

// Branch-free forms: GCC turns `c ? v : w` into a branch, and then
// vectorises nothing, as soon as it can fold the arithmetic that follows
// into the two arms (a clamp followed by a polynomial is enough). Hence the
// selects below are made with bit masks.

// e^a for a <= 0, within 1.1e-7 relative down to -87 (the normal floats),
// then rounded once into the subnormals, and 0 below -104. a = n ln 2 + r
// with |r| <= ln(2)/2 (ln 2 split in two, so n ln 2 is exact for
// |n| < 2^11), e^r by its Taylor series to r^7 / 7! (truncation below
// 5e-9), then times 2^n as two normal powers of two, each written into
// the exponent bits, so that the last product rounds into the subnormals.
//
// The polynomials here are evaluated in pairs of terms (Estrin's scheme)
// rather than by Horner's rule where that keeps the error bounds: a chain
// of dependent multiply-adds is what bounds these loops (each vector's
// arithmetic waits on the one before it, and a core holds too few
// vectors' operations in flight to hide that), and pairs halve the chain.
// e^r = 1 + r (1 + r q), q = 1/2 + r/6 + ... + r^5/7! in pairs (Horner's
// rule for the last two terms, which carry the result's leading bits).
KOKKOS_INLINE_FUNCTION float exp_nonpositive(float a) {
  // x = max(a, -104) on the bits: as unsigned numbers, the floats below -104
  // are exactly those above its bits (the sign bit set, a larger magnitude).
  const std::uint32_t limit = 0xC2D00000u;  // -104.0f
  const std::uint32_t bits = static_cast<std::uint32_t>(bits_of(a));
  const std::uint32_t below = 0u - static_cast<std::uint32_t>(bits > limit);  // all ones or 0
  const float x = float_from_bits(static_cast<std::int32_t>((limit & below) | (bits & ~below)));
  // Round x / ln 2 to the nearest integer by adding and subtracting 1.5 * 2^23.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
  const float r2 = r * r;
  const float q = ((0.5f + r * (1.0f / 6.0f)) + r2 * (1.0f / 24.0f + r * (1.0f / 120.0f))) +
                  (r2 * r2) * (1.0f / 720.0f + r * (1.0f / 5040.0f));
  const float p = 1.0f + r * (1.0f + r * q);
  const std::int32_t k = static_cast<std::int32_t>(n), half = k / 2;
  return p * float_from_bits((half + 127) * (1 << 23)) *
         float_from_bits((k - half + 127) * (1 << 23));
}

// Phi(x), the standard normal distribution function, within 1.2e-6
// relative for |x| <= 3 and 2e-5 in the far tails (measured against double
// precision). Phi(-|x|) = erfc(z) / 2 with z = |x| / sqrt(2), and
// erfc(z) = t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2) and P a degree-9
// polynomial fitted (Chebyshev least squares in t, for z in [0, 9.3])
// to log(erfc(z) / t) + z^2 within 2.3e-7 (evaluated in pairs of terms:
// p = c0 + c1 t + ... + c9 t^9 as (q0 + t^2 q1) + t^4 (q2 + t^2 q3) + t^8
// q4, q_i = c_2i + c_2i+1 t). Unlike 0.5 * (1 + erf(x /
// sqrt(2))), it keeps its relative precision for negative x, where the
// sum cancels (that form gives 0 below x = -5.5).
KOKKOS_INLINE_FUNCTION float normal_cdf(float x) {
  const std::int32_t sign = bits_of(x) >> 31;  // all ones for negative x (and -0)
  const float z = float_from_bits(bits_of(x) & 0x7fffffff) * 0.70710678118654752f;
  const float t = 1.0f / (1.0f + 0.5f * z);
  const float t2 = t * t, t4 = t2 * t2;
  const float q0 = -1.265466185e+00f + t * 9.990838459e-01f;
  const float q1 = 3.820206314e-01f + t * 6.040942905e-02f;
  const float q2 = -8.590562158e-02f + t * 1.054586143e-01f;
  const float q3 = -9.472533941e-01f + t * 1.365229451e+00f;
  const float q4 = -7.778648195e-01f + t * 1.642882749e-01f;
  const float p = ((q0 + t2 * q1) + t4 * (q2 + t2 * q3)) + (t4 * t4) * q4;
  const float tail = 0.5f * t * exp_nonpositive(p - z * z);
  // tail for negative x, 1 - tail otherwise.
  return float_from_bits((bits_of(tail) & sign) | (bits_of(1.0f - tail) & ~sign));
}

}  // namespace tessera::kernels::impl
