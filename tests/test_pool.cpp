// Max, average and global average pooling: kernel values and gradients
// against naive host loops for several window, stride and padding
// combinations (overlapping windows, non-square), tie and padding rules,
// the GPU's global pooling (a team per plane) at every team size,
// layer gradients by finite differences, and shape errors.
#include <tessera/kernels/pool.hpp>
#include <tessera/layers/pool.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "layer_check.hpp"
#include "team_sizes.hpp"

namespace {

using namespace tessera;

// f() must throw tessera::Error whose message contains `expected`.

struct PoolCase {
  int planes, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;

  kernels::Pool2dGeometry geometry() const {
    kernels::Pool2dGeometry g;
    g.planes = planes;
    g.rows = kernels::WindowAxis(height, kernel_h, stride_h, pad_h);
    g.cols = kernels::WindowAxis(width, kernel_w, stride_w, pad_w);
    return g;
  }
  int out_h() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  int out_w() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }

  // The unpadded 2x2 windows at stride 2 by the scalar rule (a tap wins
  // only when strictly greater): each output's maximum and its position in
  // the plane, into y[0, outputs) and at[0, outputs).
  void two_by_two_maxima(const std::vector<float>& x, std::vector<float>& y,
                         std::vector<int>& at) const {
    for (int o = 0; o < planes * out_h() * out_w(); ++o) {
      const int p = o / (out_h() * out_w()), r = o % (out_h() * out_w());
      const int top = (r / out_w()) * 2 * width + (r % out_w()) * 2;
      const int taps[4] = {top, top + 1, top + width, top + width + 1};
      const float* plane = x.data() + std::size_t(p) * height * width;
      int best_at = taps[0];
      for (int t = 1; t < 4; ++t)
        if (plane[taps[t]] > plane[best_at]) best_at = taps[t];
      at[o] = best_at;
      y[o] = plane[best_at];
    }
  }

  // Calls f(output index, input index) for each input element of each window,
  // in row-major window order.
  template <class F>
  void windows(const F& f) const {
    for (int p = 0; p < planes; ++p)
      for (int ho = 0; ho < out_h(); ++ho)
        for (int wo = 0; wo < out_w(); ++wo)
          for (int ki = 0; ki < kernel_h; ++ki)
            for (int kj = 0; kj < kernel_w; ++kj) {
              const int h = ho * stride_h - pad_h + ki, w = wo * stride_w - pad_w + kj;
              if (h < 0 || h >= height || w < 0 || w >= width) continue;
              f((std::size_t(p) * out_h() + ho) * out_w() + wo,
                (std::size_t(p) * height + h) * width + w);
            }
  }
};

const PoolCase pool_cases[] = {
    {3, 4, 6, 2, 2, 2, 2, 0, 0},   // the usual 2x2 / 2
    {2, 5, 7, 3, 3, 2, 2, 1, 1},   // overlapping windows with padding
    {2, 6, 5, 2, 3, 1, 2, 1, 0},   // non-square window, stride 1 rows
    {2, 5, 5, 3, 3, 1, 1, 1, 1},   // every input in up to nine windows
    {4, 7, 7, 2, 2, 2, 2, 0, 0},   // odd size: the last row and column are dropped
    {2, 8, 9, 2, 2, 3, 3, 1, 0},   // gaps between windows (stride > kernel), padding
    {3, 4, 34, 2, 2, 2, 2, 0, 0},  // 17 windows a row: whole vectors of them and a rest
    {37, 4, 4, 4, 4, 4, 4, 0, 0},  // whole planes (global pooling), blocks of planes
    {19, 3, 5, 3, 5, 1, 1, 0, 0},  // whole planes of an odd size
};

template <class ExecSpace>
class PoolKernels : public ::testing::Test {};
TYPED_TEST_SUITE(PoolKernels, test::ExecSpaces);

template <class E>
using V = Kokkos::View<float*, Kokkos::LayoutRight, typename E::memory_space>;
template <class E>
using Index = Kokkos::View<int*, Kokkos::LayoutRight, typename E::memory_space>;

