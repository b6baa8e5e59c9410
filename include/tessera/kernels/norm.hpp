// Normalisation kernels shared by BatchNorm and LayerNorm. A tensor is seen
// as [outer, groups, inner]; each group (every outer and inner position of
// one middle index) is normalised by its own mean and variance:
// BatchNorm [N, C, H*W] -> (N, C, H*W), LayerNorm [N, D] -> (1, N, D).
// Statistics are sums of x and x^2 (summable across ranks) accumulated in
// double, so the one-pass variance keeps its precision when the mean is far
// from zero. They are a separate step from the normalisation so that a
// distributed BatchNorm can allreduce them between; group_moments takes
// them and the moments in one step when nothing sits between.
//
// Each kernel has two paths (NormPath, group_layout.hpp): the host fast
// path, which host spaces take by default, and the device path, which
// CUDA and HIP take (and any space when asked, as the tests do). Each
// path's results are the same bits for any thread count and team size;
// the two differ in the order of their sums.
//
// On the host path, every per-group sum is chunked the same way for any
// thread count: a group's rows of `inner` elements are cut into chunks of
// about norm_chunk elements (several short rows, one row, or a segment of
// a long one); one thread sums a chunk in sum_lanes interleaved partial
// sums, and the chunk sums are then added in chunk order. Threads take the
// chunks of every group for one block of rows before the next block, so
// each thread reads NCHW memory front to back; a thread sums the same
// chunk of up to 128 groups together (for BatchNorm's short rows, whole
// samples), and the eight lanes of a row piece in one vector register. None of this changes which
// element goes to which lane. The statistics are bitwise identical for any thread count, and a
// channel is no longer one thread's serial chain (BatchNorm over [128, 32, 28, 28] has 4096 chunks,
// not 32).
//
// On the device path, a group's sums are one team per chunk of 256
// positions (team_sum's fixed lanes and tree), then one team per group
// adding its chunk sums; per-position sums over the groups (LayerNorm's
// gamma and beta gradients) are teams over blocks of 32 positions and 64
// groups, adding their chunks per position in order; normalisation and
// the input gradient are one thread per element (impl/norm_sums.hpp tells
// the work items at the decks' sizes).
//
// x, y and their gradients may be bf16 or fp16; the statistics, gamma,
// beta and their gradients stay float (double for the sums), every value
// is widened before the arithmetic, and y and dx are rounded once.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/group_layout.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/norm_sums.hpp>

#include <cstdint>
#include <type_traits>

