// BatchNorm and LayerNorm: values against naive host references in training
// and inference, running statistics over two steps, finite-difference
// gradients of each layer and through a model, the kernels on the host and
// the device paths against double loops, bitwise agreement of the kernels
// across execution spaces and of the device path across team sizes, shape
// errors, and a small model with BatchNorm and Dropout that must converge.
#include <tessera/kernels/loss.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/dropout.hpp>
#include <tessera/layers/norm.hpp>
#include <tessera/optim/sgd.hpp>
#include <tessera/train/trainer.hpp>

#include "layer_check.hpp"
#include "model_check.hpp"

namespace {

using namespace tessera;

// Biased mean and variance of each channel of x [n, c, s], in double.
struct ChannelMoments {
  std::vector<double> mean, var;
};

ChannelMoments channel_moments(const std::vector<float>& x, int n, int c, int s) {
  ChannelMoments m{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  const double count = double(n) * s;
  for (int ch = 0; ch < c; ++ch) {
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < s; ++k) m.mean[ch] += x[(i * c + ch) * s + k];
    m.mean[ch] /= count;
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < s; ++k) {
        const double d = x[(i * c + ch) * s + k] - m.mean[ch];
        m.var[ch] += d * d;
      }
    m.var[ch] /= count;
  }
  return m;
}

std::vector<double> batchnorm_reference(const std::vector<float>& x, int n, int c, int s,
                                        const ChannelMoments& m, double eps,
                                        const std::vector<float>& gamma,
                                        const std::vector<float>& beta) {
  std::vector<double> y(x.size());
  for (int i = 0; i < n; ++i)
    for (int ch = 0; ch < c; ++ch)
      for (int k = 0; k < s; ++k) {
        const int j = (i * c + ch) * s + k;
        y[j] = (x[j] - m.mean[ch]) / std::sqrt(m.var[ch] + eps) * gamma[ch] + beta[ch];
      }
  return y;
}

void expect_close(const std::vector<float>& actual, const std::vector<double>& expected, double tol,
                  const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], tol) << what << " element " << i;
}

// Non-trivial running statistics, so inference differs from training.
void set_running_statistics(test::LayerHarness& h, int channels) {
  test::from_host(h.state().value(0).flat(), test::random_values(channels, 31, -0.5f, 0.5f));
  test::from_host(h.state().value(1).flat(), test::random_values(channels, 32, 0.5f, 2.0f));
}

StepContext inference() {
  StepContext ctx;
  ctx.training = false;
  return ctx;
}

// x [n, c, s] through a BatchNorm with the harness's gamma and beta, in
// training (batch statistics) and inference (running statistics).
void expect_batchnorm_values(const Shape& shape, int n, int c, int s) {
  const float eps = 1e-3f;
  BatchNorm bn("bn", 0.1f, eps);
  test::LayerHarness h(bn, {shape});
  const auto x = test::to_host(h.inputs[0].flat());
  const auto gamma = test::to_host(h.parameters().value(0).flat());
  const auto beta = test::to_host(h.parameters().value(1).flat());

  h.forward();
  expect_close(test::to_host(h.output.flat()),
               batchnorm_reference(x, n, c, s, channel_moments(x, n, c, s), eps, gamma, beta), 2e-5,
               "training");

  set_running_statistics(h, c);
  const auto rm = test::to_host(h.state().value(0).flat());
  const auto rv = test::to_host(h.state().value(1).flat());
  h.forward(inference());
  expect_close(test::to_host(h.output.flat()),
               batchnorm_reference(x, n, c, s,
                                   ChannelMoments{{rm.begin(), rm.end()}, {rv.begin(), rv.end()}},
                                   eps, gamma, beta),
               2e-5, "inference");
  // Inference leaves the running statistics alone.
  EXPECT_EQ(test::to_host(h.state().value(0).flat()), rm);
  EXPECT_EQ(test::to_host(h.state().value(1).flat()), rv);
}

TEST(BatchNorm, Values1dPerFeature) { expect_batchnorm_values(Shape{6, 4}, 6, 4, 1); }

TEST(BatchNorm, Values2dPerChannel) { expect_batchnorm_values(Shape{3, 2, 3, 4}, 3, 2, 12); }

TEST(BatchNorm, ParametersAndState) {
  BatchNorm bn("bn");
  const Shapes in{Shape{8, 3, 5, 5}};
  const auto params = bn.parameter_specs(in);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].name, "gamma");
  EXPECT_EQ(params[0].shape, Shape{3});
  EXPECT_EQ(params[0].init, Init::ones);
  EXPECT_EQ(params[1].name, "beta");
  EXPECT_EQ(params[1].init, Init::zeros);
  const auto state = bn.state_specs(in);
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].name, "running_mean");
  EXPECT_EQ(state[0].init, Init::zeros);
  EXPECT_EQ(state[1].name, "running_var");
  EXPECT_EQ(state[1].shape, Shape{3});
  EXPECT_EQ(state[1].init, Init::ones);
}