TYPED_TEST(PoolKernels, MaxMatchesNaiveLoops) {
  using E = TypeParam;
  for (const auto& c : pool_cases) {
    const auto g = c.geometry();
    V<E> x("x", g.input_size()), y("y", g.output_size()), dy("dy", g.output_size()),
        dx("dx", g.input_size());
    Index<E> argmax("argmax", g.output_size());
    const auto xh = test::random_values(x.size(), 1), dyh = test::random_values(dy.size(), 2),
               start = test::random_values(dx.size(), 3);
    test::from_host(x, xh);
    test::from_host(dy, dyh);
    test::from_host(dx, start);
    kernels::max_pool2d_forward(E(), g, x, y, argmax);
    kernels::max_pool2d_backward(E(), g, argmax, dy, dx);

    std::vector<float> y_ref(y.size(), -std::numeric_limits<float>::infinity());
    std::vector<std::size_t> at(y.size());
    c.windows([&](std::size_t o, std::size_t i) {
      if (xh[i] > y_ref[o]) {
        y_ref[o] = xh[i];
        at[o] = i;
      }
    });
    std::vector<double> dx_ref(start.begin(), start.end());
    for (std::size_t o = 0; o < at.size(); ++o) dx_ref[at[o]] += dyh[o];
    EXPECT_EQ(test::to_host(y), y_ref) << "kernel " << c.kernel_h << "x" << c.kernel_w;
    const auto dxh = test::to_host(dx);
    for (std::size_t i = 0; i < dxh.size(); ++i) EXPECT_NEAR(dxh[i], dx_ref[i], 1e-5) << "dx " << i;
  }
}

// Backward that writes dx whole (add false) leaves the bits of adding into
// a zeroed dx, whatever dx held: rows and columns no window reaches, gaps
// between windows and whole planes included.
TYPED_TEST(PoolKernels, WrittenGradientsAreTheOnesAddedIntoZeros) {
  using E = TypeParam;
  for (const auto& c : pool_cases) {
    const auto g = c.geometry();
    V<E> x("x", g.input_size()), y("y", g.output_size()), dy("dy", g.output_size()),
        added("added", g.input_size()), written("written", g.input_size());
    Index<E> argmax("argmax", g.output_size());
    test::from_host(x, test::random_values(x.size(), 1));
    test::from_host(dy, test::random_values(dy.size(), 2));
    kernels::max_pool2d_forward(E(), g, x, y, argmax);
    const std::string where = "kernel " + std::to_string(c.kernel_h) + "x" +
                              std::to_string(c.kernel_w) + ", stride " +
                              std::to_string(c.stride_h) + ", input " + std::to_string(c.height) +
                              "x" + std::to_string(c.width);
    for (const bool max : {true, false}) {
      Kokkos::deep_copy(added, 0.0f);
      Kokkos::deep_copy(written, std::nanf(""));
      if (max) {
        kernels::max_pool2d_backward(E(), g, argmax, dy, added);
        kernels::max_pool2d_backward(E(), g, argmax, dy, written, false);
      } else {
        kernels::avg_pool2d_backward(E(), g, dy, added);
        kernels::avg_pool2d_backward(E(), g, dy, written, false);
      }
      EXPECT_EQ(test::float_bits(test::to_host(written)), test::float_bits(test::to_host(added)))
          << (max ? "max" : "average") << " pooling, " << where;
    }
  }
}

