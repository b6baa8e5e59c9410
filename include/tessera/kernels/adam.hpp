// Adam and AdamW in one sweep over the flat parameter buffer, with PyTorch's
// semantics (t counts steps from 1):
//   Adam:   g = grad + wd * p                 (L2 decay through the gradient)
//   AdamW:  g = grad;  p -= lr * wd * p       (decoupled decay)
//   m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/settings/optimizer_params.hpp>

#include <cmath>
#include <cstdint>

namespace tessera::kernels {

using AdamParams = tessera::AdamParams;

// l2: Adam; decoupled: AdamW.
enum class WeightDecay { l2, decoupled };

// step: the 1-based index of this update, for the bias corrections.
template <class ExecSpace, class P, class G, class M, class V>
void adam_step(const ExecSpace& exec, const AdamParams& hp, WeightDecay decay_mode, float lr,
               std::int64_t step, const P& params, const G& grads, const M& exp_avg,
               const V& exp_avg_sq) {
  ScopedRegion region("tessera::kernels::adam_step");
  TESSERA_REQUIRE(params.size() == grads.size() && params.size() == exp_avg.size() &&
                      params.size() == exp_avg_sq.size(),
                  "tessera::kernels::adam_step: parameters "
                      << params.size() << ", gradients " << grads.size() << ", first moments "
                      << exp_avg.size() << ", second moments " << exp_avg_sq.size()
                      << " must agree");
  TESSERA_REQUIRE(step >= 1,
                  "tessera::kernels::adam_step: step "
                      << step << " must be at least 1 (bias corrections divide by 1 - beta^step)");
  using T = typename P::non_const_value_type;
  // Bias corrections on the host in double, once per step.
  const double t = static_cast<double>(step);
  const T step_size = static_cast<T>(lr / (1.0 - std::pow(static_cast<double>(hp.beta1), t)));
  const T bias_correction2_sqrt =
      static_cast<T>(std::sqrt(1.0 - std::pow(static_cast<double>(hp.beta2), t)));
  const T beta1 = hp.beta1, beta2 = hp.beta2, eps = hp.eps;
  const bool decoupled = decay_mode == WeightDecay::decoupled;
  const T l2 = decoupled ? T(0) : T(hp.weight_decay);
  const T decay = decoupled ? T(1) - T(lr) * T(hp.weight_decay) : T(1);
  // Parameters and both moments read and written, gradients read; 18
  // operations an element.
  const Work work{7 * bytes_of<T>(params.size()), 18.0 * double(params.size())};
  impl::for_each_span(
      exec, "tessera::kernels::adam_step", params.size(), work,
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        T* param = params.data();
        T* first = exp_avg.data();
        T* second = exp_avg_sq.data();
        const T* grad = grads.data();
        for (std::int64_t i = begin; i < end; ++i) {
          const T p = param[i] * decay;
          const T g = grad[i] + l2 * param[i];
          const T m = beta1 * first[i] + (T(1) - beta1) * g;
          const T v = beta2 * second[i] + (T(1) - beta2) * g * g;
          first[i] = m;
          second[i] = v;
          param[i] = p - step_size * m / (compat::sqrt(v) / bias_correction2_sqrt + eps);
        }
      });
}

}  // namespace tessera::kernels
