// Element-wise data movement shared by the structural layers (Flatten, Add,
// Concat) and the model's conversions between formats: accumulate or
// convert one buffer into another, and copy a block of channels
// between tensors viewed as [N, C, S] (S = spatial size, 1 for features).
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/elementwise.hpp>

#include <cstdint>

namespace tessera::kernels {

// dst = src (accumulate = false) or dst += src, for float, bf16 and fp16
// elements of either side: computed in float, each result rounded once to
// dst's type (a copy between formats converts). Accumulating into src's
// own memory, or with dst_zero (dst taken as zero, not read), writes
// 0 + src (impl::same_memory): the bits of adding into a zeroed dst.
template <class ExecSpace, class Src, class Dst>
void copy_into(const ExecSpace& exec, const Src& src, const Dst& dst, bool accumulate,
               bool dst_zero = false) {
  using T = typename Dst::non_const_value_type;
  ScopedRegion region("tessera::kernels::copy_into");
  TESSERA_REQUIRE(src.size() == dst.size(), "tessera::kernels::copy_into: source has "
                                                << src.size() << " elements, destination "
                                                << dst.size());
  const bool reads_dst = accumulate && !dst_zero;
  const Work work{bytes_of<typename Src::value_type>(src.size()) +
                      bytes_of<T>(dst.size()) * (reads_dst ? 2 : 1),
                  accumulate ? double(src.size()) : 0.0};
  const bool in_place = impl::same_memory(src, dst);
  impl::for_each_span(
      exec, "tessera::kernels::copy_into", src.size(), work,
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        const auto* in = src.data();
        auto* out = dst.data();
        // In place through one pointer (see activation_backward).
        if (accumulate && in_place)
          for (std::int64_t i = begin; i < end; ++i) out[i] = narrow<T>(0.0f + widen(out[i]));
        else if (accumulate && dst_zero)
          for (std::int64_t i = begin; i < end; ++i) out[i] = narrow<T>(0.0f + widen(in[i]));
        else if (accumulate)
          for (std::int64_t i = begin; i < end; ++i)
            out[i] = narrow<T>(widen(out[i]) + widen(in[i]));
        else
          for (std::int64_t i = begin; i < end; ++i) out[i] = narrow<T>(widen(in[i]));
      });
}

// dst = src rounded to T's format (bf16 or fp16) and widened back: float
// values a float product takes as a 16-bit product would take them (the
// weights of a convolution that computes in T).
template <class T, class ExecSpace, class Src, class Dst>
void round_through(const ExecSpace& exec, const Src& src, const Dst& dst) {
  using D = typename Dst::non_const_value_type;
  ScopedRegion region("tessera::kernels::round_through");
  TESSERA_REQUIRE(src.size() == dst.size(), "tessera::kernels::round_through: source has "
                                                << src.size() << " elements, destination "
                                                << dst.size());
  const Work work{bytes_of<typename Src::value_type>(src.size()) + bytes_of<D>(dst.size()), 0};
  impl::for_each_span(
      exec, "tessera::kernels::round_through", src.size(), work,
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        const auto* in = src.data();
        auto* out = dst.data();
        for (std::int64_t i = begin; i < end; ++i)
          out[i] = narrow<D>(widen(narrow<T>(widen(in[i]))));
      });
}

// Channels [0, narrow_channels) of `narrow` correspond to channels
// [offset, offset + narrow_channels) of `wide` (both of one element type).
// Forward (into_wide) copies narrow -> wide; backward accumulates wide ->
// narrow, each sum rounded once in 16 bits.
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
  // Per sample, the block is contiguous in both tensors.
  const std::int64_t block = narrow_channels * spatial;
  // The block read from one side and written to the other (read and
  // written where it accumulates).
  const double moved = bytes_of<typename Narrow::value_type>(batch * block);
  const Work work{into_wide ? 2 * moved : 3 * moved, into_wide ? 0.0 : double(batch * block)};
  impl::for_each_row_span(
      exec, "tessera::kernels::channel_block", batch, block, work,
      KOKKOS_LAMBDA(const std::int64_t n, const std::int64_t begin, const std::int64_t end) {
        auto* mine = narrow.data() + n * block;
        auto* theirs = wide.data() + (n * wide_channels + offset) * spatial;
        if (into_wide)
          for (std::int64_t i = begin; i < end; ++i) theirs[i] = mine[i];
        else
          for (std::int64_t i = begin; i < end; ++i) add_rounded(mine[i], widen(theirs[i]));
      });
}

}  // namespace tessera::kernels
