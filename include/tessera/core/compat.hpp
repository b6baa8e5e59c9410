// The few places where Kokkos 3.4 (Debian) and Kokkos 4.x (Spack) differ.
// Everything else in Tessera is written to the API both share.
#pragma once

#include <KokkosBlas3_gemm.hpp>
#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdlib>
#include <deque>
#include <string>

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

// Host memory the device copies from without staging: pinned on CUDA and
// HIP (HIP's spaces left Kokkos::Experimental in 4.0), plain host memory on
// host backends.
#if defined(KOKKOS_ENABLE_CUDA)
using PinnedHostSpace = Kokkos::CudaHostPinnedSpace;
#elif defined(KOKKOS_ENABLE_HIP) && KOKKOS_VERSION >= 40000
using PinnedHostSpace = Kokkos::HIPHostPinnedSpace;
#elif defined(KOKKOS_ENABLE_HIP)
using PinnedHostSpace = Kokkos::Experimental::HIPHostPinnedSpace;
#else
using PinnedHostSpace = Kokkos::HostSpace;
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

// Kokkos 4.0 renamed the thread-count option (--kokkos-threads became
// --kokkos-num-threads) and the Kokkos Tools variable (KOKKOS_PROFILE_LIBRARY
// became KOKKOS_TOOLS_LIBS); 3.4 knows only the old names, 4.x only the new
// option. Called before Kokkos::initialize, this lets users write either
// spelling with either Kokkos: argv entries are rewritten in place.
inline void translate_kokkos_arguments(int argc, char** argv) {
#if KOKKOS_VERSION >= 40000
  const std::string from = "--kokkos-threads=", to = "--kokkos-num-threads=";
#else
  const std::string from = "--kokkos-num-threads=", to = "--kokkos-threads=";
  const char* tools = std::getenv("KOKKOS_TOOLS_LIBS");
  if (tools && !std::getenv("KOKKOS_PROFILE_LIBRARY")) ::setenv("KOKKOS_PROFILE_LIBRARY", tools, 0);
#endif
  static std::deque<std::string> rewritten;  // argv keeps pointing into it
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(from, 0) != 0) continue;
    rewritten.push_back(to + arg.substr(from.size()));
    argv[i] = rewritten.back().data();
  }
}

}  // namespace tessera::compat
