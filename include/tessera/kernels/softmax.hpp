// Softmax along dimension 1 of [N, C, S] data (S = 1 for [N, C]; the
// positions of an image): y(n, :, s) = exp(x - max) / sum exp(x - max), and
// its backward dx += y * (dy - sum_c dy * y). One thread per (n, s) row
// walks the C entries in order, so the result does not depend on the thread
// count. Backward accumulates into dx. The views may hold bf16 or fp16:
// the arithmetic is float, each y and each dx rounded once; the
// exponentials are taken twice (for the sum, then for y) rather than stored
// rounded.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>

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

template <class ExecSpace, class X, class Y>
void softmax_forward(const ExecSpace& exec, const SoftmaxLayout& l, const X& x, const Y& y) {
  ScopedRegion region("tessera::kernels::softmax_forward");
  impl::check_softmax("tessera::kernels::softmax_forward", l, x, y);
  using T = typename Y::non_const_value_type;
  using A = accumulator_t<T>;
  const std::int64_t classes = l.classes, positions = l.positions;
  Kokkos::parallel_for(
      "tessera::kernels::softmax_forward",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, l.batch * positions),
      KOKKOS_LAMBDA(const std::int64_t row) {
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
void softmax_backward(const ExecSpace& exec, const SoftmaxLayout& l, const Y& y, const DY& dy,
                      const DX& dx) {
  ScopedRegion region("tessera::kernels::softmax_backward");
  impl::check_softmax("tessera::kernels::softmax_backward", l, y, dy, dx);
  using A = accumulator_t<typename DX::non_const_value_type>;
  const std::int64_t classes = l.classes, positions = l.positions;
  Kokkos::parallel_for(
      "tessera::kernels::softmax_backward",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, l.batch * positions),
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

}  // namespace tessera::kernels
