// The layer registry, and the tests every registered layer type gets from
// it, so that a type cannot be added without them: its example parses from
// deck keys and builds; a finite-difference check of every input and
// parameter gradient; a small CNN with the layer inside learns to tell bar
// orientations apart (a sequence layer: a small language model with the
// layer inside learns to count); the trained model survives a checkpoint
// round trip bit for bit. The layer table of docs/decks.md must be the
// registry's.
#include <tessera/deck/build.hpp>
#include <tessera/io/checkpoint.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/conv.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/embedding.hpp>
#include <tessera/layers/registry.hpp>
#include <tessera/layers/structural.hpp>
#include <tessera/optim/sgd.hpp>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "layer_check.hpp"
#include "model_check.hpp"

namespace {

using namespace tessera;

Shape shape_of(const std::vector<std::int64_t>& dims) {
  Shape s;
  switch (dims.size()) {
    case 2:
      s = Shape{dims[0], dims[1]};
      break;
    case 3:
      s = Shape{dims[0], dims[1], dims[2]};
      break;
    case 4:
      s = Shape{dims[0], dims[1], dims[2], dims[3]};
      break;
    default:
      ADD_FAILURE() << "example shapes have 2 to 4 dimensions";
      break;
  }
  return s;
}

// The options of `type` from its example keys, read by the deck reader: a
// deck whose only layer is the example (reading the model input as often as
// the type takes inputs).
LayerDeck example_entry(const LayerType& type) {
  std::ostringstream deck;
  deck << "[data]\ntrain_images = \"a\"\ntrain_labels = \"b\"\ntest_images = \"c\"\n"
       << "test_labels = \"d\"\n\n[model]\ninput_shape = [4]\n\n[[model.layers]]\ntype = \""
       << type.name << "\"\n";
  if (type.arity != 1) deck << "inputs = [\"input\", \"input\"]\n";
  deck << type.example.keys << "\n";
  return parse_deck(deck.str(), type.name + "_example.toml").layers.at(0);
}

TEST(Registry, NamesAreUniqueAndFound) {
  std::set<std::string> names;
  for (const auto& type : layer_types()) {
    EXPECT_TRUE(names.insert(type.name).second) << type.name;
    EXPECT_EQ(find_layer_type(type.name), &type);
    EXPECT_FALSE(type.output.empty()) << type.name << ": the reference needs its output";
    EXPECT_FALSE(type.example.inputs.empty()) << type.name << ": the generic tests need an example";
    for (const auto& key : type.keys) {
      EXPECT_TRUE(key.set && key.show) << type.name << "." << key.name;
      EXPECT_NE(key.name, "type");
      EXPECT_NE(key.name, "name");
      EXPECT_NE(key.name, "inputs");
    }
  }
  EXPECT_EQ(find_layer_type("no_such_layer"), nullptr);
}

// docs/decks.md carries the registry's table between two markers.
TEST(Registry, DeckReferenceListsEveryLayerTypeAsRegistered) {
  std::ifstream file(test::source_dir() + "/docs/decks.md");
  ASSERT_TRUE(file) << "docs/decks.md";
  const std::string doc{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  const std::string begin = "<!-- layer types: generated from the layer registry",
                    end = "<!-- end of layer types -->";
  const auto a = doc.find(begin), b = doc.find(end);
  ASSERT_NE(a, std::string::npos) << "docs/decks.md lacks the marker " << begin;
  ASSERT_NE(b, std::string::npos) << "docs/decks.md lacks the marker " << end;
  const auto table = doc.substr(doc.find('\n', a) + 1, b - doc.find('\n', a) - 1);
  EXPECT_EQ(table, layer_reference_markdown())
      << "the layer table in docs/decks.md differs from the registry; replace it with the "
         "output of `tessera-train --list-layers`";
}

TEST(Registry, ExamplesParseWithEveryKeyShownAsTheDeckHasIt) {
  for (const auto& type : layer_types()) {
    SCOPED_TRACE(type.name);
    const LayerDeck entry = example_entry(type);
    EXPECT_EQ(entry.layer_type, &type);
    // Keys the example sets read back as written (describe() shows them).
    std::istringstream keys(type.example.keys);
    std::string line;
    const std::string described = " " + type.describe(entry.options) + " ";
    while (std::getline(keys, line)) {
      if (line.empty()) continue;
      const auto eq = line.find(" = ");
      ASSERT_NE(eq, std::string::npos) << line;
      EXPECT_NE(described.find(" " + line.substr(0, eq) + "=" + line.substr(eq + 3) + " "),
                std::string::npos)
          << line << " vs " << described;
    }
    const auto layer = type.build("example", entry.options, entry.inputs);
    EXPECT_EQ(layer->arity(), type.arity);
  }
}

TEST(Registry, EveryLayerTypeMatchesFiniteDifferences) {
  for (const auto& type : layer_types()) {
    SCOPED_TRACE(type.name);
    const LayerDeck entry = example_entry(type);
    auto layer = type.build(type.name, entry.options, entry.inputs);
    Shapes inputs;
    for (const auto& dims : type.example.inputs) inputs.push_back(shape_of(dims));
    test::LayerHarness h(*layer, inputs, 17);
    if (type.example.context == LayerExample::Context::tokens)
      h.token_inputs(type.example.vocabulary);
    else
      h.spread_inputs();
    StepContext ctx;
    ctx.seed = 7;
    ctx.step = 3;
    h.expect_gradients(ctx);
  }
}

// input [1, 8, 8] -> conv 8 (3x3) -> relu -> the layer -> flatten -> dense 2.
// A type taking several inputs merges the convolution and the activation.
// A sequence layer sits in a small language model instead: token ids [T]
// -> the layer -> a per-token head over the vocabulary (tokens context), or
// token ids -> an embedding with positions -> the layer -> the head
// (vectors context, the embedding as wide as the example's input).
constexpr std::int64_t sequence_positions = 8, sequence_vocabulary = 6;

std::int64_t vocabulary_of(const LayerType& type) {
  return type.example.context == LayerExample::Context::tokens ? type.example.vocabulary
                                                               : sequence_vocabulary;
}

std::unique_ptr<Model> model_around(const LayerType& type) {
  const LayerDeck entry = example_entry(type);
  const auto context = type.example.context;
  if (context == LayerExample::Context::images) {
    auto model = std::make_unique<Model>(Shape{1, 8, 8});
    model->add<Conv2D>("stem", 8, 3, 1, 1).add<ReLU>("act");
    model->add(type.build(
        "under_test", entry.options,
        type.arity == 1 ? std::vector<std::string>{} : std::vector<std::string>{"stem", "act"}));
    model->add<Flatten>("flat").add<Dense>("out", 2);
    return model;
  }
  auto model = std::make_unique<Model>(Shape{sequence_positions});
  const std::int64_t vocabulary = vocabulary_of(type);
  if (context == LayerExample::Context::vectors) {
    Embedding::Options embedding;
    embedding.vocabulary = vocabulary;
    embedding.dim = type.example.inputs.at(0).back();
    embedding.positions = true;
    model->add<Embedding>("embed", embedding);
  }
  model->add(type.build("under_test", entry.options, {}));
  Dense::Options head;
  head.units = vocabulary;
  head.last_axis = true;
  model->add<Dense>("out", head);
  return model;
}

// Bars for a layer among images, counting tokens for a sequence layer.
Dataset data_for(const LayerType& type, std::int64_t samples) {
  if (type.example.context == LayerExample::Context::images) return test::bar_images(samples, 5);
  return test::counting_tokens(samples, sequence_positions, vocabulary_of(type), 5);
}

// In fp32 and in bf16: every layer type computes in 16 bits.
TEST(Registry, EveryLayerTypeTrainsInsideASmallModelInFp32AndBf16) {
  for (const auto& type : layer_types())
    for (const FloatFormat format : {FloatFormat::fp32, FloatFormat::bf16}) {
      SCOPED_TRACE(type.name + " in " + float_format_name(format));
      auto model = model_around(type);
      model->set_compute(format);
      if (type.example.context == LayerExample::Context::images)
        test::expect_learns_bars(*model, 0.02f, 40);
      else
        test::expect_learns_counting(*model, vocabulary_of(type), 0.05f, 30);
    }
}

TEST(Registry, EveryLayerTypeSurvivesACheckpointRoundTrip) {
  const std::string dir = ::testing::TempDir() + "tessera_registry_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (const auto& type : layer_types()) {
    SCOPED_TRACE(type.name);
    const Dataset data = data_for(type, 64);
    auto trained = model_around(type);
    trained->compile(16, 1);
    TrainOptions options;
    options.batch_size = 16;
    options.seed = 1;
    SGD sgd(SGD::Params{0.9f});
    Trainer(*trained, sgd, options).train_epoch(data, 0);
    const std::string path = dir + "/" + type.name + ".h5";
    CheckpointInfo info;
    info.global_batch = 16;
    write_checkpoint(path, *trained, sgd, info);

    auto fresh = model_around(type);
    fresh->compile(16, 99);  // other initial weights
    SGD restored(SGD::Params{0.9f});
    load_checkpoint(path, *fresh, restored);
    EXPECT_EQ(test::to_host(fresh->parameters().values()),
              test::to_host(trained->parameters().values()));
    EXPECT_EQ(test::to_host(fresh->state().values()), test::to_host(trained->state().values()));
    StepContext eval;
    eval.training = false;
    Vector<int> labels("labels", 16 * data.label_positions());
    for (auto* m : {trained.get(), fresh.get()})
      gather_batch(ExecSpace(), data, test::identity_order(16), 0, m->input(16), labels);
    const auto a = test::to_host(trained->forward(16, eval).flat());
    const auto b = test::to_host(fresh->forward(16, eval).flat());
    EXPECT_EQ(a, b);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
