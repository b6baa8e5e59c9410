# Tessera's dependencies, found the same way by Tessera's own build and by
# TesseraConfig.cmake for downstream projects. The config defines tessera_find
# (find_package that reports failure through tessera_fail) and tessera_fail
# (Tessera not found: restore the hints, return), and passes
# Tessera_RECORDED_KOKKOS; Tessera's own build gets REQUIRED and fatal errors.
if(NOT COMMAND tessera_find)
  macro(tessera_find)
    find_package(${ARGV} REQUIRED)
  endmacro()
  macro(tessera_fail message)
    message(FATAL_ERROR "${message}")
  endmacro()
endif()

# Hints for FindMPI (the MPI C API only; the deprecated C++ bindings are not
# used) and FindHDF5 (the parallel library), restored at the end (and on
# failure), so a project calling find_package(Tessera) keeps its own settings.
macro(_tessera_restore_hints)
  foreach(_tessera_hint MPI_CXX_SKIP_MPICXX HDF5_PREFER_PARALLEL)
    if(DEFINED _tessera_saved_${_tessera_hint})
      set(${_tessera_hint} "${_tessera_saved_${_tessera_hint}}")
    else()
      unset(${_tessera_hint})
    endif()
    unset(_tessera_saved_${_tessera_hint})
  endforeach()
  unset(_tessera_hint)
  unset(_tessera_problem)
endmacro()
foreach(_tessera_hint MPI_CXX_SKIP_MPICXX HDF5_PREFER_PARALLEL)
  if(DEFINED ${_tessera_hint})
    set(_tessera_saved_${_tessera_hint} "${${_tessera_hint}}")
  endif()
endforeach()
set(MPI_CXX_SKIP_MPICXX ON)
set(HDF5_PREFER_PARALLEL TRUE)

include("${CMAKE_CURRENT_LIST_DIR}/TesseraKokkos.cmake")
tessera_find(Kokkos ${Tessera_KOKKOS_MIN_VERSION})
tessera_kokkos_problem(_tessera_problem VERSION "${Kokkos_VERSION}" DEVICES ${Kokkos_DEVICES}
  ${Tessera_RECORDED_KOKKOS})
if(_tessera_problem)
  tessera_fail("${_tessera_problem}")
endif()
tessera_find(KokkosKernels ${Tessera_KOKKOS_MIN_VERSION})
# CUDA builds take 16-bit products through cuBLAS's cublasGemmEx
# (kernels/mixed_gemm.hpp), which Kokkos Kernels does not offer, unless
# built with -DTessera_ENABLE_CUBLAS=OFF.
if(Kokkos_ENABLE_CUDA AND Tessera_ENABLE_CUBLAS)
  tessera_find(CUDAToolkit)
endif()
tessera_find(MPI COMPONENTS CXX)
tessera_find(HDF5 COMPONENTS C)
tessera_find(tomlplusplus)
tessera_find(nlohmann_json)
tessera_find(ZLIB)
_tessera_restore_hints()
