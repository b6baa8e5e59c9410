// Sums of 16-bit floating-point codes, for gradient averaging in bf16 or
// fp16: an MPI reduction over MPI_UINT16_T whose every pairwise sum widens
// both codes to float, adds them there and rounds the sum once to the
// format. Float carries at least 2p + 2 significant bits for both formats
// (p = 8 for bf16, 11 for fp16), so rounding a float sum of two such values
// again gives the same code as rounding their exact sum: each partial sum of
// the reduction is correctly rounded.
#pragma once

#include <tessera/core/precision.hpp>
#include <tessera/settings/train_options.hpp>

#include <mpi.h>

#include <cstdint>

namespace tessera {
namespace impl {

// a + b for codes of T (bf16 or fp16), rounded to nearest, ties to even;
// infinities and NaN propagate as in float addition (inf + -inf is NaN).
// Every NaN comes out as the one quiet NaN of T: float addition keeps the
// payload of one operand, so a + b and b + a could differ in their bits,
// and ranks that add in different orders would then hold different bits.
template <class T>
inline std::uint16_t add16(std::uint16_t a, std::uint16_t b) {
  const float sum = static_cast<float>(T::from_bits(a)) + static_cast<float>(T::from_bits(b));
  return sum == sum ? T(sum).bits : T(bits_float(0x7fc00000u)).bits;
}

// The commutative MPI_Op that sums MPI_UINT16_T codes of `format` (bf16 or
// fp16) with add16, elementwise. Created on first use, once per format and
// process, and freed by MPI_Finalize (an attribute of MPI_COMM_SELF), so it
// outlives every request that uses it and is never freed after MPI is gone.
// Call between MPI_Init and MPI_Finalize (tessera::Runtime's lifetime).
MPI_Op sum16_op(FloatFormat format);

}  // namespace impl
}  // namespace tessera
