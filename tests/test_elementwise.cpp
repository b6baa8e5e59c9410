// The element-wise and row-wise sweeps (kernels/impl/elementwise.hpp) and
// the kernels built on them, against naive host loops at sizes below, at
// and around multiples of the host span: a ragged last span, rows cut into
// several spans, rows shorter than a span. Every element must be visited
// exactly once and get what the one-element-at-a-time definition gives.
#include <tessera/data/dataset.hpp>
#include <tessera/kernels/activation.hpp>
#include <tessera/kernels/adam.hpp>
#include <tessera/kernels/dense.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/reduce.hpp>
#include <tessera/kernels/sgd.hpp>
#include <tessera/kernels/tensor_ops.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class Elementwise : public ::testing::Test {};
TYPED_TEST_SUITE(Elementwise, test::ExecSpaces);

template <class E>
using V = Kokkos::View<float*, Kokkos::LayoutRight, typename E::memory_space>;
template <class E>
using M = Kokkos::View<float**, Kokkos::LayoutRight, typename E::memory_space>;

constexpr std::int64_t span = kernels::impl::host_span;
const std::int64_t sizes[] = {1, 7, span - 1, span, span + 1, 3 * span + 5};

// How often each element of [0, n) is visited (free functions: CUDA takes
// no device lambda inside a test body, a private member function).
template <class E>
std::vector<int> span_visits(std::int64_t n) {
  Kokkos::View<int*, typename E::memory_space> visits("visits", n);
  kernels::impl::for_each_span(
      E(), "test::spans", n, kernels::Work{},
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) visits(i) += 1;
      });
  return test::to_host(visits);
}

// The sum of (row + 1) over the visits of each element of rows x width.
template <class E>
std::vector<int> row_span_owners(std::int64_t rows, std::int64_t width) {
  Kokkos::View<int*, typename E::memory_space> owner("owner", rows * width);
  kernels::impl::for_each_row_span(
      E(), "test::row_spans", rows, width, kernels::Work{},
      KOKKOS_LAMBDA(const std::int64_t row, const std::int64_t begin, const std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) owner(row * width + i) += int(row) + 1;
      });
  return test::to_host(owner);
}

TYPED_TEST(Elementwise, SpansCoverEveryElementOnce) {
  for (const std::int64_t n : sizes) {
    const auto visits = span_visits<TypeParam>(n);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[i], 1) << "n " << n << ", element " << i;
  }
  for (const std::int64_t width : {std::int64_t(5), span, span + 3, 2 * span + 1}) {
    const std::int64_t rows = 3;
    const auto owner = row_span_owners<TypeParam>(rows, width);
    for (std::int64_t i = 0; i < rows * width; ++i)
      ASSERT_EQ(owner[i], i / width + 1) << "width " << width << ", element " << i;
  }
}

// On a host space the kernels run the reference's own code with the same
// compiler, and agree with it to the last bits the comparisons below allow.
// A device compiles the same arithmetic with its own compiler, which fuses
// other multiply-adds (nvcc fuses every a * b + c it finds): each fused
// operation differs by one rounding, so the results differ by a few units
// in the last place of the terms summed, not of the result (measured on an
// H100: GELU 5 units of its value where x * Phi(x) is small, SGD's velocity
// 6 units where momentum and gradient cancel). fused_roundings is 0 on the
// host (exact agreement) and, on a device, the roundings of the terms that
// such a difference may reach.
template <class E>
constexpr double fused_roundings = kernels::impl::runs_on_host<E> ? 0.0 : 16.0;

template <class E, class Op>
void expect_activation(const Op& op, std::int64_t n) {
  V<E> x("x", n), y("y", n), dy("dy", n), dx("dx", n);
  const auto xh = test::random_values(n, 11, -3.0f, 3.0f), dyh = test::random_values(n, 12),
             start = test::random_values(n, 13);
  test::from_host(x, xh);
  test::from_host(dy, dyh);
  test::from_host(dx, start);
  kernels::activation_forward(E(), op, x, y);
  kernels::activation_backward(E(), op, x, y, dy, dx);
  const auto yh = test::to_host(y), dxh = test::to_host(dx);
  const double eps = std::numeric_limits<float>::epsilon(), fused = fused_roundings<E>;
  for (std::int64_t i = 0; i < n; ++i) {
    const float value = op.value(xh[i]);
    if (fused == 0)
      ASSERT_FLOAT_EQ(yh[i], value) << Op::name << ", n " << n << ", element " << i;
    else
      ASSERT_NEAR(yh[i], value, fused * eps * std::abs(value))
          << Op::name << ", n " << n << ", element " << i;
    // dx + dy f'(x) rounds once where the compiler fuses the multiply-add
    // (FMA: -DTessera_HOST_ARCH=native) and twice where it does not, and
    // the sum can cancel: the two roundings bound the difference, relative
    // to the terms rather than to the result. On a device f'(x) has its
    // fused roundings too, relative to its own terms, which can cancel as
    // well (GELU's Phi(x) + x phi(x) for negative x) and are at most 1 + |x|
    // for these functions.
    const float product = dyh[i] * op.derivative(xh[i], value);
    ASSERT_NEAR(dxh[i], start[i] + product,
                2 * eps * (std::abs(start[i]) + std::abs(product)) +
                    fused * eps * std::abs(dyh[i]) * (1 + std::abs(xh[i])))
        << Op::name << ", n " << n << ", element " << i;
  }
}

