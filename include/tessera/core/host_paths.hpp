// The one place that decides whether a kernel takes a host-only path.
// Every branch that CUDA and HIP never take (vector-extension lanes, spans
// of elements per host thread, one-thread BLAS calls, host task blocks)
// tests host_fast_paths_v<ExecSpace> (or, where a type only a host compiler
// knows is involved, the macro TESSERA_HOST_VECTORS defined here).
// Configured with -DTessera_HOST_FAST_PATHS=OFF, both are false everywhere:
// the OpenMP and Serial builds then execute the kernels and schedules of the
// GPU builds, so the suite tests the device code on every CI run.
#pragma once

#include <tessera/core/config.hpp>

#include <Kokkos_Core.hpp>

// Host compilers whose vector extensions (vector_size,
// __builtin_convertvector) let a kernel write one operation on a whole
// vector register where GCC would not vectorise the scalar loop by itself.
#if TESSERA_HOST_FAST_PATHS && defined(__GNUC__) && !defined(__CUDACC__) && !defined(__HIPCC__)
#define TESSERA_HOST_VECTORS 1
#endif

namespace tessera {

// Whether kernels on ExecSpace take their host-only paths: a space whose
// threads run on the host, in a build with the host fast paths on.
template <class ExecSpace>
inline constexpr bool host_fast_paths_v =
    TESSERA_HOST_FAST_PATHS != 0 &&
    Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible;

// "host fast paths" or "device paths on the host" or "device paths", for
// --version and reports.
inline const char* kernel_paths_name() {
  if (!Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, Kokkos::HostSpace>::accessible)
    return "device paths";
  return TESSERA_HOST_FAST_PATHS ? "host fast paths" : "device paths on the host";
}

}  // namespace tessera
