# Build choices that reach Tessera's headers and reports, resolved once the
# Kokkos to build against is known.

# The Kokkos execution space Tessera's kernels run on; empty means Kokkos'
# default (the device backend if there is one, else OpenMP, else Serial).
# Serial on an OpenMP-enabled Kokkos gives a single-threaded reference build,
# e.g. for performance-portability reports (docs/benchmarks.md).
set(Tessera_EXECUTION_SPACE "" CACHE STRING
  "Kokkos execution space for Tessera's kernels: empty (Kokkos' default), Serial, OpenMP, Threads, Cuda, HIP")
set_property(CACHE Tessera_EXECUTION_SPACE PROPERTY STRINGS "" Serial OpenMP Threads Cuda HIP)
# Set by the Spack package to the spec it builds; shown by every app's
# --version and recorded in tessera-bench reports.
set(Tessera_BUILD_SPEC "" CACHE STRING "The Spack spec (or other description) of this build")
if(Tessera_EXECUTION_SPACE STREQUAL "")
  set(Tessera_EXECUTION_SPACE_TYPE Kokkos::DefaultExecutionSpace)
  set(Tessera_EXECUTION_SPACE_NAME default)
else()
  string(TOUPPER "${Tessera_EXECUTION_SPACE}" tessera_space_upper)
  if(NOT tessera_space_upper IN_LIST Kokkos_DEVICES)
    message(FATAL_ERROR "Tessera_EXECUTION_SPACE=${Tessera_EXECUTION_SPACE}: the Kokkos found "
      "(${Kokkos_DIR}) has the backends ${Kokkos_DEVICES}; choose one of those or leave it empty")
  endif()
  set(Tessera_EXECUTION_SPACE_TYPE Kokkos::${Tessera_EXECUTION_SPACE})
  if(Tessera_EXECUTION_SPACE STREQUAL "HIP" AND Kokkos_VERSION VERSION_LESS 4.0)
    set(Tessera_EXECUTION_SPACE_TYPE Kokkos::Experimental::HIP)
  endif()
  set(Tessera_EXECUTION_SPACE_NAME ${Tessera_EXECUTION_SPACE})
endif()