namespace tessera::kernels {

namespace impl {

// The per-element arithmetic of forward and backward, the same on both
// paths: y, and batch statistics' dx before it is added.
KOKKOS_INLINE_FUNCTION float normalized(float x, float mean, float invstd, float gamma,
                                        float beta) {
  return (x - mean) * invstd * gamma + beta;
}

KOKKOS_INLINE_FUNCTION float batch_input_gradient(float x, float dxhat, float mean, float invstd,
                                                  double mean_dxhat, double mean_projected) {
  const double xhat = (x - mean) * invstd;
  return static_cast<float>(invstd * (dxhat - (mean_dxhat + xhat * mean_projected)));
}

// The per-group arithmetic of the moments from a group's sum and sum of
// squares over n elements, shared by the kernels that take the sums from
// memory and by group_moments, which has them in registers.
//
// mean and 1 / sqrt(biased variance + eps): 7 FLOPs.
constexpr double batch_moments_flops = 7;
KOKKOS_INLINE_FUNCTION void batch_moments(double sum, double squares, double n, float eps,
                                          float& mean, float& invstd) {
  const double m = sum / n;
  const double var = squares / n - m * m;
  mean = static_cast<float>(m);
  invstd = static_cast<float>(1.0 / compat::sqrt((var > 0 ? var : 0.0) + eps));
}

// n / (n - 1): the unbiased variance's factor. A single element has no
// unbiased variance; its biased one (zero) stands in.
inline double bessel_factor(std::int64_t count) {
  const double n = static_cast<double>(count);
  return count > 1 ? n / (n - 1) : 1.0;
}

// running = (1 - momentum) * running + momentum * batch, with the unbiased
// batch variance (as PyTorch): 13 FLOPs.
constexpr double update_running_flops = 13;
KOKKOS_INLINE_FUNCTION void update_running(double sum, double squares, double n, double bessel,
                                           float momentum, float& running_mean,
                                           float& running_var) {
  const double m = sum / n;
  const double var = squares / n - m * m;
  const float unbiased = static_cast<float>((var > 0 ? var : 0.0) * bessel);
  running_mean = (1.0f - momentum) * running_mean + momentum * static_cast<float>(m);
  running_var = (1.0f - momentum) * running_var + momentum * unbiased;
}

// A scratch buffer of `size` doubles for calls outside a hot loop.
template <class ExecSpace>
Kokkos::View<double*, typename ExecSpace::memory_space> partials_scratch(std::int64_t size) {
  return Kokkos::View<double*, typename ExecSpace::memory_space>(
      Kokkos::view_alloc("tessera::kernels::norm_partials", Kokkos::WithoutInitializing), size);
}

}  // namespace impl

// Doubles of scratch the sums over `layout` need on either path (the
// `partials` argument of group_sums, group_moments, group_gradient_sums,
// and affine_gradients with `affine`).
inline std::int64_t group_partials_size(const GroupLayout& layout,
                                        Affine affine = Affine::per_group) {
  std::int64_t size = 2 * layout.groups * impl::GroupChunks(layout).per_group;
  const std::int64_t device = 2 * layout.groups * impl::device_chunks(layout);
  const std::int64_t columns =
      affine == Affine::per_position ? impl::position_partials_size(layout) : 0;
  size = size > device ? size : device;
  return size > columns ? size : columns;
}

// The statistics step: sums(g) = sum of x over group g, sums(groups + g) = sum of x^2.
template <class ExecSpace, class X, class Sums, class Partials>
void group_sums(const ExecSpace& exec, const GroupLayout& layout, const X& x, const Sums& sums,
                const Partials& partials, NormPath path = default_norm_path<ExecSpace>()) {
  ScopedRegion region("tessera::kernels::group_sums");
  constexpr const char* fn = "tessera::kernels::group_sums";
  impl::require_extent(fn, "x", x, layout.size(), layout);
  impl::require_extent(fn, "sums", sums, 2 * layout.groups, layout);
  const std::int64_t groups = layout.groups;
  impl::chunked_pair_sums(
      exec, fn, layout, partials, impl::SquareTerms<typename X::non_const_value_type>{x.data()},
      KOKKOS_LAMBDA(const std::int64_t g, const double sum, const double squares) {
        sums(g) = sum;
        sums(groups + g) = squares;
      },
      Work{bytes_of<typename Sums::value_type>(2 * groups)}, path);
}

// Allocates its own scratch; for calls outside a hot loop.
template <class ExecSpace, class X, class Sums>
void group_sums(const ExecSpace& exec, const GroupLayout& layout, const X& x, const Sums& sums) {
  group_sums(exec, layout, x, sums, impl::partials_scratch<ExecSpace>(group_partials_size(layout)));
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
  // The sums read, mean and invstd written.
  const Work work{bytes_of<typename Sums::value_type>(2 * groups) +
                      bytes_of<typename Mean::value_type>(groups) +
                      bytes_of<typename InvStd::value_type>(groups),
                  impl::batch_moments_flops * groups};
  impl::parallel_for(
      "tessera::kernels::moments_from_sums", Kokkos::RangePolicy<ExecSpace>(exec, 0, groups), work,
      KOKKOS_LAMBDA(const std::int64_t g) {
        impl::batch_moments(sums(g), sums(groups + g), n, eps, mean(g), invstd(g));
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
  const double bessel = impl::bessel_factor(count);
  // The sums read, the running statistics read and written.
  const Work work{bytes_of<typename Sums::value_type>(2 * groups) +
                      2 * bytes_of<typename RunningMean::value_type>(groups) +
                      2 * bytes_of<typename RunningVar::value_type>(groups),
                  impl::update_running_flops * groups};
  impl::parallel_for(
      "tessera::kernels::update_running_moments", Kokkos::RangePolicy<ExecSpace>(exec, 0, groups),
      work, KOKKOS_LAMBDA(const std::int64_t g) {
        impl::update_running(sums(g), sums(groups + g), n, bessel, momentum, running_mean(g),
                             running_var(g));
      });
}

// The statistics of x alone, in one pass: group_sums, then moments_from_sums
// over layout.group_size() elements and, when running_mean is not empty,
// update_running_moments with `momentum`, both in the sums' last kernel
// rather than two more launches. The same bits as the three calls; for
// statistics with no sum across ranks between (a distributed BatchNorm
// calls the three).
template <class ExecSpace, class X, class Mean, class InvStd, class RunningMean, class RunningVar,
          class Partials>
void group_moments(const ExecSpace& exec, const GroupLayout& layout, const X& x, float eps,
                   const Mean& mean, const InvStd& invstd, float momentum,
                   const RunningMean& running_mean, const RunningVar& running_var,
                   const Partials& partials, NormPath path = default_norm_path<ExecSpace>()) {
  ScopedRegion region("tessera::kernels::group_moments");
  constexpr const char* fn = "tessera::kernels::group_moments";
  impl::require_extent(fn, "x", x, layout.size(), layout);
  impl::require_extent(fn, "mean", mean, layout.groups, layout);
  impl::require_extent(fn, "invstd", invstd, layout.groups, layout);
  const bool running = running_mean.size() > 0;
  if (running) {
    impl::require_extent(fn, "running mean", running_mean, layout.groups, layout);
    impl::require_extent(fn, "running var", running_var, layout.groups, layout);
  }
  TESSERA_REQUIRE(layout.group_size() > 0, fn << ": groups of layout [outer " << layout.outer
                                              << ", groups " << layout.groups << ", inner "
                                              << layout.inner << "] have no elements");
  const double n = static_cast<double>(layout.group_size());
  const double bessel = impl::bessel_factor(layout.group_size());
  const std::int64_t groups = layout.groups;
  // finish writes mean and invstd, and reads and writes the running statistics when kept.
  const Work finish_work{
      bytes_of<typename Mean::value_type>(groups) + bytes_of<typename InvStd::value_type>(groups) +
          (running ? 2 * bytes_of<typename RunningMean::value_type>(groups) +
                         2 * bytes_of<typename RunningVar::value_type>(groups)
                   : 0.0),
      (impl::batch_moments_flops + (running ? impl::update_running_flops : 0.0)) * groups};
  impl::chunked_pair_sums(
      exec, fn, layout, partials, impl::SquareTerms<typename X::non_const_value_type>{x.data()},
      KOKKOS_LAMBDA(const std::int64_t g, const double sum, const double squares) {
        if (running)
          impl::update_running(sum, squares, n, bessel, momentum, running_mean(g), running_var(g));
        impl::batch_moments(sum, squares, n, eps, mean(g), invstd(g));
      },
      finish_work, path);
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
  const std::int64_t groups = mean.size();
  // The running statistics read, mean and invstd written; an add, a square
  // root and a division a group.
  const Work work{bytes_of<typename RunningMean::value_type>(groups) +
                      bytes_of<typename RunningVar::value_type>(groups) +
                      bytes_of<typename Mean::value_type>(groups) +
                      bytes_of<typename InvStd::value_type>(groups),
                  3.0 * groups};
  impl::parallel_for(
      "tessera::kernels::moments_from_running",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, mean.size()), work,
      KOKKOS_LAMBDA(const std::size_t g) {
        mean(g) = running_mean(g);
        invstd(g) = 1.0f / compat::sqrt(running_var(g) + eps);
      });
}

// y = (x - mean) * invstd * gamma + beta.
template <class ExecSpace, class X, class Mean, class InvStd, class Gamma, class Beta, class Y>
void group_normalize(const ExecSpace& exec, const GroupLayout& layout, Affine affine, const X& x,
                     const Mean& mean, const InvStd& invstd, const Gamma& gamma, const Beta& beta,
                     const Y& y, NormPath path = default_norm_path<ExecSpace>()) {
  ScopedRegion region("tessera::kernels::group_normalize");
  constexpr const char* fn = "tessera::kernels::group_normalize";
  impl::require_normalization_views(fn, layout, affine, x, mean, invstd, gamma);
  impl::require_extent(fn, "beta", beta, impl::affine_size(layout, affine), layout);
  impl::require_extent(fn, "y", y, layout.size(), layout);
  const bool per_group = affine == Affine::per_group;
  using T = typename Y::non_const_value_type;
  const std::int64_t parameters = impl::affine_size(layout, affine);
  // x read, y written, the statistics and the affine parameters read; 4
  // operations an element (normalized).
  const Work work{bytes_of<typename X::value_type>(layout.size()) + bytes_of<T>(layout.size()) +
                      bytes_of<typename Mean::value_type>(layout.groups) +
                      bytes_of<typename InvStd::value_type>(layout.groups) +
                      bytes_of<typename Gamma::value_type>(parameters) +
                      bytes_of<typename Beta::value_type>(parameters),
                  4.0 * layout.size()};
  if constexpr (host_fast_paths_v<ExecSpace>) {
    if (!path.device) {
      impl::for_each_group_row(
          exec, fn, layout, work,
          KOKKOS_LAMBDA(const std::int64_t g, const std::int64_t k0, const std::int64_t begin,
                        const std::int64_t end) {
            const float m = mean(g), s = invstd(g);
            const auto* in = x.data();
            T* out = y.data();
            if (per_group) {
              const float scale = gamma(g), shift = beta(g);
              for (std::int64_t i = begin; i < end; ++i)
                out[i] = narrow<T>(impl::normalized(widen(in[i]), m, s, scale, shift));
            } else {
              const float* scale = gamma.data() + k0;
              const float* shift = beta.data() + k0;
              for (std::int64_t j = 0; j < end - begin; ++j)
                out[begin + j] =
                    narrow<T>(impl::normalized(widen(in[begin + j]), m, s, scale[j], shift[j]));
            }
          });
      return;
    }
  }
  impl::for_each_group_element(
      exec, fn, layout, work,
      KOKKOS_LAMBDA(const std::int64_t g, const std::int64_t k, const std::int64_t i) {
        const std::int64_t p = per_group ? g : k;
        y(i) = narrow<T>(impl::normalized(widen(x(i)), mean(g), invstd(g), gamma(p), beta(p)));
      });
}

// The statistics step of backward: with xhat = (x - mean) * invstd and w =
// gamma at the element's position (per_position) or 1 (per_group, whose
// gamma is one factor of the whole group), sums(g) = sum of dy * w over
// group g and sums(groups + g) = sum of dy * w * xhat. For per_group
// affine parameters these are also their gradients (affine_gradients_from_sums).
template <class ExecSpace, class X, class DY, class Mean, class InvStd, class Gamma, class Sums,
          class Partials>
void group_gradient_sums(const ExecSpace& exec, const GroupLayout& layout, Affine affine,
                         const X& x, const DY& dy, const Mean& mean, const InvStd& invstd,
                         const Gamma& gamma, const Sums& sums, const Partials& partials,
                         NormPath path = default_norm_path<ExecSpace>()) {
  ScopedRegion region("tessera::kernels::group_gradient_sums");
  constexpr const char* fn = "tessera::kernels::group_gradient_sums";
  impl::require_normalization_views(fn, layout, affine, x, mean, invstd, gamma);
  impl::require_extent(fn, "dy", dy, layout.size(), layout);
  impl::require_extent(fn, "sums", sums, 2 * layout.groups, layout);
  const std::int64_t groups = layout.groups;
  const float* per_position = affine == Affine::per_group ? nullptr : gamma.data();
  impl::chunked_pair_sums(
      exec, fn, layout, partials,
      impl::gradient_terms(x.data(), dy.data(), per_position, mean, invstd),
      KOKKOS_LAMBDA(const std::int64_t g, const double sum, const double projected) {
        sums(g) = sum;
        sums(groups + g) = projected;
      },
      Work{bytes_of<typename Sums::value_type>(2 * groups)}, path);
}

template <class ExecSpace, class X, class DY, class Mean, class InvStd, class Gamma, class Sums>
void group_gradient_sums(const ExecSpace& exec, const GroupLayout& layout, Affine affine,
                         const X& x, const DY& dy, const Mean& mean, const InvStd& invstd,
                         const Gamma& gamma, const Sums& sums) {
  group_gradient_sums(exec, layout, affine, x, dy, mean, invstd, gamma, sums,
                      impl::partials_scratch<ExecSpace>(group_partials_size(layout)));
}

// dgamma += sums(groups + g), dbeta += sums(g): the affine gradients of
// per_group parameters from this rank's group_gradient_sums (before any
// sum across ranks).
template <class ExecSpace, class Sums, class DGamma, class DBeta>
void affine_gradients_from_sums(const ExecSpace& exec, const Sums& sums, const DGamma& dgamma,
                                const DBeta& dbeta) {
  ScopedRegion region("tessera::kernels::affine_gradients_from_sums");
  TESSERA_REQUIRE(sums.size() == 2 * dgamma.size() && dgamma.size() == dbeta.size(),
                  "tessera::kernels::affine_gradients_from_sums: sums "
                      << sums.size() << ", dgamma " << dgamma.size() << ", dbeta " << dbeta.size()
                      << "; expected sums of 2 * groups and one gradient per group");
  const std::int64_t groups = dgamma.size();
  // The sums read, dgamma and dbeta read and written; two adds a group.
  const Work work{bytes_of<typename Sums::value_type>(2 * groups) +
                      2 * bytes_of<typename DGamma::value_type>(groups) +
                      2 * bytes_of<typename DBeta::value_type>(groups),
                  2.0 * groups};
  impl::parallel_for(
      "tessera::kernels::affine_gradients_from_sums",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, groups), work, KOKKOS_LAMBDA(const std::int64_t g) {
        dgamma(g) += static_cast<float>(sums(groups + g));
        dbeta(g) += static_cast<float>(sums(g));
      });
}

// dx += invstd / count * (count * dxhat - sum(dxhat) - xhat * sum(dxhat * xhat))
// with dxhat = dy * gamma and batch statistics (sums from
// group_gradient_sums over `count` elements), or dx += invstd * dxhat when
// mean and invstd were constants (running statistics; sums and count are
// then unused). With add false, dx = 0 + that instead, dx not read.
template <class ExecSpace, class X, class DY, class Mean, class InvStd, class Gamma, class Sums,
          class DX>
void group_input_gradient(const ExecSpace& exec, const GroupLayout& layout, Affine affine,
                          const X& x, const DY& dy, const Mean& mean, const InvStd& invstd,
                          const Gamma& gamma, bool batch_statistics, const Sums& sums,
                          std::int64_t count, const DX& dx, bool add,
                          NormPath path = default_norm_path<ExecSpace>()) {
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
  const bool per_group = affine == Affine::per_group;
  const std::int64_t size = layout.size();
  // dy, invstd, gamma (batch statistics: x, mean, sums) read, dx written (read to add); dy * gamma,
  // the gradient (6 operations, or 1), the add. Host rows: the mean either way, 4 operations each.
  const double mean_bytes = bytes_of<typename Mean::value_type>(groups);
  Work work{bytes_of<typename DY::value_type>(size) +
                (add ? 2 : 1) * bytes_of<typename DX::value_type>(size) +
                bytes_of<typename InvStd::value_type>(groups) +
                bytes_of<typename Gamma::value_type>(impl::affine_size(layout, affine)),
            (batch_statistics ? 8.0 : 3.0) * size};
  if (batch_statistics)
    work.bytes += bytes_of<typename X::value_type>(size) + mean_bytes +
                  bytes_of<typename Sums::value_type>(2 * groups);
  if constexpr (host_fast_paths_v<ExecSpace>) {
    if (!path.device) {
      Work host = work;
      if (!batch_statistics) host.bytes += mean_bytes;
      if (batch_statistics) host.flops += 4.0 * layout.outer * groups;
      impl::for_each_group_row(
          exec, fn, layout, host,
          KOKKOS_LAMBDA(const std::int64_t g, const std::int64_t k0, const std::int64_t begin,
                        const std::int64_t end) {
            const float m = mean(g), s = invstd(g);
            const bool adding = add;  // a local: no store can change it
            const auto* in = x.data();
            const auto* grad = dy.data();
            auto* out = dx.data();
            // gamma of the row's positions (per_position) or of the group.
            const float* scale = per_group ? gamma.data() + g : gamma.data() + k0;
            const std::int64_t step = per_group ? 0 : 1;
            if (!batch_statistics) {
              for (std::int64_t j = 0; j < end - begin; ++j)
                put_rounded(out[begin + j], s * (widen(grad[begin + j]) * scale[j * step]), adding);
              return;
            }
            // Means of dxhat and dxhat * xhat; per_group sums lack the factor gamma.
            const double factor = per_group ? static_cast<double>(gamma(g)) : 1.0;
            const double mean_dxhat = factor * sums(g) / n;
            const double mean_projected = factor * sums(groups + g) / n;
            for (std::int64_t j = 0; j < end - begin; ++j) {
              const float dxhat = widen(grad[begin + j]) * scale[j * step];
              put_rounded(out[begin + j],
                          impl::batch_input_gradient(widen(in[begin + j]), dxhat, m, s, mean_dxhat,
                                                     mean_projected),
                          adding);
            }
          });
      return;
    }
  }
  // Each element takes the two means of its group's sums (4 operations).
  if (batch_statistics) work.flops += 4.0 * size;
  impl::for_each_group_element(
      exec, fn, layout, work,
      KOKKOS_LAMBDA(const std::int64_t g, const std::int64_t k, const std::int64_t i) {
        const float s = invstd(g);
        const float dxhat = widen(dy(i)) * gamma(per_group ? g : k);
        if (!batch_statistics) {
          put_rounded(dx(i), s * dxhat, add);
          return;
        }
        const double factor = per_group ? static_cast<double>(gamma(g)) : 1.0;
        put_rounded(dx(i),
                    impl::batch_input_gradient(widen(x(i)), dxhat, mean(g), s, factor * sums(g) / n,
                                               factor * sums(groups + g) / n),
                    add);
      });
}

// dgamma += sum(dy * xhat), dbeta += sum(dy) over the elements each affine
// parameter touches: a group (per_group: summed as the statistics) or one
// position across all groups (per_position: on the host path, one thread
// per tile of positions, groups in order; on the device path, teams over
// blocks of positions and chunks of groups, impl::position_pair_sums).
// `partials`: group_partials_size(layout, affine) doubles.
template <class ExecSpace, class X, class DY, class Mean, class InvStd, class DGamma, class DBeta,
          class Partials>
void affine_gradients(const ExecSpace& exec, const GroupLayout& layout, Affine affine, const X& x,
                      const DY& dy, const Mean& mean, const InvStd& invstd, const DGamma& dgamma,
                      const DBeta& dbeta, const Partials& partials,
                      NormPath path = default_norm_path<ExecSpace>()) {
  ScopedRegion region("tessera::kernels::affine_gradients");
  constexpr const char* fn = "tessera::kernels::affine_gradients";
  impl::require_normalization_views(fn, layout, affine, x, mean, invstd, dgamma, "dgamma");
  impl::require_extent(fn, "dy", dy, layout.size(), layout);
  impl::require_extent(fn, "dbeta", dbeta, impl::affine_size(layout, affine), layout);
  const auto* in = x.data();
  const auto* grad = dy.data();
  const auto terms =
      impl::gradient_terms(in, grad, static_cast<const float*>(nullptr), mean, invstd);
  const auto add = KOKKOS_LAMBDA(const std::int64_t p, const double shift, const double scaled) {
    dgamma(p) += static_cast<float>(scaled);
    dbeta(p) += static_cast<float>(shift);
  };
  // add: dgamma and dbeta read and written, two adds an affine parameter.
  const std::int64_t parameters = impl::affine_size(layout, affine);
  const Work add_work{2 * bytes_of<typename DGamma::value_type>(parameters) +
                          2 * bytes_of<typename DBeta::value_type>(parameters),
                      2.0 * parameters};
  if (affine == Affine::per_group) {
    impl::chunked_pair_sums(exec, fn, layout, partials, terms, add, add_work, path);
    return;
  }
  if constexpr (host_fast_paths_v<ExecSpace>) {
    if (!path.device) {
      // A host thread takes a tile of positions that are contiguous in every
      // group (within one run of `inner`) and walks the groups once, reading
      // the tile's elements of each together.
      const GroupLayout l = layout;
      constexpr std::int64_t tile = 32;
      // The terms of every element, then add.
      const Work elements = terms.work(l);
      impl::for_each_row_span(
          exec, fn, l.outer, l.inner,
          Work{elements.bytes + add_work.bytes, elements.flops + add_work.flops,
               "host schedule: one task per tile of 32 positions"},
          KOKKOS_LAMBDA(const std::int64_t row, const std::int64_t begin, const std::int64_t end) {
            double scaled[tile] = {}, shift[tile] = {};
            const std::int64_t width = end - begin;
            // l.index(0, row inner + begin); group g's tile starts g inner later.
            const std::int64_t first = row * l.groups * l.inner + begin;
            for (std::int64_t g = 0; g < l.groups; ++g) {
              const auto* dy_g = grad + first + g * l.inner;
              const auto* x_g = in + first + g * l.inner;
              const float m = mean(g), s = invstd(g);
              if (width == tile)
                for (std::int64_t t = 0; t < tile; ++t) {
                  const float dy_t = widen(dy_g[t]);
                  shift[t] += dy_t;
                  scaled[t] += static_cast<double>(dy_t) * ((widen(x_g[t]) - m) * s);
                }
              else
                for (std::int64_t t = 0; t < width; ++t) {
                  const float dy_t = widen(dy_g[t]);
                  shift[t] += dy_t;
                  scaled[t] += static_cast<double>(dy_t) * ((widen(x_g[t]) - m) * s);
                }
            }
            for (std::int64_t t = 0; t < width; ++t) {
              dgamma(row * l.inner + begin + t) += static_cast<float>(scaled[t]);
              dbeta(row * l.inner + begin + t) += static_cast<float>(shift[t]);
            }
          },
          tile);
      return;
    }
  }
  impl::position_pair_sums(exec, fn, layout, partials, terms, add, add_work, path.team);
}

// Allocates its own scratch; for calls outside a hot loop.
template <class ExecSpace, class X, class DY, class Mean, class InvStd, class DGamma, class DBeta>
void affine_gradients(const ExecSpace& exec, const GroupLayout& layout, Affine affine, const X& x,
                      const DY& dy, const Mean& mean, const InvStd& invstd, const DGamma& dgamma,
                      const DBeta& dbeta) {
  affine_gradients(exec, layout, affine, x, dy, mean, invstd, dgamma, dbeta,
                   impl::partials_scratch<ExecSpace>(group_partials_size(layout, affine)));
}

}  // namespace tessera::kernels
