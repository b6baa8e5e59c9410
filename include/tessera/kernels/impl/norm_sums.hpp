// The mechanism behind norm.hpp: the argument checks, the chunking of each
// group's rows that makes the per-group sums the same bits for any thread
// count and backend (norm.hpp's opening comment tells how), the lane
// arithmetic (one vector register of lanes on the host), the device path's
// teams over chunks of a group and over blocks of positions, the terms of
// the statistics and of backward, and the per-group arithmetic of the
// moments and the per-element arithmetic of forward and backward.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/group_layout.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/impl/team.hpp>
#include <tessera/kernels/reduce.hpp>

#include <cstdint>
#include <string>
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

// The host path of chunked_pair_sums. Each chunk's elements go round
// sum_lanes lanes (the j-th element of a row segment to lane j %
// sum_lanes), lanes are added pairwise, and chunk sums in chunk order.
// `partials` holds 2 * groups * GroupChunks::per_group doubles. How chunks
// are shared out among the threads (blocks of groups with short rows)
// leaves the sums alone.
template <class ExecSpace, class Partials, class Terms, class Finish>
void chunked_pair_sums_host(const ExecSpace& exec, const char* label, const GroupLayout& layout,
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

// The device path. A GPU sums each group as chunks of device_chunk
// consecutive positions (row after row of the group, so a chunk may end in
// one row and go on in the next), one team per (group, chunk), with
// team_sum: its 64 fixed lanes read consecutive positions (a warp reads
// consecutive addresses of a row), and a fixed tree adds them. A group of
// several chunks adds its chunk sums with team_sum again, one team per
// group, in a second launch; a group of one chunk finishes in the first.
// The sums depend on device_chunk and team_lanes, not on the team size or
// the thread count. [128, 32, 28, 28] is 12544 chunk teams (802816
// threads at 64 a team), [128, 128, 4, 4] 1024 (65536 threads), the
// [32 x 128, 128] rows of a small GPT's LayerNorm 4096 in one launch.
// Part of the device sums' definition: changing it changes their rounding.
constexpr std::int64_t device_chunk = 256;

inline std::int64_t device_chunks(const GroupLayout& l) {
  return (l.group_size() + device_chunk - 1) / device_chunk;
}

// q = n / d and r = n % d for n >= 0, d > 0, in 32 bits where both fit: a
// GPU's 64-bit division is a long subroutine, paid per element.
KOKKOS_INLINE_FUNCTION void divide(std::int64_t n, std::int64_t d, std::int64_t& q,
                                   std::int64_t& r) {
  if (n <= 0xffffffffLL && d <= 0xffffffffLL)
    q = static_cast<std::uint32_t>(n) / static_cast<std::uint32_t>(d);
  else
    q = n / d;
  r = n - q * d;
}

// The two sums of a device team.
struct PairSum {
  double first = 0, second = 0;

  KOKKOS_INLINE_FUNCTION PairSum& operator+=(const PairSum& o) {
    first += o.first;
    second += o.second;
    return *this;
  }
};

// Chunk c of group g summed by the team of `member` (every thread gets it).
template <class Member, class Terms>
KOKKOS_INLINE_FUNCTION PairSum chunk_pair_sum(const Member& member, const Terms& terms,
                                              const GroupLayout& l, std::int64_t g,
                                              std::int64_t c) {
  const std::int64_t k0 = c * device_chunk;
  const std::int64_t rest = l.group_size() - k0;
  std::int64_t o0, j0;
  divide(k0, l.inner, o0, j0);
  return team_sum<PairSum>(member, team_lanes_scratch<PairSum>(member),
                           rest < device_chunk ? rest : device_chunk, [&](const std::int64_t i) {
                             std::int64_t o, j;
                             divide(j0 + i, l.inner, o, j);
                             PairSum s;
                             terms(OneLane{}, g, ((o0 + o) * l.groups + g) * l.inner + j, k0 + i,
                                   s.first, s.second);
                             return s;
                           });
}

// The device path of chunked_pair_sums; `partials` holds 2 * groups *
// device_chunks doubles.
template <class ExecSpace, class Partials, class Terms, class Finish>
void chunked_pair_sums_device(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                              const Partials& partials, const Terms& terms, const Finish& finish,
                              TeamShape shape) {
  const GroupLayout l = layout;
  const std::int64_t chunks = device_chunks(l);
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const std::size_t scratch = team_sum_bytes<PairSum>();
  if (chunks == 1) {
    Kokkos::parallel_for(
        std::string(label) + "::groups", team_policy(exec, l.groups, shape, scratch),
        KOKKOS_LAMBDA(const Member& member) {
          const std::int64_t g = member.league_rank();
          const PairSum s = chunk_pair_sum(member, terms, l, g, 0);
          Kokkos::single(Kokkos::PerTeam(member), [&] { finish(g, s.first, s.second); });
        });
    return;
  }
  TESSERA_REQUIRE(static_cast<std::int64_t>(partials.size()) >= 2 * l.groups * chunks,
                  label << ": scratch of " << partials.size() << " doubles; "
                        << 2 * l.groups * chunks << " needed for groups of layout [outer "
                        << l.outer << ", groups " << l.groups << ", inner " << l.inner
                        << "] (group_partials_size)");
  if (l.groups * chunks > 0)
    Kokkos::parallel_for(
        std::string(label) + "::chunks", team_policy(exec, l.groups * chunks, shape, scratch),
        KOKKOS_LAMBDA(const Member& member) {
          const std::int64_t t = member.league_rank(), g = t / chunks;
          const PairSum s = chunk_pair_sum(member, terms, l, g, t - g * chunks);
          Kokkos::single(Kokkos::PerTeam(member), [&] {
            partials(2 * t) = s.first;
            partials(2 * t + 1) = s.second;
          });
        });
  Kokkos::parallel_for(
      std::string(label) + "::groups", team_policy(exec, l.groups, shape, scratch),
      KOKKOS_LAMBDA(const Member& member) {
        const std::int64_t g = member.league_rank();
        const PairSum s = team_sum<PairSum>(member, team_lanes_scratch<PairSum>(member), chunks,
                                            [&](const std::int64_t c) {
                                              const std::int64_t t = g * chunks + c;
                                              return PairSum{partials(2 * t), partials(2 * t + 1)};
                                            });
        Kokkos::single(Kokkos::PerTeam(member), [&] { finish(g, s.first, s.second); });
      });
}

// Two sums per group: terms(lanes, g, i, k, first, second) adds the share
// of the element at flat index i (position k within group g) to the partial
// sums `first` and `second` (see OneLane); finish(g, first, second)
// receives the totals, on the host path (chunked_pair_sums_host) or the
// device path (chunked_pair_sums_device) as `path` says.
template <class ExecSpace, class Partials, class Terms, class Finish>
void chunked_pair_sums(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                       const Partials& partials, const Terms& terms, const Finish& finish,
                       NormPath path) {
  if constexpr (host_fast_paths_v<ExecSpace>) {
    if (!path.device) {
      chunked_pair_sums_host(exec, label, layout, partials, terms, finish);
      return;
    }
  }
  chunked_pair_sums_device(exec, label, layout, partials, terms, finish, path.team);
}

// Sums over the groups for each position (per_position affine gradients)
// on the device path. A team takes position_block consecutive positions
// (coalesced: a warp reads 32 neighbouring addresses of each group) and
// position_rows groups; for each position, lane q of position_lanes sums
// groups q, q + position_lanes, ... of those in order (one thread per
// position and lane), and the lanes are added pairwise in team scratch.
// Each position then adds its chunks' sums in chunk order, in a second
// launch when there is more than one chunk. The [32 x 128, 128] rows of a
// small GPT are 4 x 64 teams of 256 threads (65536), where one thread per
// position walking 4096 rows had 128. Part of the sums' definition:
// position_rows and position_lanes.
constexpr int position_block = 32;
constexpr int position_lanes = 8;
constexpr std::int64_t position_rows = 64;

inline std::int64_t position_chunks(const GroupLayout& l) {
  return (l.groups + position_rows - 1) / position_rows;
}

// Doubles of `partials` position_pair_sums needs.
inline std::int64_t position_partials_size(const GroupLayout& l) {
  return position_chunks(l) > 1 ? 2 * l.group_size() * position_chunks(l) : 0;
}

// terms(OneLane, g, i, p, first, second) as chunked_pair_sums', summed over
// the groups g for each position p; finish(p, first, second).
template <class ExecSpace, class Partials, class Terms, class Finish>
void position_pair_sums(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                        const Partials& partials, const Terms& terms, const Finish& finish,
                        TeamShape shape) {
  const GroupLayout l = layout;
  const std::int64_t positions = l.group_size(), chunks = position_chunks(l);
  const std::int64_t blocks = (positions + position_block - 1) / position_block;
  TESSERA_REQUIRE(static_cast<std::int64_t>(partials.size()) >= position_partials_size(l),
                  label << ": scratch of " << partials.size() << " doubles; "
                        << position_partials_size(l) << " needed for positions of layout [outer "
                        << l.outer << ", groups " << l.groups << ", inner " << l.inner
                        << "] (group_partials_size with Affine::per_position)");
  constexpr int units = position_block * position_lanes;
  // A GPU team gets a thread per position and lane.
  shape = gpu_team_shape<ExecSpace>(shape, units);
  const std::size_t scratch = units * sizeof(PairSum);
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  if (blocks * chunks > 0)
    Kokkos::parallel_for(
        std::string(label) + "::columns", team_policy(exec, blocks * chunks, shape, scratch),
        KOKKOS_LAMBDA(const Member& member) {
          const std::int64_t t = member.league_rank(), c = t / blocks, b = t - c * blocks;
          const std::int64_t g0 = c * position_rows;
          const std::int64_t g1 = g0 + position_rows < l.groups ? g0 + position_rows : l.groups;
          PairSum* lanes = static_cast<PairSum*>(member.team_scratch(0).get_shmem(scratch));
          Kokkos::parallel_for(Kokkos::TeamThreadRange(member, units), [&](const int u) {
            const int lane = u / position_block;
            const std::int64_t p = b * position_block + u % position_block;
            PairSum s;
            if (p < positions) {
              std::int64_t o, j;
              divide(p, l.inner, o, j);
              const std::int64_t first = o * l.groups * l.inner + j;  // l.index(0, p)
              for (std::int64_t g = g0 + lane; g < g1; g += position_lanes)
                terms(OneLane{}, g, first + g * l.inner, p, s.first, s.second);
            }
            lanes[u] = s;
          });
          member.team_barrier();
          for (int width = position_lanes / 2; width > 0; width /= 2) {
            Kokkos::parallel_for(
                Kokkos::TeamThreadRange(member, width * position_block),
                [&](const int u) { lanes[u] += lanes[u + width * position_block]; });
            member.team_barrier();
          }
          Kokkos::parallel_for(Kokkos::TeamThreadRange(member, position_block), [&](const int col) {
            const std::int64_t p = b * position_block + col;
            if (p >= positions) return;
            if (chunks == 1) {
              finish(p, lanes[col].first, lanes[col].second);
            } else {
              partials(2 * (c * positions + p)) = lanes[col].first;
              partials(2 * (c * positions + p) + 1) = lanes[col].second;
            }
          });
        });
  if (chunks == 1) return;
  Kokkos::parallel_for(
      std::string(label) + "::positions", Kokkos::RangePolicy<ExecSpace>(exec, 0, positions),
      KOKKOS_LAMBDA(const std::int64_t p) {
        PairSum s;
        for (std::int64_t c = 0; c < chunks; ++c)
          s += PairSum{partials(2 * (c * positions + p)), partials(2 * (c * positions + p) + 1)};
        finish(p, s.first, s.second);
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

// body(g, k, i) for every element on the device path: flat index i,
// position k within group g, one thread per element.
template <class ExecSpace, class Body>
void for_each_group_element(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                            const Body& body) {
  const GroupLayout l = layout;
  Kokkos::parallel_for(
      std::string(label) + "::elements", Kokkos::RangePolicy<ExecSpace>(exec, 0, l.size()),
      KOKKOS_LAMBDA(const std::int64_t i) {
        std::int64_t row, j, o, g;
        divide(i, l.inner, row, j);
        divide(row, l.groups, o, g);
        body(g, o * l.inner + j, i);
      });
}

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
