// Conv2D: kernel values and gradients against naive host loops for several
// kernel, stride and padding combinations (non-square, several sample
// blocks) on every schedule the space runs, the threads schedule's blocks
// and dW groups, the device paths of the lowering (called directly, so
// every build runs them) against the host path and double sums, layer
// gradients by finite differences, shape errors, and a small CNN that must
// learn to tell horizontal from vertical bars. In device-path mode
// (host_fast_paths_v false) the tests of the host schedules run
// ConvSchedule::blocks, the schedule CUDA and HIP run, on the same cases.
#include <tessera/core/machine.hpp>
#include <tessera/kernels/conv.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/conv.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/pool.hpp>
#include <tessera/layers/structural.hpp>
#include <tessera/optim/sgd.hpp>
#include <tessera/train/trainer.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <vector>

#include "layer_check.hpp"
#include "model_check.hpp"

namespace {

using namespace tessera;

// f() must throw tessera::Error whose message contains `expected`.

struct ConvCase {
  int batch, in_channels, out_channels, height, width, kernel_h, kernel_w, stride_h, stride_w,
      pad_h, pad_w;

  kernels::Conv2dGeometry geometry() const {
    kernels::Conv2dGeometry g;
    g.batch = batch;
    g.in_channels = in_channels;
    g.out_channels = out_channels;
    g.rows = kernels::WindowAxis(height, kernel_h, stride_h, pad_h);
    g.cols = kernels::WindowAxis(width, kernel_w, stride_w, pad_w);
    return g;
  }
};

const ConvCase conv_cases[] = {
    {2, 2, 3, 5, 7, 3, 3, 1, 1, 1, 1},  // "same" convolution, non-square image
    {3, 3, 2, 6, 5, 2, 3, 2, 1, 0, 1},  // non-square kernel, stride and padding
    {2, 1, 4, 7, 6, 3, 3, 2, 2, 2, 2},  // padding wider than the stride
    {2, 4, 3, 4, 4, 1, 1, 1, 1, 0, 0},  // 1x1: a per-pixel dense layer
    {5, 2, 2, 4, 5, 4, 5, 1, 1, 0, 0},  // kernel covers the whole image
    {2, 3, 2, 5, 6, 3, 2, 1, 1, 2, 1},  // padding kernel - 1: a "full" convolution
};

// Reference convolution and its gradients by direct loops.
struct NaiveConv {
  ConvCase c;
  int out_h() const { return (c.height + 2 * c.pad_h - c.kernel_h) / c.stride_h + 1; }
  int out_w() const { return (c.width + 2 * c.pad_w - c.kernel_w) / c.stride_w + 1; }
  std::size_t x_at(int n, int ch, int h, int w) const {
    return ((std::size_t(n) * c.in_channels + ch) * c.height + h) * c.width + w;
  }
  std::size_t w_at(int o, int ch, int ki, int kj) const {
    return ((std::size_t(o) * c.in_channels + ch) * c.kernel_h + ki) * c.kernel_w + kj;
  }
  std::size_t y_at(int n, int o, int ho, int wo) const {
    return ((std::size_t(n) * c.out_channels + o) * out_h() + ho) * out_w() + wo;
  }
  // Calls f(x index, w index, y index) for every multiply-add of the convolution.
  template <class F>
  void taps(const F& f) const {
    for (int n = 0; n < c.batch; ++n)
      for (int o = 0; o < c.out_channels; ++o)
        for (int ho = 0; ho < out_h(); ++ho)
          for (int wo = 0; wo < out_w(); ++wo)
            for (int ch = 0; ch < c.in_channels; ++ch)
              for (int ki = 0; ki < c.kernel_h; ++ki)
                for (int kj = 0; kj < c.kernel_w; ++kj) {
                  const int h = ho * c.stride_h - c.pad_h + ki, w = wo * c.stride_w - c.pad_w + kj;
                  if (h < 0 || h >= c.height || w < 0 || w >= c.width) continue;
                  f(x_at(n, ch, h, w), w_at(o, ch, ki, kj), y_at(n, o, ho, wo));
                }
  }
};

template <class ExecSpace>
class ConvKernels : public ::testing::Test {};
TYPED_TEST_SUITE(ConvKernels, test::ExecSpaces);

template <class E>
using V = Kokkos::View<float*, Kokkos::LayoutRight, typename E::memory_space>;
template <class E>
using M = Kokkos::View<float**, Kokkos::LayoutRight, typename E::memory_space>;

// Scratch for two samples, so batches above two run in several blocks.
template <class E>
V<E> two_sample_scratch(const kernels::Conv2dGeometry& g) {
  return V<E>("scratch", g.scratch_size(2));
}

// The schedules the kernels run on E: blocks everywhere, threads where E is
// OpenMP or Serial and the BLAS can run on each thread alone.
template <class E>
std::vector<kernels::ConvSchedule> schedules() {
  if (kernels::conv2d_schedule(E()) == kernels::ConvSchedule::winograd)
    return {kernels::ConvSchedule::blocks, kernels::ConvSchedule::threads,
            kernels::ConvSchedule::winograd, kernels::ConvSchedule::direct};
  return {kernels::ConvSchedule::blocks};
}

const char* schedule_name(kernels::ConvSchedule s) {
  return s == kernels::ConvSchedule::threads    ? "threads"
         : s == kernels::ConvSchedule::winograd ? "winograd"
         : s == kernels::ConvSchedule::direct   ? "direct"
                                                : "blocks";
}

// Where E has a threads schedule (thread_gemm_space_v) but the BLAS has no
// gemm for each thread alone, the tests of the host schedules skip; in
// device-path mode they run ConvSchedule::blocks instead.
template <class E>
bool host_schedules_missing() {
  return kernels::impl::thread_gemm_space_v<E> && thread_sgemm() == nullptr;
}

// The schedule E runs where a test asks for a host schedule.
template <class E>
kernels::ConvSchedule schedule_here(kernels::ConvSchedule host) {
  return kernels::impl::thread_gemm_space_v<E> ? host : kernels::ConvSchedule::blocks;
}

// The label of ConvSchedule::blocks' im2col on E (the host or device path).
template <class E>
std::string im2col_label() {
  return host_fast_paths_v<E> ? "tessera::kernels::im2col" : "tessera::kernels::im2col_device";
}

// Whether `schedule` computes g's products itself: ConvSchedule::winograd
// and ::direct run the threads schedule's where g has no Winograd or
// direct form.
bool schedule_applies(kernels::ConvSchedule schedule, const kernels::Conv2dGeometry& g) {
  if (schedule == kernels::ConvSchedule::winograd) return g.winograd();
  if (schedule == kernels::ConvSchedule::direct) return g.direct();
  return true;
}

// The labels a run of `schedule` on E must launch (the threads schedule's
// where `applies` is false: schedule_applies).
template <class E>
std::vector<std::string> schedule_labels(kernels::ConvSchedule schedule, bool applies) {
  if (schedule == kernels::ConvSchedule::blocks) return {im2col_label<E>()};
  const std::string ran = applies ? schedule_name(schedule) : "threads";
  return {"tessera::kernels::conv2d_forward_" + ran, "tessera::kernels::conv2d_backward_" + ran};
}

// Scratch for a schedule: two samples a block (blocks), or a block for each
// of E's threads (threads).
template <class E>
V<E> scratch_for(const kernels::Conv2dGeometry& g, kernels::ConvSchedule s) {
  if (s == kernels::ConvSchedule::blocks) return two_sample_scratch<E>(g);
  return V<E>("scratch", g.thread_scratch_size(Kokkos::Experimental::UniqueToken<E>(E()).size()));
}

TYPED_TEST(ConvKernels, ForwardMatchesNaiveLoops) {
  using E = TypeParam;
  for (const auto schedule : schedules<E>())
    for (const auto& c : conv_cases) {
      const auto g = c.geometry();
      const NaiveConv ref{c};
      V<E> x("x", g.input_size()), b("b", c.out_channels), y("y", g.output_size());
      M<E> w("w", c.out_channels, g.patch());
      const auto xh = test::random_values(x.size(), 1), wh = test::random_values(w.size(), 2),
                 bh = test::random_values(b.size(), 3);
      test::from_host(x, xh);
      test::from_host(w, wh);
      test::from_host(b, bh);
      kernels::conv2d_forward(E(), g, x, w, b, y, scratch_for<E>(g, schedule), schedule);
      std::vector<double> expected(y.size());
      for (int n = 0; n < c.batch; ++n)
        for (int o = 0; o < c.out_channels; ++o)
          for (int p = 0; p < ref.out_h() * ref.out_w(); ++p)
            expected[ref.y_at(n, o, 0, p)] = bh[o];
      ref.taps([&](std::size_t xi, std::size_t wi, std::size_t yi) {
        expected[yi] += double(xh[xi]) * wh[wi];
      });
      const auto yh = test::to_host(y);
      ASSERT_EQ(yh.size(), std::size_t(c.batch * c.out_channels * ref.out_h() * ref.out_w()));
      for (std::size_t i = 0; i < yh.size(); ++i)
        EXPECT_NEAR(yh[i], expected[i], 1e-5 * g.patch())
            << schedule_name(schedule) << ", case k" << c.kernel_h << "x" << c.kernel_w << " s"
            << c.stride_h << " p" << c.pad_h << ", y element " << i;
    }
}

TYPED_TEST(ConvKernels, BackwardMatchesNaiveLoopsAndAccumulates) {
  using E = TypeParam;
  for (const auto schedule : schedules<E>())
    for (const auto& c : conv_cases) {
      const auto g = c.geometry();
      const NaiveConv ref{c};
      V<E> x("x", g.input_size()), dy("dy", g.output_size()), dx("dx", g.input_size()),
          db("db", c.out_channels);
      M<E> w("w", c.out_channels, g.patch()), dw("dw", c.out_channels, g.patch());
      const auto xh = test::random_values(x.size(), 4), wh = test::random_values(w.size(), 5),
                 dyh = test::random_values(dy.size(), 6), start = test::random_values(dx.size(), 7);
      test::from_host(x, xh);
      test::from_host(w, wh);
      test::from_host(dy, dyh);
      test::from_host(dx, start);  // backward adds to what is there
      kernels::conv2d_backward(E(), g, x, w, dy, dx, dw, db, scratch_for<E>(g, schedule), schedule);

      std::vector<double> dx_ref(start.begin(), start.end()), dw_ref(dw.size()), db_ref(db.size());
      ref.taps([&](std::size_t xi, std::size_t wi, std::size_t yi) {
        dx_ref[xi] += double(wh[wi]) * dyh[yi];
        dw_ref[wi] += double(xh[xi]) * dyh[yi];
      });
      const int positions = ref.out_h() * ref.out_w();
      for (int n = 0; n < c.batch; ++n)
        for (int o = 0; o < c.out_channels; ++o)
          for (int p = 0; p < positions; ++p) db_ref[o] += dyh[ref.y_at(n, o, 0, p)];
      const auto dxh = test::to_host(dx), dwh = test::to_host(dw), dbh = test::to_host(db);
      const double tol = 1e-5 * (g.patch() + c.batch * positions);
      const char* name = schedule_name(schedule);
      for (std::size_t i = 0; i < dxh.size(); ++i)
        EXPECT_NEAR(dxh[i], dx_ref[i], tol) << name << ", dx " << i;
      for (std::size_t i = 0; i < dwh.size(); ++i)
        EXPECT_NEAR(dwh[i], dw_ref[i], tol) << name << ", dW " << i;
      for (std::size_t i = 0; i < dbh.size(); ++i)
        EXPECT_NEAR(dbh[i], db_ref[i], tol) << name << ", db " << i;

      // Without dx (the model input), and accumulating onto the first result.
      kernels::conv2d_backward(E(), g, x, w, dy, V<E>(), dw, db, scratch_for<E>(g, schedule),
                               schedule);
      const auto dw2 = test::to_host(dw), db2 = test::to_host(db);
      for (std::size_t i = 0; i < dw2.size(); ++i)
        EXPECT_NEAR(dw2[i], 2 * dwh[i], 2 * tol) << name << ", dW " << i;
      for (std::size_t i = 0; i < db2.size(); ++i)
        EXPECT_NEAR(db2[i], 2 * dbh[i], 2 * tol) << name << ", db " << i;
    }
}

// Each output and each input gradient involves one sample only, so the
// block size must not change them beyond rounding. The products go through
// the vendor BLAS, whose kernels may sum in another order for another
// matrix width (OpenBLAS's Haswell kernels do), so the results are compared
// against the rounding bound of a sum of n terms, n * u * sum |term| for each
// run (u = 2^-24), not bit for bit; a sample mixed into another block would
// be off by the size of the terms themselves.
template <class E>
void expect_block_size_independent(const ConvCase& c) {
  const auto g = c.geometry();
  const NaiveConv ref{c};
  V<E> x("x", g.input_size()), b("b", c.out_channels), dy("dy", g.output_size());
  M<E> w("w", c.out_channels, g.patch());
  const auto xh = test::random_values(x.size(), 8), wh = test::random_values(w.size(), 9),
             dyh = test::random_values(dy.size(), 10);
  test::from_host(x, xh);
  test::from_host(w, wh);
  test::from_host(dy, dyh);
  std::vector<double> y_scale(dy.size()), dx_scale(x.size());
  ref.taps([&](std::size_t xi, std::size_t wi, std::size_t yi) {
    y_scale[yi] += std::fabs(double(xh[xi]) * wh[wi]);
    dx_scale[xi] += std::fabs(double(wh[wi]) * dyh[yi]);
  });
  // Terms per output: a patch (and the zero bias); per input: at most every
  // output channel at every kernel tap.
  const double u = std::numeric_limits<float>::epsilon() / 2;
  const double y_terms = double(g.patch() + 1), dx_terms = double(c.out_channels * 9);
  std::vector<std::vector<float>> ys, dxs;
  for (std::int64_t block : {1, 3, 7}) {
    V<E> y("y", g.output_size()), dx("dx", g.input_size()), db("db", c.out_channels);
    M<E> dw("dw", c.out_channels, g.patch());
    V<E> scratch("scratch", g.scratch_size(block));
    kernels::conv2d_forward(E(), g, x, w, b, y, scratch);
    kernels::conv2d_backward(E(), g, x, w, dy, dx, dw, db, scratch);
    ys.push_back(test::to_host(y));
    dxs.push_back(test::to_host(dx));
  }
  for (std::size_t run = 1; run < ys.size(); ++run) {
    for (std::size_t i = 0; i < y_scale.size(); ++i)
      EXPECT_NEAR(ys[run][i], ys[0][i], 2 * y_terms * u * y_scale[i])
          << "y " << i << ", run " << run;
    for (std::size_t i = 0; i < dx_scale.size(); ++i)
      EXPECT_NEAR(dxs[run][i], dxs[0][i], 2 * dx_terms * u * dx_scale[i])
          << "dx " << i << ", run " << run;
  }
}

// More output than input channels (3 -> 4) and fewer (4 -> 3).
TYPED_TEST(ConvKernels, ResultsDoNotDependOnTheBlockSize) {
  for (const ConvCase& c :
       {ConvCase{7, 3, 4, 6, 6, 3, 3, 1, 1, 1, 1}, ConvCase{7, 4, 3, 6, 6, 3, 3, 1, 1, 1, 1}})
    expect_block_size_independent<TypeParam>(c);
}

// Without a bias (an empty view) forward adds nothing and backward leaves
// the bias gradient alone; everything else is what it is with a zero bias.
TYPED_TEST(ConvKernels, WithoutBias) {
  using E = TypeParam;
  const ConvCase c{3, 2, 3, 5, 4, 3, 3, 1, 1, 1, 1};
  const auto g = c.geometry();
  V<E> x("x", g.input_size()), zero_bias("b", c.out_channels), none("none", 0);
  V<E> dy("dy", g.output_size());
  M<E> w("w", c.out_channels, g.patch());
  test::from_host(x, test::random_values(x.size(), 11));
  test::from_host(w, test::random_values(w.size(), 12));
  test::from_host(dy, test::random_values(dy.size(), 13));
  std::vector<std::vector<float>> ys, dxs, dws;
  for (const auto& b : {zero_bias, none}) {
    V<E> y("y", g.output_size()), dx("dx", g.input_size());
    M<E> dw("dw", c.out_channels, g.patch());
    kernels::conv2d_forward(E(), g, x, w, b, y, two_sample_scratch<E>(g));
    kernels::conv2d_backward(E(), g, x, w, dy, dx, dw, b, two_sample_scratch<E>(g));
    ys.push_back(test::to_host(y));
    dxs.push_back(test::to_host(dx));
    dws.push_back(test::to_host(dw));
  }
  // The same products in the same order: adding a zero bias changes no bit.
  EXPECT_EQ(ys[0], ys[1]);
  EXPECT_EQ(dxs[0], dxs[1]);
  EXPECT_EQ(dws[0], dws[1]);
}

// ConvSchedule::threads: blocks of several samples with a short last block
// (4 x 4 images, 16 samples a block), and 35 one-sample blocks summed into
// dW in 12 groups, 11 of three blocks and one of two (16 x 16 images). Values against the naive
// loops, and the same bits on every space and so every thread count (ctest
// runs the suite at 1 and 2 threads; the Serial space runs the gemm outside
// a parallel region, where the BLAS may use all threads). In device-path
// mode the same for ConvSchedule::blocks (two samples a block): its
// lowering sums in fixed orders, its gemms are the BLAS's whole products.
template <class E>
std::vector<float> run_threads_schedule(const ConvCase& c, kernels::ConvSchedule schedule) {
  const auto g = c.geometry();
  V<E> x("x", g.input_size()), b("b", c.out_channels), y("y", g.output_size()),
      dy("dy", g.output_size()), dx("dx", g.input_size()), db("db", c.out_channels);
  M<E> w("w", c.out_channels, g.patch()), dw("dw", c.out_channels, g.patch());
  test::from_host(x, test::random_values(x.size(), 21));
  test::from_host(w, test::random_values(w.size(), 22));
  test::from_host(b, test::random_values(b.size(), 23));
  test::from_host(dy, test::random_values(dy.size(), 24));
  const auto scratch = scratch_for<E>(g, schedule);
  kernels::conv2d_forward(E(), g, x, w, b, y, scratch, schedule);
  kernels::conv2d_backward(E(), g, x, w, dy, dx, dw, db, scratch, schedule);
  std::vector<float> out;
  for (const auto& v : {y, dx, V<E>(dw.data(), dw.size()), db}) {
    const auto h = test::to_host(v);
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

TYPED_TEST(ConvKernels, SpaceScheduleGivesTheSameBitsOnEverySpace) {
  using E = TypeParam;
  using Default = Kokkos::DefaultExecutionSpace;
  if (host_schedules_missing<E>()) GTEST_SKIP() << "no ConvSchedule::threads on " << E::name();
  using kernels::ConvSchedule;
  for (const auto& [c, host_schedule] :
       {std::pair{ConvCase{40, 3, 2, 4, 4, 3, 3, 1, 1, 1, 1}, ConvSchedule::threads},
        std::pair{ConvCase{35, 2, 3, 16, 16, 3, 3, 1, 1, 1, 1}, ConvSchedule::threads},
        std::pair{ConvCase{35, 16, 32, 7, 7, 5, 5, 1, 1, 2, 2}, ConvSchedule::winograd},
        std::pair{ConvCase{35, 20, 70, 9, 9, 3, 3, 2, 2, 1, 1}, ConvSchedule::direct}}) {
    const auto g = c.geometry();
    ASSERT_GT(g.thread_blocks(), 1);
    if (host_schedule == ConvSchedule::direct) {
      // 3 samples a block (12 blocks, the last of 2), each its own group
      // of the weight gradient's partials.
      ASSERT_TRUE(g.direct());
      EXPECT_EQ(g.direct_block_samples(), 3);
      EXPECT_EQ(g.direct_blocks(), 12);
      EXPECT_EQ(g.direct_groups(), 12);
    } else if (c.height == 4) {
      EXPECT_EQ(g.thread_block_samples(), 16);
      EXPECT_EQ(g.thread_blocks(), 3);
    } else if (c.height == 16) {
      EXPECT_EQ(g.thread_block_samples(), 1);
      EXPECT_EQ(g.thread_group_blocks(), 3);
      EXPECT_EQ(g.thread_groups(), 12);
    } else {
      // Winograd: 4 x 4 tiles a sample, 4 samples a block (9 blocks, the
      // last of 3), each its own group of the weight gradient's dU; the
      // input gradient in blocks of 4 (and 3) within them.
      ASSERT_TRUE(g.winograd());
      EXPECT_EQ(g.winograd_block_samples(), 4);
      EXPECT_EQ(g.winograd_blocks(), 9);
      EXPECT_EQ(g.winograd_group_blocks(), 1);
      EXPECT_EQ(g.winograd_groups(), 9);
      EXPECT_EQ(g.transposed().winograd_block_samples(), 4);
    }
    const ConvSchedule schedule = schedule_here<E>(host_schedule);
    std::vector<float> got;
    {
      const test::LaunchedKernels kernels;
      got = run_threads_schedule<E>(c, schedule);
      for (const auto& label : schedule_labels<E>(schedule, schedule_applies(schedule, g)))
        EXPECT_TRUE(kernels.launched(label)) << label << " not launched; ran " << kernels.list();
    }
    const NaiveConv ref{c};
    const auto xh = test::random_values(g.input_size(), 21),
               wh = test::random_values(g.out_channels * g.patch(), 22),
               bh = test::random_values(c.out_channels, 23),
               dyh = test::random_values(g.output_size(), 24);
    std::vector<double> y_ref(g.output_size()), dx_ref(g.input_size()), dw_ref(wh.size()),
        db_ref(bh.size());
    const std::int64_t positions = g.positions();
    for (std::size_t i = 0; i < y_ref.size(); ++i) {
      y_ref[i] = bh[(i / positions) % c.out_channels];
      db_ref[(i / positions) % c.out_channels] += dyh[i];
    }
    ref.taps([&](std::size_t xi, std::size_t wi, std::size_t yi) {
      y_ref[yi] += double(xh[xi]) * wh[wi];
      dx_ref[xi] += double(wh[wi]) * dyh[yi];
      dw_ref[wi] += double(xh[xi]) * dyh[yi];
    });
    std::vector<double> expected;
    for (const auto* v : {&y_ref, &dx_ref, &dw_ref, &db_ref})
      expected.insert(expected.end(), v->begin(), v->end());
    ASSERT_EQ(got.size(), expected.size());
    const double tol = 1e-5 * (g.patch() + c.batch * positions);
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], expected[i], tol) << "case " << c.height << "x" << c.width << ", " << i;
    // The bits are promised per backend: the host spaces against each
    // other, where both run this schedule. ConvSchedule::blocks promises
    // nothing across spaces: each product is one gemm on the whole space,
    // which Kokkos Kernels 4 computes differently on Serial and OpenMP.
    if (std::is_same<E, Default>::value ||
        !Kokkos::SpaceAccessibility<Default, Kokkos::HostSpace>::accessible ||
        schedule_here<Default>(host_schedule) != schedule || schedule == ConvSchedule::blocks)
      continue;
    const std::vector<float> other = run_threads_schedule<Default>(c, schedule);
    // Every product runs on one thread alone, in blocks and groups fixed by
    // the geometry: the same bits on every space and for any thread count
    // (the Winograd case's weight-gradient gemms are 32 x 16 x 64, below
    // the sizes OpenBLAS splits over its own threads on the Serial space).
    EXPECT_EQ(got, other);
  }
}

// A model allocates its layers' scratch for its largest batch and runs
// smaller ones too (the last batch of an epoch): ConvSchedule::threads'
// scratch for a batch holds every smaller batch, although the number of dW
// groups is not monotonic (7 x 7 outputs, 6 samples a block: 128 samples
// make 22 blocks in 11 groups, 96 samples 16 blocks in 16 groups). In
// device-path mode: ConvSchedule::blocks with the scratch Conv2D allocates
// there for 128 samples (device_block_scratch_bytes: one block) on 96,
// against blocks of two samples.
TYPED_TEST(ConvKernels, ScratchForABatchHoldsEverySmallerBatch) {
  using E = TypeParam;
  for (const ConvCase& c :
       {ConvCase{128, 2, 3, 7, 7, 3, 3, 1, 1, 1, 1}, ConvCase{128, 3, 4, 14, 14, 3, 3, 2, 2, 1, 1},
        ConvCase{128, 4, 5, 4, 4, 3, 3, 1, 1, 1, 1}, ConvCase{100, 1, 8, 28, 28, 5, 5, 1, 1, 2, 2},
        ConvCase{128, 16, 32, 14, 14, 5, 5, 1, 1, 2, 2},
        ConvCase{128, 32, 16, 4, 4, 3, 3, 1, 1, 1, 1}}) {
    const auto largest = c.geometry();
    for (std::int64_t threads : {1, 2, 7})
      for (int batch = 1; batch <= c.batch; ++batch) {
        ConvCase smaller = c;
        smaller.batch = batch;
        EXPECT_LE(smaller.geometry().thread_scratch_size(threads),
                  largest.thread_scratch_size(threads))
            << "batch " << batch << " of " << c.batch << ", " << threads << " threads";
      }
  }
  const ConvCase c{96, 2, 3, 7, 7, 3, 3, 1, 1, 1, 1};
  auto g = c.geometry();
  EXPECT_EQ(g.thread_groups(), 16);
  g.batch = 128;
  EXPECT_EQ(g.thread_groups(), 11);
  if (host_schedules_missing<E>())
    GTEST_SKIP() << "no ConvSchedule::threads on " << E::name() << " (the geometry checks ran)";
  // The scratch for 128 samples each schedule runs on, after blocks of two.
  std::vector<std::pair<kernels::ConvSchedule, V<E>>> runs;
  if (kernels::impl::thread_gemm_space_v<E>) {
    const auto scratch = scratch_for<E>(g, kernels::ConvSchedule::threads);
    for (const auto schedule : schedules<E>())
      runs.emplace_back(schedule, schedule != kernels::ConvSchedule::blocks ? scratch : V<E>());
  } else {
    ASSERT_EQ(schedules<E>(), std::vector<kernels::ConvSchedule>{kernels::ConvSchedule::blocks});
    const std::int64_t samples =
        kernels::conv2d_block_samples(g, kernels::device_block_scratch_bytes);
    EXPECT_EQ(samples, 128);
    runs.emplace_back(kernels::ConvSchedule::blocks, V<E>());
    runs.emplace_back(kernels::ConvSchedule::blocks, V<E>("scratch", g.scratch_size(samples)));
  }
  g.batch = c.batch;
  // Both schedules on the same values, with scratch for 128 samples.
  V<E> x("x", g.input_size()), b("b", c.out_channels), dy("dy", g.output_size());
  M<E> w("w", c.out_channels, g.patch());
  test::from_host(x, test::random_values(x.size(), 31));
  test::from_host(w, test::random_values(w.size(), 32));
  test::from_host(b, test::random_values(b.size(), 33));
  test::from_host(dy, test::random_values(dy.size(), 34));
  std::vector<std::vector<float>> results;
  for (const auto& [schedule, scratch] : runs) {
    V<E> y("y", g.output_size()), dx("dx", g.input_size()), db("db", c.out_channels);
    M<E> dw("dw", c.out_channels, g.patch());
    const auto s = scratch.size() > 0 ? scratch : scratch_for<E>(g, schedule);
    const test::LaunchedKernels kernels;
    kernels::conv2d_forward(E(), g, x, w, b, y, s, schedule);
    kernels::conv2d_backward(E(), g, x, w, dy, dx, dw, db, s, schedule);
    // Two and three channels keep the threads schedule's products under
    // ConvSchedule::winograd; ConvSchedule::direct runs its own.
    ASSERT_FALSE(g.winograd());
    ASSERT_TRUE(g.direct());
    for (const auto& ran : schedule_labels<E>(schedule, schedule_applies(schedule, g)))
      EXPECT_TRUE(kernels.launched(ran)) << ran << " not launched; ran " << kernels.list();
    std::vector<float> out;
    for (const auto& v : {y, dx, V<E>(dw.data(), dw.size()), db}) {
      const auto h = test::to_host(v);
      out.insert(out.end(), h.begin(), h.end());
    }
    results.push_back(out);
  }
  const double tol = 1e-5 * (g.patch() + c.batch * g.positions());
  for (std::size_t run = 1; run < results.size(); ++run)
    for (std::size_t i = 0; i < results[0].size(); ++i)
      EXPECT_NEAR(results[run][i], results[0][i], tol) << schedule_name(runs[run].first) << i;
}

// Winograd's F(m x m, r x r) against the naive loops: 3 x 3 and 5 x 5
// kernels, partial tiles (odd output sizes), no padding, padding of
// kernel - 1 and different row and column padding, more input than output
// channels and fewer, 2 x 2 outputs (one tile of 4 x 4 for 3 x 3 kernels),
// and 40 samples in 20 blocks (10 groups of 2 blocks for the weight
// gradient's sums). Each output and input gradient lies within
// winograd_rounding units of roundoff of the sum of its terms' magnitudes
// (at most 43 measured on these cases, on F(4 x 4, 3 x 3); 23 on
// F(2 x 2, 5 x 5): the transforms multiply by up to 8 and add up to 36
// values, so the error is larger than the direct form's, while a wrong
// coefficient or tile is off by the size of the terms). The weight
// gradient goes through the output's transform (entries up to 8 for
// m = 4, 2 for m = 2) and G^T dU G, whose rows for the points 2 and -2 of
// the 5 x 5 kernels grow as 2^4: within winograd_weight_rounding units (at
// most 60 measured, on the 5 x 5 cases; 23 on the 3 x 3 ones). In device-path mode the
// same cases and bounds for ConvSchedule::blocks, which CUDA and HIP run on
// these geometries.
constexpr double winograd_rounding = 64;
constexpr double winograd_weight_rounding = 256;

// Runs forward and backward of `schedule` on c and compares y, dx (added
// onto a random start; with_dx false: backward without dx, as for a
// network's first layer), dW and db with the naive loops: each value within
// the given units of roundoff of the sum of its terms' magnitudes.
template <class E>
void expect_naive_within(const ConvCase& c, kernels::ConvSchedule schedule, double y_units,
                         double dx_units, double dw_units, double db_units, bool with_dx = true) {
  const double u = std::numeric_limits<float>::epsilon() / 2;
  const auto g = c.geometry();
  const NaiveConv ref{c};
  V<E> x("x", g.input_size()), b("b", c.out_channels), y("y", g.output_size()),
      dy("dy", g.output_size()), dx("dx", with_dx ? g.input_size() : 0), db("db", c.out_channels);
  M<E> w("w", c.out_channels, g.patch()), dw("dw", c.out_channels, g.patch());
  const auto xh = test::random_values(x.size(), 41), wh = test::random_values(w.size(), 42),
             bh = test::random_values(b.size(), 43), dyh = test::random_values(dy.size(), 44),
             start = test::random_values(g.input_size(), 45);
  test::from_host(x, xh);
  test::from_host(w, wh);
  test::from_host(b, bh);
  test::from_host(dy, dyh);
  if (with_dx) test::from_host(dx, start);
  const auto scratch = scratch_for<E>(g, schedule);
  {
    const test::LaunchedKernels kernels;
    kernels::conv2d_forward(E(), g, x, w, b, y, scratch, schedule);
    kernels::conv2d_backward(E(), g, x, w, dy, dx, dw, db, scratch, schedule);
    for (const auto& label : schedule_labels<E>(schedule, schedule_applies(schedule, g)))
      EXPECT_TRUE(kernels.launched(label)) << label << " not launched; ran " << kernels.list();
  }
  std::vector<double> y_ref(y.size()), y_scale(y.size()), dx_ref(start.begin(), start.end()),
      dx_scale(g.input_size()), dw_ref(dw.size()), dw_scale(dw.size());
  for (std::size_t i = 0; i < y_ref.size(); ++i) {
    y_ref[i] = bh[(i / g.positions()) % c.out_channels];
    y_scale[i] = std::fabs(y_ref[i]);
  }
  for (std::size_t i = 0; i < dx_scale.size(); ++i) dx_scale[i] = std::fabs(dx_ref[i]);
  ref.taps([&](std::size_t xi, std::size_t wi, std::size_t yi) {
    y_ref[yi] += double(xh[xi]) * wh[wi];
    y_scale[yi] += std::fabs(double(xh[xi]) * wh[wi]);
    dx_ref[xi] += double(wh[wi]) * dyh[yi];
    dx_scale[xi] += std::fabs(double(wh[wi]) * dyh[yi]);
    dw_ref[wi] += double(xh[xi]) * dyh[yi];
    dw_scale[wi] += std::fabs(double(xh[xi]) * dyh[yi]);
  });
  std::vector<double> db_ref(db.size()), db_scale(db.size());
  for (std::size_t i = 0; i < dyh.size(); ++i) {
    db_ref[(i / g.positions()) % c.out_channels] += dyh[i];
    db_scale[(i / g.positions()) % c.out_channels] += std::fabs(dyh[i]);
  }
  const auto expect_within = [&](const char* what, const std::vector<float>& got,
                                 const std::vector<double>& ref, const std::vector<double>& scale,
                                 double units) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], ref[i], units * u * scale[i])
          << schedule_name(schedule) << ", case " << c.in_channels << " -> " << c.out_channels
          << " k" << c.kernel_h << "x" << c.kernel_w << " s" << c.stride_h << "x" << c.stride_w
          << " p" << c.pad_h << "x" << c.pad_w << ", " << what << " " << i;
  };
  expect_within("y", test::to_host(y), y_ref, y_scale, y_units);
  if (with_dx) expect_within("dx", test::to_host(dx), dx_ref, dx_scale, dx_units);
  expect_within("dW", test::to_host(V<E>(dw.data(), dw.size())), dw_ref, dw_scale, dw_units);
  expect_within("db", test::to_host(db), db_ref, db_scale, db_units);
}

