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
// Every per-group sum is chunked the same way for any thread count and
// backend: a group's rows of `inner` elements are cut into chunks of about
// norm_chunk elements (several short rows, one row, or a segment of a
// long one); one thread sums a chunk in sum_lanes interleaved partial
// sums, and the chunk sums are then added in chunk order. Threads take the
// chunks of every group for one block of rows before the next block, so
// each thread reads NCHW memory front to back; on the host, a thread sums
// the same chunk of up to 128 groups together (for BatchNorm's short rows,
// whole samples), and the eight lanes of a row piece in one vector
// register. None of this changes which element goes to which lane. The
// statistics are bitwise identical for any thread count, and a channel is
// no longer one thread's serial chain (BatchNorm over [128, 32, 28, 28]
// has 4096 chunks, not 32).
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
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/reduce.hpp>

#include <cstdint>
#include <type_traits>

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

// Part of the statistics' definition: changing either changes their
// rounding. Rows shorter than norm_chunk elements go norm_chunk / inner
// rows to a chunk; longer rows one row to a chunk, and rows longer than
// norm_segment are cut into segments of norm_segment.
constexpr std::int64_t norm_chunk = 512;
constexpr std::int64_t norm_segment = 4096;

// How the rows of each group are cut into chunks: a chunk is `rows`
// consecutive rows of the group (short rows) or one segment of a row (long
// rows); chunks are numbered row block by row block, segment by segment.
struct GroupChunks {
  std::int64_t rows = 1, segment = 1, segments = 1, per_group = 1;

  explicit GroupChunks(const GroupLayout& l) {
    segment = l.inner < norm_segment ? l.inner : norm_segment;
    segments = segment > 0 ? (l.inner + segment - 1) / segment : 0;
    rows = l.inner < norm_chunk ? norm_chunk / (l.inner > 0 ? l.inner : 1) : 1;
    per_group = segments * ((l.outer + rows - 1) / rows);
  }
};

// The lane arithmetic of the per-group sums. A terms functor is a template
// on a lane policy: with OneLane it adds one element's share to one pair of
// double partial sums; with AllLanes (host compilers with vector
// extensions) the shares of the sum_lanes consecutive elements of a row
// piece to all the lanes at once, the same operations in each lane, so the
// sums are the same bits. GCC does not vectorise the scalar form across
// the float-to-double conversion. Elements whose accumulator is not float
// take OneLane only (Terms::all_lanes).
struct OneLane {
  template <class T>
  KOKKOS_INLINE_FUNCTION static accumulator_t<T> load(const T* p) {
    return widen(*p);
  }
  template <class V>
  KOKKOS_INLINE_FUNCTION static double wide(V v) {
    return static_cast<double>(v);
  }
};
#ifdef TESSERA_HOST_VECTORS
struct AllLanes {
  typedef float narrow_lanes __attribute__((vector_size(sum_lanes * sizeof(float))));
  typedef double wide_lanes __attribute__((vector_size(sum_lanes * sizeof(double))));
  template <class T>
  static narrow_lanes load(const T* p) {
    narrow_lanes v;
    if constexpr (std::is_same<T, float>::value)
      __builtin_memcpy(&v, p, sizeof v);
    else
      for (int lane = 0; lane < sum_lanes; ++lane) v[lane] = widen(p[lane]);
    return v;
  }
  static wide_lanes wide(narrow_lanes v) { return __builtin_convertvector(v, wide_lanes); }
};
#endif

// The shares of sum_lanes consecutive elements (flat index i, position k
// within group g) to the lanes of `first` and `second`.
template <class Terms>
KOKKOS_INLINE_FUNCTION void add_lanes(const Terms& terms, std::int64_t g, std::int64_t i,
                                      std::int64_t k, double (&first)[sum_lanes],
                                      double (&second)[sum_lanes]) {
  for (int lane = 0; lane < sum_lanes; ++lane)
    terms(OneLane{}, g, i + lane, k + lane, first[lane], second[lane]);
}
#ifdef TESSERA_HOST_VECTORS
template <class Terms>
inline void add_lanes(const Terms& terms, std::int64_t g, std::int64_t i, std::int64_t k,
                      AllLanes::wide_lanes& first, AllLanes::wide_lanes& second) {
  terms(AllLanes{}, g, i, k, first, second);
}
#endif