TYPED_TEST(PoolKernels, AverageMatchesNaiveLoopsCountingPadding) {
  using E = TypeParam;
  for (const auto& c : pool_cases) {
    const auto g = c.geometry();
    V<E> x("x", g.input_size()), y("y", g.output_size()), dy("dy", g.output_size()),
        dx("dx", g.input_size());
    const auto xh = test::random_values(x.size(), 4), dyh = test::random_values(dy.size(), 5),
               start = test::random_values(dx.size(), 6);
    test::from_host(x, xh);
    test::from_host(dy, dyh);
    test::from_host(dx, start);
    kernels::avg_pool2d_forward(E(), g, x, y);
    kernels::avg_pool2d_backward(E(), g, dy, dx);

    const double taps = c.kernel_h * c.kernel_w;  // padding counts in the divisor
    std::vector<double> y_ref(y.size()), dx_ref(start.begin(), start.end());
    c.windows([&](std::size_t o, std::size_t i) {
      y_ref[o] += xh[i] / taps;
      dx_ref[i] += dyh[o] / taps;
    });
    const auto yh = test::to_host(y), dxh = test::to_host(dx);
    for (std::size_t o = 0; o < yh.size(); ++o) EXPECT_NEAR(yh[o], y_ref[o], 1e-6) << "y " << o;
    for (std::size_t i = 0; i < dxh.size(); ++i) EXPECT_NEAR(dxh[i], dx_ref[i], 1e-6) << "dx " << i;
  }
}

// A host thread sums each plane of global average pooling in order, in
// float, then scales it once: the same bits for planes taken a vector of
// them at a time (whole vectors of each plane transposed in registers, then
// its last values one by one) as for the planes left over. The device paths
// give the bits of pool_forward_planes_teams, a team a plane.
TYPED_TEST(PoolKernels, GlobalAverageSumsPlanesInOrderOnTheHostAndByTeamsElsewhere) {
  using E = TypeParam;
  const std::vector<std::pair<int, int>> shapes{{4, 4}, {3, 5}, {7, 7}, {1, 1}, {2, 4}, {6, 6}};
  for (const int planes : {37, 19, 5})
    for (const auto& hw : shapes) {
      const PoolCase c{planes, hw.first, hw.second, hw.first, hw.second, 1, 1, 0, 0};
      const auto g = c.geometry();
      const int size = hw.first * hw.second;
      const float scale = 1.0f / static_cast<float>(size);
      const auto xh = test::random_values(g.input_size(), 62);
      V<E> x("x", g.input_size()), y("y", planes);
      test::from_host(x, xh);
      kernels::avg_pool2d_forward(E(), g, x, y);
      std::vector<float> expected(planes);
      if constexpr (kernels::impl::runs_on_host<E>) {
        for (int p = 0; p < planes; ++p) {
          float sum = 0;
          for (int i = 0; i < size; ++i) sum += xh[std::size_t(p) * size + i];
          expected[p] = sum * scale;
        }
      } else {
        V<E> teams("teams", planes);
        kernels::impl::pool_forward_planes_teams(E(), "test_global_avg", g,
                                                 kernels::AvgWindow{scale}, x, teams);
        expected = test::to_host(teams);
      }
      EXPECT_EQ(test::to_host(y), expected)
          << planes << " planes of " << hw.first << " x " << hw.second;
    }
}

TYPED_TEST(PoolKernels, MaxTiesGoToTheFirstAndPaddingNeverWins) {
  using E = TypeParam;
  // One 3x4 plane, 2x2 windows, stride 2, padding 1: windows hold 1, 2 or 4
  // real elements; all values are negative, so a padded zero would win.
  const PoolCase c{1, 3, 4, 2, 2, 2, 2, 1, 1};
  const auto g = c.geometry();
  V<E> x("x", g.input_size()), y("y", g.output_size()), dy("dy", g.output_size()),
      dx("dx", g.input_size());
  Index<E> argmax("argmax", g.output_size());
  test::from_host(x, {-5, -2, -2, -7, -3, -3, -3, -3, -4, -1, -6, -1});
  kernels::max_pool2d_forward(E(), g, x, y, argmax);
  EXPECT_EQ(test::to_host(y), (std::vector<float>{-5, -2, -7, -3, -1, -1}));
  // Window (0, 1) holds x(0, 1) and x(0, 2), both -2: the first wins.
  // Window (1, 0) holds x(1, 0) and x(2, 0): -3 at row 1.
  EXPECT_EQ(test::to_host(argmax), (std::vector<int>{0, 1, 3, 4, 9, 11}));
  Kokkos::deep_copy(dy, 1.0f);
  kernels::max_pool2d_backward(E(), g, argmax, dy, dx);
  EXPECT_EQ(test::to_host(dx), (std::vector<float>{1, 1, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1}));
}