TYPED_TEST(Elementwise, ActivationsMatchTheirDefinition) {
  for (const std::int64_t n : sizes) {
    expect_activation<TypeParam>(kernels::ReluOp{}, n);
    expect_activation<TypeParam>(kernels::LeakyReluOp{0.1f}, n);
    expect_activation<TypeParam>(kernels::GeluOp{}, n);
    expect_activation<TypeParam>(kernels::SigmoidOp{}, n);
  }
}

TYPED_TEST(Elementwise, CopyAccumulateAndScale) {
  using E = TypeParam;
  for (const std::int64_t n : sizes) {
    V<E> a("a", n), b("b", n);
    const auto ah = test::random_values(n, 21), bh = test::random_values(n, 22);
    test::from_host(a, ah);
    test::from_host(b, bh);
    kernels::copy_into(E(), a, b, true);
    auto got = test::to_host(b);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], bh[i] + ah[i]) << "n " << n;
    kernels::scale_in_place(E(), b, 0.5);
    got = test::to_host(b);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], (bh[i] + ah[i]) * 0.5f) << "n " << n;
    kernels::copy_into(E(), a, b, false);
    EXPECT_EQ(test::to_host(b), ah) << "n " << n;
  }
}

TYPED_TEST(Elementwise, OptimizerSweepsMatchTheUpdateRules) {
  using E = TypeParam;
  for (const std::int64_t n : sizes) {
    const auto p0 = test::random_values(n, 31), g = test::random_values(n, 32),
               s0 = test::random_values(n, 33), s1 = test::random_values(n, 34, 0.0f, 1.0f);
    // SGD with momentum, weight decay and Nesterov.
    SgdParams sgd;
    sgd.momentum = 0.9f;
    sgd.weight_decay = 0.01f;
    sgd.nesterov = true;
    V<E> p("p", n), grad("g", n), velocity("v", n);
    test::from_host(p, p0);
    test::from_host(grad, g);
    test::from_host(velocity, s0);
    kernels::sgd_step(E(), sgd, 0.1f, p, grad, velocity);
    auto ph = test::to_host(p), vh = test::to_host(velocity);
    const double eps = std::numeric_limits<float>::epsilon(), fused = fused_roundings<E>;
    for (std::int64_t i = 0; i < n; ++i) {
      const float gi = g[i] + 0.01f * p0[i], v = 0.9f * s0[i] + gi;
      const float pi = p0[i] - 0.1f * (gi + 0.9f * v);
      if (fused == 0) {
        ASSERT_FLOAT_EQ(vh[i], v) << "sgd, n " << n << ", element " << i;
        ASSERT_FLOAT_EQ(ph[i], pi) << "sgd, n " << n << ", element " << i;
        continue;
      }
      // A rounding of each multiply-add, relative to its terms; p also
      // carries v's difference, times 0.1 * 0.9.
      const double dv = 2 * eps * (0.9 * std::abs(s0[i]) + std::abs(g[i]) + 0.01 * std::abs(p0[i]));
      ASSERT_NEAR(vh[i], v, dv) << "sgd, n " << n << ", element " << i;
      ASSERT_NEAR(ph[i], pi,
                  3 * eps * (std::abs(p0[i]) + 0.1 * std::abs(gi) + 0.09 * std::abs(v)) + 0.09 * dv)
          << "sgd, n " << n << ", element " << i;
    }
    // AdamW, step 3.
    AdamParams adam;
    adam.weight_decay = 0.1f;
    V<E> m("m", n), v2("v2", n);
    test::from_host(p, p0);
    test::from_host(m, s0);
    test::from_host(v2, s1);
    kernels::adam_step(E(), adam, kernels::WeightDecay::decoupled, 0.01f, 3, p, grad, m, v2);
    ph = test::to_host(p);
    const auto mh = test::to_host(m), v2h = test::to_host(v2);
    const double step_size = 0.01 / (1 - std::pow(0.9, 3)),
                 correction = std::sqrt(1 - std::pow(0.999, 3));
    for (std::int64_t i = 0; i < n; ++i) {
      const double mi = 0.9 * s0[i] + 0.1 * g[i], vi = 0.999 * s1[i] + 0.001 * double(g[i]) * g[i];
      const double pi =
          p0[i] * (1 - 0.01 * 0.1) - step_size * mi / (std::sqrt(vi) / correction + 1e-8);
      ASSERT_NEAR(mh[i], mi, 1e-6) << "adam, n " << n << ", element " << i;
      ASSERT_NEAR(v2h[i], vi, 1e-6) << "adam, n " << n << ", element " << i;
      ASSERT_NEAR(ph[i], pi, 1e-5 * (1 + std::fabs(pi))) << "adam, n " << n << ", element " << i;
    }
  }
}

