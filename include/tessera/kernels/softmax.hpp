// Softmax along dimension 1 of [N, C, S] data (S = 1 for [N, C]; the
// positions of an image): y(n, :, s) = exp(x - max) / sum exp(x - max), and
// its backward dx += y * (dy - sum_c dy * y). Backward accumulates into dx.
// The views may hold bf16 or fp16: the arithmetic is float, each y and each
// dx rounded once; the exponentials are taken twice (for the sum, then for
// y) rather than stored rounded.
//
// On the host, and on a GPU when S > 1 (neighbouring threads then read
// neighbouring positions), one thread per (n, s) row walks the C entries in
// order. On a GPU with S = 1 one thread per row would read strided and
// leave the GPU idle at a batch of 128, so a team takes a row
// (impl::softmax_*_teams): the maximum, the sums and the writes are spread
// over its threads, the sums through impl::team_sum. Either way the result
// does not depend on the thread count or the team size.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/host_paths.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/team.hpp>
#include <tessera/kernels/impl/team_max.hpp>

#include <cstdint>

namespace tessera::kernels {

// Rows of a softmax along dimension 1: `rows` = N * S of them, each of
// `classes` entries `stride` = S apart.
struct SoftmaxLayout {
  std::int64_t batch = 0, classes = 0, positions = 1;
  std::int64_t size() const { return batch * classes * positions; }
};

namespace impl {
template <class... Views>
void check_softmax(const char* fn, const SoftmaxLayout& l, const Views&... views) {
  const std::int64_t sizes[] = {static_cast<std::int64_t>(views.size())...};
  bool ok = l.classes > 0;
  for (auto s : sizes) ok = ok && s == l.size();
  TESSERA_REQUIRE(ok, fn << ": views of " << sizes[0] << " elements for a softmax over [" << l.batch
                         << ", " << l.classes << ", " << l.positions << "] (" << l.size()
                         << " elements, at least one class)");
}
}  // namespace impl

namespace impl {
// Work of a forward pass (either schedule): x read, y written; each element
// a subtraction, an exponential and an add for the sum, then a subtraction,
// an exponential and a product for its output.
template <class X, class Y>
Work softmax_forward_work(const SoftmaxLayout& l, const char* narrow = nullptr) {
  const std::int64_t n = l.size();
  return Work{
      bytes_of<typename X::non_const_value_type>(n) + bytes_of<typename Y::non_const_value_type>(n),
      6.0 * double(n), narrow};
}

// Of a backward pass: y and dy read, dx read and written; each element a
// multiply-add into the dot, then y (dy - dot) (two operations) added to dx.
template <class Y, class DY, class DX>
Work softmax_backward_work(const SoftmaxLayout& l, const char* narrow = nullptr) {
  const std::int64_t n = l.size();
  return Work{bytes_of<typename Y::non_const_value_type>(n) +
                  bytes_of<typename DY::non_const_value_type>(n) +
                  2 * bytes_of<typename DX::non_const_value_type>(n),
              5.0 * double(n), narrow};
}

// Why a thread per row is all the rows schedule exposes.
constexpr const char* softmax_rows_narrow =
    "one thread per row: its maximum and sums go in order of class";

// One thread per row, the C entries in order.
template <class ExecSpace, class X, class Y>
void softmax_forward_rows(const ExecSpace& exec, const SoftmaxLayout& l, const X& x, const Y& y) {
  using T = typename Y::non_const_value_type;
  using A = accumulator_t<T>;
  const std::int64_t classes = l.classes, positions = l.positions;
  parallel_for(
      "tessera::kernels::softmax_forward",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, l.batch * positions),
      softmax_forward_work<X, Y>(l, softmax_rows_narrow), KOKKOS_LAMBDA(const std::int64_t row) {
        const std::int64_t first = (row / positions) * classes * positions + row % positions;
        A max = widen(x(first));
        for (std::int64_t c = 1; c < classes; ++c) {
          const A v = widen(x(first + c * positions));
          max = v > max ? v : max;
        }
        A sum = 0;
        for (std::int64_t c = 0; c < classes; ++c)
          sum += compat::exp(widen(x(first + c * positions)) - max);
        const A inverse = A(1) / sum;
        for (std::int64_t c = 0; c < classes; ++c)
          y(first + c * positions) =
              narrow<T>(compat::exp(widen(x(first + c * positions)) - max) * inverse);
      });
}

template <class ExecSpace, class Y, class DY, class DX>
void softmax_backward_rows(const ExecSpace& exec, const SoftmaxLayout& l, const Y& y, const DY& dy,
                           const DX& dx) {
  using A = accumulator_t<typename DX::non_const_value_type>;
  const std::int64_t classes = l.classes, positions = l.positions;
  parallel_for(
      "tessera::kernels::softmax_backward",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, l.batch * positions),
      softmax_backward_work<Y, DY, DX>(l, softmax_rows_narrow),
      KOKKOS_LAMBDA(const std::int64_t row) {
        const std::int64_t first = (row / positions) * classes * positions + row % positions;
        A dot = 0;
        for (std::int64_t c = 0; c < classes; ++c)
          dot += widen(dy(first + c * positions)) * widen(y(first + c * positions));
        for (std::int64_t c = 0; c < classes; ++c) {
          const std::int64_t i = first + c * positions;
          add_rounded(dx(i), widen(y(i)) * (widen(dy(i)) - dot));
        }
      });
}

