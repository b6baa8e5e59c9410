// A named Kokkos profiling region for the lifetime of a scope, so Kokkos
// Tools and vendor profilers show Tessera's operations by name.
#pragma once

#include <Kokkos_Core.hpp>
#include <string>

namespace tessera {

class ScopedRegion {
 public:
  explicit ScopedRegion(const std::string& name) { Kokkos::Profiling::pushRegion(name); }
  ~ScopedRegion() { Kokkos::Profiling::popRegion(); }
  ScopedRegion(const ScopedRegion&) = delete;
  ScopedRegion& operator=(const ScopedRegion&) = delete;
};

}  // namespace tessera
