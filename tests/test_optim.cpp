// Optimizers: SGD, Adam and AdamW updates against hand-computed values, the
// optimizer interface (step count, state buffers, resuming from saved state,
// the factory, argument checks), and tiny models that must converge.
#include <tessera/kernels/adam.hpp>
#include <tessera/kernels/sgd.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/optim/adam.hpp>
#include <tessera/optim/sgd.hpp>
#include <tessera/train/trainer.hpp>

#include <algorithm>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class OptimKernel : public ::testing::Test {};
TYPED_TEST_SUITE(OptimKernel, test::ExecSpaces);

template <class ExecSpace>
using V = Kokkos::View<float*, Kokkos::LayoutRight, typename ExecSpace::memory_space>;

TYPED_TEST(OptimKernel, SgdPlainStep) {
  using E = TypeParam;
  V<E> p("p", 2), g("g", 2), v("v", 2);
  test::from_host(p, {1.0f, -2.0f});
  test::from_host(g, {0.5f, 0.25f});
  kernels::sgd_step(E(), kernels::SgdParams{}, 0.1f, p, g, v);
  const auto ph = test::to_host(p);
  EXPECT_FLOAT_EQ(ph[0], 1.0f - 0.1f * 0.5f);
  EXPECT_FLOAT_EQ(ph[1], -2.0f - 0.1f * 0.25f);
}

TYPED_TEST(OptimKernel, SgdMomentumWeightDecayTwoSteps) {
  using E = TypeParam;
  V<E> p("p", 1), g("g", 1), v("v", 1);
  test::from_host(p, {1.0f});
  test::from_host(g, {0.5f});
  kernels::SgdParams hp;
  hp.momentum = 0.9f;
  hp.weight_decay = 0.01f;
  // step 1: g' = 0.5 + 0.01 * 1 = 0.51; v = 0.51; p = 1 - 0.1 * 0.51 = 0.949
  kernels::sgd_step(E(), hp, 0.1f, p, g, v);
  EXPECT_FLOAT_EQ(test::to_host(p)[0], 0.949f);
  EXPECT_FLOAT_EQ(test::to_host(v)[0], 0.51f);
  // step 2: g' = 0.5 + 0.00949 = 0.50949; v = 0.9 * 0.51 + 0.50949 = 0.96849;
  // p = 0.949 - 0.096849 = 0.852151
  kernels::sgd_step(E(), hp, 0.1f, p, g, v);
  EXPECT_NEAR(test::to_host(v)[0], 0.96849, 1e-6);
  EXPECT_NEAR(test::to_host(p)[0], 0.852151, 1e-6);
}

TYPED_TEST(OptimKernel, SgdNesterovStep) {
  using E = TypeParam;
  V<E> p("p", 1), g("g", 1), v("v", 1);
  test::from_host(p, {1.0f});
  test::from_host(g, {2.0f});
  test::from_host(v, {1.0f});
  kernels::SgdParams hp;
  hp.momentum = 0.5f;
  hp.nesterov = true;
  // v = 0.5 * 1 + 2 = 2.5; p = 1 - 0.5 * (2 + 0.5 * 2.5) = 1 - 1.625 = -0.625
  kernels::sgd_step(E(), hp, 0.5f, p, g, v);
  EXPECT_FLOAT_EQ(test::to_host(v)[0], 2.5f);
  EXPECT_FLOAT_EQ(test::to_host(p)[0], -0.625f);
}

// Runs adam_step once per gradient in `grads` on one parameter starting at p0
// and returns p after each step.
template <class E>
std::vector<float> adam_trajectory(const kernels::AdamParams& hp, kernels::WeightDecay mode,
                                   float lr, float p0, const std::vector<float>& grads) {
  V<E> p("p", 1), g("g", 1), m("m", 1), v("v", 1);
  test::from_host(p, {p0});
  std::vector<float> out;
  for (std::size_t t = 0; t < grads.size(); ++t) {
    test::from_host(g, {grads[t]});
    kernels::adam_step(E(), hp, mode, lr, static_cast<std::int64_t>(t + 1), p, g, m, v);
    out.push_back(test::to_host(p)[0]);
  }
  return out;
}

