// Element-wise data movement shared by the structural layers (Flatten, Add,
// Concat): accumulate one buffer into another, and copy a block of channels
// between tensors viewed as [N, C, S] (S = spatial size, 1 for features).
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>

#include <cstdint>

namespace tessera::kernels {

// dst = src (accumulate = false) or dst += src.
template <class ExecSpace, class Src, class Dst>
void copy_into(const ExecSpace& exec, const Src& src, const Dst& dst, bool accumulate) {
  ScopedRegion region("tessera::kernels::copy_into");
  TESSERA_REQUIRE(src.size() == dst.size(), "tessera::kernels::copy_into: source has "
                                                << src.size() << " elements, destination "
                                                << dst.size());
  Kokkos::parallel_for(
      "tessera::kernels::copy_into", Kokkos::RangePolicy<ExecSpace>(exec, 0, src.size()),
      KOKKOS_LAMBDA(const std::size_t i) { dst(i) = accumulate ? dst(i) + src(i) : src(i); });
}

// Channels [0, narrow_channels) of `narrow` correspond to channels
// [offset, offset + narrow_channels) of `wide`. Forward (into_wide) copies
// narrow -> wide; backward accumulates wide -> narrow.
template <class ExecSpace, class Narrow, class Wide>
void channel_block(const ExecSpace& exec, const Narrow& narrow, std::int64_t narrow_channels,
                   const Wide& wide, std::int64_t wide_channels, std::int64_t offset,
                   std::int64_t batch, std::int64_t spatial, bool into_wide) {
  ScopedRegion region("tessera::kernels::channel_block");
  TESSERA_REQUIRE(static_cast<std::int64_t>(narrow.size()) == batch * narrow_channels * spatial &&
                      static_cast<std::int64_t>(wide.size()) == batch * wide_channels * spatial &&
                      offset + narrow_channels <= wide_channels,
                  "tessera::kernels::channel_block: block of "
                      << narrow_channels << " channels at " << offset << " does not fit "
                      << wide_channels << " channels (batch " << batch << ", spatial " << spatial
                      << ")");
  const std::int64_t block = narrow_channels * spatial;
  Kokkos::parallel_for(
      "tessera::kernels::channel_block",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, static_cast<std::size_t>(batch * block)),
      KOKKOS_LAMBDA(const std::size_t i) {
        const std::int64_t n = static_cast<std::int64_t>(i) / block;
        const std::int64_t within = static_cast<std::int64_t>(i) % block;
        const std::int64_t w = (n * wide_channels + offset) * spatial + within;
        if (into_wide)
          wide(w) = narrow(i);
        else
          narrow(i) += wide(w);
      });
}

}  // namespace tessera::kernels
