// Gradient clipping by global norm over the flat gradient buffer. The norm is
// a deterministic reduction, so clipping decisions and results are bitwise
// identical for any thread count.
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/kernels/reduce.hpp>
#include <tessera/model/parameters.hpp>

#include <cmath>

namespace tessera {

// Scales every gradient by max_norm / (norm + 1e-6) when the global L2 norm
// exceeds max_norm (as PyTorch's clip_grad_norm_); returns the norm before
// clipping. A non-finite norm leaves the gradients as they are, for the
// caller to detect. scratch: kernels::deterministic_sum_scratch(count) doubles.
template <class ExecSpace>
float clip_grad_norm(const ExecSpace& exec, ParameterStore& params, float max_norm,
                     const Kokkos::View<double*, MemSpace>& scratch) {
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, MemSpace>::accessible,
                "tessera::clip_grad_norm: the execution space cannot reach the parameter buffers");
  ScopedRegion region("tessera::clip_grad_norm");
  TESSERA_REQUIRE(max_norm > 0 && std::isfinite(max_norm),
                  "tessera::clip_grad_norm: max_norm " << max_norm << " must be positive and finite");
  TESSERA_REQUIRE(params.allocated(), "tessera::clip_grad_norm: the parameter store is not allocated");
  const double norm = std::sqrt(kernels::deterministic_sum_squares(exec, params.gradients(), scratch));
  if (std::isfinite(norm) && norm > max_norm)
    kernels::scale_in_place(exec, params.gradients(), max_norm / (norm + 1e-6));
  return static_cast<float>(norm);
}

// Allocates its own scratch.
template <class ExecSpace>
float clip_grad_norm(const ExecSpace& exec, ParameterStore& params, float max_norm) {
  const Kokkos::View<double*, MemSpace> scratch(
      "tessera::clip_grad_norm::scratch", kernels::deterministic_sum_scratch(params.count()));
  return clip_grad_norm(exec, params, max_norm, scratch);
}

}  // namespace tessera