// Groups a host task sums together: the same chunk of up to
// max_group_block neighbouring groups, so that a task whose chunk is a few
// short rows reads whole samples front to back ([N, 128, 4, 4]: 32 samples
// of 8 KB) instead of 64 bytes of each, a jump of 8 KB between them, which
// no prefetcher follows when the tensor has left the caches, as it has in
// a training step.
constexpr std::int64_t max_group_block = 128;

// Chunk c of groups [g0, g1) (at most MaxBlock), each summed in lanes held
// as Lanes (an array of doubles or one vector): the j-th element of a row
// segment goes to lane j % sum_lanes, the lanes are added pairwise, and
// group g's two sums land in partials 2 (g per_group + c) and the next.
// The rows are read in memory order: row o of every group, then row o + 1.
template <int MaxBlock, class Lanes, class Terms, class Partials>
KOKKOS_INLINE_FUNCTION void chunk_pair_sums(const Terms& terms, const GroupLayout& l,
                                            const GroupChunks& chunks, std::int64_t c,
                                            std::int64_t g0, std::int64_t g1,
                                            const Partials& partials) {
  const std::int64_t first_row = (c / chunks.segments) * chunks.rows;
  const std::int64_t last_row =
      first_row + chunks.rows < l.outer ? first_row + chunks.rows : l.outer;
  const std::int64_t begin = (c % chunks.segments) * chunks.segment;
  const std::int64_t end = begin + chunks.segment < l.inner ? begin + chunks.segment : l.inner;
  // Only the block's lanes are zeroed: MaxBlock is the largest block.
  Lanes first[MaxBlock], second[MaxBlock];
  for (std::int64_t g = 0; g < g1 - g0; ++g)
    for (int lane = 0; lane < sum_lanes; ++lane) first[g][lane] = second[g][lane] = 0;
  for (std::int64_t o = first_row; o < last_row; ++o)
    for (std::int64_t g = g0; g < g1; ++g) {
      const std::int64_t row = (o * l.groups + g) * l.inner, k = o * l.inner;
      Lanes& f = first[g - g0];
      Lanes& s = second[g - g0];
      std::int64_t j = begin;
      for (; j + sum_lanes <= end; j += sum_lanes) add_lanes(terms, g, row + j, k + j, f, s);
      for (int lane = 0; j + lane < end; ++lane) {
        double f_lane = f[lane], s_lane = s[lane];
        terms(OneLane{}, g, row + j + lane, k + j + lane, f_lane, s_lane);
        f[lane] = f_lane;
        s[lane] = s_lane;
      }
    }
  for (std::int64_t g = g0; g < g1; ++g) {
    Lanes& f = first[g - g0];
    Lanes& s = second[g - g0];
    for (int width = sum_lanes / 2; width > 0; width /= 2)
      for (int lane = 0; lane < width; ++lane) {
        f[lane] += f[lane + width];
        s[lane] += s[lane + width];
      }
    partials(2 * (g * chunks.per_group + c)) = f[0];
    partials(2 * (g * chunks.per_group + c) + 1) = s[0];
  }
}

