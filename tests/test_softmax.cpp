// Softmax: kernel values against a naive host loop along dimension 1 of
// feature vectors and images, numerical stability for large inputs, the
// backward formula, the GPU's team per row at every team size, layer
// gradients on feature vectors, and shape errors.
#include <tessera/kernels/softmax.hpp>
#include <tessera/layers/softmax.hpp>

#include <cmath>
#include <string>

#include "layer_check.hpp"
#include "team_sizes.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class SoftmaxKernels : public ::testing::Test {};
TYPED_TEST_SUITE(SoftmaxKernels, test::ExecSpaces);

template <class E>
using V = Kokkos::View<float*, Kokkos::LayoutRight, typename E::memory_space>;

// softmax over c of x[(n * C + c) * S + s], in double.
std::vector<double> reference(const std::vector<float>& x, const kernels::SoftmaxLayout& l) {
  std::vector<double> y(x.size());
  for (std::int64_t n = 0; n < l.batch; ++n)
    for (std::int64_t s = 0; s < l.positions; ++s) {
      double max = -1e300, sum = 0;
      const auto at = [&](std::int64_t c) { return (n * l.classes + c) * l.positions + s; };
      for (std::int64_t c = 0; c < l.classes; ++c) max = std::max(max, double(x[at(c)]));
      for (std::int64_t c = 0; c < l.classes; ++c) sum += std::exp(x[at(c)] - max);
      for (std::int64_t c = 0; c < l.classes; ++c) y[at(c)] = std::exp(x[at(c)] - max) / sum;
    }
  return y;
}

TYPED_TEST(SoftmaxKernels, ForwardAndBackwardMatchReferences) {
  using E = TypeParam;
  for (const kernels::SoftmaxLayout l :
       {kernels::SoftmaxLayout{4, 5, 1}, kernels::SoftmaxLayout{2, 3, 6}}) {
    V<E> x("x", l.size()), y("y", l.size()), dy("dy", l.size()), dx("dx", l.size());
    auto xh = test::random_values(l.size(), 1, -3.0f, 3.0f);
    xh[0] = 1000.0f;  // exp(1000) overflows: the maximum must be subtracted first
    test::from_host(x, xh);
    const auto dyh = test::random_values(l.size(), 2), start = test::random_values(l.size(), 3);
    test::from_host(dy, dyh);
    test::from_host(dx, start);
    kernels::softmax_forward(E(), l, x, y);
    kernels::softmax_backward(E(), l, y, dy, dx);
    const auto expected = reference(xh, l);
    const auto yh = test::to_host(y), dxh = test::to_host(dx);
    for (std::size_t i = 0; i < yh.size(); ++i) EXPECT_NEAR(yh[i], expected[i], 1e-6) << "y " << i;
    // dx = start + y (dy - sum_c dy y), per row.
    for (std::int64_t n = 0; n < l.batch; ++n)
      for (std::int64_t s = 0; s < l.positions; ++s) {
        const auto at = [&](std::int64_t c) { return (n * l.classes + c) * l.positions + s; };
        double dot = 0;
        for (std::int64_t c = 0; c < l.classes; ++c) dot += dyh[at(c)] * expected[at(c)];
        for (std::int64_t c = 0; c < l.classes; ++c)
          EXPECT_NEAR(dxh[at(c)], start[at(c)] + expected[at(c)] * (dyh[at(c)] - dot), 1e-5)
              << at(c);
      }
  }
}