TYPED_TEST(OptimKernel, AdamThreeSteps) {
  // lr 0.1, b1 0.9, b2 0.999, eps 1e-8, p = 1, gradients 0.5, 0.25, -0.5.
  // t=1: m = 0.1 * 0.5 = 0.05; v = 0.001 * 0.25 = 0.00025; bc1 = 0.1; bc2 = 0.001
  //      p = 1 - (0.1 / 0.1) * 0.05 / (sqrt(0.00025) / sqrt(0.001) + 1e-8)
  //        = 1 - 0.05 / 0.50000001 = 0.900000002
  // t=2: m = 0.9 * 0.05 + 0.1 * 0.25 = 0.07; v = 0.999 * 0.00025 + 0.001 * 0.0625 = 0.00031225
  //      bc1 = 1 - 0.81 = 0.19; bc2 = 1 - 0.998001 = 0.001999
  //      p = 0.9 - (0.1 / 0.19) * 0.07 / (sqrt(0.00031225) / sqrt(0.001999) + 1e-8)
  //        = 0.9 - 0.5263158 * 0.07 / 0.3952254 = 0.9 - 0.0932180 = 0.8067820
  // t=3: m = 0.9 * 0.07 + 0.1 * -0.5 = 0.013; v = 0.999 * 0.00031225 + 0.001 * 0.25 = 0.00056194
  //      bc1 = 1 - 0.729 = 0.271; bc2 = 1 - 0.997003 = 0.002997001
  //      p = 0.8067820 - (0.1 / 0.271) * 0.013 / (sqrt(0.00056194) / sqrt(0.002997001))
  //        = 0.8067820 - 0.3690037 * 0.013 / 0.4330127 = 0.8067820 - 0.0110783 = 0.7957037
  const auto p = adam_trajectory<TypeParam>(kernels::AdamParams{}, kernels::WeightDecay::l2, 0.1f,
                                            1.0f, {0.5f, 0.25f, -0.5f});
  EXPECT_NEAR(p[0], 0.900000002, 1e-6);
  EXPECT_NEAR(p[1], 0.8067820, 1e-6);
  EXPECT_NEAR(p[2], 0.7957037, 1e-6);
}

TYPED_TEST(OptimKernel, AdamEpsIsOutsideTheSquareRoot) {
  // lr 0.01, b1 0.5, b2 0.75, eps 0.5 (large, so its placement shows), p = 2.
  // t=1, g = -1: m = -0.5; v = 0.25; bc1 = 0.5; bc2 = 0.25
  //      p = 2 - (0.01 / 0.5) * -0.5 / (sqrt(0.25) / sqrt(0.25) + 0.5) = 2 + 0.01 / 1.5 = 2.0066667
  //      (inside the root it would be 2 + 0.01 / sqrt(1.5) = 2.0081650)
  // t=2, g = 0: m = -0.25; v = 0.1875; bc1 = 0.75; bc2 = 0.4375
  //      p = 2.0066667 + (0.01 / 0.75) * 0.25 / (sqrt(0.1875) / sqrt(0.4375) + 0.5)
  //        = 2.0066667 + 0.0133333 * 0.25 / 1.1546537 = 2.0066667 + 0.0028869 = 2.0095535
  kernels::AdamParams hp;
  hp.beta1 = 0.5f;
  hp.beta2 = 0.75f;
  hp.eps = 0.5f;
  const auto p =
      adam_trajectory<TypeParam>(hp, kernels::WeightDecay::l2, 0.01f, 2.0f, {-1.0f, 0.0f});
  EXPECT_NEAR(p[0], 2.0066667, 1e-6);
  EXPECT_NEAR(p[1], 2.0095535, 1e-6);
}

TYPED_TEST(OptimKernel, AdamL2WeightDecayGoesThroughTheGradient) {
  // lr 0.1, wd 0.1, p = 1, gradients 0.5, 0.25.
  // t=1: g = 0.5 + 0.1 * 1 = 0.6; m = 0.06; v = 0.00036; p = 1 - 0.06 / (0.6 + 1e-8) = 0.9000000017
  // t=2: g = 0.25 + 0.1 * 0.9 = 0.34; m = 0.9 * 0.06 + 0.034 = 0.088;
  //      v = 0.999 * 0.00036 + 0.001 * 0.1156 = 0.00047524
  //      p = 0.9 - (0.1 / 0.19) * 0.088 / (sqrt(0.00047524) / sqrt(0.001999))
  //        = 0.9 - 0.5263158 * 0.088 / 0.4875847 = 0.9 - 0.0949902 = 0.8050098
  kernels::AdamParams hp;
  hp.weight_decay = 0.1f;
  const auto p =
      adam_trajectory<TypeParam>(hp, kernels::WeightDecay::l2, 0.1f, 1.0f, {0.5f, 0.25f});
  EXPECT_NEAR(p[0], 0.9000000017, 1e-6);
  EXPECT_NEAR(p[1], 0.8050098, 1e-6);
}