TYPED_TEST(ConvKernels, WinogradGeometriesMatchNaiveLoops) {
  using E = TypeParam;
  // Geometries that keep the threads schedule's products: channels not
  // multiples of 16, stride 2, a 1 x 1, 7 x 7 or 3 x 5 kernel, padding of
  // the kernel's size.
  for (const ConvCase& c :
       {ConvCase{2, 8, 16, 8, 8, 3, 3, 1, 1, 1, 1}, ConvCase{2, 16, 24, 8, 8, 3, 3, 1, 1, 1, 1},
        ConvCase{2, 16, 16, 8, 8, 3, 3, 2, 2, 1, 1}, ConvCase{2, 16, 16, 8, 8, 1, 1, 1, 1, 0, 0},
        ConvCase{2, 16, 16, 8, 8, 7, 7, 1, 1, 3, 3}, ConvCase{2, 16, 16, 8, 8, 3, 5, 1, 1, 1, 2},
        ConvCase{2, 16, 16, 8, 8, 3, 3, 1, 1, 3, 3}})
    EXPECT_FALSE(c.geometry().winograd()) << "k" << c.kernel_h << "x" << c.kernel_w;
  if (host_schedules_missing<E>()) GTEST_SKIP() << "no ConvSchedule::winograd on " << E::name();
  const auto schedule = schedule_here<E>(kernels::ConvSchedule::winograd);
  for (const ConvCase& c :
       {ConvCase{3, 16, 32, 7, 6, 3, 3, 1, 1, 1, 1}, ConvCase{2, 32, 16, 9, 7, 5, 5, 1, 1, 2, 2},
        ConvCase{2, 16, 16, 6, 7, 3, 3, 1, 1, 0, 0}, ConvCase{2, 16, 16, 5, 6, 5, 5, 1, 1, 4, 3},
        ConvCase{2, 16, 16, 4, 4, 3, 3, 1, 1, 0, 0},
        ConvCase{40, 16, 16, 26, 26, 3, 3, 1, 1, 1, 1}}) {
    const auto g = c.geometry();
    ASSERT_TRUE(g.winograd());
    if (c.batch == 40) EXPECT_EQ(g.winograd_group_blocks(), 2);
    expect_naive_within<E>(c, schedule, winograd_rounding, winograd_rounding,
                           winograd_weight_rounding, winograd_rounding);
  }
}

