// Models end to end: a gradient check through Dense + ReLU + loss, a tiny
// model that must converge, bitwise determinism, seeded shuffling.
#include <tessera/kernels/loss.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/model/trainer.hpp>
#include <tessera/optim/sgd.hpp>

#include <algorithm>
#include <limits>

#include "model_check.hpp"

namespace {

using namespace tessera;

std::unique_ptr<Model> small_mlp(std::int64_t inputs, std::int64_t hidden, std::int64_t classes) {
  auto model = std::make_unique<Model>(Shape{inputs});
  model->add<Dense>("fc1", hidden).add<ReLU>("relu1").add<Dense>("fc2", classes);
  return model;
}


TEST(Model, ShapeInferenceAndSummary) {
  auto model = small_mlp(784, 32, 10);
  model->compile(16, 1);
  EXPECT_EQ(model->layer_output_shape(0), (Shape{32}));
  EXPECT_EQ(model->output_shape(), (Shape{10}));
  EXPECT_EQ(model->parameters().entries().size(), 4u);
  // fc1 (multiply-adds and bias), relu1 (one per element), fc2.
  EXPECT_EQ(model->flops_per_sample(), 2 * 784 * 32 + 32 + 32 + 2 * 32 * 10 + 10);
  const std::string summary = model->summary();
  EXPECT_NE(summary.find("fc1"), std::string::npos) << summary;
  EXPECT_NE(summary.find(std::to_string(784 * 32 + 32 + 32 * 10 + 10)), std::string::npos) << summary;
}

TEST(Model, ParametersLiveInOneBufferAndInitialiseFromSeed) {
  auto a = small_mlp(5, 4, 3), b = small_mlp(5, 4, 3), c = small_mlp(5, 4, 3);
  a->compile(2, 7);
  b->compile(2, 7);
  c->compile(2, 8);
  const auto& entries = a->parameters().entries();
  for (std::size_t i = 1; i < entries.size(); ++i)
    EXPECT_GE(entries[i].offset, entries[i - 1].offset + entries[i - 1].spec.shape.numel());
  EXPECT_EQ(a->parameters().values().data(), a->parameters().value(0).data());
  EXPECT_EQ(test::to_host(a->parameters().values()), test::to_host(b->parameters().values()));
  EXPECT_NE(test::to_host(a->parameters().values()), test::to_host(c->parameters().values()));
  // Biases start at zero; weights within the He bound sqrt(6 / fan_in).
  for (float v : test::to_host(a->parameters().value(1).flat())) EXPECT_EQ(v, 0.0f);
  for (float v : test::to_host(a->parameters().value(0).flat())) EXPECT_LE(std::fabs(v), std::sqrt(6.0f / 5));
}

TEST(Model, BackwardMatchesFiniteDifferencesThroughTheLoss) {
  const std::int64_t batch = 4;
  auto model = small_mlp(3, 5, 4);
  model->compile(batch, 3);
  test::from_host(model->input(batch).flat(), test::random_values(batch * 3, 51));
  test::expect_model_gradients(*model, std::vector<int>{0, 3, 1, 2});
}

TEST(Model, TinyMlpConvergesOnXor) {
  const Dataset data = test::xor_dataset(512, 61);
  auto model = small_mlp(2, 32, 2);
  TrainOptions options;
  options.batch_size = 32;
  options.seed = 5;
  options.schedule.base_lr = 0.1f;
  model->compile(options.batch_size, options.seed);
  SGD::Params hp;
  hp.momentum = 0.9f;
  SGD sgd(hp);
  Trainer trainer(*model, sgd, options);
  test::expect_converges(trainer, data, 40);
}

TEST(Model, TrainingIsBitwiseReproducible) {
  const Dataset data = test::xor_dataset(100, 71);  // 100 / 32: the last batch is partial
  std::vector<std::vector<float>> finals;
  for (int run = 0; run < 2; ++run) {
    auto model = small_mlp(2, 8, 2);
    TrainOptions options;
    options.batch_size = 32;
    options.seed = 9;
    options.schedule.base_lr = 0.05f;
    model->compile(options.batch_size, options.seed);
    SGD sgd(SGD::Params{0.9f, 1e-4f, true});
    Trainer trainer(*model, sgd, options);
    for (int epoch = 0; epoch < 3; ++epoch) trainer.train_epoch(data, epoch);
    EXPECT_EQ(trainer.step(), 3 * 4);
    finals.push_back(test::to_host(model->parameters().values()));
  }
  EXPECT_EQ(finals[0], finals[1]);
}

TEST(Shuffle, SeededPermutation) {
  const auto a = shuffled_order(1000, 3, 0);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(a, shuffled_order(1000, 3, 0));
  EXPECT_NE(a, shuffled_order(1000, 3, 1));
  EXPECT_NE(a, shuffled_order(1000, 4, 0));
}

// Identity forward; backward writes NaN into dx, so the loss stays finite and
// only the gradients of the layers before it turn non-finite.
class PoisonGradient final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "PoisonGradient"; }
  Shape output_shape(const Shapes& inputs) const override { return inputs.at(0); }
  void forward(const Tensors& x, const Tensor<float>& y, const StepContext&) override {
    Kokkos::deep_copy(y.flat(), x[0].flat());
  }
  void backward(const Tensors&, const Tensor<float>&, const Tensor<float>&, const Tensors& dx,
                const StepContext&) override {
    Kokkos::deep_copy(dx[0].flat(), std::numeric_limits<float>::quiet_NaN());
  }
};