// Two sums per group: terms(lanes, g, i, k, first, second) adds the share
// of the element at flat index i (position k within group g) to the partial
// sums `first` and `second` (see OneLane); finish(g, first, second)
// receives the totals. Each chunk's elements go round sum_lanes lanes (the
// j-th element of a row segment to lane j % sum_lanes), lanes are added
// pairwise, and chunk sums in chunk order. `partials` holds 2 * groups *
// chunks-per-group doubles. How chunks are shared out among the threads
// (on the host, blocks of groups with short rows) leaves the sums alone.
template <class ExecSpace, class Partials, class Terms, class Finish>
void chunked_pair_sums(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                       const Partials& partials, const Terms& terms, const Finish& finish) {
  const GroupChunks chunks(layout);
  TESSERA_REQUIRE(
      static_cast<std::int64_t>(partials.size()) >= 2 * layout.groups * chunks.per_group,
      label << ": scratch of " << partials.size() << " doubles; "
            << 2 * layout.groups * chunks.per_group << " needed for groups of layout [outer "
            << layout.outer << ", groups " << layout.groups << ", inner " << layout.inner << "]");
  const GroupLayout l = layout;
  constexpr int max_block = runs_on_host<ExecSpace> ? max_group_block : 1;
  // Groups per task: all of them (up to max_block), while leaving at least
  // two tasks per thread.
  const std::int64_t per_thread =
      l.groups * chunks.per_group / (2 * static_cast<std::int64_t>(exec.concurrency()));
  std::int64_t block = l.groups < per_thread ? l.groups : per_thread;
  block = block < max_block ? block : max_block;
  block = block > 1 ? block : 1;
  const std::int64_t blocks = (l.groups + block - 1) / block;
  // Dynamic: a group's last chunk may have fewer rows ([N, 64, 7, 7] cuts
  // 128 rows into 83 and 45), so equal numbers of tasks are not equal work.
  Kokkos::parallel_for(
      label,
      Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(exec, 0,
                                                                        blocks * chunks.per_group),
      KOKKOS_LAMBDA(const std::int64_t t) {
        // Task t is chunk c of a block of groups; consecutive tasks are the
        // same rows of neighbouring groups, so a thread reads adjacent memory.
        const std::int64_t c = t / blocks, g0 = (t % blocks) * block;
        const std::int64_t g1 = g0 + block < l.groups ? g0 + block : l.groups;
#ifdef TESSERA_HOST_VECTORS
        if constexpr (runs_on_host<ExecSpace> && Terms::all_lanes)
          chunk_pair_sums<max_block, AllLanes::wide_lanes>(terms, l, chunks, c, g0, g1, partials);
        else
#endif
          chunk_pair_sums<max_block, double[sum_lanes]>(terms, l, chunks, c, g0, g1, partials);
      });
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(exec, 0, l.groups),
      KOKKOS_LAMBDA(const std::int64_t g) {
        double first = 0, second = 0;
        for (std::int64_t c = 0; c < chunks.per_group; ++c) {
          first += partials(2 * (g * chunks.per_group + c));
          second += partials(2 * (g * chunks.per_group + c) + 1);
        }
        finish(g, first, second);
      });
}

// The statistics' terms: x and x^2.
template <class T>
struct SquareTerms {
  static constexpr bool all_lanes = std::is_same<accumulator_t<T>, float>::value;
  const T* x;

  template <class Lanes, class Sum>
  KOKKOS_INLINE_FUNCTION void operator()(Lanes, std::int64_t, std::int64_t i, std::int64_t,
                                         Sum& sum, Sum& squares) const {
    const auto v = Lanes::wide(Lanes::load(x + i));
    sum += v;
    squares += v * v;
  }
};

// Backward's terms: dxhat = dy * gamma (gamma per position, or null for a
// factor of the whole group) and dxhat * xhat, xhat = (x - mean) * invstd.
template <class T, class Mean, class InvStd>
struct GradientTerms {
  static constexpr bool all_lanes = std::is_same<accumulator_t<T>, float>::value;
  const T* x;
  const T* dy;
  const float* gamma;
  Mean mean;
  InvStd invstd;

  template <class Lanes, class Sum>
  KOKKOS_INLINE_FUNCTION void operator()(Lanes, std::int64_t g, std::int64_t i, std::int64_t k,
                                         Sum& dxhat_sum, Sum& projected) const {
    auto dxhat = Lanes::wide(Lanes::load(dy + i));
    if (gamma) dxhat *= Lanes::wide(Lanes::load(gamma + k));
    dxhat_sum += dxhat;
    projected += dxhat * Lanes::wide((Lanes::load(x + i) - mean(g)) * invstd(g));
  }
};

template <class T, class Mean, class InvStd>
GradientTerms<T, Mean, InvStd> gradient_terms(const T* x, const T* dy, const float* gamma,
                                              const Mean& mean, const InvStd& invstd) {
  return {x, dy, gamma, mean, invstd};
}