TEST(BatchNorm, RunningStatisticsAfterTwoSteps) {
  const int n = 4, c = 3, s = 2;
  const float momentum = 0.25f;
  BatchNorm bn("bn", momentum);
  test::LayerHarness h(bn, {Shape{n, c, 1, s}});
  std::vector<double> running_mean(c, 0.0), running_var(c, 1.0);
  for (int step = 0; step < 2; ++step) {
    const auto x = test::random_values(n * c * s, 40 + step, -2.0f, 3.0f);
    test::from_host(h.inputs[0].flat(), x);
    h.forward();
    const ChannelMoments m = channel_moments(x, n, c, s);
    for (int ch = 0; ch < c; ++ch) {
      const double unbiased = m.var[ch] * (n * s) / (n * s - 1);
      running_mean[ch] = (1 - momentum) * running_mean[ch] + momentum * m.mean[ch];
      running_var[ch] = (1 - momentum) * running_var[ch] + momentum * unbiased;
    }
  }
  expect_close(test::to_host(h.state().value(0).flat()), running_mean, 1e-6, "running_mean");
  expect_close(test::to_host(h.state().value(1).flat()), running_var, 1e-6, "running_var");
}

// Finite-difference check of every gradient of `layer` on an input of `shape`.
void expect_layer_gradients(Layer&& layer, const Shape& shape, const StepContext& ctx = {}) {
  test::LayerHarness h(layer, {shape});
  // Inference (BatchNorm only) should see running statistics other than the initial 0 and 1.
  if (!ctx.training) set_running_statistics(h, static_cast<int>(shape[1]));
  h.expect_gradients(ctx);
}

TEST(BatchNorm, GradientsInTrainingAndInferenceMode) {
  for (const StepContext& ctx : {StepContext{}, inference()}) {
    expect_layer_gradients(BatchNorm("bn1d"), Shape{6, 3}, ctx);
    expect_layer_gradients(BatchNorm("bn2d"), Shape{3, 2, 2, 3}, ctx);
  }
}

// backward adds to what dx and the parameter gradients already hold.
void expect_backward_accumulates(Layer& layer, const Shape& shape, const StepContext& ctx) {
  test::LayerHarness h(layer, {shape});
  test::from_host(h.output_grad.flat(), test::random_values(shape.numel(), 5));
  h.forward(ctx);
  h.backward(ctx);
  const auto dx = test::to_host(h.input_grads[0].flat());
  const auto dp = test::to_host(h.parameters().gradients());
  layer.backward(h.inputs, h.output, h.output_grad, h.input_grads, ctx);
  const auto dx2 = test::to_host(h.input_grads[0].flat());
  const auto dp2 = test::to_host(h.parameters().gradients());
  for (std::size_t i = 0; i < dx.size(); ++i) EXPECT_FLOAT_EQ(dx2[i], 2 * dx[i]) << layer.name();
  for (std::size_t i = 0; i < dp.size(); ++i) EXPECT_FLOAT_EQ(dp2[i], 2 * dp[i]) << layer.name();
}

TEST(Normalization, BackwardAccumulates) {
  BatchNorm train("bn_train"), infer("bn_infer");
  LayerNorm ln("ln");
  expect_backward_accumulates(train, Shape{4, 3, 2, 2}, {});
  expect_backward_accumulates(infer, Shape{4, 3}, inference());
  expect_backward_accumulates(ln, Shape{3, 2, 5}, {});
}

TEST(BatchNorm, RejectsOtherRanks) {
  BatchNorm bn("bn");
  try {
    bn.output_shape({Shape{4, 3, 5}});
    FAIL() << "expected tessera::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "tessera::BatchNorm 'bn': input [4, 3, 5] must be [N, F] (per feature) or "
                  "[N, C, H, W] (per channel)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(bn.output_shape({Shape{7}}), Error);
  EXPECT_THROW(BatchNorm("bad", 1.5f), Error);
  EXPECT_THROW(BatchNorm("bad", 0.1f, 0.0f), Error);
}

std::vector<double> layernorm_reference(const std::vector<float>& x, int n, int d, double eps,
                                        const std::vector<float>& gamma,
                                        const std::vector<float>& beta) {
  std::vector<double> y(x.size());
  for (int i = 0; i < n; ++i) {
    double mean = 0, var = 0;
    for (int k = 0; k < d; ++k) mean += x[i * d + k];
    mean /= d;
    for (int k = 0; k < d; ++k) var += (x[i * d + k] - mean) * (x[i * d + k] - mean);
    var /= d;
    for (int k = 0; k < d; ++k)
      y[i * d + k] = (x[i * d + k] - mean) / std::sqrt(var + eps) * gamma[k] + beta[k];
  }
  return y;
}

TEST(LayerNorm, ValuesAndParameterShape) {
  const float eps = 1e-4f;
  for (const Shape& shape : {Shape{4, 6}, Shape{3, 2, 2, 3}}) {
    LayerNorm ln("ln", eps);
    test::LayerHarness h(ln, {shape});
    const auto specs = ln.parameter_specs({shape});
    ASSERT_EQ(specs.size(), 2u);
    EXPECT_EQ(specs[0].shape.numel(), shape.inner());
    EXPECT_EQ(specs[0].shape.rank(), shape.rank() - 1);
    // Values are offset so the mean is far from zero, as a single-pass
    // variance would lose precision there.
    auto x = test::to_host(h.inputs[0].flat());
    for (auto& v : x) v += 50.0f;
    test::from_host(h.inputs[0].flat(), x);
    h.forward();
    expect_close(test::to_host(h.output.flat()),
                 layernorm_reference(x, static_cast<int>(shape[0]), static_cast<int>(shape.inner()),
                                     eps, test::to_host(h.parameters().value(0).flat()),
                                     test::to_host(h.parameters().value(1).flat())),
                 2e-5, "layernorm");
  }
}

TEST(LayerNorm, Gradients) {
  expect_layer_gradients(LayerNorm("ln"), Shape{4, 5});
  expect_layer_gradients(LayerNorm("ln"), Shape{2, 3, 2, 2});
}

// last_axis: each position of [N, T, C] normalised over its C channels,
// gamma and beta of length C.
TEST(LayerNorm, LastAxisNormalisesEachPosition) {
  const float eps = 1e-5f;
  LayerNorm::Options options;
  options.eps = eps;
  options.last_axis = true;
  const Shape shape{2, 3, 4};
  LayerNorm ln("ln", options);
  test::LayerHarness h(ln, {shape});
  const auto specs = ln.parameter_specs({shape});
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].shape, (Shape{4}));
  auto x = test::to_host(h.inputs[0].flat());
  for (auto& v : x) v += 50.0f;
  test::from_host(h.inputs[0].flat(), x);
  h.forward();
  expect_close(test::to_host(h.output.flat()),
               layernorm_reference(x, 6, 4, eps, test::to_host(h.parameters().value(0).flat()),
                                   test::to_host(h.parameters().value(1).flat())),
               2e-5, "layernorm last axis");
  expect_layer_gradients(LayerNorm("ln", options), shape);
}