// A host thread takes a span of the unpadded 2x2 windows' output rows and
// stores a short row's last vector whole over the start of the next row of
// its span; rows shorter than a vector go through a stage on its stack,
// copied out every pool_stage outputs. Rows of 7 and 5 windows (staged),
// spans and copies that start inside a plane, a last row of 5 windows
// whose input still holds whole vectors (the odd last input row is
// dropped), and rows of 10 (stored in place, a vector and a whole vector
// over the next row's start; the last row's input again holds whole
// vectors), with y and argmax followed by guards that must stay as they
// were.
TYPED_TEST(PoolKernels, MaxTwoByTwoRowSpansWriteOnlyTheirOutputs) {
  using E = TypeParam;
  const PoolCase cases[] = {{200, 14, 14, 2, 2, 2, 2, 0, 0},
                            {3, 11, 10, 2, 2, 2, 2, 0, 0},
                            {40, 7, 20, 2, 2, 2, 2, 0, 0}};
  const std::int64_t guard = 16;
  for (const auto& c : cases) {
    const auto g = c.geometry();
    const std::int64_t outputs = g.output_size();
    V<E> x("x", g.input_size()), y_all("y", outputs + guard);
    Index<E> at_all("argmax", outputs + guard);
    Kokkos::deep_copy(y_all, -7.0f);
    Kokkos::deep_copy(at_all, -7);
    const auto xh = test::random_values(x.size(), 4);
    test::from_host(x, xh);
    const auto y = Kokkos::subview(y_all, std::make_pair(std::int64_t(0), outputs));
    const auto argmax = Kokkos::subview(at_all, std::make_pair(std::int64_t(0), outputs));
    kernels::max_pool2d_forward(E(), g, x, y, argmax);

    std::vector<float> y_ref(outputs + guard, -7.0f);
    std::vector<int> at_ref(outputs + guard, -7);
    c.two_by_two_maxima(xh, y_ref, at_ref);
    EXPECT_EQ(test::to_host(y_all), y_ref)
        << c.planes << " planes of " << c.height << " x " << c.width;
    EXPECT_EQ(test::to_host(at_all), at_ref)
        << c.planes << " planes of " << c.height << " x " << c.width;
  }
}

// The unpadded 2x2 window at stride 2 has a path of its own: ties there go
// to the first maximum in row-major order too, wherever the tie is.
TYPED_TEST(PoolKernels, MaxTiesInUnpaddedTwoByTwoWindowsGoToTheFirst) {
  using E = TypeParam;
  const PoolCase c{1, 2, 8, 2, 2, 2, 2, 0, 0};
  const auto g = c.geometry();
  V<E> x("x", g.input_size()), y("y", g.output_size());
  Index<E> argmax("argmax", g.output_size());
  // Windows: all equal; top pair tied above the bottom; bottom pair tied
  // above the top; the last tap alone the largest.
  test::from_host(x, {4, 4, 1, 1, 0, 0, 0, 0,  //
                      4, 4, 0, 0, 2, 2, 0, 9});
  kernels::max_pool2d_forward(E(), g, x, y, argmax);
  EXPECT_EQ(test::to_host(y), (std::vector<float>{4, 1, 2, 9}));
  EXPECT_EQ(test::to_host(argmax), (std::vector<int>{0, 2, 12, 15}));
}

