// Flatten, Add and Concat: values, finite-difference gradients, shape
// errors, and a residual model whose fan-out gradients must add up.
#include <tessera/kernels/loss.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/norm.hpp>
#include <tessera/layers/structural.hpp>
#include <tessera/optim/adam.hpp>
#include <tessera/train/trainer.hpp>

#include "layer_check.hpp"
#include "model_check.hpp"

namespace {

using namespace tessera;

TEST(Flatten, ValuesAndGradient) {
  Flatten flatten("flat");
  test::LayerHarness h(flatten, {Shape{2, 3, 2, 2}});
  EXPECT_EQ(h.output.shape(), (Shape{2, 12}));
  h.forward();
  EXPECT_EQ(test::to_host(h.output.flat()), test::to_host(h.inputs[0].flat()));
  h.expect_gradients();
}

TEST(Add, ValuesAndGradient) {
  Add add("sum", {"a", "b", "c"});
  test::LayerHarness h(add, {Shape{2, 5}, Shape{2, 5}, Shape{2, 5}});
  h.forward();
  const auto a = test::to_host(h.inputs[0].flat()), b = test::to_host(h.inputs[1].flat()),
             c = test::to_host(h.inputs[2].flat()), y = test::to_host(h.output.flat());
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], a[i] + b[i] + c[i]);
  h.expect_gradients();
}

TEST(Add, RejectsDifferentShapes) {
  Add add("sum", {"a", "b"});
  try {
    add.output_shape({Shape{2, 5}, Shape{2, 6}});
    FAIL() << "expected tessera::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "tessera::Add 'sum': inputs must have one shape, got [2, 5], [2, 6]"),
              std::string::npos)
        << e.what();
  }
}

TEST(Concat, ChannelsOfImages) {
  Concat concat("cat", {"a", "b"});
  test::LayerHarness h(concat, {Shape{2, 1, 2, 2}, Shape{2, 2, 2, 2}});
  ASSERT_EQ(h.output.shape(), (Shape{2, 3, 2, 2}));
  h.forward();
  const auto a = test::to_host(h.inputs[0].flat()), b = test::to_host(h.inputs[1].flat()),
             y = test::to_host(h.output.flat());
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int s = 0; s < 4; ++s) {
        const float expected = c == 0 ? a[n * 4 + s] : b[(n * 2 + c - 1) * 4 + s];
        EXPECT_EQ(y[(n * 3 + c) * 4 + s], expected) << n << ", " << c << ", " << s;
      }
  h.expect_gradients();
}

TEST(Concat, FeaturesAndShapeErrors) {
  Concat concat("cat", {"a", "b"});
  test::LayerHarness h(concat, {Shape{3, 2}, Shape{3, 4}});
  EXPECT_EQ(h.output.shape(), (Shape{3, 6}));
  h.expect_gradients();
  EXPECT_THROW(concat.output_shape({Shape{3, 2, 4, 4}, Shape{3, 2, 5, 4}}), Error);
}

// input -> fc1 -> relu1 -+-> fc2 -> relu2 -> add -> out
//                        +-----------------/
std::unique_ptr<Model> skip_connection_model() {
  auto model = std::make_unique<Model>(Shape{3});
  model->add<Dense>("fc1", 6)
      .add<ReLU>("relu1")
      .add<Dense>("fc2", 6)
      .add<ReLU>("relu2")
      .add<Add>("add", std::vector<std::string>{"relu1", "relu2"})
      .add<Dense>("out", 4);
  return model;
}

TEST(ResidualModel, GraphSummaryAndErrors) {
  auto model = skip_connection_model();
  model->compile(4, 1);
  EXPECT_EQ(model->layer_inputs(4), (std::vector<std::size_t>{2, 4}));
  EXPECT_NE(model->summary().find("relu1, relu2"), std::string::npos) << model->summary();

  Model unknown(Shape{3});
  unknown.add<Dense>("fc", 2).add<Add>("add", std::vector<std::string>{"fc", "later"});
  try {
    unknown.compile(2, 0);
    FAIL() << "expected tessera::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "layer 'add' reads 'later', which is not 'input' or a layer declared before it"),
              std::string::npos)
        << e.what();
  }
  Model single(Shape{3});
  single.add<Add>("add", std::vector<std::string>{"input"});
  EXPECT_THROW(single.compile(2, 0), Error);
}

TEST(ResidualModel, FanOutGradientsMatchFiniteDifferences) {
  const std::int64_t batch = 4;
  auto model = skip_connection_model();
  model->compile(batch, 3);
  test::from_host(model->input(batch).flat(), test::random_values(batch * 3, 81));
  test::expect_model_gradients(*model, std::vector<int>{0, 3, 1, 2});
  test::expect_catches_scaled_gradients(*model, std::vector<int>{0, 3, 1, 2});
}

// A graph with both merge layers and the activations and normalisation the
// other convergence tests do not use must learn XOR.
TEST(GraphModel, MergesActivationsAndLayerNormConverge) {
  using Names = std::vector<std::string>;
  const Dataset data = test::xor_dataset(512, 61);
  Model model(Shape{2});
  model.add<Dense>("fc1", 16)
      .add<LayerNorm>("ln")
      .add<GELU>("gelu")
      .add<Dense>("fc2", 16)
      .add<Tanh>("tanh")
      .add<Add>("add", Names{"gelu", "tanh"})
      .add<Dense>("fc3", 8)
      .add<LeakyReLU>("leaky", kernels::LeakyReluOp{0.1f})
      .add<Dense>("fc4", 8, Names{"add"})
      .add<Sigmoid>("sigmoid")
      .add<Concat>("cat", Names{"leaky", "sigmoid"})
      .add<Dense>("out", 2);
  TrainOptions options;
  options.batch_size = 32;
  options.seed = 4;
  options.schedule.base_lr = 0.01f;
  model.compile(options.batch_size, options.seed);
  Adam adam;
  Trainer trainer(model, adam, options);
  test::expect_converges(trainer, data, 30);
}

// In bf16 and fp16: Flatten and Concat copy values exactly, Add of two
// inputs rounds each sum once, and every input gradient is dy (rounded
// once onto the zero it starts from).
template <class T>
void expect_structural_16bit() {
  Flatten a("flatten"), b("flatten");
  test::expect_16bit_matches_float<T>(a, b, {Shape{2, 3, 2, 2}});
  Add c("add", {"p", "q"}), d("add", {"p", "q"});
  test::expect_16bit_matches_float<T>(c, d, {Shape{3, 5}, Shape{3, 5}});
  Concat e("concat", {"p", "q"}), f("concat", {"p", "q"});
  test::expect_16bit_matches_float<T>(e, f, {Shape{2, 2, 3, 2}, Shape{2, 3, 3, 2}});
}

TEST(StructuralLayers, Bf16AndFp16AreTheFloatResultsRoundedOnce) {
  expect_structural_16bit<bf16>();
  expect_structural_16bit<fp16>();
}

}  // namespace
