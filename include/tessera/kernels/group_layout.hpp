// How the normalisation kernels (norm.hpp) see a tensor: [outer, groups,
// inner], each group normalised by its own statistics, and where gamma and
// beta apply. BatchNorm [N, C, H*W] -> (N, C, H*W), LayerNorm [N, D] ->
// (1, N, D).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace tessera::kernels {

struct GroupLayout {
  std::int64_t outer = 1;
  std::int64_t groups = 1;
  std::int64_t inner = 1;

  KOKKOS_INLINE_FUNCTION std::int64_t size() const { return outer * groups * inner; }
  // Elements per group: the count statistics are taken over.
  KOKKOS_INLINE_FUNCTION std::int64_t group_size() const { return outer * inner; }
  // Flat index of position k (in [0, group_size())) of group g.
  KOKKOS_INLINE_FUNCTION std::int64_t index(std::int64_t g, std::int64_t k) const {
    return ((k / inner) * groups + g) * inner + k % inner;
  }
};

// gamma and beta hold one value per group (BatchNorm: per channel) or one
// per position within a group (LayerNorm: per feature of a sample).
enum class Affine { per_group, per_position };

}  // namespace tessera::kernels
