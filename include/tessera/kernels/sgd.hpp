// SGD with momentum, Nesterov and L2 weight decay,
// one sweep over the flat parameter buffer:
//   g = grad + wd * p;  v = momentum * v + g;  p -= lr * (nesterov ? g + momentum * v : v)
// The learning rate is an argument of its own: a schedule changes it every step.
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/settings/optimizer_params.hpp>

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
  // Parameters and velocity read and written, gradients read; 8 operations
  // an element (Nesterov's).
  const Work work{5 * bytes_of<T>(params.size()), 8.0 * double(params.size())};
  impl::for_each_span(
      exec, "tessera::kernels::sgd_step", params.size(), work,
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        T* p = params.data();
        T* vel = velocity.data();
        const T* grad = grads.data();
        for (std::int64_t i = begin; i < end; ++i) {
          const T g = grad[i] + wd * p[i];
          const T v = momentum * vel[i] + g;
          vel[i] = v;
          p[i] -= rate * (nesterov ? g + momentum * v : v);
        }
      });
}

}  // namespace tessera::kernels
