// op(M) of a row-major matrix as its shape and two strides: how the
// products of mixed_gemm.hpp, and the vendor libraries they call, read an
// operand given as stored ("N") or transposed ("T").
#pragma once

#include <cstdint>

namespace tessera::kernels::impl {

// op(M) of a row-major matrix as a pointer and two strides.
struct Operand {
  std::int64_t rows, cols;          // of op(M)
  std::int64_t row_step, col_step;  // element distance between rows, columns of op(M)
};

template <class M>
Operand operand(const char* trans, const M& m) {
  const std::int64_t ld = static_cast<std::int64_t>(m.stride(0));
  const std::int64_t r = m.extent(0), c = m.extent(1);
  return trans[0] == 'N' ? Operand{r, c, ld, 1} : Operand{c, r, 1, ld};
}

}  // namespace tessera::kernels::impl