// Channels [1, 3) of a 4-channel tensor, planes below and above a span.
TYPED_TEST(Elementwise, ChannelBlockBothWays) {
  using E = TypeParam;
  for (const std::int64_t spatial : {std::int64_t(9), span / 2 + 1, span + 3}) {
    const std::int64_t batch = 3, narrow_channels = 2, wide_channels = 4, offset = 1;
    V<E> narrow("narrow", batch * narrow_channels * spatial),
        wide("wide", batch * wide_channels * spatial);
    const auto nh = test::random_values(narrow.size(), 41),
               wh = test::random_values(wide.size(), 42);
    test::from_host(narrow, nh);
    test::from_host(wide, wh);
    kernels::channel_block(E(), narrow, narrow_channels, wide, wide_channels, offset, batch,
                           spatial, false);
    const auto back = test::to_host(narrow);
    kernels::channel_block(E(), narrow, narrow_channels, wide, wide_channels, offset, batch,
                           spatial, true);
    const auto forth = test::to_host(wide);
    for (std::int64_t n = 0; n < batch; ++n)
      for (std::int64_t c = 0; c < wide_channels; ++c)
        for (std::int64_t s = 0; s < spatial; ++s) {
          const std::int64_t w = (n * wide_channels + c) * spatial + s;
          if (c < offset || c >= offset + narrow_channels) {
            ASSERT_EQ(forth[w], wh[w]) << "spatial " << spatial << ", outside the block";
            continue;
          }
          const std::int64_t i = (n * narrow_channels + c - offset) * spatial + s;
          ASSERT_EQ(back[i], nh[i] + wh[w]) << "spatial " << spatial << ", wide -> narrow";
          ASSERT_EQ(forth[w], back[i]) << "spatial " << spatial << ", narrow -> wide";
        }
  }
}

// The bias added per row and its gradient summed per column, over row
// widths of a few features up to several spans (tiles of 16 and a rest).
TYPED_TEST(Elementwise, DenseBiasAndBiasGradient) {
  using E = TypeParam;
  for (const std::int64_t out : {std::int64_t(5), std::int64_t(37), span + 21}) {
    const std::int64_t rows = 6, in = 2;
    M<E> x("x", rows, in), w("w", out, in), y("y", rows, out), dy("dy", rows, out),
        dw("dw", out, in);
    V<E> b("b", out), db("db", out);
    M<E> no_dx("dx", 0, 0);
    Kokkos::deep_copy(x, 0.0f);  // y is the bias alone
    const auto bh = test::random_values(out, 51), dyh = test::random_values(rows * out, 52),
               start = test::random_values(out, 53);
    test::from_host(b, bh);
    test::from_host(dy, dyh);
    test::from_host(db, start);
    kernels::dense_forward(E(), x, w, b, y);
    kernels::dense_backward(E(), x, w, dy, no_dx, dw, db);
    const auto yh = test::to_host(y), dbh = test::to_host(db);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < out; ++j)
        ASSERT_EQ(yh[i * out + j], bh[j]) << "out " << out << ", row " << i << ", feature " << j;
    for (std::int64_t j = 0; j < out; ++j) {
      float sum = 0;  // rows in order, as the kernel sums them
      for (std::int64_t i = 0; i < rows; ++i) sum += dyh[i * out + j];
      ASSERT_EQ(dbh[j], start[j] + sum) << "out " << out << ", feature " << j;
    }
  }
}

TEST(Elementwise, GatherBatchCopiesRowsLongerThanASpan) {
  const std::int64_t features = span + 9, samples = 4;
  const auto values = test::random_values(samples * features, 71);
  const Dataset data = test::make_dataset(Shape{features}, 3, values, std::vector<int>{0, 1, 2, 1});
  Vector<std::int64_t> order("order", 4);
  test::from_host(order, std::vector<std::int64_t>{3, 1, 0, 2});
  Tensor<float> batch("batch", Shape{3, features});
  Vector<int> labels("labels", 3);
  gather_batch(ExecSpace(), data, order, 1, batch, labels);
  const auto got = test::to_host(batch.flat());
  const std::int64_t picked[3] = {1, 0, 2};
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t f = 0; f < features; ++f)
      ASSERT_EQ(got[b * features + f], values[picked[b] * features + f]) << "row " << b;
  EXPECT_EQ(test::to_host(labels), (std::vector<int>{1, 0, 2}));
}

}  // namespace