TYPED_TEST(OptimKernel, AdamWDecaysTheWeightsDirectly) {
  // lr 0.1, wd 0.1, p = 1, gradients 0.5, 0.25: the moments are Adam's without decay.
  // t=1: p = 1 - 0.1 * 0.1 * 1 = 0.99; then the Adam step of 0.099999998: p = 0.890000002
  // t=2: p = 0.890000002 * (1 - 0.01) = 0.881100002; then Adam's t=2 step of 0.0932180:
  //      p = 0.881100002 - 0.0932180 = 0.7878820
  kernels::AdamParams hp;
  hp.weight_decay = 0.1f;
  const auto p =
      adam_trajectory<TypeParam>(hp, kernels::WeightDecay::decoupled, 0.1f, 1.0f, {0.5f, 0.25f});
  EXPECT_NEAR(p[0], 0.890000002, 1e-6);
  EXPECT_NEAR(p[1], 0.7878820, 1e-6);
}

TYPED_TEST(OptimKernel, ElementsAreIndependentAndSizesAreChecked) {
  using E = TypeParam;
  V<E> p("p", 2), g("g", 2), m("m", 2), v("v", 2), short_v("v", 1);
  test::from_host(p, {1.0f, 1.0f});
  test::from_host(g, {0.5f, -0.5f});
  kernels::adam_step(E(), kernels::AdamParams{}, kernels::WeightDecay::l2, 0.1f, 1, p, g, m, v);
  const auto ph = test::to_host(p);
  EXPECT_NEAR(ph[0], 0.900000002, 1e-6);
  EXPECT_NEAR(ph[1], 1.099999998, 1e-6);
  try {
    kernels::adam_step(E(), kernels::AdamParams{}, kernels::WeightDecay::l2, 0.1f, 1, p, g, m,
                       short_v);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tessera::kernels::adam_step: parameters 2, gradients 2, "
                                         "first moments 2, second moments 1 must agree"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      kernels::adam_step(E(), kernels::AdamParams{}, kernels::WeightDecay::l2, 0.1f, 0, p, g, m, v),
      Error);
  EXPECT_THROW(kernels::sgd_step(E(), kernels::SgdParams{}, 0.1f, p, g, short_v), Error);
}

// A store with two entries (5 + 3 parameters, each padded for alignment) and
// seeded values and gradients.
ParameterStore small_store(std::uint64_t seed) {
  ParameterStore store;
  store.add("fc", ParameterSpec{"weight", Shape{5}});
  store.add("fc", ParameterSpec{"bias", Shape{3}});
  store.allocate();
  const auto n = static_cast<std::size_t>(store.count());
  test::from_host(store.values(), test::random_values(n, seed));
  test::from_host(store.gradients(), test::random_values(n, seed + 1));
  return store;
}

TEST(Optimizer, StepCountAndStateBuffersFollowTheParameterLayout) {
  ParameterStore store = small_store(3);
  Adam adam;
  EXPECT_EQ(adam.name(), "Adam");
  EXPECT_TRUE(adam.state_buffers().empty());
  adam.step(ExecSpace(), store, 0.01f);
  adam.step(ExecSpace(), store, 0.01f);
  EXPECT_EQ(adam.step_count(), 2);
  const auto state = adam.state_buffers();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "exp_avg");
  EXPECT_EQ(state[1].first, "exp_avg_sq");
  for (const auto& [name, buffer] : state) EXPECT_EQ(buffer.size(), store.values().size()) << name;

  SGD sgd(SGD::Params{0.9f, 0.0f, false});
  EXPECT_EQ(sgd.name(), "SGD");
  sgd.allocate(store);
  ASSERT_EQ(sgd.state_buffers().size(), 1u);
  EXPECT_EQ(sgd.state_buffers()[0].first, "velocity");
  EXPECT_EQ(sgd.step_count(), 0);
}