TYPED_TEST(PoolKernels, ErrorsNameFunctionAndShapes) {
  using E = TypeParam;
  const PoolCase c{2, 4, 4, 2, 2, 2, 2, 0, 0};
  const auto g = c.geometry();
  V<E> x("x", g.input_size()), y("y", 5);
  test::expect_error(
      [&] { kernels::avg_pool2d_forward(E(), g, x, y); },
      "tessera::kernels::avg_pool2d_forward: input has 32 elements, output 5; expected 2 "
      "planes of 4 x 4 -> 2 x 2");
  Index<E> small("argmax", 3);
  EXPECT_THROW(kernels::max_pool2d_forward(E(), g, x, V<E>("y", 8), small), Error);
}

// Distinct values at least 0.05 apart, shuffled, so finite differences of
// step 0.01 never change which element is a window's maximum.
std::vector<float> distinct_values(std::size_t n, std::uint64_t seed) {
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = 0.05f * (float(i) - float(n) / 2);
  const auto keys = test::random_values(n, seed);
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
  std::vector<float> shuffled(n);
  for (std::size_t i = 0; i < n; ++i) shuffled[i] = values[order[i]];
  return shuffled;
}

// Global pooling on a GPU, a team per plane: the same bits at every team
// size; averages close to double sums, maxima and their positions exact,
// ties to the first; planes shorter than, as long as and longer than
// team_sum's 64 lanes.
TYPED_TEST(PoolKernels, GlobalPoolingTeamsSameBitsForEveryTeamSize) {
  using E = TypeParam;
  const std::vector<std::pair<int, int>> shapes{{1, 1}, {4, 4}, {8, 8}, {7, 7}, {9, 13}};
  for (const auto& hw : shapes) {
    const int planes = 6, size = hw.first * hw.second;
    SCOPED_TRACE(std::to_string(hw.first) + " x " + std::to_string(hw.second));
    const PoolCase c{planes, hw.first, hw.second, hw.first, hw.second, 1, 1, 0, 0};
    const auto g = c.geometry();
    auto xh = test::random_values(g.input_size(), 61);
    // Plane 1 holds its maximum twice: the first position wins.
    xh[size + size / 2] = xh[size + size - 1] = 2.0f;
    V<E> x("x", g.input_size());
    test::from_host(x, xh);
    std::vector<float> first_avg, first_max;
    std::vector<int> first_at;
    for (const kernels::TeamShape team : test::team_shapes<E>()) {
      V<E> avg("avg", planes), max("max", planes);
      Index<E> argmax("argmax", planes);
      kernels::impl::pool_forward_planes_teams(E(), "test_global_avg", g,
                                               kernels::AvgWindow{1.0f / size}, x, avg, team);
      kernels::impl::pool_forward_planes_teams(E(), "test_global_max", g,
                                               kernels::MaxWindow<Index<E>>{argmax}, x, max, team);
      const auto avg_h = test::to_host(avg), max_h = test::to_host(max);
      const auto at_h = test::to_host(argmax);
      if (!first_avg.empty()) {
        EXPECT_EQ(avg_h, first_avg) << "team size " << team.size;
        EXPECT_EQ(max_h, first_max) << "team size " << team.size;
        EXPECT_EQ(at_h, first_at) << "team size " << team.size;
        continue;
      }
      first_avg = avg_h;
      first_max = max_h;
      first_at = at_h;
      for (int p = 0; p < planes; ++p) {
        double sum = 0;
        int at = 0;
        for (int i = 0; i < size; ++i) {
          sum += xh[p * size + i];
          if (xh[p * size + i] > xh[p * size + at]) at = i;
        }
        EXPECT_NEAR(avg_h[p], sum / size, 1e-6) << "plane " << p;
        EXPECT_EQ(at_h[p], at) << "plane " << p;
        EXPECT_EQ(max_h[p], xh[p * size + at]) << "plane " << p;
      }
    }
  }
}