// The transforms' constant matrices (impl::WinogradMatrices) are those
// Winograd's constructor derives from the interpolation points, and their
// FLOPs count the terms of the nonzero coefficients: B^T's rows hold 3, 4,
// 4, 4, 4 and 3 terms, each row 2 of them with a coefficient other than 1
// and -1 (4, -5, 2, -2 or -4); A^T's rows for m = 4 hold 5, 4, 4 and 5
// terms, the last three 2 each with a coefficient other than 1 and -1 (2,
// -2; 4, 4; 8, -8).
TEST(Winograd, ConstantMatricesAreTheDerivedOnes) {
  using kernels::impl::Winograd;
  using kernels::impl::WinogradMatrices;
  const auto expect_same = [](const Winograd& w, const auto& m) {
    for (int i = 0; i < w.t; ++i)
      for (int j = 0; j < w.t; ++j)
        EXPECT_EQ(w.bt[i][j], m.bt[i][j]) << "r " << w.r << " B^T " << i << j;
    for (int i = 0; i < w.m; ++i)
      for (int j = 0; j < w.t; ++j)
        EXPECT_EQ(w.at[i][j], m.at[i][j]) << "r " << w.r << " A^T " << i << j;
  };
  EXPECT_EQ(Winograd(3).m, 4);
  EXPECT_EQ(Winograd(3).t, 6);
  EXPECT_EQ(Winograd(5).m, 2);
  EXPECT_EQ(Winograd(5).t, 6);
  expect_same(Winograd(3), WinogradMatrices<6, 4>{});
  expect_same(Winograd(5), WinogradMatrices<6, 2>{});
  // Two passes of t rows of B^T over t columns or rows.
  EXPECT_EQ(kernels::impl::winograd_input_tile_flops<6>(), 2 * 6 * (4 + 5 + 5 + 5 + 5 + 4));
  // t columns, then m rows, each through A^T's m rows.
  EXPECT_EQ((kernels::impl::winograd_output_tile_flops<6, 2>()), (6 + 2) * (4 + 6));
  EXPECT_EQ((kernels::impl::winograd_output_tile_flops<6, 4>()), (6 + 4) * (4 + 5 + 5 + 6));
  // Each of A^T's t columns taken m + t times (m columns of d, then t
  // rows): an add a nonzero entry after the first, a multiply an entry
  // other than 0, 1 and -1.
  EXPECT_EQ((kernels::impl::winograd_gradient_tile_flops<6, 2>()), (2 + 6) * (1 + 1 + 2 + 2));
  EXPECT_EQ((kernels::impl::winograd_gradient_tile_flops<6, 4>()), (4 + 6) * (3 + 3 + 6 + 6));
}