TEST(LayerNorm, RejectsInputWithoutFeatures) {
  LayerNorm ln("ln");
  try {
    ln.output_shape({Shape{7}});
    FAIL() << "expected tessera::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tessera::LayerNorm 'ln': input [7] needs a batch"),
              std::string::npos)
        << e.what();
  }
}

// The norm kernels on each space agree bitwise with the default space (and
// so with every thread count, since ctest runs this at 1 and 2 threads), on
// the space's own path and on the device path, whose bits are also the
// same for every team size.
template <class ExecSpace>
class NormKernels : public ::testing::Test {};
TYPED_TEST_SUITE(NormKernels, test::ExecSpaces);

template <class E>
using V = Kokkos::View<float*, Kokkos::LayoutRight, typename E::memory_space>;
template <class E>
using D = Kokkos::View<double*, Kokkos::LayoutRight, typename E::memory_space>;

// The space's own path and the device path (the same in a build without
// host fast paths, and on a GPU).
template <class E>
std::vector<kernels::NormPath> paths() {
  return {kernels::default_norm_path<E>(), kernels::NormPath{true, {}}};
}

std::string describe(const kernels::GroupLayout& l, kernels::NormPath path) {
  return "layout [" + std::to_string(l.outer) + ", " + std::to_string(l.groups) + ", " +
         std::to_string(l.inner) + "] on the " + (path.device ? "device" : "host") +
         " path, team size " + std::to_string(path.team.size);
}

