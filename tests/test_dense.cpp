// Dense kernels: values against a naive host reference, finite-difference
// gradients of input, weight and bias, accumulation, the layer with and
// without a bias, the GPU's bias gradient at every team size, and shape
// errors.
#include <tessera/kernels/dense.hpp>
#include <tessera/layers/dense.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "layer_check.hpp"
#include "team_sizes.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class DenseKernels : public ::testing::Test {};
TYPED_TEST_SUITE(DenseKernels, test::ExecSpaces);

template <class ExecSpace>
using M = Kokkos::View<float**, Kokkos::LayoutRight, typename ExecSpace::memory_space>;
template <class ExecSpace>
using V = Kokkos::View<float*, Kokkos::LayoutRight, typename ExecSpace::memory_space>;

TYPED_TEST(DenseKernels, ForwardMatchesNaiveReference) {
  using E = TypeParam;
  const int n = 5, in = 7, out = 3;
  M<E> x("x", n, in), w("w", out, in), y("y", n, out);
  V<E> b("b", out);
  const auto xh = test::random_values(n * in, 1), wh = test::random_values(out * in, 2),
             bh = test::random_values(out, 3);
  test::from_host(x, xh);
  test::from_host(w, wh);
  test::from_host(b, bh);
  kernels::dense_forward(E(), x, w, b, y);
  const auto yh = test::to_host(y);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o) {
      double ref = bh[o];
      for (int k = 0; k < in; ++k) ref += double(xh[i * in + k]) * wh[o * in + k];
      EXPECT_NEAR(yh[i * out + o], ref, 1e-5 * in) << "y(" << i << ", " << o << ")";
    }
}

TYPED_TEST(DenseKernels, BackwardMatchesFiniteDifferences) {
  using E = TypeParam;
  const int n = 4, in = 6, out = 5;
  M<E> x("x", n, in), w("w", out, in), y("y", n, out), dy("dy", n, out), dx("dx", n, in),
      dw("dw", out, in);
  V<E> b("b", out), db("db", out);
  test::from_host(x, test::random_values(n * in, 11));
  test::from_host(w, test::random_values(out * in, 12));
  test::from_host(b, test::random_values(out, 13));
  // L = sum(r .* y) for fixed r, so dL/dy = r.
  const auto r = test::random_values(n * out, 14);
  test::from_host(dy, r);
  const auto loss = [&]() {
    kernels::dense_forward(E(), x, w, b, y);
    const auto yh = test::to_host(y);
    double l = 0;
    for (std::size_t i = 0; i < yh.size(); ++i) l += double(r[i]) * yh[i];
    return l;
  };
  kernels::dense_backward(E(), x, w, dy, dx, dw, db);
  test::expect_gradient("dx", x, test::to_host(dx), loss);
  test::expect_gradient("dW", w, test::to_host(dw), loss);
  test::expect_gradient("db", b, test::to_host(db), loss);
}

TYPED_TEST(DenseKernels, BackwardAccumulatesParameterGradients) {
  using E = TypeParam;
  const int n = 3, in = 4, out = 2;
  M<E> x("x", n, in), w("w", out, in), dy("dy", n, out), dw("dw", out, in);
  V<E> db("db", out);
  test::from_host(x, test::random_values(n * in, 21));
  test::from_host(w, test::random_values(out * in, 22));
  test::from_host(dy, test::random_values(n * out, 23));
  M<E> no_dx;
  kernels::dense_backward(E(), x, w, dy, no_dx, dw, db);
  const auto once_w = test::to_host(dw);
  const auto once_b = test::to_host(db);
  kernels::dense_backward(E(), x, w, dy, no_dx, dw, db);
  const auto twice_w = test::to_host(dw);
  const auto twice_b = test::to_host(db);
  // dW goes through the vendor BLAS, which may round the accumulating call
  // differently from the first (another kernel path for beta = 1): each
  // result is within n * u * sum |term| of the exact sum (u = 2^-24), so
  // they agree to twice that. The bias sums are Tessera's own and exact.
  const auto xh = test::to_host(x), dyh = test::to_host(dy);
  const double u = std::numeric_limits<float>::epsilon() / 2;
  for (int o = 0; o < out; ++o)
    for (int k = 0; k < in; ++k) {
      double scale = 0;
      for (int i = 0; i < n; ++i) scale += std::fabs(double(dyh[i * out + o]) * xh[i * in + k]);
      EXPECT_NEAR(twice_w[o * in + k], 2 * once_w[o * in + k], 2 * 2 * n * u * scale);
    }
  for (std::size_t i = 0; i < once_b.size(); ++i) EXPECT_EQ(twice_b[i], 2 * once_b[i]);
}