// Winograd's t^2 products (impl::tile_product) against a product in
// double: rows side by side (the weight gradient's, a_step apart) or lda
// apart (the forward's), fewer rows than a tile, a last tile of rows that
// overlaps the one before, columns of one tile and of several, and beta 1
// adding to c (the overlapped rows added once). Every value is a sum of
// `length` products in float, within that many units of roundoff of the
// sum of their magnitudes (one more for beta 1's add).
TEST(Winograd, TileProductMatchesTheProductInDouble) {
  struct Case {
    std::int64_t rows, cols, length;
    bool side_by_side;
  };
  const std::int64_t lanes = kernels::impl::native_lanes;
  for (const Case& k :
       {Case{13, 3 * lanes, 37, false}, Case{32, 2 * lanes, 11, true}, Case{4, lanes, 9, false},
        Case{7, 5 * lanes, 64, true}, Case{6, 4 * lanes, 1, false}}) {
    const std::int64_t lda = k.side_by_side ? 1 : k.length + 3;
    const std::int64_t a_step = k.side_by_side ? k.rows + 2 : 1;
    const std::int64_t ldb = k.cols + lanes, ldc = k.cols + 2 * lanes;
    std::vector<float> a(
        static_cast<std::size_t>(k.side_by_side ? k.length * a_step : k.rows * lda));
    std::vector<float> b(static_cast<std::size_t>(k.length * ldb));
    std::vector<float> c0(static_cast<std::size_t>(k.rows * ldc));
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(std::sin(0.37 * double(i) + 0.1));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(std::cos(0.53 * double(i)));
    for (std::size_t i = 0; i < c0.size(); ++i) c0[i] = float(0.25 * std::sin(1.7 * double(i)));
    for (const float beta : {0.0f, 1.0f}) {
      std::vector<float> c = c0;
      kernels::impl::tile_product(k.rows, k.cols, k.length, a.data(), lda, a_step, b.data(), ldb,
                                  beta, c.data(), ldc);
      const double eps = std::numeric_limits<float>::epsilon();
      for (std::int64_t r = 0; r < k.rows; ++r) {
        for (std::int64_t o = 0; o < ldc; ++o) {
          const float got = c[r * ldc + o];
          if (o >= k.cols) {
            EXPECT_EQ(got, c0[r * ldc + o]) << "row " << r << " column " << o << " beyond cols";
            continue;
          }
          double sum = beta * double(c0[r * ldc + o]), magnitude = std::abs(sum);
          for (std::int64_t j = 0; j < k.length; ++j) {
            const double term = double(a[r * lda + j * a_step]) * double(b[j * ldb + o]);
            sum += term;
            magnitude += std::abs(term);
          }
          EXPECT_NEAR(got, sum, double(k.length + 1) * eps * magnitude)
              << "rows " << k.rows << " cols " << k.cols << " length " << k.length << " beta "
              << beta << ": row " << r << " column " << o;
        }
      }
    }
  }
}