// Every kernel's outputs over `layout`, on `path`.
template <class E>
std::vector<double> run_norm_kernels(const kernels::GroupLayout& layout, kernels::Affine affine,
                                     kernels::NormPath path) {
  const std::size_t size = layout.size();
  const bool per_group = affine == kernels::Affine::per_group;
  const std::size_t params = per_group ? layout.groups : layout.group_size();
  V<E> x("x", size), y("y", size), dy("dy", size), dx("dx", size), dx_running("dxr", size),
      gamma("gamma", params), beta("beta", params), dgamma("dgamma", params),
      dbeta("dbeta", params), dgamma2("dgamma2", params), dbeta2("dbeta2", params),
      mean("mean", layout.groups), invstd("invstd", layout.groups),
      fused_mean("fused_mean", layout.groups), fused_invstd("fused_invstd", layout.groups),
      running_mean("running_mean", layout.groups), running_var("running_var", layout.groups);
  D<E> sums("sums", 2 * layout.groups), gradient_sums("gradient_sums", 2 * layout.groups),
      partials("partials", kernels::group_partials_size(layout, affine));
  test::from_host(x, test::random_values(size, 61, -1.0f, 3.0f));
  test::from_host(dy, test::random_values(size, 62));
  test::from_host(gamma, test::random_values(params, 63, 0.5f, 1.5f));
  test::from_host(beta, test::random_values(params, 64));
  test::from_host(dx, test::random_values(size, 65));
  Kokkos::deep_copy(running_var, 1.0f);
  const E exec;
  kernels::group_sums(exec, layout, x, sums, partials, path);
  kernels::moments_from_sums(exec, sums, layout.group_size(), 1e-5f, mean, invstd);
  kernels::group_moments(exec, layout, x, 1e-5f, fused_mean, fused_invstd, 0.1f, running_mean,
                         running_var, partials, path);
  kernels::group_normalize(exec, layout, affine, x, mean, invstd, gamma, beta, y, path);
  kernels::group_gradient_sums(exec, layout, affine, x, dy, mean, invstd, gamma, gradient_sums,
                               partials, path);
  kernels::group_input_gradient(exec, layout, affine, x, dy, mean, invstd, gamma, true,
                                gradient_sums, layout.group_size(), dx, true, path);
  kernels::group_input_gradient(exec, layout, affine, x, dy, mean, invstd, gamma, false,
                                gradient_sums, layout.group_size(), dx_running, true, path);
  kernels::affine_gradients(exec, layout, affine, x, dy, mean, invstd, dgamma, dbeta, partials,
                            path);
  if (per_group) kernels::affine_gradients_from_sums(exec, gradient_sums, dgamma2, dbeta2);
  std::vector<double> out;
  for (const auto& v : {y, dx, dx_running, dgamma, dbeta, dgamma2, dbeta2, fused_mean, fused_invstd,
                        running_mean, running_var}) {
    const auto h = test::to_host(v);
    out.insert(out.end(), h.begin(), h.end());
  }
  for (const auto& v : {sums, gradient_sums}) {
    const auto h = test::to_host(v);
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

// group_input_gradient that writes dx (add false) leaves the bits of
// adding into a zeroed dx, whatever dx held: on both paths, with batch and
// with running statistics, per-group and per-position affine parameters.
TYPED_TEST(NormKernels, WrittenInputGradientIsTheOneAddedIntoZeros) {
  using E = TypeParam;
  const E exec;
  for (const kernels::NormPath path : paths<E>())
    for (const auto affine : {kernels::Affine::per_group, kernels::Affine::per_position}) {
      const bool per_group = affine == kernels::Affine::per_group;
      const kernels::GroupLayout l =
          per_group ? kernels::GroupLayout{16, 5, 37} : kernels::GroupLayout{1, 9, 70};
      const std::size_t size = l.size(), params = per_group ? l.groups : l.group_size();
      V<E> x("x", size), dy("dy", size), added("added", size), written("written", size),
          gamma("gamma", params), mean("mean", l.groups), invstd("invstd", l.groups);
      D<E> sums("sums", 2 * l.groups),
          partials("partials", kernels::group_partials_size(l, affine));
      test::from_host(x, test::random_values(size, 71, -1.0f, 3.0f));
      test::from_host(dy, test::random_values(size, 72));
      test::from_host(gamma, test::random_values(params, 73, 0.5f, 1.5f));
      kernels::group_sums(exec, l, x, sums, partials, path);
      kernels::moments_from_sums(exec, sums, l.group_size(), 1e-5f, mean, invstd);
      kernels::group_gradient_sums(exec, l, affine, x, dy, mean, invstd, gamma, sums, partials,
                                   path);
      for (const bool batch_statistics : {true, false}) {
        Kokkos::deep_copy(added, 0.0f);
        Kokkos::deep_copy(written, std::nanf(""));
        kernels::group_input_gradient(exec, l, affine, x, dy, mean, invstd, gamma, batch_statistics,
                                      sums, l.group_size(), added, true, path);
        kernels::group_input_gradient(exec, l, affine, x, dy, mean, invstd, gamma, batch_statistics,
                                      sums, l.group_size(), written, false, path);
        EXPECT_EQ(test::float_bits(test::to_host(written)), test::float_bits(test::to_host(added)))
            << describe(l, path) << (batch_statistics ? ", batch" : ", running") << " statistics";
      }
    }
}

// Layouts of one chunk per group ({9, 70, 3}) and layouts whose groups
// span several chunks: blocks of rows (BatchNorm) and segments of a long
// row (LayerNorm).
TYPED_TEST(NormKernels, MatchDefaultSpaceBitwise) {
  using E = TypeParam;
  using Default = Kokkos::DefaultExecutionSpace;
  for (std::size_t p = 0; p < paths<E>().size(); ++p) {
    const kernels::NormPath path = paths<E>()[p], default_path = paths<Default>()[p];
    // {9, 70, 3} and {12, 40, 49}: short rows, summed on the host in blocks
    // of groups whose size follows the thread count, with a partial last block.
    for (const kernels::GroupLayout batchnorm :
         {kernels::GroupLayout{16, 5, 37}, kernels::GroupLayout{40, 3, 300},
          kernels::GroupLayout{9, 70, 3}, kernels::GroupLayout{12, 40, 49}})
      EXPECT_EQ(run_norm_kernels<E>(batchnorm, kernels::Affine::per_group, path),
                run_norm_kernels<Default>(batchnorm, kernels::Affine::per_group, default_path))
          << describe(batchnorm, path);
    for (const kernels::GroupLayout layernorm :
         {kernels::GroupLayout{1, 9, 70}, kernels::GroupLayout{1, 3, 9000},
          kernels::GroupLayout{1, 300, 40}})
      EXPECT_EQ(run_norm_kernels<E>(layernorm, kernels::Affine::per_position, path),
                run_norm_kernels<Default>(layernorm, kernels::Affine::per_position, default_path))
          << describe(layernorm, path);
  }
}

// The largest team the backend allows (a free function: CUDA's device
// lambdas cannot be defined in a test's private body).
template <class E>
int team_size_max() {
  return Kokkos::TeamPolicy<E>(E(), 1, 1).team_size_max(
      KOKKOS_LAMBDA(const typename Kokkos::TeamPolicy<E>::member_type&){},
      Kokkos::ParallelForTag());
}

// The device path at every team size the backend allows gives the bits of
// the backend's own choice: chunks of a group over several teams ({40, 3,
// 300}: 47; {1, 3, 9000}: 36 of a long row), one team per group ({9, 70,
// 3}, {1, 9, 70}), position blocks with several chunks of groups ({1, 300,
// 40}: 2 blocks by 5 chunks; {3, 70, 5}: positions over several rows).
TYPED_TEST(NormKernels, DevicePathIsTheSameBitsForEveryTeamSize) {
  using E = TypeParam;
  const int max_size = team_size_max<E>();
  const std::vector<std::pair<kernels::GroupLayout, kernels::Affine>> cases = {
      {{16, 5, 37}, kernels::Affine::per_group},     {{40, 3, 300}, kernels::Affine::per_group},
      {{9, 70, 3}, kernels::Affine::per_group},      {{700, 4, 1}, kernels::Affine::per_group},
      {{1, 3, 9000}, kernels::Affine::per_position}, {{1, 9, 70}, kernels::Affine::per_position},
      {{1, 300, 40}, kernels::Affine::per_position}, {{3, 70, 5}, kernels::Affine::per_position}};
  for (const auto& [layout, affine] : cases) {
    const auto automatic = run_norm_kernels<E>(layout, affine, kernels::NormPath{true, {}});
    int sizes_run = 0;
    for (const int size : {1, 2, 3, 32, 64, 128, 256}) {
      if (size > max_size) continue;
      const kernels::NormPath path{true, {size}};
      EXPECT_EQ(run_norm_kernels<E>(layout, affine, path), automatic) << describe(layout, path);
      ++sizes_run;
    }
    EXPECT_GE(sizes_run, 1);
  }
}

// Each group's sums among many are the same bits as for that group alone
// (a layout of one group, whose chunks are the same).
template <class E>
void expect_group_sums_alone_and_among_many(const kernels::GroupLayout& all,
                                            kernels::NormPath path) {
  const E exec;
  const kernels::GroupLayout alone{all.outer, 1, all.inner};
  V<E> x("x", all.size()), dy("dy", all.size()), mean("mean", all.groups),
      invstd("invstd", all.groups), gamma("gamma", all.groups);
  D<E> sums("sums", 2 * all.groups), gradient_sums("gradient_sums", 2 * all.groups),
      partials("partials", kernels::group_partials_size(all));
  const auto xh = test::random_values(all.size(), 67, -1.0f, 3.0f),
             dyh = test::random_values(all.size(), 68);
  test::from_host(x, xh);
  test::from_host(dy, dyh);
  Kokkos::deep_copy(gamma, 1.0f);
  kernels::group_sums(exec, all, x, sums, partials, path);
  kernels::moments_from_sums(exec, sums, all.group_size(), 1e-5f, mean, invstd);
  kernels::group_gradient_sums(exec, all, kernels::Affine::per_group, x, dy, mean, invstd, gamma,
                               gradient_sums, partials, path);
  const auto s = test::to_host(sums), gs = test::to_host(gradient_sums);
  const auto m = test::to_host(mean), is = test::to_host(invstd);
  for (const std::int64_t g : {std::int64_t{0}, std::int64_t{13}, all.groups - 1}) {
    std::vector<float> xg, dyg;
    for (std::int64_t k = 0; k < all.group_size(); ++k) {
      xg.push_back(xh[all.index(g, k)]);
      dyg.push_back(dyh[all.index(g, k)]);
    }
    V<E> x1("x1", alone.size()), dy1("dy1", alone.size()), m1("m1", 1), s1("s1", 1), g1("g1", 1);
    D<E> sums1("sums1", 2), gradient_sums1("gradient_sums1", 2);
    test::from_host(x1, xg);
    test::from_host(dy1, dyg);
    test::from_host(m1, {m[g]});
    test::from_host(s1, {is[g]});
    Kokkos::deep_copy(g1, 1.0f);
    kernels::group_sums(exec, alone, x1, sums1, partials, path);
    kernels::group_gradient_sums(exec, alone, kernels::Affine::per_group, x1, dy1, m1, s1, g1,
                                 gradient_sums1, partials, path);
    const auto a = test::to_host(sums1), ga = test::to_host(gradient_sums1);
    const std::string where = describe(all, path) + ", group " + std::to_string(g);
    EXPECT_EQ(a[0], s[g]) << "sum, " << where;
    EXPECT_EQ(a[1], s[all.groups + g]) << "sum of squares, " << where;
    EXPECT_EQ(ga[0], gs[g]) << "sum of dxhat, " << where;
    EXPECT_EQ(ga[1], gs[all.groups + g]) << "sum of dxhat * xhat, " << where;
  }
}

// A host thread sums the same chunk of up to 128 groups together.
// {40, 130, 16}: more groups than a block holds, and chunks of 32 rows
// with a short last one.
TYPED_TEST(NormKernels, GroupSumsAreTheSameBitsAloneAndAmongManyGroups) {
  for (const kernels::NormPath path : paths<TypeParam>())
    for (const kernels::GroupLayout all :
         {kernels::GroupLayout{12, 40, 49}, kernels::GroupLayout{40, 130, 16}})
      expect_group_sums_alone_and_among_many<TypeParam>(all, path);
}

// The chunked statistics against sums in double, over layouts of one and
// of many chunks per group.
TYPED_TEST(NormKernels, ChunkedSumsMatchDoubleSums) {
  using E = TypeParam;
  for (const kernels::NormPath path : paths<E>())
    for (const kernels::GroupLayout layout :
         {kernels::GroupLayout{16, 5, 37}, kernels::GroupLayout{40, 3, 300},
          kernels::GroupLayout{1, 3, 9000}, kernels::GroupLayout{700, 4, 1},
          kernels::GroupLayout{9, 70, 3}}) {
      V<E> x("x", layout.size());
      D<E> sums("sums", 2 * layout.groups),
          partials("partials", kernels::group_partials_size(layout));
      const auto xh = test::random_values(layout.size(), 65, -1.0f, 3.0f);
      test::from_host(x, xh);
      kernels::group_sums(E(), layout, x, sums, partials, path);
      std::vector<double> expected(2 * layout.groups);
      for (std::int64_t i = 0; i < layout.size(); ++i) {
        const std::int64_t g = (i / layout.inner) % layout.groups;
        expected[g] += xh[i];
        expected[layout.groups + g] += double(xh[i]) * xh[i];
      }
      const auto got = test::to_host(sums);
      for (std::size_t g = 0; g < expected.size(); ++g)
        EXPECT_NEAR(got[g], expected[g], 1e-9 * layout.group_size())
            << "sum " << g << ", " << describe(layout, path);
    }
}

// group_moments (the statistics, moments and running update in one pass)
// against the three separate kernels: the same bits, with and without the
// running update, over layouts of one and of many chunks per group, short
// rows in blocks of groups with a partial last block ({40, 130, 16}),
// segments of a long row, and one element per group (no unbiased variance).
TYPED_TEST(NormKernels, GroupMomentsAreTheSeparateKernelsBits) {
  using E = TypeParam;
  const E exec;
  for (const kernels::NormPath path : paths<E>())
    for (const kernels::GroupLayout l :
         {kernels::GroupLayout{16, 5, 37}, kernels::GroupLayout{40, 130, 16},
          kernels::GroupLayout{1, 3, 9000}, kernels::GroupLayout{700, 4, 1},
          kernels::GroupLayout{9, 70, 3}, kernels::GroupLayout{1, 6, 1}}) {
      V<E> x("x", l.size()), mean("mean", l.groups), invstd("invstd", l.groups),
          running_mean("running_mean", l.groups), running_var("running_var", l.groups),
          fused_mean("fused_mean", l.groups), fused_invstd("fused_invstd", l.groups),
          fused_running_mean("fused_running_mean", l.groups),
          fused_running_var("fused_running_var", l.groups), plain_mean("plain_mean", l.groups),
          plain_invstd("plain_invstd", l.groups), none("none", 0);
      D<E> sums("sums", 2 * l.groups), partials("partials", kernels::group_partials_size(l));
      test::from_host(x, test::random_values(l.size(), 69, -1.0f, 3.0f));
      const auto running = test::random_values(2 * l.groups, 70, 0.5f, 1.5f);
      for (const auto& v : {running_mean, fused_running_mean})
        test::from_host(v, std::vector<float>(running.begin(), running.begin() + l.groups));
      for (const auto& v : {running_var, fused_running_var})
        test::from_host(v, std::vector<float>(running.begin() + l.groups, running.end()));
      kernels::group_sums(exec, l, x, sums, partials, path);
      kernels::update_running_moments(exec, sums, l.group_size(), 0.3f, running_mean, running_var);
      kernels::moments_from_sums(exec, sums, l.group_size(), 1e-3f, mean, invstd);
      kernels::group_moments(exec, l, x, 1e-3f, fused_mean, fused_invstd, 0.3f, fused_running_mean,
                             fused_running_var, partials, path);
      kernels::group_moments(exec, l, x, 1e-3f, plain_mean, plain_invstd, 0.3f, none, none,
                             partials, path);
      const std::string where = describe(l, path);
      EXPECT_EQ(test::to_host(fused_mean), test::to_host(mean)) << where;
      EXPECT_EQ(test::to_host(fused_invstd), test::to_host(invstd)) << where;
      EXPECT_EQ(test::to_host(fused_running_mean), test::to_host(running_mean)) << where;
      EXPECT_EQ(test::to_host(fused_running_var), test::to_host(running_var)) << where;
      EXPECT_EQ(test::to_host(plain_mean), test::to_host(mean)) << where;
      EXPECT_EQ(test::to_host(plain_invstd), test::to_host(invstd)) << where;
      // The running statistics moved: the update ran.
      EXPECT_NE(test::to_host(fused_running_var),
                std::vector<float>(running.begin() + l.groups, running.end()))
          << where;
    }
}

// Every step of forward and backward against double loops over the
// definition, with the kernels' own mean and invstd, for both affine modes,
// batch and running statistics, both paths, and layouts of one and of many
// chunks per group (blocks of short rows, segments of long rows, rows of
// one element) and, per position, of one and of several blocks of
// positions and chunks of groups ({1, 300, 40}, {3, 70, 5}). Sums are held
// to their rounding bound: 1e-6 of the sum of |terms|.
template <class E>
void expect_backward_matches_naive_loops(kernels::Affine affine, const kernels::GroupLayout& l,
                                         kernels::NormPath path) {
  const E exec;
  const bool per_group = affine == kernels::Affine::per_group;
  const std::int64_t size = l.size(), params = per_group ? l.groups : l.group_size();
  V<E> x("x", size), y("y", size), dy("dy", size), dx("dx", size), dx_running("dxr", size),
      gamma("gamma", params), beta("beta", params), dgamma("dgamma", params),
      dbeta("dbeta", params), dgamma2("dgamma2", params), dbeta2("dbeta2", params),
      mean("mean", l.groups), invstd("invstd", l.groups);
  D<E> sums("sums", 2 * l.groups), partials("partials", kernels::group_partials_size(l, affine));
  const auto xh = test::random_values(size, 81, -1.0f, 3.0f), dyh = test::random_values(size, 82),
             gh = test::random_values(params, 83, 0.5f, 1.5f), bh = test::random_values(params, 84),
             start = test::random_values(size, 85), pstart = test::random_values(params, 86);
  test::from_host(x, xh);
  test::from_host(dy, dyh);
  test::from_host(gamma, gh);
  test::from_host(beta, bh);
  test::from_host(dx, start);
  test::from_host(dx_running, start);
  for (const auto& v : {dgamma, dbeta, dgamma2, dbeta2}) test::from_host(v, pstart);
  kernels::group_sums(exec, l, x, sums, partials, path);
  kernels::moments_from_sums(exec, sums, l.group_size(), 1e-5f, mean, invstd);
  kernels::group_normalize(exec, l, affine, x, mean, invstd, gamma, beta, y, path);
  kernels::group_input_gradient(exec, l, affine, x, dy, mean, invstd, gamma, false, sums,
                                l.group_size(), dx_running, true, path);
  kernels::affine_gradients(exec, l, affine, x, dy, mean, invstd, dgamma, dbeta, partials, path);
  kernels::group_gradient_sums(exec, l, affine, x, dy, mean, invstd, gamma, sums, partials, path);
  kernels::group_input_gradient(exec, l, affine, x, dy, mean, invstd, gamma, true, sums,
                                l.group_size(), dx, true, path);
  if (per_group) kernels::affine_gradients_from_sums(exec, sums, dgamma2, dbeta2);

  const std::string where = describe(l, path);
  const auto m = test::to_host(mean), s = test::to_host(invstd);
  const double n = static_cast<double>(l.group_size());
  std::vector<double> sum_dxhat(l.groups), sum_projected(l.groups), bound(l.groups);
  std::vector<double> dg(pstart.begin(), pstart.end()), db(pstart.begin(), pstart.end()),
      dg_bound(params);
  for (std::int64_t g = 0; g < l.groups; ++g)
    for (std::int64_t k = 0; k < l.group_size(); ++k) {
      const std::int64_t i = l.index(g, k), p = per_group ? g : k;
      const double xhat = (double(xh[i]) - m[g]) * s[g], dxhat = double(dyh[i]) * gh[p];
      sum_dxhat[g] += dxhat;
      sum_projected[g] += dxhat * xhat;
      bound[g] += std::fabs(dxhat) * (1 + std::fabs(xhat));
      dg[p] += dyh[i] * xhat;
      db[p] += dyh[i];
      dg_bound[p] += std::fabs(dyh[i]) * (1 + std::fabs(xhat));
    }
  const auto yk = test::to_host(y), dxk = test::to_host(dx), dxr = test::to_host(dx_running);
  for (std::int64_t g = 0; g < l.groups; ++g)
    for (std::int64_t k = 0; k < l.group_size(); ++k) {
      const std::int64_t i = l.index(g, k), p = per_group ? g : k;
      const double xhat = (double(xh[i]) - m[g]) * s[g], dxhat = double(dyh[i]) * gh[p];
      const double y_ref = xhat * gh[p] + bh[p];
      ASSERT_NEAR(yk[i], y_ref, 1e-5 * (1 + std::fabs(y_ref))) << "y " << i << ", " << where;
      const double running = start[i] + s[g] * dxhat;
      ASSERT_NEAR(dxr[i], running, 1e-5 * (1 + std::fabs(running)))
          << "dx (running) " << i << ", " << where;
      const double batch = start[i] + s[g] * (dxhat - (sum_dxhat[g] + xhat * sum_projected[g]) / n);
      const double tol = 1e-5 * (1 + std::fabs(batch)) + 1e-6 * s[g] * bound[g] / n;
      ASSERT_NEAR(dxk[i], batch, tol) << "dx (batch) " << i << ", " << where;
    }
  const auto dgk = test::to_host(dgamma), dbk = test::to_host(dbeta);
  const auto dgk2 = test::to_host(dgamma2), dbk2 = test::to_host(dbeta2);
  for (std::int64_t p = 0; p < params; ++p) {
    const double tol_g = 1e-6 * dg_bound[p] + 1e-6 * (1 + std::fabs(dg[p]));
    const double tol_b = 1e-6 * dg_bound[p] + 1e-6 * (1 + std::fabs(db[p]));
    ASSERT_NEAR(dgk[p], dg[p], tol_g) << "dgamma " << p << ", " << where;
    ASSERT_NEAR(dbk[p], db[p], tol_b) << "dbeta " << p << ", " << where;
    if (!per_group) continue;
    ASSERT_NEAR(dgk2[p], dg[p], tol_g) << "dgamma from sums " << p << ", " << where;
    ASSERT_NEAR(dbk2[p], db[p], tol_b) << "dbeta from sums " << p << ", " << where;
  }
}

TYPED_TEST(NormKernels, BackwardMatchesNaiveLoops) {
  for (const kernels::NormPath path : paths<TypeParam>())
    for (const kernels::Affine affine : {kernels::Affine::per_group, kernels::Affine::per_position})
      for (const kernels::GroupLayout l :
           {kernels::GroupLayout{16, 5, 37}, kernels::GroupLayout{40, 3, 300},
            kernels::GroupLayout{1, 3, 9000}, kernels::GroupLayout{700, 4, 1},
            kernels::GroupLayout{9, 70, 3}, kernels::GroupLayout{1, 300, 40},
            kernels::GroupLayout{3, 70, 5}})
        expect_backward_matches_naive_loops<TypeParam>(affine, l, path);
}

TYPED_TEST(NormKernels, ShapeMismatchNamesKernelAndExtents) {
  using E = TypeParam;
  V<E> x("x", 10);
  D<E> sums("sums", 4);
  try {
    kernels::group_sums(E(), kernels::GroupLayout{2, 3, 2}, x, sums);
    FAIL() << "expected tessera::Error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("tessera::kernels::group_sums: x has 10 elements, expected 12"),
        std::string::npos)
        << e.what();
  }
}

// Through a model and the loss, in training mode: the norm layers pass
// correct gradients to the layers before them.
TEST(NormModel, GradientsThroughNormLayersMatchFiniteDifferences) {
  const std::int64_t batch = 6;
  Model model(Shape{3});
  model.add<Dense>("fc1", 4).add<BatchNorm>("bn").add<Tanh>("tanh").add<LayerNorm>("ln").add<Dense>(
      "fc2", 3);
  model.compile(batch, 3);
  test::from_host(model.input(batch).flat(), test::random_values(batch * 3, 91));
  test::expect_model_gradients(model, std::vector<int>{0, 2, 1, 1, 0, 2});
  test::expect_catches_scaled_gradients(model, std::vector<int>{0, 2, 1, 1, 0, 2});
}

// Evaluation runs in inference mode, so it also checks that the running
// statistics the training steps left behind normalise well. Batches of 128:
// the mean of 32 samples moves each ReLU hinge by ~0.1, which alone
// misclassifies the XOR points that close to an axis.
TEST(NormModel, BatchNormAndDropoutMlpConvergesOnXor) {
  const Dataset data = test::xor_dataset(512, 61);
  auto model = std::make_unique<Model>(Shape{2});
  model->add<Dense>("fc1", 32)
      .add<BatchNorm>("bn1")
      .add<ReLU>("relu1")
      .add<Dropout>("drop1", 0.1f)
      .add<Dense>("fc2", 2);
  TrainOptions options;
  options.batch_size = 128;
  options.seed = 5;
  options.schedule.base_lr = 0.1f;
  model->compile(options.batch_size, options.seed);
  EXPECT_EQ(model->state().entries().size(), 2u);
  SGD::Params hp;
  hp.momentum = 0.9f;
  SGD sgd(hp);
  Trainer trainer(*model, sgd, options);
  test::expect_converges(trainer, data, 50);
}

// In bf16 and fp16 the statistics are the float layer's (sums in double of
// the same values), and y and dx are its results rounded once; the
// running statistics and the affine gradients stay float.
template <class T>
void expect_norm_16bit() {
  const auto running = [](int channels) {
    return [channels](test::LayerHarness& h) { set_running_statistics(h, channels); };
  };
  for (const StepContext& ctx : {StepContext{}, inference()}) {
    BatchNorm a("bn1d"), b("bn1d");
    test::expect_16bit_matches_float<T>(a, b, {Shape{6, 3}}, running(3), 1e-5, 1.0, ctx);
    BatchNorm c("bn2d"), d("bn2d");
    test::expect_16bit_matches_float<T>(c, d, {Shape{3, 2, 2, 3}}, running(2), 1e-5, 1.0, ctx);
  }
  LayerNorm e("ln"), f("ln");
  test::expect_16bit_matches_float<T>(e, f, {Shape{2, 3, 2, 2}});
  LayerNorm::Options options;
  options.last_axis = true;
  LayerNorm g("ln_last", options), h("ln_last", options);
  test::expect_16bit_matches_float<T>(g, h, {Shape{2, 3, 4}});
}

TEST(Normalization, Bf16AndFp16AreTheFloatResultsRoundedOnce) {
  expect_norm_16bit<bf16>();
  expect_norm_16bit<fp16>();
}

}  // namespace