// The GPU's kernels for rows of contiguous classes (a team per row, sums
// through team_sum): the same bits at every team size, and close to the
// double-precision reference; rows shorter than, as long as and longer
// than team_sum's 64 lanes, and one of 1000 classes.
TYPED_TEST(SoftmaxKernels, TeamsSameBitsForEveryTeamSizeAndCloseToDouble) {
  using E = TypeParam;
  for (const std::int64_t classes : {1, 5, 64, 65, 1000}) {
    SCOPED_TRACE(std::to_string(classes) + " classes");
    const kernels::SoftmaxLayout l{3, classes, 1};
    V<E> x("x", l.size()), dy("dy", l.size());
    auto xh = test::random_values(l.size(), 21, -3.0f, 3.0f);
    xh[l.size() - 1] = 1000.0f;  // the last row's maximum, in its last class
    const auto dyh = test::random_values(l.size(), 22), start = test::random_values(l.size(), 23);
    test::from_host(x, xh);
    test::from_host(dy, dyh);
    const auto expected = reference(xh, l);
    std::vector<float> first_y, first_dx;
    for (const kernels::TeamShape team : test::team_shapes<E>()) {
      V<E> y("y", l.size()), dx("dx", l.size());
      test::from_host(dx, start);
      kernels::impl::softmax_forward_teams(E(), l, x, y, team);
      // Backward from the reference probabilities, so that its check does
      // not inherit forward's rounding.
      V<E> y_ref("y_ref", l.size());
      test::from_host(y_ref, std::vector<float>(expected.begin(), expected.end()));
      kernels::impl::softmax_backward_teams(E(), l, y_ref, dy, dx, team);
      const auto yh = test::to_host(y), dxh = test::to_host(dx);
      if (first_y.empty()) {
        first_y = yh;
        first_dx = dxh;
        for (std::size_t i = 0; i < yh.size(); ++i)
          EXPECT_NEAR(yh[i], expected[i], 1e-6) << "y " << i;
        for (std::int64_t n = 0; n < l.batch; ++n) {
          double dot = 0, magnitude = 0;
          for (std::int64_t c = 0; c < classes; ++c) {
            const float p = static_cast<float>(expected[n * classes + c]);
            dot += double(dyh[n * classes + c]) * p;
            magnitude += std::abs(double(dyh[n * classes + c]) * p);
          }
          for (std::int64_t c = 0; c < classes; ++c) {
            const std::int64_t i = n * classes + c;
            const float p = static_cast<float>(expected[i]);
            EXPECT_NEAR(dxh[i], start[i] + p * (dyh[i] - dot), 1e-6 * (1 + magnitude)) << i;
          }
        }
      } else {
        EXPECT_EQ(yh, first_y) << "team size " << team.size;
        EXPECT_EQ(dxh, first_dx) << "team size " << team.size;
      }
    }
  }
}

TEST(Softmax, GradientsMatchFiniteDifferences) {
  Softmax softmax("softmax");
  test::LayerHarness h(softmax, {Shape{3, 6}});
  EXPECT_EQ(h.output.shape(), (Shape{3, 6}));
  h.expect_gradients();
}

TEST(Softmax, ErrorsNameLayerAndShape) {
  Softmax softmax("probs");
  test::expect_error(
      [&] { softmax.output_shape({Shape{8}}); },
      "tessera::Softmax 'probs': input [8] needs a batch dimension and at least one class");
  V<Kokkos::DefaultExecutionSpace> small("x", 5), y("y", 6);
  test::expect_error(
      [&] {
        kernels::softmax_forward(Kokkos::DefaultExecutionSpace(), kernels::SoftmaxLayout{2, 3, 1},
                                 small, y);
      },
      "tessera::kernels::softmax_forward: views of 5 elements for a softmax over [2, 3, 1] (6 "
      "elements");
}

// In bf16 and fp16 each probability is the float result rounded once
// (within u).
// Backward reads the rounded probabilities: dx_i = y_i (dy_i - sum_j y_j
// dy_j) then errs by u |dx_i| from y_i's rounding, by u y_i sum_j y_j |dy_j|
// <= u max|dy| from the sum's, and by u |dx_i| from its own rounding: 2u
// relative to dx_i, plus u max|dy|. The harness draws dy from [-1, 1]
// (max|dy| 0.95 here), and the largest |dx| of these cases is 0.26 and
// 0.42, so u max|dy| is within 4u of the largest |dx|.
template <class T>
void expect_softmax_16bit() {
  for (const Shape& shape : {Shape{4, 7}, Shape{2, 3, 2, 2}}) {
    SCOPED_TRACE(to_string(shape));
    Softmax a("softmax"), b("softmax");
    test::expect_16bit_matches_float<T>(a, b, {shape}, {}, 1e-5, 2.0, {},
                                        4 * test::unit_roundoff<T>());
  }
}

TEST(Softmax, Bf16AndFp16AreTheFloatResultsRoundedOnce) {
  expect_softmax_16bit<bf16>();
  expect_softmax_16bit<fp16>();
}

}  // namespace
