// The few places where Kokkos 3.4 (Debian) and Kokkos 4.x (Spack) differ.
// Everything else in Tessera is written to the API both share.
#pragma once

#include <KokkosBlas3_gemm.hpp>
#include <Kokkos_Core.hpp>

#include <cmath>

namespace tessera::compat {

// Math functions moved from Kokkos::Experimental to Kokkos in 4.0.
#if KOKKOS_VERSION >= 40000
using Kokkos::cos;
using Kokkos::erf;
using Kokkos::exp;
using Kokkos::fabs;
using Kokkos::log;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::cos;
using Kokkos::Experimental::erf;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::fabs;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif

// Kokkos 3.4 has no fma. fmaf exists in CUDA and HIP device code and on the
// host (where, without FMA instructions, it is a slow library call: for
// device kernels).
KOKKOS_INLINE_FUNCTION float fma(float a, float b, float c) { return ::fmaf(a, b, c); }

// KokkosBlas::gemm takes an execution space instance from Kokkos Kernels 4.0
// on; 3.4 runs on the default instance of the views' space.
template <class ExecSpace, class AView, class BView, class CView>
void gemm(const ExecSpace& exec, const char transA[], const char transB[],
          typename AView::const_value_type alpha, const AView& A, const BView& B,
          typename CView::const_value_type beta, const CView& C) {
#if KOKKOS_VERSION >= 40000
  KokkosBlas::gemm(exec, transA, transB, alpha, A, B, beta, C);
#else
  (void)exec;
  KokkosBlas::gemm(transA, transB, alpha, A, B, beta, C);
#endif
}

}  // namespace tessera::compat