// body(g, k0, begin, end) over each row of each group: flat elements
// [begin, end) of group g, the first at position k0 within the group; rows
// longer than a host span are split. A host task of short rows steps from
// row to row and group to group rather than dividing a row's index by the
// groups ([N, 128, 4, 4] has 16 values a row: the division cost as much).
template <class ExecSpace, class Body>
void for_each_group_row(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                        const Body& body) {
  const GroupLayout l = layout;
  if (runs_on_host<ExecSpace> && l.inner > 0 && l.inner < host_span) {
    for_each_span(
        exec, label, l.outer * l.groups,
        KOKKOS_LAMBDA(const std::int64_t first, const std::int64_t last) {
          std::int64_t o = first / l.groups, g = first % l.groups;
          for (std::int64_t r = first; r < last; ++r) {
            body(g, o * l.inner, r * l.inner, (r + 1) * l.inner);
            if (++g == l.groups) {
              g = 0;
              ++o;
            }
          }
        },
        host_span / l.inner);
    return;
  }
  for_each_row_span(
      exec, label, l.outer * l.groups, l.inner,
      KOKKOS_LAMBDA(const std::int64_t r, const std::int64_t begin, const std::int64_t end) {
        const std::int64_t o = r / l.groups, g = r % l.groups;
        body(g, o * l.inner + begin, r * l.inner + begin, r * l.inner + end);
      });
}

// The per-group arithmetic of the moments from a group's sum and sum of
// squares over n elements, shared by the kernels that take the sums from
// memory and by group_moments, which has them in registers.
//
// mean and 1 / sqrt(biased variance + eps).
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
// batch variance (as PyTorch).
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

// Doubles of scratch the per-group sums over `layout` need (the `partials`
// argument of group_sums and group_gradient_sums).
inline std::int64_t group_partials_size(const GroupLayout& layout) {
  return 2 * layout.groups * impl::GroupChunks(layout).per_group;
}

