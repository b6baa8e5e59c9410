// Reductions over flat buffers whose result is bitwise identical for any
// thread count and backend: fixed-size chunks are each summed in
// sum_lanes interleaved partial sums (in parallel over chunks; one serial
// chain per chunk was bound by the latency of one add after another),
// then the chunk sums are added in chunk order. Accumulation is in double. Also the rescaling that
// gradient clipping applies with the result.
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/impl/lanes.hpp>
#include <tessera/kernels/impl/launch.hpp>

#include <cstdint>
#include <type_traits>
#include <vector>

namespace tessera::kernels {

// Part of the result's definition: changing it changes the rounding.
constexpr std::int64_t deterministic_chunk = 1024;

// Partial sums lane_sum keeps; part of its result's definition.
constexpr int sum_lanes = 8;

#ifdef TESSERA_HOST_VECTORS
namespace impl {
static_assert(sum_lanes == 8, "the host's lane sums hold sum_lanes floats in one EightFloats");
// The pairwise adds (and comparisons) that end lane_sum and lane_max, on
// the eight partial results as one vector: GCC's vectorised loops wrote
// the lanes to the stack and read them back, a stall a row (the
// attention's rows of 16 to 128 scores).
inline float lane_total(EightFloats x) {
  x += __builtin_shufflevector(x, x, 4, 5, 6, 7, 4, 5, 6, 7);
  x += __builtin_shufflevector(x, x, 2, 3, 2, 3, 2, 3, 2, 3);
  return x[0] + x[1];
}
inline float lane_largest(EightFloats x) {
  EightFloats s = __builtin_shufflevector(x, x, 4, 5, 6, 7, 4, 5, 6, 7);
  x = s > x ? s : x;
  s = __builtin_shufflevector(x, x, 2, 3, 2, 3, 2, 3, 2, 3);
  x = s > x ? s : x;
  return x[1] > x[0] ? x[1] : x[0];
}
}  // namespace impl
#else
namespace impl {
// lane_total's adds, one lane at a time.
inline float lane_total(EightFloats x) {
  for (int width = sum_lanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) x[l] += x[l + width];
  return x[0];
}
}  // namespace impl
#endif

// Sum of term(i) over [0, n) in lane_sum's lanes and order (term(i) goes
// to partial sum i % sum_lanes): for terms computed on the way, e.g. the
// exponentials of a softmax, without a row to hold them.
template <class A, class Term>
KOKKOS_INLINE_FUNCTION A lane_sum_of(std::int64_t n, const Term& term) {
  A lane[sum_lanes] = {};
  std::int64_t i = 0;
  for (; i + sum_lanes <= n; i += sum_lanes)
    for (int l = 0; l < sum_lanes; ++l) lane[l] += term(i + l);
  for (int l = 0; i + l < n; ++l) lane[l] += term(i + l);
  for (int width = sum_lanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

// Sum of v[0, n) in a fixed order that does not wait on one accumulator:
// element i goes to partial sum i % sum_lanes, and the partial sums are
// added pairwise at the end. The adds vectorise, and the result is the same
// for any thread count and backend (a serial sum of a long row is bound by
// the latency of one add after another). 16-bit values are summed widened
// (accumulator_t), as the same values copied into a float row would be.
template <class T>
KOKKOS_INLINE_FUNCTION accumulator_t<T> lane_sum(const T* v, std::int64_t n) {
#ifdef TESSERA_HOST_VECTORS
  if constexpr (std::is_same<T, float>::value) {
    impl::EightFloats lane = {};
    std::int64_t i = 0;
    for (; i + sum_lanes <= n; i += sum_lanes) lane += impl::load_lanes<impl::EightFloats>(v + i);
    for (int l = 0; i + l < n; ++l) lane[l] += v[i + l];
    return impl::lane_total(lane);
  }
#endif
  return lane_sum_of<accumulator_t<T>>(n, [&](std::int64_t i) { return widen(v[i]); });
}

// The largest of v[0, n) (n > 0), in lane_sum's lanes so that the
// comparisons vectorise (one running maximum waits on the last compare).
// The maximum does not depend on the order, but for the sign of a zero
// maximum (+0 and -0 compare equal), which x - max does not see.
KOKKOS_INLINE_FUNCTION float lane_max(const float* v, std::int64_t n) {
#ifdef TESSERA_HOST_VECTORS
  const float first = v[0];
  impl::EightFloats lane = {first, first, first, first, first, first, first, first};
  std::int64_t i = 0;
  for (; i + sum_lanes <= n; i += sum_lanes) {
    const auto x = impl::load_lanes<impl::EightFloats>(v + i);
    lane = x > lane ? x : lane;
  }
  for (int l = 0; i + l < n; ++l) lane[l] = v[i + l] > lane[l] ? v[i + l] : lane[l];
  return impl::lane_largest(lane);
#else
  float lane[sum_lanes];
  for (int l = 0; l < sum_lanes; ++l) lane[l] = v[0];
  std::int64_t i = 0;
  for (; i + sum_lanes <= n; i += sum_lanes)
    for (int l = 0; l < sum_lanes; ++l) lane[l] = v[i + l] > lane[l] ? v[i + l] : lane[l];
  for (int l = 0; i + l < n; ++l) lane[l] = v[i + l] > lane[l] ? v[i + l] : lane[l];
  for (int width = sum_lanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] = lane[l + width] > lane[l] ? lane[l + width] : lane[l];
  return lane[0];
#endif
}

// a[i] * b[i] summed over [0, n) in lane_sum's order: product i goes to
// partial sum i % sum_lanes. The products and adds vectorise without
// reassociating anything (a plain dot product loop does not, as its one
// accumulator makes each add wait on the last).
template <class T>
KOKKOS_INLINE_FUNCTION T lane_dot(const T* a, const T* b, std::int64_t n) {
  T lane[sum_lanes] = {};
  std::int64_t i = 0;
  for (; i + sum_lanes <= n; i += sum_lanes)
    for (int l = 0; l < sum_lanes; ++l) lane[l] += a[i + l] * b[i + l];
  for (int l = 0; i + l < n; ++l) lane[l] += a[i + l] * b[i + l];
  for (int width = sum_lanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

// Sum of v[i]^2 over [0, n) in double, in the lanes and order of lane_sum.
template <class T>
KOKKOS_INLINE_FUNCTION double lane_sum_squares(const T* v, std::int64_t n) {
  double lane[sum_lanes] = {};
  std::int64_t i = 0;
  for (; i + sum_lanes <= n; i += sum_lanes)
    for (int l = 0; l < sum_lanes; ++l) lane[l] += static_cast<double>(v[i + l]) * v[i + l];
  for (int l = 0; i + l < n; ++l) lane[l] += static_cast<double>(v[i + l]) * v[i + l];
  for (int width = sum_lanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

// Scratch elements deterministic_sum_squares needs for n inputs:
// one per chunk, plus the total.
inline std::int64_t deterministic_sum_scratch(std::int64_t n) {
  return (n + deterministic_chunk - 1) / deterministic_chunk + 1;
}

// The sums of squares of x's chunks of deterministic_chunk elements (the
// last one partial), into scratch(0) to scratch(chunks - 1); returns the
// number of chunks. Buffers that split at chunk boundaries give the chunk
// sums of the whole buffer piece by piece.
template <class ExecSpace, class X, class S>
std::int64_t deterministic_chunk_sums_squares(const ExecSpace& exec, const X& x, const S& scratch) {
  const std::int64_t n = static_cast<std::int64_t>(x.size());
  const std::int64_t chunks = deterministic_sum_scratch(n) - 1;
  TESSERA_REQUIRE(static_cast<std::int64_t>(scratch.size()) >= chunks + 1,
                  "tessera::kernels::deterministic_sum_squares: scratch holds "
                      << scratch.size() << " doubles; " << chunks + 1 << " needed for " << n
                      << " elements");
  const std::int64_t chunk = deterministic_chunk;
  // x read, one sum written per chunk; a multiply-add an element and each
  // chunk's lanes added pairwise.
  const Work work{bytes_of<typename X::value_type>(n) + bytes_of<typename S::value_type>(chunks),
                  2.0 * n + (sum_lanes - 1.0) * chunks,
                  "one item per chunk of 1024 elements: the chunks are part of the sum's rounding"};
  impl::parallel_for(
      "tessera::kernels::sum_squares_chunks", Kokkos::RangePolicy<ExecSpace>(exec, 0, chunks), work,
      KOKKOS_LAMBDA(const std::int64_t c) {
        const std::int64_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        scratch(c) = lane_sum_squares(x.data() + c * chunk, end - c * chunk);
      });
  return chunks;
}

// The same chunk sums on the host, for callers that add other ranks' to
// them before taking the total in chunk order.
template <class ExecSpace, class X, class S>
std::vector<double> deterministic_chunk_sums_squares_on_host(const ExecSpace& exec, const X& x,
                                                             const S& scratch) {
  const std::int64_t chunks = deterministic_chunk_sums_squares(exec, x, scratch);
  std::vector<double> sums(static_cast<std::size_t>(chunks));
  exec.fence();
  Kokkos::deep_copy(Kokkos::View<double*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                        sums.data(), sums.size()),
                    Kokkos::subview(scratch, std::pair<std::int64_t, std::int64_t>(0, chunks)));
  return sums;
}

// Sum of x(i)^2 in double; scratch holds at least deterministic_sum_scratch(n)
// doubles in x's memory space. Non-finite inputs give a non-finite sum.
template <class ExecSpace, class X, class S>
double deterministic_sum_squares(const ExecSpace& exec, const X& x, const S& scratch) {
  ScopedRegion region("tessera::kernels::deterministic_sum_squares");
  const std::int64_t chunks = deterministic_chunk_sums_squares(exec, x, scratch);
  // The chunk sums read and added in chunk order, the total written.
  impl::parallel_for(
      "tessera::kernels::sum_squares_total", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1),
      Work{bytes_of<typename S::value_type>(chunks + 1), static_cast<double>(chunks)},
      KOKKOS_LAMBDA(const int) {
        double total = 0;
        for (std::int64_t c = 0; c < chunks; ++c) total += scratch(c);
        scratch(chunks) = total;
      });
  double total = 0;
  const Kokkos::View<double, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> total_host(&total);
  exec.fence();
  Kokkos::deep_copy(total_host, Kokkos::subview(scratch, chunks));
  return total;
}

// Allocates its own scratch; for calls outside a hot loop.
template <class ExecSpace, class X>
double deterministic_sum_squares(const ExecSpace& exec, const X& x) {
  const Kokkos::View<double*, typename X::memory_space> scratch(
      "tessera::kernels::deterministic_sum_squares::scratch",
      deterministic_sum_scratch(static_cast<std::int64_t>(x.size())));
  return deterministic_sum_squares(exec, x, scratch);
}

// x *= factor.
template <class ExecSpace, class X>
void scale_in_place(const ExecSpace& exec, const X& x, double factor) {
  ScopedRegion region("tessera::kernels::scale_in_place");
  using T = typename X::non_const_value_type;
  const T f = static_cast<T>(factor);
  const std::int64_t n = x.size();
  // x read and written, one multiply an element.
  const Work work{2 * bytes_of<T>(n), static_cast<double>(n)};
  impl::for_each_span(
      exec, "tessera::kernels::scale_in_place", n, work,
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        T* v = x.data();
        for (std::int64_t i = begin; i < end; ++i) v[i] *= f;
      });
}

}  // namespace tessera::kernels