// With write_dx, dx = dy W whatever it held (NaN here): the result of
// adding into a zeroed dx, within the BLAS's rounding (its beta = 0 call
// may take another kernel path than beta = 1), and the parameter
// gradients are still added to.
TYPED_TEST(DenseKernels, BackwardWritesTheInputGradientWhole) {
  using E = TypeParam;
  const int n = 6, in = 5, out = 4;
  M<E> x("x", n, in), w("w", out, in), dy("dy", n, out), added("added", n, in),
      written("written", n, in), dw_added("dw", out, in), dw_written("dw", out, in);
  V<E> db_added("db", out), db_written("db", out);
  test::from_host(x, test::random_values(n * in, 51));
  test::from_host(w, test::random_values(out * in, 52));
  test::from_host(dy, test::random_values(n * out, 53));
  Kokkos::deep_copy(written, std::numeric_limits<float>::quiet_NaN());
  kernels::dense_backward(E(), x, w, dy, added, dw_added, db_added);
  kernels::dense_backward(E(), x, w, dy, written, dw_written, db_written, true);
  const auto a = test::to_host(added), b = test::to_host(written);
  const auto wh = test::to_host(w), dyh = test::to_host(dy);
  const double u = std::numeric_limits<float>::epsilon() / 2;
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < in; ++k) {
      double scale = 0;
      for (int o = 0; o < out; ++o) scale += std::fabs(double(dyh[i * out + o]) * wh[o * in + k]);
      EXPECT_NEAR(b[i * in + k], a[i * in + k], 2 * out * u * scale)
          << "dx(" << i << ", " << k << ")";
    }
  EXPECT_EQ(test::to_host(dw_written), test::to_host(dw_added));
  EXPECT_EQ(test::to_host(db_written), test::to_host(db_added));
}

