// The mechanism behind norm.hpp: the argument checks, the chunking of each
// group's rows that makes the per-group sums the same bits for any thread
// count and backend (norm.hpp's opening comment tells how), the lane
// arithmetic (one vector register of lanes on the host), the device path's
// teams over chunks of a group and over blocks of positions, and the terms
// of the statistics and of backward.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/group_layout.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/impl/lanes.hpp>
#include <tessera/kernels/impl/launch.hpp>
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
  static_assert(sum_lanes == 8, "the lanes are EightFloats and EightDoubles (impl/lanes.hpp)");
  typedef EightFloats narrow_lanes;
  typedef EightDoubles wide_lanes;
  static wide_lanes wide(narrow_lanes v) { return widen_lanes(v); }
  template <class T>
  static narrow_lanes load(const T* p) {
    narrow_lanes v;
    if constexpr (std::is_same<T, float>::value)
      __builtin_memcpy(&v, p, sizeof v);
    else
      for (int lane = 0; lane < sum_lanes; ++lane) v[lane] = widen(p[lane]);
    return v;
  }
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
// leaves the sums alone. finish_work: finish's work over all the groups.
template <class ExecSpace, class Partials, class Terms, class Finish>
void chunked_pair_sums_host(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                            const Partials& partials, const Terms& terms, const Finish& finish,
                            const Work& finish_work) {
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
  using P = typename Partials::value_type;
  const std::int64_t sums = 2 * l.groups * chunks.per_group;
  const Work elements = terms.work(l);
  // Dynamic: a group's last chunk may have fewer rows ([N, 64, 7, 7] cuts
  // 128 rows into 83 and 45), so equal numbers of tasks are not equal work.
  // The terms of every element, each sum's lanes added pairwise, the sums written.
  parallel_for(
      label,
      Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(exec, 0,
                                                                        blocks * chunks.per_group),
      Work{elements.bytes + bytes_of<P>(sums), elements.flops + (sum_lanes - 1.0) * sums,
           "host schedule: one task per chunk of a block of groups"},
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
  // The chunk sums read and added, then finish.
  parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(exec, 0, l.groups),
      Work{bytes_of<P>(sums) + finish_work.bytes, sums + finish_work.flops,
           "host schedule: one task per group, adding its chunk sums in order"},
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

// FLOPs of team_sum over `count` pairs in all, in `teams` teams: each pair
// added into its lane, then each team's lanes added in a tree.
inline double team_pair_sum_flops(std::int64_t count, std::int64_t teams) {
  return 2.0 * count + 2.0 * (team_lanes - 1) * teams;
}

// The device path of chunked_pair_sums; `partials` holds 2 * groups *
// device_chunks doubles. finish_work: finish's work over all the groups.
template <class ExecSpace, class Partials, class Terms, class Finish>
void chunked_pair_sums_device(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                              const Partials& partials, const Terms& terms, const Finish& finish,
                              const Work& finish_work, TeamShape shape) {
  const GroupLayout l = layout;
  const std::int64_t chunks = device_chunks(l);
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using P = typename Partials::value_type;
  const std::size_t scratch = team_sum_bytes<PairSum>();
  const Work elements = terms.work(l);
  // The terms of every element summed by a team per chunk.
  const double chunk_flops = elements.flops + team_pair_sum_flops(l.size(), l.groups * chunks);
  if (chunks == 1) {
    parallel_for(
        std::string(label) + "::groups", team_policy(exec, l.groups, shape, scratch),
        Work{elements.bytes + finish_work.bytes, chunk_flops + finish_work.flops},
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
  const std::int64_t sums = 2 * l.groups * chunks;
  if (l.groups * chunks > 0)
    parallel_for(
        std::string(label) + "::chunks", team_policy(exec, l.groups * chunks, shape, scratch),
        Work{elements.bytes + bytes_of<P>(sums), chunk_flops}, KOKKOS_LAMBDA(const Member& member) {
          const std::int64_t t = member.league_rank(), g = t / chunks;
          const PairSum s = chunk_pair_sum(member, terms, l, g, t - g * chunks);
          Kokkos::single(Kokkos::PerTeam(member), [&] {
            partials(2 * t) = s.first;
            partials(2 * t + 1) = s.second;
          });
        });
  // The chunk sums read and summed by a team per group, then finish.
  parallel_for(
      std::string(label) + "::groups", team_policy(exec, l.groups, shape, scratch),
      Work{bytes_of<P>(sums) + finish_work.bytes,
           team_pair_sum_flops(l.groups * chunks, l.groups) + finish_work.flops},
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
// device path (chunked_pair_sums_device) as `path` says. terms.work(layout)
// is the terms' work over every element (the bytes they read, their
// FLOPs), finish_work finish's over all the groups (the bytes it reads and
// writes, its FLOPs); the launches' Work adds the partial sums' own.
template <class ExecSpace, class Partials, class Terms, class Finish>
void chunked_pair_sums(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                       const Partials& partials, const Terms& terms, const Finish& finish,
                       const Work& finish_work, NormPath path) {
  if constexpr (host_fast_paths_v<ExecSpace>) {
    if (!path.device) {
      chunked_pair_sums_host(exec, label, layout, partials, terms, finish, finish_work);
      return;
    }
  }
  chunked_pair_sums_device(exec, label, layout, partials, terms, finish, finish_work, path.team);
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
// the groups g for each position p; finish(p, first, second), whose work
// over all the positions is finish_work.
template <class ExecSpace, class Partials, class Terms, class Finish>
void position_pair_sums(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                        const Partials& partials, const Terms& terms, const Finish& finish,
                        const Work& finish_work, TeamShape shape) {
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
  using P = typename Partials::value_type;
  const std::int64_t sums = 2 * positions * chunks;
  const Work elements = terms.work(l);
  // The terms of every element, each team's lanes added pairwise, and
  // finish (one chunk) or the chunk sums written.
  const Work columns{
      elements.bytes + (chunks == 1 ? finish_work.bytes : bytes_of<P>(sums)),
      elements.flops + 2.0 * (position_lanes - 1) * position_block * blocks * chunks +
          (chunks == 1 ? finish_work.flops : 0.0),
      "one team per 32 positions and 64 groups: the chunks of groups are the order of each "
      "position's sums"};
  if (blocks * chunks > 0)
    parallel_for(
        std::string(label) + "::columns", team_policy(exec, blocks * chunks, shape, scratch),
        columns, KOKKOS_LAMBDA(const Member& member) {
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
  // The chunk sums read and added, then finish.
  parallel_for(
      std::string(label) + "::positions", Kokkos::RangePolicy<ExecSpace>(exec, 0, positions),
      Work{bytes_of<P>(sums) + finish_work.bytes, sums + finish_work.flops},
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

  // x read; an add and a multiply-add an element.
  Work work(const GroupLayout& l) const { return Work{bytes_of<T>(l.size()), 3.0 * l.size()}; }

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

  // x and dy read, gamma at every position where given, the statistics of
  // every group; an element's dy * gamma, add, subtract, multiply and
  // multiply-add.
  Work work(const GroupLayout& l) const {
    return Work{bytes_of<T>(2 * l.size()) + (gamma ? bytes_of<float>(l.group_size()) : 0.0) +
                    bytes_of<typename Mean::value_type>(l.groups) +
                    bytes_of<typename InvStd::value_type>(l.groups),
                (gamma ? 6.0 : 5.0) * l.size()};
  }

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
// work: the whole sweep's, noted as a host schedule (a task takes a span
// of rows).
template <class ExecSpace, class Body>
void for_each_group_row(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                        Work work, const Body& body) {
  const GroupLayout l = layout;
  work.narrow = "host schedule: one task per span of rows";
  if (runs_on_host<ExecSpace> && l.inner > 0 && l.inner < host_span) {
    for_each_span(
        exec, label, l.outer * l.groups, work,
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
      exec, label, l.outer * l.groups, l.inner, work,
      KOKKOS_LAMBDA(const std::int64_t r, const std::int64_t begin, const std::int64_t end) {
        const std::int64_t o = r / l.groups, g = r % l.groups;
        body(g, o * l.inner + begin, r * l.inner + begin, r * l.inner + end);
      });
}

// body(g, k, i) for every element on the device path: flat index i,
// position k within group g, one thread per element. work: the sweep's.
template <class ExecSpace, class Body>
void for_each_group_element(const ExecSpace& exec, const char* label, const GroupLayout& layout,
                            const Work& work, const Body& body) {
  const GroupLayout l = layout;
  parallel_for(
      std::string(label) + "::elements", Kokkos::RangePolicy<ExecSpace>(exec, 0, l.size()), work,
      KOKKOS_LAMBDA(const std::int64_t i) {
        std::int64_t row, j, o, g;
        divide(i, l.inner, row, j);
        divide(row, l.groups, o, g);
        body(g, o * l.inner + j, i);
      });
}
}  // namespace tessera::kernels::impl
