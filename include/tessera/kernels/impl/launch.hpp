// Every Tessera kernel is launched here, with the work it does: the bytes it
// moves and the floating-point operations it performs, written beside the
// kernel by its author. The launch notes them with the parallel work items
// of its policy for whoever is listening (tessera-bench's per-kernel report
// and its predicted GPU step), then hands the kernel to Kokkos unchanged.
// A launch costs a few stores into a thread-local record more than Kokkos'
// own; nothing is allocated or fenced.
//
// A structural test (scripts/check-layout.py launches) fails on a kernel
// launched around these functions: a Kokkos::parallel_for, _reduce or _scan
// at the top level (outside a team) anywhere else under include/ and src/.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/kernels/impl/team.hpp>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

namespace tessera::kernels {

// What one launch does, for the roofline bound of tessera-bench --predict.
// bytes: the memory traffic a GPU cannot avoid (every element read or
// written once from device memory; what stays in registers, team scratch
// or a cache line already loaded by the same kernel is not counted).
// flops: floating-point operations (a fused multiply-add is two).
// narrow: why the launch cannot expose a GPU's worth of parallel work,
// where it cannot (e.g. "one team per vocabulary row: the rows are the
// order of the sum"); the report prints it beside a kernel that moves more
// than 1 MB through fewer than 2^16 work items.
struct Work {
  double bytes = 0;
  double flops = 0;
  const char* narrow = nullptr;
};

// Bytes of n elements of T.
template <class T>
constexpr double bytes_of(std::int64_t n) {
  return static_cast<double>(n) * static_cast<double>(sizeof(T));
}

namespace impl {

// The last launch on this host thread, read by a Kokkos Tools listener in
// its begin-kernel callback (which runs on the launching thread, before
// the kernel).
struct LaunchRecord {
  std::int64_t work_items = 0;
  Work work;
  const void* instance = nullptr;  // instance_of() the space instance it runs on
  bool fresh = false;              // set by a launch, cleared by the listener that takes it
};

inline LaunchRecord& last_launch() {
  static thread_local LaunchRecord record;
  return record;
}

// Parallel work items of a policy: a range's length, the product of an
// MDRange's extents, or league x team threads. A host backend's team (its
// own choice of a few threads) counts team_lanes threads, the size a GPU
// build gives most team kernels (column_sums' teams take more there: a
// lower bound).
template <class Policy, class = void>
struct is_team_policy : std::false_type {};
template <class Policy>
struct is_team_policy<Policy, std::void_t<decltype(std::declval<const Policy&>().league_size())>>
    : std::true_type {};
template <class Policy, class = void>
struct is_md_range : std::false_type {};
template <class Policy>
struct is_md_range<Policy, std::void_t<decltype(std::declval<const Policy&>().m_upper)>>
    : std::true_type {};

template <class Policy>
std::int64_t work_items(const Policy& policy) {
  if constexpr (is_team_policy<Policy>::value) {
    using Space = typename Policy::execution_space;
    const int team = Kokkos::SpaceAccessibility<Space, Kokkos::HostSpace>::accessible
                         ? team_lanes
                         : policy.team_size();
    return static_cast<std::int64_t>(policy.league_size()) * team;
  } else if constexpr (is_md_range<Policy>::value) {
    std::int64_t items = 1;
    for (unsigned r = 0; r < Policy::rank; ++r)
      items *= static_cast<std::int64_t>(policy.m_upper[r] - policy.m_lower[r]);
    return items;
  } else {
    return static_cast<std::int64_t>(policy.end() - policy.begin());
  }
}

// The identity of an execution space instance (on a GPU, its stream's):
// Kokkos 4's internal instance; null on Kokkos 3.4, whose host backends
// have one instance each.
template <class ExecSpace>
const void* instance_of(const ExecSpace& exec) {
#if KOKKOS_VERSION >= 40000
  return exec.impl_internal_space_instance();
#else
  (void)exec;
  return nullptr;
#endif
}

// Notes a launch of `work` over `items` work items on `instance`; also the
// way in for work Kokkos launches on Tessera's behalf (a KokkosBlas
// product).
inline void note_launch(std::int64_t items, const Work& work, const void* instance = nullptr) {
  LaunchRecord& record = last_launch();
  record.work_items = items;
  record.work = work;
  record.instance = instance;
  record.fresh = true;
}

template <class Policy, class Functor>
void parallel_for(const std::string& label, const Policy& policy, const Work& work,
                  const Functor& functor) {
  note_launch(work_items(policy), work, instance_of(policy.space()));
  Kokkos::parallel_for(label, policy, functor);
}

template <class Policy, class Functor, class... Results>
void parallel_reduce(const std::string& label, const Policy& policy, const Work& work,
                     const Functor& functor, Results&&... results) {
  note_launch(work_items(policy), work, instance_of(policy.space()));
  Kokkos::parallel_reduce(label, policy, functor, std::forward<Results>(results)...);
}

template <class Policy, class Functor, class... Results>
void parallel_scan(const std::string& label, const Policy& policy, const Work& work,
                   const Functor& functor, Results&&... results) {
  note_launch(work_items(policy), work, instance_of(policy.space()));
  Kokkos::parallel_scan(label, policy, functor, std::forward<Results>(results)...);
}

// One part of a launch of team kernels: `league` teams, each running
// body(member, rank) for its rank in [0, league), with `scratch_bytes` of
// level-0 scratch. A body that reads member.league_rank() instead of rank
// would see its place in the whole launch: bodies take the rank.
template <class Body>
struct TeamPart {
  std::int64_t league = 0;
  std::size_t scratch_bytes = 0;
  Work work;
  Body body;
};

template <class Body>
TeamPart<Body> team_part(std::int64_t league, const Work& work, const Body& body,
                         std::size_t scratch_bytes = 0) {
  return TeamPart<Body>{league, scratch_bytes, work, body};
}

// The league ranks of a launch dealt to its parts in order: teams
// [0, league of the first) run the first body, the next the second, ...
template <class Member, class... Bodies>
struct TeamParts;
template <class Member, class Body>
struct TeamParts<Member, Body> {
  Body body;
  KOKKOS_INLINE_FUNCTION void run(const Member& member, std::int64_t rank) const {
    body(member, rank);
  }
};
template <class Member, class Body, class Next, class... Rest>
struct TeamParts<Member, Body, Next, Rest...> {
  std::int64_t league;
  Body body;
  TeamParts<Member, Next, Rest...> rest;
  KOKKOS_INLINE_FUNCTION void run(const Member& member, std::int64_t rank) const {
    if (rank < league)
      body(member, rank);
    else
      rest.run(member, rank - league);
  }
};
template <class Member, class Body>
TeamParts<Member, Body> chain_parts(const TeamPart<Body>& part) {
  return TeamParts<Member, Body>{part.body};
}
template <class Member, class Body, class Next, class... Rest>
TeamParts<Member, Body, Next, Rest...> chain_parts(const TeamPart<Body>& part,
                                                   const TeamPart<Next>& next,
                                                   const TeamPart<Rest>&... rest) {
  return TeamParts<Member, Body, Next, Rest...>{part.league, part.body,
                                                chain_parts<Member>(next, rest...)};
}

template <class Member, class Parts>
struct RunParts {
  Parts parts;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    parts.run(member, member.league_rank());
  }
};

// Independent team kernels in one launch (the kernels of a layer's pass
// that need nothing from each other: on a GPU a launch costs microseconds
// whatever it holds). One team policy of `shape` over the parts' leagues
// added, the largest scratch of any part, the parts' work added (the first
// part's narrow reason, else the next's). Parts may not depend on each
// other's results: their teams run in any order, at once.
template <class ExecSpace, class... Bodies>
void parallel_teams(const std::string& label, const ExecSpace& exec, TeamShape shape,
                    const TeamPart<Bodies>&... parts) {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  std::int64_t league = 0;
  std::size_t scratch = 0;
  Work work;
  const std::int64_t leagues[] = {parts.league...};
  const std::size_t scratches[] = {parts.scratch_bytes...};
  const Work works[] = {parts.work...};
  for (std::size_t i = 0; i < sizeof...(Bodies); ++i) {
    league += leagues[i];
    scratch = scratches[i] > scratch ? scratches[i] : scratch;
    work.bytes += works[i].bytes;
    work.flops += works[i].flops;
    if (work.narrow == nullptr) work.narrow = works[i].narrow;
  }
  if (league == 0) return;
  parallel_for(
      label, team_policy(exec, league, shape, scratch), work,
      RunParts<Member, decltype(chain_parts<Member>(parts...))>{chain_parts<Member>(parts...)});
}

// C = alpha op(A) op(B) + beta C through KokkosBlas (core/compat.hpp),
// noted as one launch of M x N work items (the outputs; how a library
// parallelises a product is its own): A, B and C read (C only where beta
// is not 0) and C written, 2 M N K FLOPs.
template <class ExecSpace, class AView, class BView, class CView>
void gemm(const ExecSpace& exec, const char transA[], const char transB[],
          typename AView::const_value_type alpha, const AView& A, const BView& B,
          typename CView::const_value_type beta, const CView& C) {
  const std::int64_t m = C.extent(0), n = C.extent(1);
  const std::int64_t k = transA[0] == 'N' ? A.extent(1) : A.extent(0);
  const double bytes = bytes_of<typename AView::value_type>(A.size()) +
                       bytes_of<typename BView::value_type>(B.size()) +
                       bytes_of<typename CView::value_type>(C.size()) * (beta == 0 ? 1 : 2);
  note_launch(m * n,
              Work{bytes, 2.0 * double(m) * double(n) * double(k),
                   m * n < (std::int64_t(1) << 16)
                       ? "a product's M x N outputs: the BLAS tiles them and splits K"
                       : nullptr},
              instance_of(exec));
  compat::gemm(exec, transA, transB, alpha, A, B, beta, C);
}

}  // namespace impl
}  // namespace tessera::kernels