// The host's products in blocks of C's rows (impl::gemm_row_blocks, where
// the space and BLAS allow): shapes of several blocks with a short last
// one, in y, dx and dW alike, against a double-precision reference within
// the rounding bound k u sum |term| (u = 2^-24); the bias and the zeros of
// a written dx come before each block's product, an accumulated dx and dW
// keep what they held.
TYPED_TEST(DenseKernels, ProductsInRowBlocksMatchNaiveReference) {
  using E = TypeParam;
  const int n = 700, in = 37, out = 300;
  M<E> x("x", n, in), w("w", out, in), y("y", n, out), dy("dy", n, out), dx("dx", n, in),
      dw("dw", out, in);
  V<E> b("b", out), db("db", out);
  const auto xh = test::random_values(std::size_t(n) * in, 61),
             wh = test::random_values(std::size_t(out) * in, 62), bh = test::random_values(out, 63),
             dyh = test::random_values(std::size_t(n) * out, 64),
             dx0 = test::random_values(std::size_t(n) * in, 65),
             dw0 = test::random_values(std::size_t(out) * in, 66);
  test::from_host(x, xh);
  test::from_host(w, wh);
  test::from_host(b, bh);
  test::from_host(dy, dyh);
  if (kernels::impl::row_block_operands_v<E, M<E>, M<E>, M<E>> && thread_sgemm() != nullptr) {
    // The path under test runs here: several blocks for every product.
    const kernels::impl::RowBlocks rows(n, E().concurrency()), dw_rows(out, E().concurrency());
    EXPECT_GT(rows.count, 1);
    EXPECT_GT(dw_rows.count, 1);
  }
  const double u = std::numeric_limits<float>::epsilon() / 2;
  // start + the sum of term(k) for k < count in double, and the sum of the
  // magnitudes (start's included) that bounds the float result's error.
  struct Exact {
    double value, magnitude;
  };
  const auto exact = [](double start, int count, const auto& term) {
    Exact e{start, std::fabs(start)};
    for (int k = 0; k < count; ++k) {
      const double t = term(k);
      e.value += t;
      e.magnitude += std::fabs(t);
    }
    return e;
  };
  kernels::dense_forward(E(), x, w, b, y);
  const auto yh = test::to_host(y);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o) {
      const Exact e =
          exact(bh[o], in, [&](int k) { return double(xh[i * in + k]) * wh[o * in + k]; });
      ASSERT_NEAR(yh[std::size_t(i) * out + o], e.value, (in + 1) * u * e.magnitude)
          << "y(" << i << ", " << o << ")";
    }
  for (const bool write_dx : {true, false}) {
    SCOPED_TRACE(write_dx ? "dx written" : "dx accumulated");
    test::from_host(dx, dx0);
    test::from_host(dw, dw0);
    kernels::dense_backward(E(), x, w, dy, dx, dw, db, write_dx);
    const auto dxh = test::to_host(dx), dwh = test::to_host(dw);
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < in; ++k) {
        const std::size_t at = std::size_t(i) * in + k;
        const Exact e = exact(write_dx ? 0.0 : dx0[at], out, [&](int o) {
          return double(dyh[std::size_t(i) * out + o]) * wh[o * in + k];
        });
        ASSERT_NEAR(dxh[at], e.value, (out + 1) * u * e.magnitude)
            << "dx(" << i << ", " << k << ")";
      }
    for (int o = 0; o < out; ++o)
      for (int k = 0; k < in; ++k) {
        const std::size_t at = std::size_t(o) * in + k;
        const Exact e = exact(dw0[at], n, [&](int i) {
          return double(dyh[std::size_t(i) * out + o]) * xh[i * in + k];
        });
        ASSERT_NEAR(dwh[at], e.value, (n + 1) * u * e.magnitude) << "dW(" << o << ", " << k << ")";
      }
  }
}

// Blocks of at most 256 rows, multiples of 16, covering every row, as many
// on each thread where there are enough rows.
TEST(DenseRowBlocks, CoverTheRowsInWholeVectorsEvenlyOverTheThreads) {
  struct Case {
    std::int64_t m, threads, rows, count;
  };
  const Case cases[] = {{4096, 2, 256, 16}, {700, 2, 176, 4}, {512, 2, 256, 2},   {384, 2, 192, 2},
                        {128, 2, 64, 2},    {5, 2, 16, 1},    {4096, 1, 256, 16}, {300, 1, 160, 2},
                        {1, 8, 16, 1},      {0, 2, 0, 0}};
  for (const Case& c : cases) {
    const kernels::impl::RowBlocks blocks(c.m, c.threads);
    EXPECT_EQ(blocks.rows, c.rows) << c.m << " rows, " << c.threads << " threads";
    EXPECT_EQ(blocks.count, c.count) << c.m << " rows, " << c.threads << " threads";
    EXPECT_GE(blocks.rows * blocks.count, c.m);
    if (c.m > 0) EXPECT_LT(blocks.rows * (blocks.count - 1), c.m);
    EXPECT_LE(blocks.rows, kernels::impl::RowBlocks::max_rows);
  }
}

