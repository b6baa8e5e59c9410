// SGD with momentum, Nesterov and L2 weight decay,
// one sweep over the flat parameter buffer:
//   g = grad + wd * p;  v = momentum * v + g;  p -= lr * (nesterov ? g + momentum * v : v)
// The learning rate is an argument of its own: a schedule changes it every step.
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/optim/params.hpp>

namespace tessera::kernels {

using SgdParams = tessera::SgdParams;

template <class ExecSpace, class P, class G, class V>
void sgd_step(const ExecSpace& exec, const SgdParams& hp, float lr, const P& params, const G& grads,
              const V& velocity) {
  ScopedRegion region("tessera::kernels::sgd_step");
  TESSERA_REQUIRE(params.size() == grads.size() && params.size() == velocity.size(),
                  "tessera::kernels::sgd_step: parameters " << params.size() << ", gradients "
                                                            << grads.size() << ", velocity "
                                                            << velocity.size() << " must agree");
  using T = typename P::non_const_value_type;
  const T rate = lr, momentum = hp.momentum, wd = hp.weight_decay;
  const bool nesterov = hp.nesterov;
  Kokkos::parallel_for(
      "tessera::kernels::sgd_step", Kokkos::RangePolicy<ExecSpace>(exec, 0, params.size()),
      KOKKOS_LAMBDA(const std::size_t i) {
        const T g = grads(i) + wd * params(i);
        const T v = momentum * velocity(i) + g;
        velocity(i) = v;
        params(i) -= rate * (nesterov ? g + momentum * v : v);
      });
}

}  // namespace tessera::kernels
