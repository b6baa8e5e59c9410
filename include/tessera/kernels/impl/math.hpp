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

// Phi(x), the standard normal distribution function, and e^(-x^2 / 2),
// the exponential of its density, from one exponential: Phi within 1.2e-6
// relative for |x| <= 3 and 1.5e-5 in the far tails (measured against
// double precision). Phi(-|x|) = erfc(z) / 2 with z = |x| / sqrt(2), and
// erfc(z) = t e^(-z^2) Q(t) with t = 1 / (1 + z / 2) and Q a degree-8
// polynomial fitted (least squares of the relative error at Chebyshev
// points in t, for z in [0, 9.3]) to erfc(z) e^(z^2) / t, which falls
// smoothly from 1 at t = 1 to 1 / (2 sqrt(pi)) as t goes to 0, within
// 4.9e-8 (evaluated in pairs of terms: q = c0 + c1 t + ... + c8 t^8 as
// (q0 + t^2 q1) + t^4 (q2 + t^2 q3) + t^8 c8, q_i = c_2i + c_2i+1 t).
// The exponential does not wait for the division and the polynomial, and
// the density's is the same value: an earlier form, e^(P(t) - z^2) with P
// fitted to the logarithm, chained the three, and GELU's derivative took a
// second exponential (on 2^21 values, 2 threads of a Zen 2 core pair,
// GELU forward 2.29 against 1.56 ms, backward 3.24 against 1.63).
// Unlike 0.5 * (1 + erf(x / sqrt(2))), it keeps its relative precision for
// negative x, where the sum cancels (that form gives 0 below x = -5.5).
struct NormalCdf {
  float cdf;    // Phi(x)
  float gauss;  // e^(-x^2 / 2): the density is gauss / sqrt(2 pi)
};

KOKKOS_INLINE_FUNCTION NormalCdf normal_cdf_parts(float x) {
  const std::int32_t sign = bits_of(x) >> 31;  // all ones for negative x (and -0)
  const float z = float_from_bits(bits_of(x) & 0x7fffffff) * 0.70710678118654752f;
  const float t = 1.0f / (1.0f + 0.5f * z);
  const float gauss = exp_nonpositive(-(z * z));
  const float t2 = t * t, t4 = t2 * t2;
  const float q0 = 2.820837421e-01f + t * 2.824287684e-01f;
  const float q1 = 2.426677308e-01f + t * 2.045918463e-01f;
  const float q2 = -3.152925775e-02f + t * 2.857277131e-01f;
  const float q3 = -4.943332111e-01f + t * 2.882136416e-01f;
  const float q = ((q0 + t2 * q1) + t4 * (q2 + t2 * q3)) + (t4 * t4) * -5.985102222e-02f;
  const float tail = (0.5f * t * gauss) * q;
  // tail for negative x, 1 - tail otherwise.
  return {float_from_bits((bits_of(tail) & sign) | (bits_of(1.0f - tail) & ~sign)), gauss};
}

KOKKOS_INLINE_FUNCTION float normal_cdf(float x) { return normal_cdf_parts(x).cdf; }

}  // namespace tessera::kernels::impl