// An empty bias view: forward adds nothing, backward computes no bias sum.
TYPED_TEST(DenseKernels, WithoutBias) {
  using E = TypeParam;
  const int n = 4, in = 5, out = 3;
  M<E> x("x", n, in), w("w", out, in), dy("dy", n, out);
  V<E> zero_bias("b", out), none("none", 0);
  test::from_host(x, test::random_values(n * in, 31));
  test::from_host(w, test::random_values(out * in, 32));
  test::from_host(dy, test::random_values(n * out, 33));
  std::vector<std::vector<float>> ys, dxs, dws;
  for (const auto& b : {zero_bias, none}) {
    M<E> y("y", n, out), dx("dx", n, in), dw("dw", out, in);
    kernels::dense_forward(E(), x, w, b, y);
    kernels::dense_backward(E(), x, w, dy, dx, dw, b);
    ys.push_back(test::to_host(y));
    dxs.push_back(test::to_host(dx));
    dws.push_back(test::to_host(dw));
  }
  EXPECT_EQ(ys[0], ys[1]);
  EXPECT_EQ(dxs[0], dxs[1]);
  EXPECT_EQ(dws[0], dws[1]);
}

// The GPU's bias gradient (teams over blocks of 8 columns, 128 fixed chunks
// of rows): the same bits at every team size, within the rounding of its
// chunked sum of the double-precision column sums; for fewer rows than
// chunks, one chunk per row, blocks of columns with a rest, and no columns.
TYPED_TEST(DenseKernels, DeviceBiasGradientSameBitsForEveryTeamSizeAndCloseToDouble) {
  using E = TypeParam;
  const int shapes[][2] = {{1, 3}, {5, 10}, {130, 17}, {1000, 130}, {4096, 24}, {7, 0}};
  for (const auto& shape : shapes) {
    const int n = shape[0], out = shape[1];
    SCOPED_TRACE(std::to_string(n) + " rows, " + std::to_string(out) + " columns");
    M<E> dy("dy", n, out);
    const auto dyh = test::random_values(std::size_t(n) * out, 51);
    const auto start = test::random_values(out, 52);
    test::from_host(dy, dyh);
    std::vector<float> first;
    for (const kernels::TeamShape team : test::team_shapes<E>()) {
      V<E> db("db", out);
      test::from_host(db, start);
      kernels::impl::dense_bias_gradient_device(E(), dy, db, team);
      const auto dbh = test::to_host(db);
      if (first.empty() && team.size == 0) {
        first = dbh;
        // Each chunk's sum and the sum of the chunks and the start round at
        // most (n / 128 + 1) + 128 + 1 times: a bound on the error relative
        // to the sum of magnitudes.
        const double u = std::numeric_limits<float>::epsilon() / 2;
        for (int o = 0; o < out; ++o) {
          double sum = start[o], magnitude = std::abs(start[o]);
          for (int i = 0; i < n; ++i) {
            sum += dyh[std::size_t(i) * out + o];
            magnitude += std::abs(dyh[std::size_t(i) * out + o]);
          }
          EXPECT_NEAR(dbh[o], sum, (n / 128 + 130) * u * magnitude) << "column " << o;
        }
      } else {
        EXPECT_EQ(dbh, first) << "team size " << team.size;
      }
    }
  }
}

TYPED_TEST(DenseKernels, ShapeMismatchNamesFunctionAndShapes) {
  using E = TypeParam;
  M<E> x("x", 2, 3), w("w", 4, 5), y("y", 2, 4);
  V<E> b("b", 4);
  try {
    kernels::dense_forward(E(), x, w, b, y);
    FAIL() << "expected tessera::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tessera::kernels::dense_forward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("x [2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("W [4, 5]"), std::string::npos) << msg;
  }
}

