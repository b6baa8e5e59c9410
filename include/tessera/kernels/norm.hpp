// Normalisation kernels shared by BatchNorm and LayerNorm. A tensor is seen
// as [outer, groups, inner]; each group (every outer and inner position of
// one middle index) is normalised by its own mean and variance:
// BatchNorm [N, C, H*W] -> (N, C, H*W), LayerNorm [N, D] -> (1, N, D).
// Statistics are sums of x and x^2 (summable across ranks) accumulated in
// double, so the one-pass variance keeps its precision when the mean is far
// from zero; one thread per group sums in a fixed order, so they are bitwise
// identical for any thread count. They are a separate step from the
// normalisation so that a distributed BatchNorm can allreduce them between.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>

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
  KOKKOS_INLINE_FUNCTION std::int64_t group_of(std::int64_t i) const {
    return (i / inner) % groups;
  }
  KOKKOS_INLINE_FUNCTION std::int64_t position_of(std::int64_t i) const {
    return (i / (inner * groups)) * inner + i % inner;
  }
};

// gamma and beta hold one value per group (BatchNorm: per channel) or one
// per position within a group (LayerNorm: per feature of a sample).
enum class Affine { per_group, per_position };

namespace impl {
template <class V>
void require_extent(const char* fn, const char* what, const V& v, std::int64_t expected,
                    const GroupLayout& layout) {
  TESSERA_REQUIRE(static_cast<std::int64_t>(v.size()) == expected,
                  fn << ": " << what << " has " << v.size() << " elements, expected " << expected
                     << " for groups of layout [outer " << layout.outer << ", groups "
                     << layout.groups << ", inner " << layout.inner << "]");
}

inline std::int64_t affine_size(const GroupLayout& layout, Affine affine) {
  return affine == Affine::per_group ? layout.groups : layout.group_size();
}

// x and the per-group statistics and gamma every pass after the statistics reads.
template <class X, class Mean, class InvStd, class Gamma>
void require_normalization_views(const char* fn, const GroupLayout& layout, Affine affine,
                                 const X& x, const Mean& mean, const InvStd& invstd,
                                 const Gamma& gamma, const char* gamma_name = "gamma") {
  require_extent(fn, "x", x, layout.size(), layout);
  require_extent(fn, "mean", mean, layout.groups, layout);
  require_extent(fn, "invstd", invstd, layout.groups, layout);
  require_extent(fn, gamma_name, gamma, affine_size(layout, affine), layout);
}

KOKKOS_INLINE_FUNCTION std::int64_t affine_index(Affine affine, std::int64_t g, std::int64_t k) {
  return affine == Affine::per_group ? g : k;
}

// Every reduction here: one thread per output o sums two terms over `span`
// elements in a fixed order (terms(o, j, first, second) adds element j's
// share), then finish(o, first, second) stores them. Bitwise identical for
// any thread count.
template <class ExecSpace, class Terms, class Finish>
void fixed_order_pair_sums(const ExecSpace& exec, const char* label, std::int64_t outputs,
                           std::int64_t span, const Terms& terms, const Finish& finish) {
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(exec, 0, outputs), KOKKOS_LAMBDA(const std::int64_t o) {
        double first = 0, second = 0;
        for (std::int64_t j = 0; j < span; ++j) terms(o, j, first, second);
        finish(o, first, second);
      });
}
}  // namespace impl

// The statistics step: sums(g) = sum of x over group g, sums(groups + g) = sum of x^2.
template <class ExecSpace, class X, class Sums>
void group_sums(const ExecSpace& exec, const GroupLayout& layout, const X& x, const Sums& sums) {
  ScopedRegion region("tessera::kernels::group_sums");
  constexpr const char* fn = "tessera::kernels::group_sums";
  impl::require_extent(fn, "x", x, layout.size(), layout);
  impl::require_extent(fn, "sums", sums, 2 * layout.groups, layout);
  const std::int64_t groups = layout.groups;
  impl::fixed_order_pair_sums(
      exec, "tessera::kernels::group_sums", groups, layout.group_size(),
      KOKKOS_LAMBDA(const std::int64_t g, const std::int64_t k, double& sum, double& squares) {
        const double v = x(layout.index(g, k));
        sum += v;
        squares += v * v;
      },
      KOKKOS_LAMBDA(const std::int64_t g, const double sum, const double squares) {
        sums(g) = sum;
        sums(groups + g) = squares;
      });
}