TEST(Trainer, NonFiniteGradientStopsBeforeTheUpdate) {
  const Dataset data = test::xor_dataset(64, 3);
  Model model(Shape{2});
  model.add<Dense>("fc1", 4).add<PoisonGradient>("poison").add<Dense>("fc2", 2);
  TrainOptions options;
  options.batch_size = 16;
  model.compile(options.batch_size, 1);
  const auto before = test::to_host(model.parameters().values());
  SGD sgd;
  Trainer trainer(model, sgd, options);
  test::expect_error([&] { trainer.train_epoch(data, 0); },
                     "tessera::Trainer: non-finite gradient at epoch 1, step 1 (optimizer step 1), "
                     "first in fc1.weight; the weights were not updated with it");
  EXPECT_EQ(test::to_host(model.parameters().values()), before);
  EXPECT_EQ(trainer.step(), 0);
}

TEST(Trainer, NonFiniteLossStopsBeforeTheUpdate) {
  auto xy = test::random_values(2 * 64, 3);
  xy[2 * 20] = std::numeric_limits<float>::infinity();  // one bad sample
  const Dataset data = test::make_dataset(Shape{2}, 2, xy, std::vector<int>(64, 1));
  auto model = small_mlp(2, 4, 2);
  TrainOptions options;
  options.batch_size = 64;
  model->compile(options.batch_size, 1);
  const auto before = test::to_host(model->parameters().values());
  SGD sgd;
  Trainer trainer(*model, sgd, options);
  test::expect_error([&] { trainer.train_epoch(data, 0); },
                     "tessera::Trainer: non-finite loss at epoch 1, step 1 (optimizer step 1); "
                     "the weights were not updated with it");
  EXPECT_EQ(test::to_host(model->parameters().values()), before);
}

// Phase times are measured and add up to no more than the epoch.
TEST(Trainer, ReportsPhaseTimes) {
  const Dataset data = test::xor_dataset(256, 3);
  auto model = small_mlp(2, 16, 2);
  TrainOptions options;
  options.batch_size = 32;
  model->compile(options.batch_size, 1);
  SGD sgd;
  Trainer trainer(*model, sgd, options);
  const EpochReport report = trainer.train_epoch(data, 0);
  const PhaseTimes& t = report.time;
  EXPECT_GT(t.data, 0.0);
  EXPECT_GT(t.forward, 0.0);
  EXPECT_GT(t.backward, 0.0);
  EXPECT_GT(t.optimizer, 0.0);
  EXPECT_EQ(t.communication, 0.0);
  EXPECT_LE(t.data + t.forward + t.backward + t.optimizer, report.seconds);
}

}  // namespace