TEST(MaxPool2D, ShapesAndGradients) {
  MaxPool2D pool("pool", 2);
  EXPECT_EQ(pool.stride().h, 2);
  EXPECT_EQ(pool.output_shape({Shape{2, 3, 6, 5}}), (Shape{2, 3, 3, 2}));
  EXPECT_EQ(pool.flops_per_sample({Shape{2, 3, 6, 5}}), 3 * 3 * 2 * 4);
  test::LayerHarness h(pool, {Shape{2, 3, 6, 5}});
  test::from_host(h.inputs[0].flat(), distinct_values(h.inputs[0].numel(), 11));
  h.expect_gradients();

  MaxPool2D overlapping("overlapping", {3, 2}, {2, 1}, {1, 1});
  test::LayerHarness ho(overlapping, {Shape{2, 2, 5, 4}});
  EXPECT_EQ(ho.output.shape(), (Shape{2, 2, 3, 5}));
  test::from_host(ho.inputs[0].flat(), distinct_values(ho.inputs[0].numel(), 12));
  ho.expect_gradients();
}

// The same rules where a host thread takes the windows of a long row eight
// at a time: ties in every tap order, and a NaN that wins only when first,
// at every lane position, against the scalar definition.
TYPED_TEST(PoolKernels, MaxTiesAndNaNsAlongLongRowsFollowTheScalarRule) {
  using E = TypeParam;
  const PoolCase c{2, 4, 40, 2, 2, 2, 2, 0, 0};
  const auto g = c.geometry();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Window patterns (taps a b / c d in row-major order).
  const float patterns[][4] = {{4, 4, 4, 4},   {1, 3, 3, 0},     {0, 2, 5, 5},     {nan, 9, 9, 9},
                               {1, nan, 0, 7}, {1, 0, nan, 7},   {2, 0, nan, nan}, {0, 0, 0, 1},
                               {3, 3, 1, 3},   {-1, -2, -1, -3}, {6, nan, 6, 6}};
  const int count = sizeof patterns / sizeof patterns[0];
  std::vector<float> xh(g.input_size());
  int n = 0;
  for (int p = 0; p < c.planes; ++p)
    for (int ho = 0; ho < c.out_h(); ++ho)
      for (int wo = 0; wo < c.out_w(); ++wo, ++n) {
        const float* t = patterns[(n * 7) % count];
        const std::size_t top = (std::size_t(p) * c.height + 2 * ho) * c.width + 2 * wo;
        xh[top] = t[0];
        xh[top + 1] = t[1];
        xh[top + c.width] = t[2];
        xh[top + c.width + 1] = t[3];
      }
  V<E> x("x", g.input_size()), y("y", g.output_size());
  Index<E> argmax("argmax", g.output_size());
  test::from_host(x, xh);
  kernels::max_pool2d_forward(E(), g, x, y, argmax);
  const auto yk = test::to_host(y);
  const auto ak = test::to_host(argmax);
  std::vector<int> at_ref(g.output_size());
  std::vector<float> y_ref(g.output_size());
  c.two_by_two_maxima(xh, y_ref, at_ref);
  EXPECT_EQ(ak, at_ref);
  for (std::int64_t o = 0; o < g.output_size(); ++o)
    if (std::isnan(y_ref[o]))
      EXPECT_TRUE(std::isnan(yk[o])) << "output " << o;
    else
      EXPECT_EQ(yk[o], y_ref[o]) << "output " << o;
}

TEST(AvgPool2D, ShapesAndGradients) {
  AvgPool2D pool("pool", 3, 2, 1);
  test::LayerHarness h(pool, {Shape{2, 2, 7, 6}});
  EXPECT_EQ(h.output.shape(), (Shape{2, 2, 4, 3}));
  h.expect_gradients();
}

TEST(GlobalAvgPool, ValuesAndGradients) {
  GlobalAvgPool pool("gap");
  test::LayerHarness h(pool, {Shape{3, 4, 5, 2}});
  ASSERT_EQ(h.output.shape(), (Shape{3, 4}));
  h.forward();
  const auto x = test::to_host(h.inputs[0].flat()), y = test::to_host(h.output.flat());
  for (int plane = 0; plane < 12; ++plane) {
    double mean = 0;
    for (int i = 0; i < 10; ++i) mean += x[plane * 10 + i] / 10.0;
    EXPECT_NEAR(y[plane], mean, 1e-6) << "plane " << plane;
  }
  h.expect_gradients();
}