TEST(Optimizer, ClassStepMatchesTheKernel) {
  ParameterStore a = small_store(5), b = small_store(5);
  const SGD::Params hp{0.9f, 1e-3f, true};
  SGD sgd(hp);
  Vector<float> velocity("velocity", a.count());
  for (int i = 0; i < 3; ++i) {
    sgd.step(ExecSpace(), a, 0.05f);
    kernels::sgd_step(ExecSpace(), hp, 0.05f, b.values(), b.gradients(), velocity);
  }
  EXPECT_EQ(test::to_host(a.values()), test::to_host(b.values()));
}

// What a checkpoint does: save the step count and state buffers, load them
// into a fresh optimizer, and continue bitwise as if never interrupted.
template <class O>
void expect_resume_is_exact() {
  ParameterStore a = small_store(11), b = small_store(11);
  O original;
  original.step(ExecSpace(), a, 0.01f);
  original.step(ExecSpace(), a, 0.02f);
  O resumed;
  resumed.allocate(b);
  Kokkos::deep_copy(b.values(), a.values());
  const auto saved = original.state_buffers();
  const auto fresh = resumed.state_buffers();
  ASSERT_EQ(saved.size(), fresh.size());
  for (std::size_t i = 0; i < saved.size(); ++i)
    Kokkos::deep_copy(fresh[i].second, saved[i].second);
  resumed.set_step_count(original.step_count());
  original.step(ExecSpace(), a, 0.03f);
  resumed.step(ExecSpace(), b, 0.03f);
  EXPECT_EQ(test::to_host(a.values()), test::to_host(b.values()));
  EXPECT_EQ(resumed.step_count(), 3);
}

TEST(Optimizer, ResumesExactlyFromSavedState) {
  expect_resume_is_exact<SGD>();
  expect_resume_is_exact<Adam>();
  expect_resume_is_exact<AdamW>();
}

// ZeRO-1's premise: optimizers holding the shards of a store update it as
// one optimizer over the whole store does, bit for bit, each keeping state
// for its shard only.
void expect_shards_compose(const OptimizerParams& params) {
  ParameterStore whole = small_store(13), sharded = small_store(13);
  const std::int64_t n = whole.count(), cut = n / 3;
  const auto one_ptr = make_optimizer(params), first_ptr = make_optimizer(params),
             second_ptr = make_optimizer(params);
  Optimizer &one = *one_ptr, &first = *first_ptr, &second = *second_ptr;
  first.set_shard(0, cut);
  second.set_shard(cut, n - cut);
  EXPECT_TRUE(first.sharded());
  EXPECT_EQ(second.shard_offset(), cut);
  for (int step = 0; step < 3; ++step) {
    one.step(ExecSpace(), whole, 0.01f * (step + 1));
    // Each shard's step writes only its own slice of the values.
    const auto before = test::to_host(sharded.values());
    first.step(ExecSpace(), sharded, 0.01f * (step + 1));
    const auto after_first = test::to_host(sharded.values());
    for (std::int64_t i = cut; i < n; ++i) ASSERT_EQ(after_first[i], before[i]) << i;
    second.step(ExecSpace(), sharded, 0.01f * (step + 1));
  }
  EXPECT_EQ(test::to_host(sharded.values()), test::to_host(whole.values())) << one.name();
  for (const auto& [name, buffer] : first.state_buffers())
    EXPECT_EQ(buffer.size(), static_cast<std::size_t>(cut)) << name;
  for (const auto& [name, buffer] : second.state_buffers())
    EXPECT_EQ(buffer.size(), static_cast<std::size_t>(n - cut)) << name;
}

TEST(Optimizer, ShardsUpdateAsTheWholeStore) {
  for (const char* type : {"sgd", "adam", "adamw"}) {
    OptimizerParams params = OptimizerParams::for_type(type);
    params.sgd.momentum = 0.9f;
    params.sgd.nesterov = true;
    params.sgd.weight_decay = 1e-3f;
    expect_shards_compose(params);
  }
}

