// The mechanism behind norm.hpp: the argument checks, the chunking of each
// group's rows that makes the per-group sums the same bits for any thread
// count and backend (norm.hpp's opening comment tells how), the lane
// arithmetic (one vector register of lanes on the host), the terms of the
// statistics and of backward, and the per-group arithmetic of the moments.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/group_layout.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/reduce.hpp>

#include <cstdint>
#include <type_traits>

namespace tessera::kernels::impl {
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
}  // namespace tessera::kernels::impl
