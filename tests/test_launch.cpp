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