// Mean and 1 / sqrt(biased variance + eps) of each group from its sums over
// `count` elements (count may span several ranks).
template <class ExecSpace, class Sums, class Mean, class InvStd>
void moments_from_sums(const ExecSpace& exec, const Sums& sums, std::int64_t count, float eps,
                       const Mean& mean, const InvStd& invstd) {
  ScopedRegion region("tessera::kernels::moments_from_sums");
  TESSERA_REQUIRE(count > 0 && sums.size() == 2 * mean.size() && mean.size() == invstd.size(),
                  "tessera::kernels::moments_from_sums: sums "
                      << sums.size() << ", mean " << mean.size() << ", invstd " << invstd.size()
                      << ", count " << count
                      << "; expected sums of 2 * groups and a positive count");
  const std::int64_t groups = mean.size();
  const double n = static_cast<double>(count);
  Kokkos::parallel_for(
      "tessera::kernels::moments_from_sums", Kokkos::RangePolicy<ExecSpace>(exec, 0, groups),
      KOKKOS_LAMBDA(const std::int64_t g) {
        const double m = sums(g) / n;
        const double var = sums(groups + g) / n - m * m;
        mean(g) = static_cast<float>(m);
        invstd(g) = static_cast<float>(1.0 / compat::sqrt((var > 0 ? var : 0.0) + eps));
      });
}

// running = (1 - momentum) * running + momentum * batch, with the unbiased
// batch variance (as PyTorch).
template <class ExecSpace, class Sums, class RunningMean, class RunningVar>
void update_running_moments(const ExecSpace& exec, const Sums& sums, std::int64_t count,
                            float momentum, const RunningMean& running_mean,
                            const RunningVar& running_var) {
  ScopedRegion region("tessera::kernels::update_running_moments");
  TESSERA_REQUIRE(count > 0 && sums.size() == 2 * running_mean.size() &&
                      running_mean.size() == running_var.size(),
                  "tessera::kernels::update_running_moments: sums "
                      << sums.size() << ", running mean " << running_mean.size() << ", running var "
                      << running_var.size() << ", count " << count
                      << "; expected sums of 2 * groups and a positive count");
  const std::int64_t groups = running_mean.size();
  const double n = static_cast<double>(count);
  // A single sample has no unbiased variance; its biased one (zero) stands in.
  const double bessel = count > 1 ? n / (n - 1) : 1.0;
  Kokkos::parallel_for(
      "tessera::kernels::update_running_moments", Kokkos::RangePolicy<ExecSpace>(exec, 0, groups),
      KOKKOS_LAMBDA(const std::int64_t g) {
        const double m = sums(g) / n;
        const double var = sums(groups + g) / n - m * m;
        const float unbiased = static_cast<float>((var > 0 ? var : 0.0) * bessel);
        running_mean(g) = (1.0f - momentum) * running_mean(g) + momentum * static_cast<float>(m);
        running_var(g) = (1.0f - momentum) * running_var(g) + momentum * unbiased;
      });
}

// Mean and inverse std from running statistics (inference).
template <class ExecSpace, class RunningMean, class RunningVar, class Mean, class InvStd>
void moments_from_running(const ExecSpace& exec, const RunningMean& running_mean,
                          const RunningVar& running_var, float eps, const Mean& mean,
                          const InvStd& invstd) {
  ScopedRegion region("tessera::kernels::moments_from_running");
  TESSERA_REQUIRE(running_mean.size() == running_var.size() && mean.size() == running_mean.size() &&
                      invstd.size() == running_mean.size(),
                  "tessera::kernels::moments_from_running: running mean "
                      << running_mean.size() << ", running var " << running_var.size() << ", mean "
                      << mean.size() << ", invstd " << invstd.size() << " must agree");
  Kokkos::parallel_for(
      "tessera::kernels::moments_from_running",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, mean.size()), KOKKOS_LAMBDA(const std::size_t g) {
        mean(g) = running_mean(g);
        invstd(g) = 1.0f / compat::sqrt(running_var(g) + eps);
      });
}

// y = (x - mean) * invstd * gamma + beta.
template <class ExecSpace, class X, class Mean, class InvStd, class Gamma, class Beta, class Y>
void group_normalize(const ExecSpace& exec, const GroupLayout& layout, Affine affine, const X& x,
                     const Mean& mean, const InvStd& invstd, const Gamma& gamma, const Beta& beta,
                     const Y& y) {
  ScopedRegion region("tessera::kernels::group_normalize");
  constexpr const char* fn = "tessera::kernels::group_normalize";
  impl::require_normalization_views(fn, layout, affine, x, mean, invstd, gamma);
  impl::require_extent(fn, "beta", beta, impl::affine_size(layout, affine), layout);
  impl::require_extent(fn, "y", y, layout.size(), layout);
  Kokkos::parallel_for(
      "tessera::kernels::group_normalize", Kokkos::RangePolicy<ExecSpace>(exec, 0, layout.size()),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t g = layout.group_of(i);
        const std::int64_t p = impl::affine_index(affine, g, layout.position_of(i));
        y(i) = (x(i) - mean(g)) * invstd(g) * gamma(p) + beta(p);
      });
}

