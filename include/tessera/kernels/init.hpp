// Seeded parameter initialisation from counter-based random numbers: the
// same seed gives the same weights on every backend and thread count.
#pragma once

#include <tessera/core/profiling.hpp>
#include <tessera/core/random.hpp>
#include <tessera/core/types.hpp>

#include <cstdint>

namespace tessera::kernels {

// v(i) = uniform in [-bound, bound), drawn from (seed, stream, i).
template <class ExecSpace, class V>
void init_uniform(const ExecSpace& exec, const V& v, typename V::const_value_type bound,
                  std::uint64_t seed, std::uint64_t stream) {
  ScopedRegion region("tessera::kernels::init_uniform");
  using T = typename V::non_const_value_type;
  Kokkos::parallel_for(
      "tessera::kernels::init_uniform", Kokkos::RangePolicy<ExecSpace>(exec, 0, v.size()),
      KOKKOS_LAMBDA(const std::size_t i) {
        v(i) = bound * (T(2) * static_cast<T>(counter_uniform(seed, stream, i)) - T(1));
      });
}

}  // namespace tessera::kernels
