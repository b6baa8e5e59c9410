// kernels/impl/launch.hpp: a launch notes its policy's work items and the
// work its caller states before Kokkos begins the kernel (where a Kokkos
// Tools listener such as tessera-bench's reads them), runs the kernel
// unchanged, and a product through impl::gemm notes M x N items, the bytes
// of its operands and 2 M N K FLOPs.
#include <tessera/kernels/impl/launch.hpp>

#include <cstring>
#include <string>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class Launch : public ::testing::Test {};
TYPED_TEST_SUITE(Launch, test::ExecSpaces);

// What a listener saw at the beginning of the last kernel.
struct Seen {
  std::string label;
  bool fresh = false;
  std::int64_t items = 0;
  kernels::Work work;
};
Seen seen;

void remember_launch(const char* label, std::uint32_t, std::uint64_t*) {
  auto& record = kernels::impl::last_launch();
  seen = Seen{label, record.fresh, record.work_items, record.work};
  record.fresh = false;
}

// Listens to the begin-kernel callbacks for its lifetime.
struct LaunchListener {
  LaunchListener() {
    seen = Seen{};
    Kokkos::Tools::Experimental::set_begin_parallel_for_callback(&remember_launch);
    Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(&remember_launch);
  }
  ~LaunchListener() {
    Kokkos::Tools::Experimental::set_begin_parallel_for_callback(nullptr);
    Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(nullptr);
  }
};

// Free functions: CUDA takes no device lambda inside a test body.
template <class E>
std::vector<float> launch_range() {
  Kokkos::View<float*, typename E::memory_space> x("x", 1000);
  kernels::impl::parallel_for(
      "test_launch::range", Kokkos::RangePolicy<E>(E(), 10, 1000),
      kernels::Work{kernels::bytes_of<float>(990), 990, "why"},
      KOKKOS_LAMBDA(const std::int64_t i) { x(i) = float(i); });
  return test::to_host(x);
}

template <class E>
double launch_md_range() {
  double sum = 0;
  kernels::impl::parallel_reduce(
      "test_launch::md_range", Kokkos::MDRangePolicy<E, Kokkos::Rank<2>>(E(), {2, 0}, {7, 30}),
      kernels::Work{0, 150},
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j, double& s) { s += double(i * j); },
      sum);
  return sum;
}

// Adds 1 to teams(t) from team t of 12, teams of `shape`.
template <class E>
void launch_teams(const char* label, kernels::TeamShape shape,
                  const Kokkos::View<int*, typename E::memory_space>& teams) {
  using Member = typename Kokkos::TeamPolicy<E>::member_type;
  kernels::impl::parallel_for(
      label, kernels::impl::team_policy(E(), 12, shape), kernels::Work{},
      KOKKOS_LAMBDA(const Member& m) {
        Kokkos::single(Kokkos::PerTeam(m), [&] { teams(m.league_rank()) += 1; });
      });
}

// A part of a fused launch: hits(offset + rank) += 1 from its team
// `rank`, after every thread of the team has written its own slot of
// `scratch_floats` floats of scratch and read them back summed.
template <class Hits>
struct CountRanks {
  Hits hits;
  std::int64_t offset;
  int scratch_floats;
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& m, std::int64_t rank) const {
    int sum = 1;
    if (scratch_floats > 0) {
      auto* mine = static_cast<float*>(m.team_scratch(0).get_shmem(scratch_floats * sizeof(float)));
      Kokkos::parallel_for(Kokkos::TeamThreadRange(m, scratch_floats),
                           [&](const int i) { mine[i] = 1.0f; });
      m.team_barrier();
      float total = 0;
      for (int i = 0; i < scratch_floats; ++i) total += mine[i];
      sum = total == float(scratch_floats) ? 1 : 100;
    }
    Kokkos::single(Kokkos::PerTeam(m), [&] { hits(offset + rank) += sum; });
  }
};

// Three parts in one launch: 5 teams, none, 7 teams with 96 floats of
// scratch each; hits [0, 5) from the first, [5, 12) from the third.
template <class E>
std::vector<int> launch_parts(kernels::TeamShape shape) {
  using Hits = Kokkos::View<int*, typename E::memory_space>;
  Hits hits("hits", 12);
  namespace impl = kernels::impl;
  impl::parallel_teams(
      "test_launch::parts", E(), shape,
      impl::team_part(5, kernels::Work{10, 1}, CountRanks<Hits>{hits, 0, 0}),
      impl::team_part(0, kernels::Work{1000, 1000, "empty"}, CountRanks<Hits>{hits, 100, 0}),
      impl::team_part(7, kernels::Work{20, 2, "third"}, CountRanks<Hits>{hits, 5, 96},
                      96 * sizeof(float)));
  return test::to_host(hits);
}

