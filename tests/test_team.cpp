// team_sum: the same bits for every team size the backend allows (and so
// for any thread count, which ctest varies), close to a double-precision
// reference, for counts below, at and above the lane count, and with two
// sums in one pass.
#include <tessera/kernels/impl/team.hpp>

#include <cmath>

#include "team_sizes.hpp"
#include "tessera_test.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class TeamSum : public ::testing::Test {};
TYPED_TEST_SUITE(TeamSum, test::ExecSpaces);

struct Moments {
  float sum = 0, squares = 0;
  KOKKOS_INLINE_FUNCTION Moments& operator+=(const Moments& o) {
    sum += o.sum;
    squares += o.squares;
    return *this;
  }
};

// Row r's sum and sum of squares of x[r * count, (r + 1) * count), by one
// team per row of `shape`'s size.
template <class E>
std::vector<float> team_row_moments(const std::vector<float>& x, std::int64_t rows,
                                    std::int64_t count, kernels::TeamShape shape) {
  using V = Kokkos::View<float*, typename E::memory_space>;
  V in("in", x.size()), out("out", 2 * rows);
  test::from_host(in, x);
  using Member = typename Kokkos::TeamPolicy<E>::member_type;
  Kokkos::parallel_for(
      "test_team_sum",
      kernels::impl::team_policy(E(), rows, shape, kernels::impl::team_sum_bytes<Moments>()),
      KOKKOS_LAMBDA(const Member& m) {
        const std::int64_t r = m.league_rank();
        Moments* lanes = kernels::impl::team_lanes_scratch<Moments>(m);
        const Moments s = kernels::impl::team_sum<Moments>(m, lanes, count, [&](std::int64_t i) {
          const float v = in(r * count + i);
          return Moments{v, v * v};
        });
        Kokkos::single(Kokkos::PerTeam(m), [&] {
          out(2 * r) = s.sum;
          out(2 * r + 1) = s.squares;
        });
      });
  return test::to_host(out);
}

TYPED_TEST(TeamSum, SameBitsForEveryTeamSizeAndCloseToDouble) {
  using E = TypeParam;
  for (const std::int64_t count : {0, 1, 5, 63, 64, 65, 1000, 100003}) {
    const std::int64_t rows = 3;
    const auto x = test::random_values(rows * count, 7, -1.0f, 1.0f);
    const auto automatic = team_row_moments<E>(x, rows, count, {});
    for (std::int64_t r = 0; r < rows; ++r) {
      double sum = 0, squares = 0, magnitude = 0;
      for (std::int64_t i = 0; i < count; ++i) {
        const double v = x[r * count + i];
        sum += v;
        squares += v * v;
        magnitude += std::abs(v);
      }
      // Each lane and tree level rounds once: far below count ulps of the magnitude.
      const double bound = 1e-6 * (magnitude + 1e-30) * std::sqrt(double(count) + 1);
      EXPECT_NEAR(automatic[2 * r], sum, bound) << "count " << count << " row " << r;
      EXPECT_NEAR(automatic[2 * r + 1], squares, 1e-6 * squares * std::sqrt(double(count) + 1))
          << "count " << count << " row " << r;
    }
    for (const kernels::TeamShape shape : test::team_shapes<E>()) {
      const auto fixed = team_row_moments<E>(x, rows, count, shape);
      for (std::size_t i = 0; i < fixed.size(); ++i)
        EXPECT_EQ(fixed[i], automatic[i])
            << "count " << count << " team size " << shape.size << " value " << i;
    }
  }
}

}  // namespace