// The statistics step of backward: with dxhat = dy * gamma and
// xhat = (x - mean) * invstd, sums(g) = sum of dxhat over group g and
// sums(groups + g) = sum of dxhat * xhat.
template <class ExecSpace, class X, class DY, class Mean, class InvStd, class Gamma, class Sums>
void group_gradient_sums(const ExecSpace& exec, const GroupLayout& layout, Affine affine,
                         const X& x, const DY& dy, const Mean& mean, const InvStd& invstd,
                         const Gamma& gamma, const Sums& sums) {
  ScopedRegion region("tessera::kernels::group_gradient_sums");
  constexpr const char* fn = "tessera::kernels::group_gradient_sums";
  impl::require_normalization_views(fn, layout, affine, x, mean, invstd, gamma);
  impl::require_extent(fn, "dy", dy, layout.size(), layout);
  impl::require_extent(fn, "sums", sums, 2 * layout.groups, layout);
  const std::int64_t groups = layout.groups;
  impl::fixed_order_pair_sums(
      exec, "tessera::kernels::group_gradient_sums", groups, layout.group_size(),
      KOKKOS_LAMBDA(const std::int64_t g, const std::int64_t k, double& sum, double& projected) {
        const std::int64_t i = layout.index(g, k);
        const double dxhat = static_cast<double>(dy(i)) * gamma(impl::affine_index(affine, g, k));
        sum += dxhat;
        projected += dxhat * ((x(i) - mean(g)) * invstd(g));
      },
      KOKKOS_LAMBDA(const std::int64_t g, const double sum, const double projected) {
        sums(g) = sum;
        sums(groups + g) = projected;
      });
}

// dx += invstd / count * (count * dxhat - sum(dxhat) - xhat * sum(dxhat * xhat))
// with batch statistics (sums from group_gradient_sums over `count`
// elements), or dx += invstd * dxhat when mean and invstd were constants
// (running statistics; sums and count are then unused).
template <class ExecSpace, class X, class DY, class Mean, class InvStd, class Gamma, class Sums,
          class DX>
void group_input_gradient(const ExecSpace& exec, const GroupLayout& layout, Affine affine,
                          const X& x, const DY& dy, const Mean& mean, const InvStd& invstd,
                          const Gamma& gamma, bool batch_statistics, const Sums& sums,
                          std::int64_t count, const DX& dx) {
  ScopedRegion region("tessera::kernels::group_input_gradient");
  constexpr const char* fn = "tessera::kernels::group_input_gradient";
  impl::require_normalization_views(fn, layout, affine, x, mean, invstd, gamma);
  impl::require_extent(fn, "dy", dy, layout.size(), layout);
  impl::require_extent(fn, "dx", dx, layout.size(), layout);
  if (batch_statistics) {
    impl::require_extent(fn, "sums", sums, 2 * layout.groups, layout);
    TESSERA_REQUIRE(count > 0, fn << ": count " << count << " must be positive");
  }
  const std::int64_t groups = layout.groups;
  const double n = static_cast<double>(count);
  Kokkos::parallel_for(
      "tessera::kernels::group_input_gradient",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, layout.size()), KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t g = layout.group_of(i);
        const float dxhat = dy(i) * gamma(impl::affine_index(affine, g, layout.position_of(i)));
        if (!batch_statistics) {
          dx(i) += invstd(g) * dxhat;
          return;
        }
        const double xhat = (x(i) - mean(g)) * invstd(g);
        dx(i) += static_cast<float>(invstd(g) * (dxhat - (sums(g) + xhat * sums(groups + g)) / n));
      });
}

// dgamma += sum(dy * xhat), dbeta += sum(dy) over the elements each affine
// parameter touches: a group (per_group) or one position across all groups
// (per_position). One thread per parameter, fixed order.
template <class ExecSpace, class X, class DY, class Mean, class InvStd, class DGamma, class DBeta>
void affine_gradients(const ExecSpace& exec, const GroupLayout& layout, Affine affine, const X& x,
                      const DY& dy, const Mean& mean, const InvStd& invstd, const DGamma& dgamma,
                      const DBeta& dbeta) {
  ScopedRegion region("tessera::kernels::affine_gradients");
  constexpr const char* fn = "tessera::kernels::affine_gradients";
  impl::require_normalization_views(fn, layout, affine, x, mean, invstd, dgamma, "dgamma");
  impl::require_extent(fn, "dy", dy, layout.size(), layout);
  impl::require_extent(fn, "dbeta", dbeta, impl::affine_size(layout, affine), layout);
  const bool per_group = affine == Affine::per_group;
  impl::fixed_order_pair_sums(
      exec, "tessera::kernels::affine_gradients", impl::affine_size(layout, affine),
      per_group ? layout.group_size() : layout.groups,
      KOKKOS_LAMBDA(const std::int64_t p, const std::int64_t j, double& scaled, double& shift) {
        const std::int64_t g = per_group ? p : j;
        const std::int64_t i = per_group ? layout.index(p, j) : layout.index(j, p);
        shift += dy(i);
        scaled += static_cast<double>(dy(i)) * ((x(i) - mean(g)) * invstd(g));
      },
      KOKKOS_LAMBDA(const std::int64_t p, const double scaled, const double shift) {
        dgamma(p) += static_cast<float>(scaled);
        dbeta(p) += static_cast<float>(shift);
      });
}

}  // namespace tessera::kernels
