// How the normalisation kernels (norm.hpp) see a tensor: [outer, groups,
// inner], each group normalised by its own statistics, where gamma and
// beta apply, and which of their paths the kernels take. BatchNorm
// [N, C, H*W] -> (N, C, H*W), LayerNorm [N, D] -> (1, N, D).
#pragma once

#include <tessera/core/host_paths.hpp>
#include <tessera/kernels/impl/team.hpp>

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

// The path a norm kernel takes: the host fast path (host tasks over blocks
// of groups, vector lanes) or the device path (teams over chunks, one
// thread per element; what CUDA and HIP run), whose teams have `team`'s
// size. A kernel's default is its space's own path; any space takes the
// device path when asked (the tests ask on the host), and a space without
// the host path ignores device = false. Each path's results are the same
// bits for any thread count and team size; the two paths' differ.
struct NormPath {
  bool device = true;
  TeamShape team = {};
};

template <class ExecSpace>
constexpr NormPath default_norm_path() {
  return NormPath{!host_fast_paths_v<ExecSpace>, TeamShape{}};
}

}  // namespace tessera::kernels
