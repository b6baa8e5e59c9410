# Tessera's dependencies, found the same way by Tessera's own build and by
# TesseraConfig.cmake for downstream projects (which passes a macro that
# becomes find_dependency).
if(NOT COMMAND tessera_find)
  macro(tessera_find)
    find_package(${ARGV} REQUIRED)
  endmacro()
endif()

tessera_find(Kokkos)
tessera_find(KokkosKernels)
# The MPI C API only; the deprecated C++ bindings are not used.
set(MPI_CXX_SKIP_MPICXX ON)
tessera_find(MPI COMPONENTS CXX)
set(HDF5_PREFER_PARALLEL TRUE)
tessera_find(HDF5 COMPONENTS C)
tessera_find(tomlplusplus)
tessera_find(nlohmann_json)
tessera_find(ZLIB)