// The direct schedule against the naive loops: a one-channel input (the
// stem of the ResNet deck), stride 2 (the downsampling 3 x 3 and the 1 x 1
// projection, whose input's last row and column no window reads), channel
// counts that are not multiples of a vector (a tile narrower than its
// registers on both sides), a 5 x 5 kernel, several blocks of samples and
// groups of blocks. Every value is a sum of its terms in float, so it lies
// within that many units of roundoff of the sum of their magnitudes (one
// more for the add into dx, and a group's partials added into dW).
TYPED_TEST(ConvKernels, DirectGeometriesMatchNaiveLoops) {
  using E = TypeParam;
  if (host_schedules_missing<E>()) GTEST_SKIP() << "no ConvSchedule::direct on " << E::name();
  const auto schedule = schedule_here<E>(kernels::ConvSchedule::direct);
  for (const ConvCase& c :
       {ConvCase{12, 1, 32, 28, 28, 3, 3, 1, 1, 1, 1},
        ConvCase{15, 32, 64, 14, 14, 3, 3, 2, 2, 1, 1},
        ConvCase{17, 32, 64, 14, 14, 1, 1, 2, 2, 0, 0}, ConvCase{9, 20, 70, 7, 7, 3, 3, 2, 2, 1, 1},
        ConvCase{3, 16, 8, 9, 7, 5, 5, 1, 1, 2, 2}, ConvCase{40, 2, 5, 64, 63, 3, 2, 1, 2, 1, 0}}) {
    const auto g = c.geometry();
    ASSERT_TRUE(g.direct());
    if (c.batch == 40) EXPECT_GT(g.direct_group_blocks(), 1);
    if (c.kernel_h == 1) EXPECT_LT(g.direct_rows(), c.height);
    const double positions = double(c.batch) * g.positions();
    expect_naive_within<E>(c, schedule, double(g.patch() + 1),
                           double(g.taps() * c.out_channels + 1), positions + 16, positions + 16);
  }
}

// The direct schedule's planar form (Conv2dGeometry::direct_planar: at
// most 4 input channels, stride 1) against the naive loops, with and
// without dx (the planar weight gradient runs without it): the ResNet
// deck's stem, the CNN deck's 5 x 5 one, three channels into fewer than a
// tile of output channels on an odd-sized input, rows narrower than a
// vector (the forward then takes the channel-last tiles), a 1 x 1 kernel,
// a kernel of two rows and four columns, and 40 samples in several groups.
// The weight gradient sums over every flat position of a block in 8
// lanes, the flat positions a row's kernel - 1 columns past its outputs
// contributing zeros.
TYPED_TEST(ConvKernels, DirectPlanarFormMatchesNaiveLoops) {
  using E = TypeParam;
  if (host_schedules_missing<E>()) GTEST_SKIP() << "no ConvSchedule::direct on " << E::name();
  const auto schedule = schedule_here<E>(kernels::ConvSchedule::direct);
  for (const ConvCase& c :
       {ConvCase{12, 1, 32, 28, 28, 3, 3, 1, 1, 1, 1}, ConvCase{6, 1, 32, 28, 28, 5, 5, 1, 1, 2, 2},
        ConvCase{5, 3, 5, 13, 21, 3, 3, 1, 1, 1, 1}, ConvCase{7, 2, 9, 6, 5, 3, 3, 1, 1, 1, 1},
        ConvCase{3, 4, 7, 9, 17, 1, 1, 1, 1, 0, 0}, ConvCase{40, 1, 3, 60, 61, 2, 4, 1, 1, 0, 1}}) {
    const auto g = c.geometry();
    ASSERT_TRUE(g.direct_planar());
    if (c.batch == 40) EXPECT_GT(g.direct_group_blocks(), 1);
    const double positions = double(c.batch) * g.positions();
    for (const bool with_dx : {true, false}) {
      SCOPED_TRACE(with_dx ? "with dx" : "without dx");
      expect_naive_within<E>(c, schedule, double(g.patch() + 1),
                             double(g.taps() * c.out_channels + 1), positions + 16, positions + 16,
                             with_dx);
    }
  }
}

// The planar forward sums each output's terms in the channel-last tiles'
// order, so a convolution gives the same bits either way: outputs of an
// input wide enough for the planar tiles equal, bit for bit, those of the
// same windows in an input whose rows are narrower than a vector (where
// the channel-last tiles run), with one input channel (runs of kernel
// rows) and with three (runs of taps).
TYPED_TEST(ConvKernels, DirectPlanarForwardHasTheChannelLastBits) {
  using E = TypeParam;
  if (host_schedules_missing<E>()) GTEST_SKIP() << "no ConvSchedule::direct on " << E::name();
  if (!kernels::impl::thread_gemm_space_v<E>) {
    // Device paths: no direct schedule, and asking for it is refused.
    const ConvCase c{3, 1, 7, 9, 40, 3, 3, 1, 1, 1, 1};
    const auto g = c.geometry();
    V<E> x("x", g.input_size()), b("b", 7), y("y", g.output_size());
    M<E> w("w", 7, g.patch());
    test::expect_error(
        [&] {
          kernels::conv2d_forward(E(), g, x, w, b, y, two_sample_scratch<E>(g),
                                  kernels::ConvSchedule::direct);
        },
        "use conv2d_schedule(exec) to choose the schedule");
    return;
  }
  for (const int in : {1, 3}) {
    const ConvCase wide{3, in, 7, 9, 40, 3, 3, 1, 1, 1, 1},
        narrow{3, in, 7, 9, 5, 3, 3, 1, 1, 1, 1};
    const auto gw = wide.geometry(), gn = narrow.geometry();
    ASSERT_GE(gw.cols.out, kernels::impl::native_lanes);
    ASSERT_LT(gn.cols.out, kernels::impl::native_lanes);
    V<E> xw("xw", gw.input_size()), xn("xn", gn.input_size()), b("b", 7),
        yw("yw", gw.output_size()), yn("yn", gn.output_size());
    M<E> w("w", 7, gw.patch());
    const auto xh = test::random_values(xw.size(), 51);
    std::vector<float> xnh(xn.size());
    for (std::size_t i = 0; i < xnh.size(); ++i) {
      const std::size_t plane = i / 45, row = i % 45 / 5, col = i % 5;
      xnh[i] = xh[plane * 360 + row * 40 + col];
    }
    test::from_host(xw, xh);
    test::from_host(xn, xnh);
    test::from_host(w, test::random_values(w.size(), 52));
    test::from_host(b, test::random_values(b.size(), 53));
    kernels::conv2d_forward(E(), gw, xw, w, b, yw,
                            scratch_for<E>(gw, kernels::ConvSchedule::direct),
                            kernels::ConvSchedule::direct);
    kernels::conv2d_forward(E(), gn, xn, w, b, yn,
                            scratch_for<E>(gn, kernels::ConvSchedule::direct),
                            kernels::ConvSchedule::direct);
    const auto got_w = test::to_host(yw), got_n = test::to_host(yn);
    // Output columns 0 to 3 read the same values in both (column 4 of the
    // narrow input reads its padding where the wide one reads column 5).
    for (std::size_t i = 0; i < got_n.size(); ++i) {
      const std::size_t plane = i / 45, row = i % 45 / 5, col = i % 5;
      if (col < 4)
        ASSERT_EQ(got_n[i], got_w[plane * 360 + row * 40 + col])
            << in << " channels, output plane " << plane << " row " << row << " column " << col;
    }
  }
}

// Conv2D runs ConvSchedule::winograd (threads, with Winograd's products
// where the geometry allows) on the OpenMP and Serial spaces when the BLAS
// runs on its calling thread inside a parallel region, and blocks when
// OpenBLAS brings its own pthreads; in device-path mode, blocks (as on
// CUDA and HIP) whatever the BLAS.
TEST(Conv2dSchedule, WinogradWhereTheBlasRunsOnItsCallingThread) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  const BlasInfo blas = blas_info();
  const auto chosen = kernels::conv2d_schedule(Host());
  if (!kernels::impl::thread_gemm_space_v<Host>) {
    EXPECT_FALSE(host_fast_paths_v<Host>);
    EXPECT_EQ(chosen, kernels::ConvSchedule::blocks) << blas.library << ", device paths";
    return;
  }
  if (blas.openblas && blas.threading != "pthreads") {
    EXPECT_EQ(chosen, kernels::ConvSchedule::winograd) << blas.library;
  } else if (blas.openblas) {
    EXPECT_EQ(chosen, kernels::ConvSchedule::blocks) << blas.library;
  }
  EXPECT_EQ(chosen == kernels::ConvSchedule::winograd, thread_sgemm() != nullptr);
}