TYPED_TEST(Launch, RangeNotesItsLengthAndWorkBeforeTheKernel) {
  using E = TypeParam;
  const LaunchListener listener;
  const auto host = launch_range<E>();
  EXPECT_EQ(seen.label, "test_launch::range");
  EXPECT_TRUE(seen.fresh);
  EXPECT_EQ(seen.items, 990);
  EXPECT_EQ(seen.work.bytes, 3960);
  EXPECT_EQ(seen.work.flops, 990);
  EXPECT_STREQ(seen.work.narrow, "why");
  EXPECT_EQ(host[9], 0.0f);
  EXPECT_EQ(host[10], 10.0f);
  EXPECT_EQ(host[999], 999.0f);
}

TYPED_TEST(Launch, MDRangeNotesTheProductOfItsExtents) {
  using E = TypeParam;
  const LaunchListener listener;
  const double sum = launch_md_range<E>();
  EXPECT_EQ(seen.label, "test_launch::md_range");
  EXPECT_EQ(seen.items, 5 * 30);
  EXPECT_EQ(seen.work.flops, 150);
  EXPECT_EQ(seen.work.narrow, nullptr);
  EXPECT_EQ(sum, double((2 + 3 + 4 + 5 + 6) * (29 * 30 / 2)));
}

TYPED_TEST(Launch, TeamsNoteLeagueTimesTeam) {
  using E = TypeParam;
  const LaunchListener listener;
  Kokkos::View<int*, typename E::memory_space> teams("teams", 12);
  // A GPU's team counts its size; a host's team, of any size, counts the
  // team_lanes threads a GPU build gives it.
  const bool host = Kokkos::SpaceAccessibility<E, Kokkos::HostSpace>::accessible;
  launch_teams<E>("test_launch::fixed_team", kernels::TeamShape{1}, teams);
  EXPECT_EQ(seen.items, 12 * (host ? kernels::team_lanes : 1));
  launch_teams<E>("test_launch::chosen_team", kernels::TeamShape{}, teams);
  EXPECT_EQ(seen.label, "test_launch::chosen_team");
  EXPECT_EQ(seen.items, 12 * kernels::team_lanes);
  for (const int t : test::to_host(teams)) EXPECT_EQ(t, 2);
}

// Parts share one launch: each team runs the part its rank falls in, with
// the rank counted from the part's first team; the launch notes the
// leagues' sum and the parts' work added; every part gets the largest
// scratch. An empty part takes no team, but its stated work is still added.
TYPED_TEST(Launch, PartsShareOneLaunch) {
  using E = TypeParam;
  const LaunchListener listener;
  const bool host = Kokkos::SpaceAccessibility<E, Kokkos::HostSpace>::accessible;
  for (const int size : {0, 1, kernels::impl::team_size_max(E())}) {
    const std::vector<int> hits = launch_parts<E>(kernels::TeamShape{size});
    EXPECT_EQ(seen.label, "test_launch::parts");
    EXPECT_EQ(seen.items, 12 * (host || size == 0 ? kernels::team_lanes : size));
    EXPECT_EQ(seen.work.bytes, 1030);
    EXPECT_EQ(seen.work.flops, 1003);
    EXPECT_STREQ(seen.work.narrow, "empty");
    for (std::size_t t = 0; t < hits.size(); ++t) EXPECT_EQ(hits[t], 1) << "team " << t;
  }
}

TYPED_TEST(Launch, GemmNotesItsProductsAndOperands) {
  using E = TypeParam;
  using M = Kokkos::View<float**, Kokkos::LayoutRight, typename E::memory_space>;
  M a("a", 3, 4), b("b", 4, 5), c("c", 3, 5);
  Kokkos::deep_copy(a, 1.0f);
  Kokkos::deep_copy(b, 2.0f);
  for (const float beta : {0.0f, 1.0f}) {
    kernels::impl::last_launch() = {};
    kernels::impl::gemm(E(), "N", "N", 1.0f, a, b, beta, c);
    const auto& record = kernels::impl::last_launch();
    EXPECT_EQ(record.work_items, 15);
    EXPECT_EQ(record.work.bytes, 4.0 * (12 + 20 + (beta == 0 ? 15 : 30)));
    EXPECT_EQ(record.work.flops, 2.0 * 3 * 5 * 4);
  }
  // The transposed A of [K, M] = [4, 3] gives the same M x N and K.
  M at("at", 4, 3);
  kernels::impl::gemm(E(), "T", "N", 1.0f, at, b, 0.0f, c);
  EXPECT_EQ(kernels::impl::last_launch().work.flops, 2.0 * 3 * 5 * 4);
  for (const float v : test::to_host(c)) EXPECT_EQ(v, 0.0f);
}

}  // namespace
