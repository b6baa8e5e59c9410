// Hierarchical parallelism for the device paths: a team policy whose team
// size a caller may fix (the tests run every team kernel at several), and
// a sum inside a team whose bits depend on neither the team size nor the
// number of threads or teams. The terms are dealt to team_lanes fixed
// lanes (lane l takes terms l, l + team_lanes, ... in order; on a GPU,
// neighbouring threads read neighbouring terms), and the lanes are added
// in a fixed pairwise tree in team scratch. A team of any size walks the
// lanes with TeamThreadRange, so one thread or 256 give the same result.
#pragma once

#include <tessera/core/types.hpp>

#include <cstddef>
#include <cstdint>

namespace tessera::kernels {

// Lanes of team_sum: part of its result's definition (changing it changes
// the rounding). 64 is a wavefront on AMD GPUs and two warps on NVIDIA's.
constexpr int team_lanes = 64;

// The team size of a team kernel: 0 lets the backend choose (team_lanes
// threads on a GPU, Kokkos::AUTO on the host); a positive size fixes it
// (tests run the kernels at several sizes and compare the bits).
struct TeamShape {
  int size = 0;
};

namespace impl {

// shape with the backend's choice made on a GPU: gpu_size threads a team
// (team_lanes unless a kernel's team walks more items at once). On the
// host a size of 0 stays Kokkos::AUTO's choice; a team's size never
// changes team_sum's bits, so this is no kernel path.
template <class ExecSpace>
TeamShape gpu_team_shape(TeamShape shape, int gpu_size) {
  if constexpr (!Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible)
    if (shape.size <= 0) shape.size = gpu_size;
  return shape;
}

// A team policy over `league` teams on exec with `scratch_bytes` of level-0
// scratch per team.
template <class ExecSpace>
Kokkos::TeamPolicy<ExecSpace> team_policy(const ExecSpace& exec, std::int64_t league,
                                          TeamShape shape, std::size_t scratch_bytes = 0) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  const int size = gpu_team_shape<ExecSpace>(shape, team_lanes).size;
  Policy policy = size > 0 ? Policy(exec, static_cast<int>(league), size)
                           : Policy(exec, static_cast<int>(league), Kokkos::AUTO);
  if (scratch_bytes > 0) policy.set_scratch_size(0, Kokkos::PerTeam(scratch_bytes));
  return policy;
}

// The largest team a team kernel without scratch may have on exec (the
// tests run team kernels at every size up to it).
template <class ExecSpace>
int team_size_max(const ExecSpace& exec) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  return Kokkos::TeamPolicy<ExecSpace>(exec, 1, 1)
      .team_size_max(KOKKOS_LAMBDA(const Member&){}, Kokkos::ParallelForTag());
}

// Level-0 scratch bytes team_sum needs for values of type V.
template <class V>
KOKKOS_INLINE_FUNCTION constexpr std::size_t team_sum_bytes() {
  // Rounded up to 8 bytes, so that a second scratch array after it stays aligned.
  return (team_lanes * sizeof(V) + 7) / 8 * 8;
}

// The team's sum of term(i) for i < count (V: float, double or a struct of
// them with += and a zero default), returned to every thread of the team.
// lanes: team_sum_bytes<V>() of the team's scratch, reused by each call.
// term(i) is called once per i, by one thread.
template <class V, class Member, class Term>
KOKKOS_INLINE_FUNCTION V team_sum(const Member& member, V* lanes, std::int64_t count,
                                  const Term& term) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, team_lanes), [&](const int l) {
    V sum{};
    for (std::int64_t i = l; i < count; i += team_lanes) sum += term(i);
    lanes[l] = sum;
  });
  member.team_barrier();
  for (int width = team_lanes / 2; width > 0; width /= 2) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, width),
                         [&](const int l) { lanes[l] += lanes[l + width]; });
    member.team_barrier();
  }
  const V total = lanes[0];
  member.team_barrier();  // every thread has read lanes[0] before the next call writes it
  return total;
}

// team_sum's lanes, taken from the team's level-0 scratch (which hands out
// its bytes in the order of the calls).
template <class V, class Member>
KOKKOS_INLINE_FUNCTION V* team_lanes_scratch(const Member& member) {
  return static_cast<V*>(member.team_scratch(0).get_shmem(team_sum_bytes<V>()));
}

}  // namespace impl
}  // namespace tessera::kernels
