// Inverted dropout from counter-based random numbers: whether element i is
// kept depends only on (seed, stream, first_counter + i), so backward
// recomputes the forward mask instead of storing it, and every backend and
// thread count draws the same mask.
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/random.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/elementwise.hpp>

#include <cstdint>
#include <string>

namespace tessera::kernels {

// 64-bit FNV-1a of a name: a stable random stream per layer.
inline std::uint64_t name_stream(const std::string& name) {
  return fnv1a64(name.data(), name.size());
}

// dst = mask .* src / (1 - rate) (accumulate = false) or dst += that, where
// element i is kept iff counter_uniform(seed, stream, first_counter + i) >= rate.
// Accumulating into src's own memory writes 0 + that (impl::same_memory).
template <class ExecSpace, class Src, class Dst>
void dropout_apply(const ExecSpace& exec, const Src& src, const Dst& dst, float rate,
                   std::uint64_t seed, std::uint64_t stream, std::uint64_t first_counter,
                   bool accumulate) {
  ScopedRegion region("tessera::kernels::dropout_apply");
  TESSERA_REQUIRE(src.size() == dst.size(), "tessera::kernels::dropout_apply: source has "
                                                << src.size() << " elements, destination "
                                                << dst.size());
  TESSERA_REQUIRE(rate >= 0.0f && rate < 1.0f,
                  "tessera::kernels::dropout_apply: rate " << rate << " is outside [0, 1)");
  const float scale = 1.0f / (1.0f - rate);
  using T = typename Dst::non_const_value_type;
  // src read, dst written (and read when accumulating); the counter-based
  // uniform's integer hash is no floating-point work.
  const Work work{bytes_of<typename Src::value_type>(src.size()) +
                      bytes_of<T>(dst.size()) * (accumulate ? 2 : 1),
                  (accumulate ? 3.0 : 2.0) * double(src.size())};
  const bool in_place = accumulate && impl::same_memory(src, dst);
  const UniformAtLeast kept(seed, stream, first_counter, rate);
  impl::for_each_span(
      exec, "tessera::kernels::dropout_apply", src.size(), work,
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        // Locals, not the closure's members, which the stores could alias
        // (GCC then keeps the loops scalar, an order of magnitude slower).
        T* out = dst.data();
        const auto* in = src.data();
        const UniformAtLeast keep = kept;
        const float s = scale;
        const auto value = [=](std::int64_t i, float v) { return keep(i) ? v * s : 0.0f; };
        // In place through one pointer (see activation_backward).
        if (in_place)
          for (std::int64_t i = begin; i < end; ++i)
            out[i] = narrow<T>(0.0f + value(i, widen(out[i])));
        else if (accumulate)
          for (std::int64_t i = begin; i < end; ++i)
            out[i] = narrow<T>(widen(out[i]) + value(i, widen(in[i])));
        else
          for (std::int64_t i = begin; i < end; ++i) out[i] = narrow<T>(value(i, widen(in[i])));
      });
}

}  // namespace tessera::kernels
