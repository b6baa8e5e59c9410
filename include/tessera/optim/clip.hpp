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

// The global L2 norm of all gradients; inf or NaN when any gradient is.
// scratch: kernels::deterministic_sum_scratch(count) doubles.
template <class ExecSpace>
double gradient_norm(const ExecSpace& exec, const ParameterStore& params,
                     const Kokkos::View<double*, MemSpace>& scratch) {
  static_assert(Kokkos::SpaceAccessibility<ExecSpace, MemSpace>::accessible,
                "tessera::gradient_norm: the execution space cannot reach the parameter buffers");
  ScopedRegion region("tessera::gradient_norm");
  TESSERA_REQUIRE(params.allocated(),
                  "tessera::gradient_norm: the parameter store is not allocated");
  return std::sqrt(kernels::deterministic_sum_squares(exec, params.gradients(), scratch));
}

// Given the gradients' global norm, scales every gradient by
// max_norm / (norm + 1e-6) when the norm exceeds max_norm (as PyTorch's
// clip_grad_norm_). A non-finite norm leaves the gradients as they are.
template <class ExecSpace>
void clip_to_norm(const ExecSpace& exec, ParameterStore& params, double norm, float max_norm) {
  ScopedRegion region("tessera::clip_to_norm");
  TESSERA_REQUIRE(max_norm > 0 && std::isfinite(max_norm), "tessera::clip_grad_norm: max_norm "
                                                               << max_norm
                                                               << " must be positive and finite");
  if (std::isfinite(norm) && norm > max_norm)
    kernels::scale_in_place(exec, params.gradients(), max_norm / (norm + 1e-6));
}

// Both of the above: clips and returns the norm before clipping.
template <class ExecSpace>
float clip_grad_norm(const ExecSpace& exec, ParameterStore& params, float max_norm,
                     const Kokkos::View<double*, MemSpace>& scratch) {
  ScopedRegion region("tessera::clip_grad_norm");
  TESSERA_REQUIRE(max_norm > 0 && std::isfinite(max_norm), "tessera::clip_grad_norm: max_norm "
                                                               << max_norm
                                                               << " must be positive and finite");
  const double norm = gradient_norm(exec, params, scratch);
  clip_to_norm(exec, params, norm, max_norm);
  return static_cast<float>(norm);
}

// Allocates its own scratch.
template <class ExecSpace>
float clip_grad_norm(const ExecSpace& exec, ParameterStore& params, float max_norm) {
  const Kokkos::View<double*, MemSpace> scratch("tessera::clip_grad_norm::scratch",
                                                kernels::deterministic_sum_scratch(params.count()));
  return clip_grad_norm(exec, params, max_norm, scratch);
}

}  // namespace tessera