TEST(Dense, GradientsMatchFiniteDifferences) {
  Dense dense("fc", 4);
  test::LayerHarness h(dense, {Shape{3, 2, 3}});
  EXPECT_EQ(h.output.shape(), (Shape{3, 4}));
  h.expect_gradients();
  Dense::Options options;
  options.units = 5;
  options.bias = false;
  Dense no_bias("fc_no_bias", options);
  test::LayerHarness hn(no_bias, {Shape{2, 6}}, 2);
  ASSERT_EQ(hn.parameters().entries().size(), 1u);
  EXPECT_EQ(hn.parameters().entries()[0].spec.name, "weight");
  EXPECT_EQ(no_bias.flops_per_sample({Shape{2, 6}}), 2 * 6 * 5);
  hn.expect_gradients();
}

// last_axis: the same weights at every position, [N, T, C] -> [N, T, units],
// against a host loop; and the gradients.
TEST(Dense, LastAxisActsOnEachPosition) {
  Dense::Options options;
  options.units = 4;
  options.last_axis = true;
  Dense dense("proj", options);
  const std::int64_t n = 2, t = 3, c = 5;
  test::LayerHarness h(dense, {Shape{n, t, c}});
  EXPECT_EQ(h.output.shape(), (Shape{n, t, 4}));
  ASSERT_EQ(h.parameters().entries().size(), 2u);
  EXPECT_EQ(h.parameters().entries()[0].spec.shape, (Shape{4, c}));
  EXPECT_EQ(dense.flops_per_sample({Shape{n, t, c}}), t * (2 * c * 4 + 4));
  h.forward();
  const auto x = test::to_host(h.inputs[0].flat()), y = test::to_host(h.output.flat());
  const auto w = test::to_host(h.parameters().value(0).flat());
  const auto b = test::to_host(h.parameters().value(1).flat());
  for (std::int64_t r = 0; r < n * t; ++r)
    for (std::int64_t u = 0; u < 4; ++u) {
      double sum = b[u], bound = std::abs(b[u]);
      for (std::int64_t k = 0; k < c; ++k) {
        sum += double(x[r * c + k]) * w[u * c + k];
        bound += std::abs(double(x[r * c + k]) * w[u * c + k]);
      }
      // Through the vendor BLAS: the rounding bound (c + 1) u sum |terms|.
      EXPECT_NEAR(y[r * 4 + u], sum, (c + 1) * 6e-8 * bound + 1e-7) << r << ", " << u;
    }
  h.expect_gradients();
}

// In bf16 and fp16 (x, W, y, dy and dx in the format, W a rounded copy of
// the float weights, products summed in float): every output and input
// gradient is the float layer's rounded once, the weight and bias gradients
// the float layer's; with and without a bias, on the last axis, and with
// 300 features (sums long enough to differ if anything summed in 16 bits).
template <class T>
void expect_dense_16bit() {
  Dense a("fc", 5), b("fc", 5);
  test::expect_16bit_matches_float<T>(a, b, {Shape{7, 2, 6}});
  Dense::Options options;
  options.units = 6;
  options.bias = false;
  options.last_axis = true;
  Dense c("proj", options), d("proj", options);
  test::expect_16bit_matches_float<T>(c, d, {Shape{3, 4, 5}});
  Dense e("wide", 33), f("wide", 33);
  test::expect_16bit_matches_float<T>(e, f, {Shape{9, 300}});
}

TEST(Dense, Bf16AndFp16AreTheFloatResultsRoundedOnce) {
  expect_dense_16bit<bf16>();
  expect_dense_16bit<fp16>();
}

// A 16-bit forward refuses tensors of another format than the one set.
TEST(Dense, RefusesAFormatOtherThanItsCompute) {
  Dense dense("fc", 2);
  test::LayerHarness h(dense, {Shape{1, 3}});
  TensorsOf<bf16> x{Tensor<bf16>("x", Shape{1, 3})};
  Tensor<bf16> y("y", Shape{1, 2});
  test::expect_error([&] { dense.forward16(x, y, {}); },
                     "called with bf16 tensors after set_compute(fp32)");
}

}  // namespace