TEST(Optimizer, ShardsAreCheckedAgainstTheStore) {
  ParameterStore store = small_store(3);
  SGD late;
  late.step(ExecSpace(), store, 0.1f);
  test::expect_error([&] { late.set_shard(0, 1); },
                     "tessera::SGD::set_shard: the state is allocated already");
  Adam outside;
  outside.set_shard(store.count() - 1, 2);
  test::expect_error([&] { outside.step(ExecSpace(), store, 0.1f); },
                     "tessera::Adam: the shard [" + std::to_string(store.count() - 1) + ", " +
                         std::to_string(store.count() + 1) + ") lies outside the store's " +
                         std::to_string(store.count()) + " parameters");
}

TEST(Optimizer, FactoryBuildsEachTypeAndChecksHyperparameters) {
  OptimizerParams p;
  EXPECT_EQ(make_optimizer(p)->name(), "SGD");
  p.type = "adam";
  EXPECT_EQ(make_optimizer(p)->name(), "Adam");
  p.type = "adamw";
  p.adam.weight_decay = 0.1f;
  const auto adamw = make_optimizer(p);
  ASSERT_EQ(adamw->name(), "AdamW");
  EXPECT_FLOAT_EQ(dynamic_cast<const AdamW&>(*adamw).params().weight_decay, 0.1f);

  const auto expect_error = [](const OptimizerParams& bad, const std::string& fragment) {
    try {
      make_optimizer(bad);
      FAIL() << "expected an Error with " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  OptimizerParams bad;
  bad.type = "adagrad";
  expect_error(bad, "tessera::make_optimizer: unknown type 'adagrad'; allowed: sgd, adam, adamw");
  bad.type = "adam";
  bad.adam.beta2 = 1.0f;
  expect_error(bad, "tessera::make_optimizer: beta2 1 must be in [0, 0.999999]");
  bad.adam.beta2 = 0.999f;
  bad.adam.eps = 0.0f;
  expect_error(bad, "tessera::make_optimizer: eps 0 must be in (0, 1]");
  bad.type = "sgd";
  bad.sgd.momentum = -0.5f;
  expect_error(bad, "tessera::make_optimizer: momentum -0.5 must be in [0, 0.999999]");
}

TEST(Optimizer, DefaultsDependOnTheType) {
  EXPECT_FLOAT_EQ(OptimizerParams::for_type("adamw").weight_decay(), 0.01f);
  EXPECT_FLOAT_EQ(OptimizerParams::for_type("adam").weight_decay(), 0.0f);
  EXPECT_FLOAT_EQ(OptimizerParams::for_type("sgd").weight_decay(), 0.0f);
  EXPECT_FLOAT_EQ(OptimizerParams::default_lr("sgd"), 0.01f);
  EXPECT_FLOAT_EQ(OptimizerParams::default_lr("adamw"), 0.001f);
  // The kernels, the optimizers and the factory share one definition.
  EXPECT_FLOAT_EQ(Adam::Params{}.beta2, OptimizerParams{}.adam.beta2);
}

TEST(Optimizer, RejectsBadLearningRatesAndForeignStores) {
  ParameterStore store = small_store(1);
  AdamW adamw;
  try {
    adamw.step(ExecSpace(), store, -1.0f);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "tessera::AdamW::step: learning rate -1 must be finite and >= 0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(adamw.step_count(), 0);
  adamw.step(ExecSpace(), store, 0.1f);
  ParameterStore other;
  other.add("x", ParameterSpec{"w", Shape{2}});
  other.allocate();
  EXPECT_THROW(adamw.step(ExecSpace(), other, 0.1f), Error);
  EXPECT_THROW(adamw.set_step_count(-1), Error);
}

std::vector<std::string>& recorded_regions() {
  static std::vector<std::string> names;
  return names;
}

TEST(Optimizer, EachStepIsANamedProfilingRegion) {
  ParameterStore store = small_store(2);
  SGD sgd;
  Adam adam;
  AdamW adamw;
  recorded_regions().clear();
  Kokkos::Tools::Experimental::set_push_region_callback(
      [](const char* name) { recorded_regions().emplace_back(name); });
  sgd.step(ExecSpace(), store, 0.1f);
  adam.step(ExecSpace(), store, 0.1f);
  adamw.step(ExecSpace(), store, 0.1f);
  Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
  const auto& names = recorded_regions();
  for (const char* expected : {"tessera::SGD::step", "tessera::Adam::step", "tessera::AdamW::step",
                               "tessera::kernels::sgd_step", "tessera::kernels::adam_step"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
}

// Points in [-1, 1)^2 labelled by whether they lie inside the disc of area 2
// (radius^2 = 2 / pi), half the square: balanced classes, and a boundary no
// linear model can draw.
Dataset disc_dataset(std::int64_t n, std::uint64_t seed) {
  const float radius_squared = static_cast<float>(2.0 / 3.14159265358979323846);
  return test::plane_dataset(n, seed,
                             [=](float x, float y) { return x * x + y * y < radius_squared; });
}

// Trains a small MLP on the disc with `optimizer`, warmup into a cosine schedule
// and gradient clipping; returns {initial loss, final evaluation}.
std::pair<double, Evaluation> train_disc(Optimizer& optimizer, float lr) {
  const Dataset data = disc_dataset(512, 61);
  auto model = std::make_unique<Model>(Shape{2});
  model->add<Dense>("fc1", 32).add<ReLU>("relu1").add<Dense>("fc2", 2);
  TrainOptions options;
  options.batch_size = 32;
  options.seed = 5;
  options.epochs = 30;
  options.schedule.type = ScheduleType::cosine;
  options.schedule.base_lr = lr;
  options.schedule.min_lr = lr / 100;
  options.schedule.warmup_steps = 16;
  options.clip_norm = 1.0f;
  model->compile(options.batch_size, options.seed);
  Trainer trainer(*model, optimizer, options);
  const double initial = trainer.evaluate(data).loss;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    const auto report = trainer.train_epoch(data, epoch);
    EXPECT_EQ(report.lr, trainer.lr());
  }
  // The last of 30 * 16 steps is 479: cosine at 479 / 480 of the way.
  EXPECT_FLOAT_EQ(trainer.lr(), options.schedule.lr(479, 16, 480));
  EXPECT_LT(trainer.lr(), 1.01f * options.schedule.min_lr);
  EXPECT_GT(trainer.grad_norm(), 0.0f);
  EXPECT_EQ(optimizer.step_count(), 480);
  return {initial, trainer.evaluate(data)};
}

TEST(OptimizerTraining, AdamAndAdamWConvergeWithWarmupCosineAndClipping) {
  Adam adam;
  const auto [initial, adam_eval] = train_disc(adam, 0.01f);
  EXPECT_LT(adam_eval.loss, 0.25 * initial);
  EXPECT_GT(adam_eval.accuracy, 0.95);
  AdamW adamw(Adam::Params{0.9f, 0.999f, 1e-8f, 0.01f});
  const auto [initial_w, adamw_eval] = train_disc(adamw, 0.01f);
  EXPECT_LT(adamw_eval.loss, 0.25 * initial_w);
  EXPECT_GT(adamw_eval.accuracy, 0.95);
}

TEST(OptimizerTraining, TrainerRejectsBadOptions) {
  auto model = std::make_unique<Model>(Shape{2});
  model->add<Dense>("fc", 2);
  model->compile(4, 0);
  SGD sgd;
  TrainOptions options;
  options.batch_size = 4;
  options.clip_norm = -1.0f;
  EXPECT_THROW(Trainer(*model, sgd, options), Error);
  options.clip_norm = 0.0f;
  options.schedule.gamma = 0.0f;
  EXPECT_THROW(Trainer(*model, sgd, options), Error);
  // The engine checks the ranges the deck's keys declare.
  options.schedule = LrSchedule{};
  options.epochs = 0;
  test::expect_error([&] { Trainer(*model, sgd, options); },
                     "tessera::TrainOptions: epochs 0 must be in [1, 1000000]");
  options.epochs = 1;
  options.clip_norm = 2e6f;
  test::expect_error([&] { Trainer(*model, sgd, options); },
                     "tessera::TrainOptions: clip_norm 2e+06 must be in [0, 1000000]");
  options.clip_norm = 0.0f;
  options.accumulation_steps = 5;
  test::expect_error([&] { Trainer(*model, sgd, options); },
                     "accumulation_steps 5 must be at most batch_size 4");
}

}  // namespace