// A team per row of contiguous classes (S = 1): the maximum (a NaN wins it),
// the sum of exponentials by team_sum, then the outputs, spread over the
// team's threads. Work items: N teams of the team size.
template <class ExecSpace, class X, class Y>
void softmax_forward_teams(const ExecSpace& exec, const SoftmaxLayout& l, const X& x, const Y& y,
                           TeamShape shape = {}) {
  using T = typename Y::non_const_value_type;
  using A = accumulator_t<T>;
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const std::int64_t classes = l.classes;
  parallel_for(
      "tessera::kernels::softmax_forward_teams",
      team_policy(exec, l.batch * l.positions, shape,
                  team_sum_bytes<MaxAt<A>>() + team_sum_bytes<A>()),
      softmax_forward_work<X, Y>(l), KOKKOS_LAMBDA(const Member& member) {
        MaxAt<A>* max_lanes = team_lanes_scratch<MaxAt<A>>(member);
        A* sum_lanes = team_lanes_scratch<A>(member);
        const std::int64_t first = member.league_rank() * classes;
        const A max = team_sum<MaxAt<A>>(member, max_lanes, classes, [&](const std::int64_t c) {
                        return MaxAt<A>{widen(x(first + c)), c};
                      }).value;
        const A sum = team_sum<A>(member, sum_lanes, classes, [&](const std::int64_t c) {
          return compat::exp(widen(x(first + c)) - max);
        });
        const A inverse = A(1) / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, classes), [&](const std::int64_t c) {
          y(first + c) = narrow<T>(compat::exp(widen(x(first + c)) - max) * inverse);
        });
      });
}

template <class ExecSpace, class Y, class DY, class DX>
void softmax_backward_teams(const ExecSpace& exec, const SoftmaxLayout& l, const Y& y, const DY& dy,
                            const DX& dx, TeamShape shape = {}) {
  using A = accumulator_t<typename DX::non_const_value_type>;
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const std::int64_t classes = l.classes;
  parallel_for(
      "tessera::kernels::softmax_backward_teams",
      team_policy(exec, l.batch * l.positions, shape, team_sum_bytes<A>()),
      softmax_backward_work<Y, DY, DX>(l), KOKKOS_LAMBDA(const Member& member) {
        const std::int64_t first = member.league_rank() * classes;
        const A dot = team_sum<A>(
            member, team_lanes_scratch<A>(member), classes,
            [&](const std::int64_t c) { return widen(dy(first + c)) * widen(y(first + c)); });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, classes), [&](const std::int64_t c) {
          const std::int64_t i = first + c;
          add_rounded(dx(i), widen(y(i)) * (widen(dy(i)) - dot));
        });
      });
}
}  // namespace impl

template <class ExecSpace, class X, class Y>
void softmax_forward(const ExecSpace& exec, const SoftmaxLayout& l, const X& x, const Y& y) {
  ScopedRegion region("tessera::kernels::softmax_forward");
  impl::check_softmax("tessera::kernels::softmax_forward", l, x, y);
  if (!host_fast_paths_v<ExecSpace> && l.positions == 1)
    impl::softmax_forward_teams(exec, l, x, y);
  else
    impl::softmax_forward_rows(exec, l, x, y);
}

template <class ExecSpace, class Y, class DY, class DX>
void softmax_backward(const ExecSpace& exec, const SoftmaxLayout& l, const Y& y, const DY& dy,
                      const DX& dx) {
  ScopedRegion region("tessera::kernels::softmax_backward");
  impl::check_softmax("tessera::kernels::softmax_backward", l, y, dy, dx);
  if (!host_fast_paths_v<ExecSpace> && l.positions == 1)
    impl::softmax_backward_teams(exec, l, y, dy, dx);
  else
    impl::softmax_backward_rows(exec, l, y, dy, dx);
}

}  // namespace tessera::kernels