// The benchmark's traffic: pooling's backward reads the output gradient and
// adds to the input gradient, never x or y; max pooling also writes one
// int per output forward and reads it backward. Without an input gradient
// backward does nothing.
TEST(Pooling, CostCountsWhatTheKernelsTouch) {
  const Shapes in{Shape{2, 3, 4, 6}};  // 144 values in, 36 out
  const LayerCost max = MaxPool2D("max", 2).cost(in, true);
  EXPECT_EQ(max.forward.bytes, 4.0 * (144 + 36) + 4.0 * 36);
  EXPECT_EQ(max.backward.bytes, 4.0 * (36 + 2 * 144) + 4.0 * 36);
  EXPECT_EQ(MaxPool2D("max", 2).cost(in, false).backward.bytes, 0.0);
  const LayerCost avg = AvgPool2D("avg", 2).cost(in, true);
  EXPECT_EQ(avg.forward.bytes, 4.0 * (144 + 36));
  EXPECT_EQ(avg.backward.bytes, 4.0 * (36 + 2 * 144));
  const LayerCost global = GlobalAvgPool("gap").cost(in, true);
  EXPECT_EQ(global.forward.bytes, 4.0 * (144 + 6));
  EXPECT_EQ(global.backward.bytes, 4.0 * (6 + 2 * 144));
}

TEST(Pooling, ErrorsNameLayerAndShape) {
  MaxPool2D pool("p1", 3);
  test::expect_error(
      [&] {
        pool.output_shape({Shape{2, 16}});
      },
      "tessera::MaxPool2D 'p1': input [2, 16] is not an image batch [N, C, H, W]");
  test::expect_error(
      [&] {
        pool.output_shape({Shape{2, 1, 2, 8}});
      },
      "tessera::MaxPool2D 'p1': input [2, 1, 2, 8] is smaller than the kernel 3 x 3");
  test::expect_error(
      [] { AvgPool2D("p2", 2, 2, 2); },
      "tessera::AvgPool2D 'p2': kernel 2 x 2, stride 2 x 2, padding 2 x 2: expected a "
      "positive kernel, stride >= 0 (0: the kernel), and padding between 0 and half the kernel");
  GlobalAvgPool gap("gap");
  test::expect_error(
      [&] {
        gap.output_shape({Shape{2, 3, 4}});
      },
      "tessera::GlobalAvgPool 'gap': input [2, 3, 4] is not an image batch");
}

// In bf16 and fp16 each window computes in float and rounds its result
// once; with windows that do not overlap, each input gradient receives one
// window's share, rounded once: within u of the float layer.
template <class T>
void expect_pooling_16bit() {
  MaxPool2D a("max", 2), b("max", 2);  // the vectorised 2 x 2 path
  test::expect_16bit_matches_float<T>(a, b, {Shape{2, 3, 6, 5}});
  MaxPool2D c("max_padded", 3, 3, 1), d("max_padded", 3, 3, 1);
  test::expect_16bit_matches_float<T>(c, d, {Shape{2, 2, 7, 6}});
  AvgPool2D e("avg", 2), f("avg", 2);
  test::expect_16bit_matches_float<T>(e, f, {Shape{2, 2, 4, 6}});
  AvgPool2D g("avg_padded", {3, 2}, {3, 2}, {1, 0}), h("avg_padded", {3, 2}, {3, 2}, {1, 0});
  test::expect_16bit_matches_float<T>(g, h, {Shape{2, 2, 7, 6}});
  GlobalAvgPool i("gap"), j("gap");
  test::expect_16bit_matches_float<T>(i, j, {Shape{3, 4, 5, 2}});
}

TEST(Pooling, Bf16AndFp16AreTheFloatResultsRoundedOnce) {
  expect_pooling_16bit<bf16>();
  expect_pooling_16bit<fp16>();
}

}  // namespace
