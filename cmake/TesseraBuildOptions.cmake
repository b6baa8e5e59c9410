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

# Whether CUDA builds call cuBLAS (option Tessera_ENABLE_CUBLAS), as a 0 or 1
# for core/config.hpp.
if(Tessera_ENABLE_CUBLAS AND Kokkos_ENABLE_CUDA)
  set(TESSERA_ENABLE_CUBLAS_VALUE 1)
else()
  set(TESSERA_ENABLE_CUBLAS_VALUE 0)
endif()

# Whether host spaces take the host-only kernels (option
# Tessera_HOST_FAST_PATHS), as a 0 or 1 for core/config.hpp.
if(Tessera_HOST_FAST_PATHS)
  set(TESSERA_HOST_FAST_PATHS_VALUE 1)
else()
  set(TESSERA_HOST_FAST_PATHS_VALUE 0)
endif()

# The host instruction set Tessera's own kernels are compiled for: empty
# keeps the compiler's default (x86-64: SSE2, which runs anywhere),
# `native` targets the CPU of the build machine (AVX2 and FMA, or AVX-512,
# where it has them: element-wise and attention kernels run 1.5 to 3 times
# as fast), any other value is passed to -march. The binaries then run only
# on CPUs with that instruction set. scripts/setup.sh builds with `native`;
# Spack passes its target's flags itself. The flag reaches every target of
# this build (library, apps, tests) so that they agree on rounding (FMA
# contraction), but not an installed package's users.
set(Tessera_HOST_ARCH "" CACHE STRING
  "-march for Tessera's host code: empty (the compiler's default), native, or e.g. znver3")
if(Tessera_HOST_ARCH)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "Tessera_HOST_ARCH=${Tessera_HOST_ARCH} needs GCC or Clang (-march); "
      "this is ${CMAKE_CXX_COMPILER_ID}. Leave Tessera_HOST_ARCH empty.")
  endif()
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag("-march=${Tessera_HOST_ARCH}" tessera_host_arch_works)
  if(NOT tessera_host_arch_works)
    message(FATAL_ERROR "Tessera_HOST_ARCH=${Tessera_HOST_ARCH}: ${CMAKE_CXX_COMPILER} does not "
      "accept -march=${Tessera_HOST_ARCH}. Use a value it knows (native, x86-64-v3, znver3, ...) "
      "or leave Tessera_HOST_ARCH empty.")
  endif()
  # `native` names a different instruction set on each CPU, yet the command
  # line stays the same: a compiler cache (ccache, which scripts/setup.sh uses)
  # would hand a build on a CPU without AVX-512 the objects compiled on one
  # with it. The instruction set macros the flag defines, hashed into a
  # definition, make the command line say which set it is; a build directory
  # reused on another CPU is then rebuilt at its next configure as well.
  if(Tessera_HOST_ARCH STREQUAL "native")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -march=native -dM -E -x c++ /dev/null
      OUTPUT_VARIABLE tessera_native_macros RESULT_VARIABLE tessera_native_status ERROR_QUIET)
    if(NOT tessera_native_status EQUAL 0)
      message(FATAL_ERROR "Tessera_HOST_ARCH=native: '${CMAKE_CXX_COMPILER} -march=native -dM -E' "
        "failed (${tessera_native_status}); name the instruction set instead, e.g. x86-64-v3")
    endif()
    string(SHA256 tessera_native_isa "${tessera_native_macros}")
    string(SUBSTRING "${tessera_native_isa}" 0 16 tessera_native_isa)
    set(Tessera_NATIVE_ISA_KEY "${tessera_native_isa}")
  endif()
endif()