// The kernel tests above loop over schedules<E>() (blocks, threads,
// winograd and direct), which holds only
// ConvSchedule::blocks where the BLAS has no gemm for each thread alone:
// such a build tests less, and says so here, once, as a skip that the
// expected-skip list must name (tests/expected_skips.txt). In device-path
// mode ConvSchedule::blocks is all there is, as on CUDA and HIP: the tests
// of the host schedules run it.
TEST(Conv2dSchedule, ThreadsAndWinogradAreTestedHere) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  if (!kernels::impl::thread_gemm_space_v<Host>) {
    EXPECT_EQ(schedules<Host>(), std::vector<kernels::ConvSchedule>{kernels::ConvSchedule::blocks});
    return;
  }
  if (thread_sgemm() == nullptr)
    GTEST_SKIP() << "the BLAS (" << blas_info().library
                 << ") has no sgemm that runs on its calling thread: the kernel tests cover "
                    "ConvSchedule::blocks only";
  EXPECT_EQ(schedules<Kokkos::DefaultHostExecutionSpace>().size(), 4u);
}

TYPED_TEST(ConvKernels, ErrorsNameFunctionAndShapes) {
  using E = TypeParam;
  const ConvCase c{2, 3, 4, 5, 5, 3, 3, 1, 1, 0, 0};
  const auto g = c.geometry();
  V<E> x("x", g.input_size()), b("b", 4), y("y", g.output_size());
  M<E> wrong("w", 4, 26);
  // Every extent given and every extent expected.
  test::expect_error(
      [&] { kernels::conv2d_forward(E(), g, x, wrong, b, y, two_sample_scratch<E>(g)); },
      "tessera::kernels::conv2d_forward: x has 150 elements, W [4, 26], b [4], y 72 "
      "elements; expected x [2, 3, 5, 5], W [4, 27], b [4] or [0] (no bias), y [2, 4, 3, 3]");
  M<E> w("w", 4, 27);
  test::expect_error([&] { kernels::conv2d_forward(E(), g, x, w, b, y, V<E>("small", 10)); },
                     "scratch of 10 floats is below one sample's");
  if (schedules<E>().size() < 2) {
    test::expect_error(
        [&] {
          kernels::conv2d_forward(E(), g, x, w, b, y, two_sample_scratch<E>(g),
                                  kernels::ConvSchedule::threads);
        },
        "tessera::kernels::conv2d_forward: ConvSchedule::threads needs the OpenMP or Serial "
        "execution space");
    return;
  }
  const std::int64_t threads = Kokkos::Experimental::UniqueToken<E>(E()).size();
  std::ostringstream expected;
  expected << "tessera::kernels::conv2d_backward: scratch of 10 floats is below the "
           << g.thread_scratch_size(threads) << " of ConvSchedule::threads on " << threads
           << " threads";
  V<E> dx("dx", g.input_size()), dy("dy", g.output_size());
  test::expect_error(
      [&] {
        kernels::conv2d_backward(E(), g, x, w, dy, dx, M<E>("dw", 4, 27), b, V<E>("small", 10),
                                 kernels::ConvSchedule::threads);
      },
      expected.str());
}

// The device paths of the lowering (impl/conv_lowering.hpp), called
// directly, so that the default build runs them too, at every team size the
// space allows. im2col and channel_major copy, and the fold adds each input
// element's taps in the host path's order: each must store what the host
// path stores, bit for bit (the host path here: its per-plane and per-row
// functions on the calling thread). The fold is also checked against a
// double sum, and channel_major's rows' sums (team_sum) against double sums
// and for the same bits at every team size. Samples [1, batch) of each
// case, so that a kernel that touches the sample before `first` fails.
template <class T>
std::vector<T> stored_as(const std::vector<float>& values) {
  std::vector<T> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = narrow<T>(values[i]);
  return out;
}

template <class T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& expected,
                      const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &expected[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " of " << got.size() << " is "
                    << float(widen(got[i])) << ", expected " << float(widen(expected[i]));
      return;
    }
}

template <class T, class E>
using StoredView = Kokkos::View<T*, Kokkos::LayoutRight, typename E::memory_space>;
template <class T>
using HostValues = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// The backend's choice (0) and the fixed team sizes E allows.
template <class E>
std::vector<kernels::TeamShape> team_shapes() {
  const int max_size = Kokkos::TeamPolicy<E>(E(), 1, 1).team_size_max(
      [] KOKKOS_FUNCTION(const typename Kokkos::TeamPolicy<E>::member_type&) {},
      Kokkos::ParallelForTag());
  std::vector<kernels::TeamShape> shapes{{0}};
  for (const int size : {1, 2, 3, 32, 64, 128, 256})
    if (size <= max_size) shapes.push_back({size});
  return shapes;
}

std::string team_name(kernels::TeamShape shape) {
  return shape.size > 0 ? "team size " + std::to_string(shape.size) : "automatic team size";
}

template <class E, class T>
void expect_device_im2col_as_host(const ConvCase& c) {
  const auto g = c.geometry();
  const std::int64_t first = 1, count = c.batch - 1, width = count * g.positions();
  auto xh = stored_as<T>(test::random_values(g.input_size(), 51));
  StoredView<T, E> x("x", xh.size());
  test::from_host(x, xh);
  std::vector<float> host(g.patch() * width, 7.0f);
  kernels::impl::lower_samples(g, HostValues<T>(xh.data(), xh.size()), first, count, host.data(),
                               width);
  for (const auto shape : team_shapes<E>()) {
    M<E> col("col", g.patch(), width);
    Kokkos::deep_copy(col, 7.0f);  // every entry is written
    {
      const test::LaunchedKernels kernels;
      kernels::impl::im2col_device(E(), g, x, first, count, col, shape);
      EXPECT_TRUE(kernels.launched("tessera::kernels::im2col_device")) << kernels.list();
    }
    expect_same_bits(test::to_host(V<E>(col.data(), col.size())), host,
                     "im2col_device, " + team_name(shape));
  }
}

template <class E, class T>
void expect_device_fold_as_host(const ConvCase& c) {
  const auto g = c.geometry();
  const std::int64_t first = 1, count = c.batch - 1, positions = g.positions();
  const std::int64_t width = count * positions, channels = g.in_channels;
  const std::int64_t plane = g.input_positions();
  const auto colh = test::random_values(g.patch() * width, 52);
  const auto start = stored_as<T>(test::random_values(g.input_size(), 53));
  M<E> col("col", g.patch(), width);
  test::from_host(V<E>(col.data(), col.size()), colh);

  std::vector<float> columns = colh;  // the host fold overwrites its seams
  std::vector<T> host = start;
  for (std::int64_t r = 0; r < count * channels; ++r)
    kernels::impl::fold_plane(host.data() + (first * channels + r) * plane,
                              columns.data() + (r / channels) * positions, r % channels, g.rows,
                              g.cols, width);
  // Each input element: its start plus its taps, summed in double.
  std::vector<double> sum(start.size()), magnitude(start.size());
  for (std::size_t i = 0; i < start.size(); ++i) {
    sum[i] = double(widen(start[i]));
    magnitude[i] = std::fabs(sum[i]);
  }
  const int kh = c.kernel_h, kw = c.kernel_w;
  for (std::int64_t k = 0; k < g.patch(); ++k)
    for (std::int64_t j = 0; j < width; ++j) {
      const std::int64_t n = first + j / positions, p = j % positions;
      const int ki = int((k / kw) % kh), kj = int(k % kw);
      const int h = g.rows.start(int(p / g.cols.out)) + ki;
      const int w = g.cols.start(int(p % g.cols.out)) + kj;
      if (h < 0 || h >= c.height || w < 0 || w >= c.width) continue;
      const std::size_t i = ((n * channels + k / (kh * kw)) * c.height + h) * c.width + w;
      sum[i] += colh[k * width + j];
      magnitude[i] += std::fabs(colh[k * width + j]);
    }
  const double u = std::numeric_limits<float>::epsilon() / 2;
  const double stored_u = std::is_same<T, float>::value ? 0.0 : 1.0 / 256;  // bf16: 8 bits
  for (const auto shape : team_shapes<E>()) {
    StoredView<T, E> dx("dx", start.size());
    test::from_host(dx, start);
    kernels::impl::col2im_add_device(E(), g, col, first, count, dx, shape);
    const auto got = test::to_host(dx);
    expect_same_bits(got, host, "col2im_add_device, " + team_name(shape));
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(double(widen(got[i])), sum[i],
                  (kh * kw + 1) * u * magnitude[i] + stored_u * std::fabs(sum[i]))
          << "dx " << i << ", " << team_name(shape);
  }
}