// The statistics step: sums(g) = sum of x over group g, sums(groups + g) = sum of x^2.
template <class ExecSpace, class X, class Sums, class Partials>
void group_sums(const ExecSpace& exec, const GroupLayout& layout, const X& x, const Sums& sums,
                const Partials& partials) {
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
      });
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
  Kokkos::parallel_for(
      "tessera::kernels::moments_from_sums", Kokkos::RangePolicy<ExecSpace>(exec, 0, groups),
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
  Kokkos::parallel_for(
      "tessera::kernels::update_running_moments", Kokkos::RangePolicy<ExecSpace>(exec, 0, groups),
      KOKKOS_LAMBDA(const std::int64_t g) {
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
                   const Partials& partials) {
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
  impl::chunked_pair_sums(
      exec, fn, layout, partials, impl::SquareTerms<typename X::non_const_value_type>{x.data()},
      KOKKOS_LAMBDA(const std::int64_t g, const double sum, const double squares) {
        if (running)
          impl::update_running(sum, squares, n, bessel, momentum, running_mean(g), running_var(g));
        impl::batch_moments(sum, squares, n, eps, mean(g), invstd(g));
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
  const bool per_group = affine == Affine::per_group;
  impl::for_each_group_row(
      exec, fn, layout,
      KOKKOS_LAMBDA(const std::int64_t g, const std::int64_t k0, const std::int64_t begin,
                    const std::int64_t end) {
        using T = typename Y::non_const_value_type;
        const float m = mean(g), s = invstd(g);
        const auto* in = x.data();
        T* out = y.data();
        if (per_group) {
          const float scale = gamma(g), shift = beta(g);
          for (std::int64_t i = begin; i < end; ++i)
            out[i] = narrow<T>((widen(in[i]) - m) * s * scale + shift);
        } else {
          const float* scale = gamma.data() + k0;
          const float* shift = beta.data() + k0;
          for (std::int64_t j = 0; j < end - begin; ++j)
            out[begin + j] = narrow<T>((widen(in[begin + j]) - m) * s * scale[j] + shift[j]);
        }
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
                         const Gamma& gamma, const Sums& sums, const Partials& partials) {
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
      });
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
  Kokkos::parallel_for(
      "tessera::kernels::affine_gradients_from_sums",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, groups), KOKKOS_LAMBDA(const std::int64_t g) {
        dgamma(g) += static_cast<float>(sums(groups + g));
        dbeta(g) += static_cast<float>(sums(g));
      });
}

// dx += invstd / count * (count * dxhat - sum(dxhat) - xhat * sum(dxhat * xhat))
// with dxhat = dy * gamma and batch statistics (sums from
// group_gradient_sums over `count` elements), or dx += invstd * dxhat when
// mean and invstd were constants (running statistics; sums and count are
// then unused).
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
  const bool per_group = affine == Affine::per_group;
  impl::for_each_group_row(
      exec, fn, layout,
      KOKKOS_LAMBDA(const std::int64_t g, const std::int64_t k0, const std::int64_t begin,
                    const std::int64_t end) {
        const float m = mean(g), s = invstd(g);
        const auto* in = x.data();
        const auto* grad = dy.data();
        auto* out = dx.data();
        // gamma of the row's positions (per_position) or of the group.
        const float* scale = per_group ? gamma.data() + g : gamma.data() + k0;
        const std::int64_t step = per_group ? 0 : 1;
        if (!batch_statistics) {
          for (std::int64_t j = 0; j < end - begin; ++j)
            add_rounded(out[begin + j], s * (widen(grad[begin + j]) * scale[j * step]));
          return;
        }
        // Means of dxhat and dxhat * xhat; per_group sums lack the factor gamma.
        const double factor = per_group ? static_cast<double>(gamma(g)) : 1.0;
        const double mean_dxhat = factor * sums(g) / n;
        const double mean_projected = factor * sums(groups + g) / n;
        for (std::int64_t j = 0; j < end - begin; ++j) {
          const float dxhat = widen(grad[begin + j]) * scale[j * step];
          const double xhat = (widen(in[begin + j]) - m) * s;
          add_rounded(out[begin + j],
                      static_cast<float>(s * (dxhat - (mean_dxhat + xhat * mean_projected))));
        }
      });
}

// dgamma += sum(dy * xhat), dbeta += sum(dy) over the elements each affine
// parameter touches: a group (per_group: chunked as the statistics, with
// `partials` of group_partials_size(layout) doubles) or one position across
// all groups (per_position: one thread per position, groups in order).
template <class ExecSpace, class X, class DY, class Mean, class InvStd, class DGamma, class DBeta,
          class Partials>
void affine_gradients(const ExecSpace& exec, const GroupLayout& layout, Affine affine, const X& x,
                      const DY& dy, const Mean& mean, const InvStd& invstd, const DGamma& dgamma,
                      const DBeta& dbeta, const Partials& partials) {
  ScopedRegion region("tessera::kernels::affine_gradients");
  constexpr const char* fn = "tessera::kernels::affine_gradients";
  impl::require_normalization_views(fn, layout, affine, x, mean, invstd, dgamma, "dgamma");
  impl::require_extent(fn, "dy", dy, layout.size(), layout);
  impl::require_extent(fn, "dbeta", dbeta, impl::affine_size(layout, affine), layout);
  const auto* in = x.data();
  const auto* grad = dy.data();
  if (affine == Affine::per_group) {
    impl::chunked_pair_sums(
        exec, fn, layout, partials,
        impl::gradient_terms(in, grad, static_cast<const float*>(nullptr), mean, invstd),
        KOKKOS_LAMBDA(const std::int64_t g, const double shift, const double scaled) {
          dgamma(g) += static_cast<float>(scaled);
          dbeta(g) += static_cast<float>(shift);
        });
    return;
  }
  // per_position: each position sums over the groups in order. A host
  // thread takes a tile of positions that are contiguous in every group
  // (within one run of `inner`) and walks the groups once, reading the
  // tile's elements of each together; a GPU thread takes one position.
  const GroupLayout l = layout;
  constexpr std::int64_t tile = impl::runs_on_host<ExecSpace> ? 32 : 1;
  impl::for_each_row_span(
      exec, fn, l.outer, l.inner,
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
}

// Allocates its own scratch (per_group); for calls outside a hot loop.
template <class ExecSpace, class X, class DY, class Mean, class InvStd, class DGamma, class DBeta>
void affine_gradients(const ExecSpace& exec, const GroupLayout& layout, Affine affine, const X& x,
                      const DY& dy, const Mean& mean, const InvStd& invstd, const DGamma& dgamma,
                      const DBeta& dbeta) {
  affine_gradients(exec, layout, affine, x, dy, mean, invstd, dgamma, dbeta,
                   impl::partials_scratch<ExecSpace>(
                       affine == Affine::per_group ? group_partials_size(layout) : 0));
}

}  // namespace tessera::kernels
