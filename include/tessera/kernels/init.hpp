// Seeded parameter initialisation from counter-based random numbers: the
// same seed gives the same weights on every backend and thread count.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/random.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/launch.hpp>

#include <cstdint>

namespace tessera::kernels {

// v(i) = uniform in [-bound, bound), drawn from (seed, stream, i).
template <class ExecSpace, class V>
void init_uniform(const ExecSpace& exec, const V& v, typename V::const_value_type bound,
                  std::uint64_t seed, std::uint64_t stream) {
  ScopedRegion region("tessera::kernels::init_uniform");
  using T = typename V::non_const_value_type;
  // v written; 4 operations an element (the draw's scaling to [0, 1), then
  // 2u - 1 and the bound).
  const std::int64_t n = v.size();
  const Work work{bytes_of<T>(n), 4.0 * double(n)};
  impl::parallel_for(
      "tessera::kernels::init_uniform", Kokkos::RangePolicy<ExecSpace>(exec, 0, v.size()), work,
      KOKKOS_LAMBDA(const std::size_t i) {
        v(i) = bound * (T(2) * static_cast<T>(counter_uniform(seed, stream, i)) - T(1));
      });
}

// v(i) = stddev * a standard normal drawn from (seed, stream, 2i, 2i + 1)
// by the Box-Muller transform.
template <class ExecSpace, class V>
void init_normal(const ExecSpace& exec, const V& v, typename V::const_value_type stddev,
                 std::uint64_t seed, std::uint64_t stream) {
  ScopedRegion region("tessera::kernels::init_normal");
  using T = typename V::non_const_value_type;
  // v written; 10 operations an element (two draws scaled, the shift,
  // log, -2 x, sqrt, 2 pi x, cos, the product and the standard deviation).
  const std::int64_t n = v.size();
  const Work work{bytes_of<T>(n), 10.0 * double(n)};
  impl::parallel_for(
      "tessera::kernels::init_normal", Kokkos::RangePolicy<ExecSpace>(exec, 0, v.size()), work,
      KOKKOS_LAMBDA(const std::size_t i) {
        // Shifted by half a step so the logarithm never sees 0.
        const float u1 = counter_uniform(seed, stream, 2 * i) + 0.5f / 16777216.0f;
        const float u2 = counter_uniform(seed, stream, 2 * i + 1);
        const float radius = compat::sqrt(-2.0f * compat::log(u1));
        v(i) = stddev * static_cast<T>(radius * compat::cos(6.2831853071795865f * u2));
      });
}

}  // namespace tessera::kernels