// channel_major_device against move_row; from_nchw with the rows' sums:
// those against double sums, and the same bits at every team size.
template <class E, class T>
void expect_device_channel_major_as_host(kernels::impl::Transfer transfer, bool with_bias,
                                         std::int64_t positions) {
  using kernels::impl::Transfer;
  const std::int64_t batch = 4, first = 1, count = 3, channels = 3;
  const std::int64_t ld = count * positions;
  const auto blockh = test::random_values(channels * ld, 54);
  const auto nchwh = stored_as<T>(test::random_values(batch * channels * positions, 55));
  const auto biash = test::random_values(with_bias ? channels : 0, 56);
  V<E> bias("bias", biash.size());
  test::from_host(bias, biash);
  std::vector<float> block_host = blockh;
  std::vector<T> nchw_host = nchwh;
  for (std::int64_t r = 0; r < count * channels; ++r) {
    const std::int64_t c = r % channels, n = r / channels;
    const float b = transfer == Transfer::to_nchw && with_bias ? biash[c] : 0.0f;
    kernels::impl::move_row(block_host.data() + c * ld + n * positions,
                            nchw_host.data() + ((first + n) * channels + c) * positions, b,
                            positions, transfer);
  }
  const bool with_sums = transfer == Transfer::from_nchw;
  std::vector<float> first_sums;
  for (const auto shape : team_shapes<E>()) {
    M<E> block("block", channels, ld);
    test::from_host(V<E>(block.data(), block.size()), blockh);
    StoredView<T, E> nchw("nchw", nchwh.size());
    test::from_host(nchw, nchwh);
    V<E> sums("sums", batch * channels);
    Kokkos::deep_copy(sums, 7.0f);
    kernels::impl::channel_major_device(E(), block, nchw, bias, first, count, channels, positions,
                                        transfer, with_sums ? sums.data() : nullptr, shape);
    const std::string what = "channel_major_device, transfer " + std::to_string(int(transfer)) +
                             ", " + std::to_string(positions) + " positions, " + team_name(shape);
    expect_same_bits(test::to_host(V<E>(block.data(), block.size())), block_host, what + ", block");
    expect_same_bits(test::to_host(nchw), nchw_host, what + ", nchw");
    const auto sums_host = test::to_host(sums);
    for (std::int64_t r = 0; r < batch * channels; ++r) {
      if (!with_sums || r < first * channels) {
        EXPECT_EQ(sums_host[r], 7.0f) << what << ": row " << r << " is not the block's";
        continue;
      }
      double sum = 0, magnitude = 0;
      for (std::int64_t p = 0; p < positions; ++p) {
        sum += double(widen(nchwh[r * positions + p]));
        magnitude += std::fabs(double(widen(nchwh[r * positions + p])));
      }
      // A lane's sum and the tree's 6 levels: positions / 64 + 7 roundings at most.
      const double u = std::numeric_limits<float>::epsilon() / 2;
      EXPECT_NEAR(sums_host[r], sum, (7.0 + double(positions) / 64) * u * magnitude)
          << what << ", row " << r;
    }
    if (first_sums.empty())
      first_sums = sums_host;
    else
      expect_same_bits(sums_host, first_sums, what + ", row sums");
  }
}

// The device path's two fused backward launches (impl::parallel_teams):
// the copies of x and dy in one launch store what im2col_device and
// channel_major_device store, and the fold with the bias gradient stores
// what col2im_add_device stores, with db within a rounding a term of the
// double sums of the rows' sums; the same bits at every team size.
template <class E>
void expect_fused_backward_as_parts(const ConvCase& c) {
  using kernels::impl::Transfer;
  namespace impl = kernels::impl;
  const auto g = c.geometry();
  const std::int64_t batch = c.batch, out = g.out_channels, positions = g.positions();
  const std::int64_t width = batch * positions;
  V<E> x("x", g.input_size()), dy("dy", g.output_size()), db_start("db0", out);
  test::from_host(x, test::random_values(g.input_size(), 61));
  test::from_host(dy, test::random_values(g.output_size(), 62));
  const auto dbh = test::random_values(out, 63);
  const auto dxh = test::random_values(g.input_size(), 64);
  M<E> col_ref("col", g.patch(), width), grad_ref("grad", out, width);
  V<E> sums_ref("sums", batch * out), dx_ref("dx", dxh.size());
  test::from_host(dx_ref, dxh);
  impl::im2col_device(E(), g, x, 0, batch, col_ref);
  impl::channel_major_device(E(), grad_ref, dy, db_start, 0, batch, out, positions,
                             Transfer::from_nchw, sums_ref.data());
  impl::col2im_add_device(E(), g, col_ref, 0, batch, dx_ref);
  const auto sums = test::to_host(sums_ref);
  const double u = std::numeric_limits<float>::epsilon() / 2;
  for (const auto shape : team_shapes<E>()) {
    const std::string what = "fused backward, " + team_name(shape);
    M<E> col("col", g.patch(), width), grad("grad", out, width);
    V<E> row_sums("sums", batch * out), dx("dx", dxh.size()), db("db", out);
    test::from_host(dx, dxh);
    test::from_host(db, dbh);
    {
      const test::LaunchedKernels kernels;
      impl::parallel_teams("test_conv::lower", E(), shape, impl::im2col_part(g, x, 0, batch, col),
                           impl::channel_major_part(grad, dy, db, 0, batch, out, positions,
                                                    Transfer::from_nchw, row_sums.data()));
      impl::parallel_teams("test_conv::fold", E(), shape,
                           impl::col2im_add_part(g, col_ref, 0, batch, dx),
                           impl::bias_gradient_part(row_sums.data(), batch, out, db));
      EXPECT_EQ(kernels.list(), "test_conv::lower, test_conv::fold") << what;
    }
    expect_same_bits(test::to_host(V<E>(col.data(), col.size())),
                     test::to_host(V<E>(col_ref.data(), col_ref.size())), what + ", columns");
    expect_same_bits(test::to_host(V<E>(grad.data(), grad.size())),
                     test::to_host(V<E>(grad_ref.data(), grad_ref.size())), what + ", dy block");
    expect_same_bits(test::to_host(row_sums), sums, what + ", rows' sums");
    expect_same_bits(test::to_host(dx), test::to_host(dx_ref), what + ", dx");
    const auto dbg = test::to_host(db);
    for (std::int64_t o = 0; o < out; ++o) {
      double sum = dbh[o], magnitude = std::fabs(dbh[o]);
      for (std::int64_t n = 0; n < batch; ++n) {
        sum += sums[n * out + o];
        magnitude += std::fabs(sums[n * out + o]);
      }
      EXPECT_NEAR(dbg[o], sum, double(batch + 1) * u * magnitude) << what << ", db " << o;
    }
  }
}

TYPED_TEST(ConvKernels, FusedBackwardLaunchesStoreWhatTheirPartsStore) {
  for (const auto& c : conv_cases) expect_fused_backward_as_parts<TypeParam>(c);
}

TYPED_TEST(ConvKernels, DeviceLoweringStoresWhatTheHostPathStores) {
  using E = TypeParam;
  for (const auto& c : conv_cases) {
    expect_device_im2col_as_host<E, float>(c);
    expect_device_im2col_as_host<E, bf16>(c);
    expect_device_fold_as_host<E, float>(c);
    expect_device_fold_as_host<E, bf16>(c);
  }
  // CNN-deck-like geometries: 5 x 5, padding 2, 1 and 4 channels in.
  expect_device_im2col_as_host<E, float>(ConvCase{3, 1, 4, 28, 28, 5, 5, 1, 1, 2, 2});
  expect_device_fold_as_host<E, float>(ConvCase{3, 4, 2, 14, 14, 5, 5, 1, 1, 2, 2});
  using kernels::impl::Transfer;
  for (const auto transfer : {Transfer::to_nchw, Transfer::add_to_nchw, Transfer::from_nchw}) {
    expect_device_channel_major_as_host<E, float>(transfer, true, 37);
    expect_device_channel_major_as_host<E, bf16>(transfer, true, 37);
  }
  expect_device_channel_major_as_host<E, float>(Transfer::to_nchw, false, 37);
  // The rows' sums below, at and above team_lanes, and at the decks' 14 x 14 and 28 x 28.
  for (const std::int64_t positions : {1, 5, 64, 65, 196, 784}) {
    expect_device_channel_major_as_host<E, float>(Transfer::from_nchw, false, positions);
    expect_device_channel_major_as_host<E, bf16>(Transfer::from_nchw, false, positions);
  }
}

TEST(Conv2D, ShapesParametersAndFlops) {
  Conv2D conv("conv", 8, 5, 1, 2);
  const Shapes in{Shape{4, 3, 28, 20}};
  EXPECT_EQ(conv.output_shape(in), (Shape{4, 8, 28, 20}));
  const auto specs = conv.parameter_specs(in);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].shape, (Shape{8, 3, 5, 5}));
  EXPECT_EQ(specs[0].init, Init::he_uniform);
  EXPECT_EQ(specs[0].fan_in, 3 * 25);
  EXPECT_EQ(specs[1].shape, (Shape{8}));
  EXPECT_EQ(specs[1].init, Init::zeros);
  EXPECT_EQ(conv.flops_per_sample(in), 2 * 8 * 28 * 20 * 3 * 25 + 8 * 28 * 20);
  Conv2D strided("strided", 2, {3, 2}, {2, 1}, {1, 0});
  EXPECT_EQ(strided.output_shape({Shape{1, 1, 7, 5}}), (Shape{1, 2, 4, 4}));
}

TEST(Conv2D, ForwardUsesWeightsAsOutInKernelRowsColumns) {
  const ConvCase c{2, 3, 2, 5, 6, 3, 2, 2, 1, 1, 0};
  Conv2D conv("conv", c.out_channels, {c.kernel_h, c.kernel_w}, {c.stride_h, c.stride_w},
              {c.pad_h, c.pad_w});
  test::LayerHarness h(conv, {Shape{c.batch, c.in_channels, c.height, c.width}});
  const NaiveConv ref{c};
  ASSERT_EQ(h.output.shape(), (Shape{c.batch, c.out_channels, ref.out_h(), ref.out_w()}));
  h.forward();
  const auto xh = test::to_host(h.inputs[0].flat()), yh = test::to_host(h.output.flat());
  const auto wh = test::to_host(h.parameters().value(0).flat()),
             bh = test::to_host(h.parameters().value(1).flat());
  std::vector<double> expected(yh.size());
  for (std::size_t i = 0; i < expected.size(); ++i)
    expected[i] = bh[(i / (ref.out_h() * ref.out_w())) % c.out_channels];
  ref.taps([&](std::size_t xi, std::size_t wi, std::size_t yi) {
    expected[yi] += double(xh[xi]) * wh[wi];
  });
  for (std::size_t i = 0; i < yh.size(); ++i) EXPECT_NEAR(yh[i], expected[i], 1e-5) << "y " << i;
}

