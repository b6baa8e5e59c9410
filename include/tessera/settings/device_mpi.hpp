// How gradients in GPU memory reach MPI (the deck's parallel.gpu_aware_mpi).
// Plain C++: the deck reader includes it.
#pragma once

#include <tessera/core/enum_names.hpp>

#include <string>

namespace tessera {

enum class DeviceMpi {
  automatic,  // device pointers if the build (Tessera_ENABLE_GPU_AWARE_MPI) or the MPI
              // library reports GPU support, else staging
  direct,     // always pass device pointers (the MPI library must be GPU-aware)
  staged      // always copy through host memory
};
inline constexpr EnumNames<DeviceMpi, 3> device_mpi_names{
    "gpu_aware_mpi setting",
    {{DeviceMpi::automatic, "auto"}, {DeviceMpi::direct, "on"}, {DeviceMpi::staged, "off"}}};
// "auto" | "on" | "off".
inline DeviceMpi device_mpi_from_name(const std::string& name) {
  return device_mpi_names.value(name, "tessera::device_mpi_from_name");
}

}  // namespace tessera