TEST(Conv2D, GradientsMatchFiniteDifferences) {
  Conv2D conv("conv", 3, 3, 1, 1);
  test::LayerHarness h(conv, {Shape{2, 2, 5, 4}});
  h.expect_gradients();
  Conv2D strided("strided", 2, {2, 3}, {2, 1}, {1, 1});
  test::LayerHarness hs(strided, {Shape{3, 2, 5, 6}}, 2);
  hs.expect_gradients();
  Conv2D::Options options;
  options.out_channels = 3;
  options.kernel = 3;
  options.bias = false;
  Conv2D no_bias("no_bias", options);
  test::LayerHarness hn(no_bias, {Shape{2, 2, 5, 4}}, 3);
  ASSERT_EQ(hn.parameters().entries().size(), 1u);
  hn.expect_gradients();
  // Fewer output than input channels at stride 1.
  Conv2D narrowing("narrowing", 2, {3, 2}, 1, {1, 0});
  test::LayerHarness ht(narrowing, {Shape{2, 3, 5, 4}}, 4);
  ht.expect_gradients();
}

// 16 channels in and out: Winograd's products on the OpenMP and Serial
// spaces (ConvSchedule::winograd), 3 x 3 and 5 x 5, odd output sizes; in
// device-path mode ConvSchedule::blocks on the same layers.
TEST(Conv2D, WinogradGeometryGradientsMatchFiniteDifferences) {
  if (host_schedules_missing<ExecSpace>())
    GTEST_SKIP() << "Conv2D does not run ConvSchedule::winograd on " << ExecSpace::name()
                 << " with this BLAS";
  const auto schedule = schedule_here<ExecSpace>(kernels::ConvSchedule::winograd);
  EXPECT_EQ(kernels::conv2d_schedule(ExecSpace()), schedule);
  for (const int kernel : {3, 5}) {
    Conv2D wide("winograd" + std::to_string(kernel), 16, kernel, 1, kernel / 2);
    const test::LaunchedKernels kernels;
    test::LayerHarness hw(wide, {Shape{2, 16, 5, 3}}, 5);
    hw.expect_gradients();
    for (const auto& label : schedule_labels<ExecSpace>(schedule, true))
      EXPECT_TRUE(kernels.launched(label)) << label << " not launched; ran " << kernels.list();
  }
}

// A convolution's kernel options are the schedules that run its shapes
// here (Layer::kernel_options): threads, winograd where the geometry has
// Winograd's form, direct where it has the direct form, on the OpenMP and
// Serial spaces with a BLAS that runs on each thread; blocks alone in
// device-path mode (and on CUDA and HIP). The fixed rule takes Winograd's,
// then the direct products for kernels of several taps over 16 channels or
// more or in the planar form (a one-channel stem), then threads; the key
// names the shapes and whether dx is computed.
TEST(Conv2D, KernelOptionsAreTheSchedulesThatRunItsShapes) {
  const Conv2D same("same", 32, 3, 1, 1), strided("strided", 64, 3, 2, 1),
      stem("stem", 32, 3, 1, 1), projection("projection", 64, 1, 2, 0);
  const Shape wide{8, 32, 14, 14}, one_channel{8, 1, 28, 28};
  const auto options = [](const Conv2D& c, const Shape& in) {
    return c.kernel_options({in}, true);
  };
  using Names = std::vector<std::string>;
  if (!kernels::impl::thread_gemm_space_v<ExecSpace> || thread_sgemm() == nullptr) {
    for (const auto& [c, in] : {std::pair{&same, wide}, std::pair{&stem, one_channel}}) {
      EXPECT_EQ(options(*c, in).names, Names{"blocks"}) << c->name();
      EXPECT_EQ(options(*c, in).fixed, "blocks") << c->name();
    }
    return;
  }
  EXPECT_EQ(options(same, wide).names, (Names{"threads", "winograd", "direct"}));
  EXPECT_EQ(options(same, wide).fixed, "winograd");
  EXPECT_EQ(options(strided, wide).names, (Names{"threads", "direct"}));
  EXPECT_EQ(options(strided, wide).fixed, "direct");
  EXPECT_EQ(options(stem, one_channel).names, (Names{"threads", "direct"}));
  EXPECT_EQ(options(stem, one_channel).fixed, "direct");
  EXPECT_EQ(options(projection, wide).fixed, "threads");
  EXPECT_EQ(options(same, wide).family, "conv2d");
  EXPECT_EQ(options(strided, wide).key,
            "conv2d [8, 32, 14, 14] -> 64 kernel 3x3 stride 2x2 padding 1x1 with dx");
  EXPECT_EQ(stem.kernel_options({one_channel}, false).key,
            "conv2d [8, 1, 28, 28] -> 32 kernel 3x3 stride 1x1 padding 1x1 without dx");
  // Before allocate() a layer names what set_kernel_option chose; after it,
  // what it runs: its fixed rule's choice unless one was set.
  Conv2D chosen("chosen", 64, 3, 2, 1);
  EXPECT_EQ(chosen.kernel_option(), "");
  chosen.set_kernel_option("threads");
  EXPECT_EQ(chosen.kernel_option(), "threads");
  test::expect_error([&] { chosen.set_kernel_option("fastest"); },
                     "tessera::Conv2D 'chosen': no kernel option 'fastest'");
}

// Every kernel option gives the layer's gradients: the finite-difference
// check under each schedule of a 3 x 3 layer over 16 channels (all three)
// and of a downsampling one with channel counts that are not multiples of
// a vector, each launching its own kernels.
TEST(Conv2D, EveryKernelOptionMatchesFiniteDifferences) {
  for (const auto& [stride, in, out] : {std::tuple{1, 16, 16}, std::tuple{2, 20, 24}}) {
    const Shape shape{2, in, 7, 6};
    const auto names = Conv2D("probe", out, 3, stride, 1).kernel_options({shape}, true).names;
    for (const std::string& name : names) {
      SCOPED_TRACE(name + ", stride " + std::to_string(stride));
      Conv2D conv("conv", out, 3, stride, 1);
      conv.set_kernel_option(name);
      const test::LaunchedKernels kernels;
      test::LayerHarness h(conv, {shape}, 7);
      EXPECT_EQ(conv.kernel_option(), name);
      h.expect_gradients();
      if (name != "blocks")
        EXPECT_TRUE(kernels.launched("tessera::kernels::conv2d_backward_" + name))
            << kernels.list();
    }
  }
}

TEST(Conv2D, WithoutBiasHasOnlyWeights) {
  Conv2D::Options options;
  options.out_channels = 8;
  options.kernel = 5;
  options.padding = 2;
  options.bias = false;
  const Conv2D conv("conv", options);
  const Shapes in{Shape{4, 3, 28, 20}};
  const auto specs = conv.parameter_specs(in);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].name, "weight");
  EXPECT_FALSE(conv.has_bias());
  EXPECT_EQ(conv.flops_per_sample(in), 2 * 8 * 28 * 20 * 3 * 25);
}

TEST(Conv2D, ShapeErrorsNameLayerAndShape) {
  Conv2D conv("c1", 4, 5);
  test::expect_error(
      [&] {
        conv.output_shape({Shape{8, 28, 28}});
      },
      "tessera::Conv2D 'c1': input [8, 28, 28] is not an image batch [N, C, H, W]");
  test::expect_error(
      [&] {
        conv.output_shape({Shape{8, 1, 4, 9}});
      },
      "tessera::Conv2D 'c1': input [8, 1, 4, 9] is smaller than the kernel 5 x 5");
  test::expect_error([&] { Conv2D bad("c2", 4, 3, 0); },
                     "tessera::Conv2D 'c2': out_channels 4, kernel 3 x 3, stride 0 x 0");
}

TEST(Conv2D, TinyCnnWithMaxPoolingLearnsBarOrientation) {
  Model model(Shape{1, 8, 8});
  model.add<Conv2D>("conv", 4, 3, 1, 1)
      .add<ReLU>("relu")
      .add<MaxPool2D>("pool", 2)
      .add<Flatten>("flat")
      .add<Dense>("fc", 2);
  test::expect_learns_bars(model, 0.05f, 15);
}

// Only channel means reach the classifier, so the filters themselves must
// respond to orientation.
TEST(Conv2D, TinyCnnWithAveragePoolingLearnsBarOrientation) {
  Model model(Shape{1, 8, 8});
  model.add<Conv2D>("conv1", 4, 3, 1, 1)
      .add<ReLU>("relu1")
      .add<AvgPool2D>("pool", 2)
      .add<Conv2D>("conv2", 4, 3, 1, 1)
      .add<ReLU>("relu2")
      .add<GlobalAvgPool>("gap")
      .add<Dense>("fc", 2);
  test::expect_learns_bars(model, 0.05f, 15);
}

// In bf16 and fp16 the columns are the inputs widened to float, the
// products float, and y and dx each rounded once: within u of the float
// layer on the same rounded values. dx is folded back from the columns
// (col2im, summed per element in float), with fewer output than input
// channels too, and with 16 channels goes through Winograd's float
// transforms and products (the convolution of dy with the flipped weights).
template <class T>
void expect_conv_16bit() {
  Conv2D a("same", 3, 3, 1, 1), b("same", 3, 3, 1, 1);
  test::expect_16bit_matches_float<T>(a, b, {Shape{2, 2, 5, 4}});
  Conv2D c("strided", 2, {2, 3}, {2, 1}, {1, 1}), d("strided", 2, {2, 3}, {2, 1}, {1, 1});
  test::expect_16bit_matches_float<T>(c, d, {Shape{3, 2, 5, 6}});
  Conv2D e("narrowing", 2, {3, 2}, 1, {1, 0}), f("narrowing", 2, {3, 2}, 1, {1, 0});
  test::expect_16bit_matches_float<T>(e, f, {Shape{2, 3, 5, 4}});
  Conv2D::Options options;
  options.out_channels = 4;
  options.kernel = 3;
  options.stride = 2;
  options.bias = false;
  Conv2D g("no_bias", options), h("no_bias", options);
  test::expect_16bit_matches_float<T>(g, h, {Shape{2, 3, 7, 6}});
  // 16 channels: Winograd's form on the OpenMP and Serial spaces.
  Conv2D i("winograd", 16, 3, 1, 1), j("winograd", 16, 3, 1, 1);
  test::expect_16bit_matches_float<T>(i, j, {Shape{2, 16, 5, 6}});
}

TEST(Conv2D, Bf16AndFp16AreTheFloatResultsRoundedOnce) {
  expect_conv_16bit<bf16>();
  expect_conv_16bit<fp16>();
}

}  // namespace
