// Decks: every shipped deck parses and builds; each class of error names
// file:line:column and the key.
#include <tessera/deck/build.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

const char* valid_deck = R"([run]
name = "t"
seed = 3

[data]
train_images = "a"
train_labels = "b"
test_images = "c"
test_labels = "d"

[model]
input_shape = [784]

[[model.layers]]
type = "dense"
units = 16

[[model.layers]]
type = "relu"

[[model.layers]]
type = "dense"
units = 10

[training]
epochs = 2
batch_size = 64
)";

std::string write_deck(const std::string& name, const std::string& text) {
  const std::string path =
      ::testing::TempDir() + "tessera_deck_" + std::to_string(::getpid()) + "_" + name + ".toml";
  std::ofstream(path) << text;
  return path;
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

// Loads a broken deck and expects "path:line:column: key: ..." with `fragment`.
void expect_deck_error(const std::string& name, const std::string& text, int line, int column,
                       const std::string& key, const std::string& fragment) {
  const std::string path = write_deck(name, text);
  try {
    load_deck(path);
    FAIL() << name << ": expected a DeckError";
  } catch (const DeckError& e) {
    const std::string msg = e.what();
    const std::string location =
        path + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + key + ": ";
    EXPECT_EQ(msg.rfind(location, 0), 0u) << "message: " << msg << "\nexpected start: " << location;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
  std::remove(path.c_str());
}

TEST(Deck, ValidDeckParsesAndBuilds) {
  const std::string path = write_deck("valid", valid_deck);
  const Deck deck = load_deck(path);
  EXPECT_EQ(deck.seed, 3u);
  EXPECT_EQ(deck.training.epochs, 2);
  EXPECT_EQ(deck.training.batch_size, 64);
  ASSERT_EQ(deck.layers.size(), 3u);
  EXPECT_EQ(deck.layers[2].units, 10);
  auto model = build_model(deck);
  model->compile(deck.training.batch_size, deck.seed);
  EXPECT_EQ(model->output_shape(), (Shape{10}));
  std::remove(path.c_str());
}

TEST(Deck, EveryShippedDeckParses) {
  int decks = 0;
  for (const auto& dir : {"inputs", "tests/app"}) {
    for (const auto& entry : std::filesystem::directory_iterator(std::string(TESSERA_SOURCE_DIR) + "/" + dir)) {
      if (entry.path().extension() != ".toml" || entry.path().filename().string().rfind("bad_", 0) == 0)
        continue;
      SCOPED_TRACE(entry.path().string());
      const Deck deck = load_deck(entry.path().string());
      auto model = build_model(deck);
      EXPECT_NO_THROW(model->compile(deck.training.batch_size, deck.seed));
      ++decks;
    }
  }
  EXPECT_GE(decks, 2);
}

// The examples in the deck reference are decks too.
TEST(Deck, DocumentationExamplesParse) {
  std::ifstream doc(std::string(TESSERA_SOURCE_DIR) + "/docs/decks.md");
  ASSERT_TRUE(doc) << "docs/decks.md";
  std::string line, block;
  bool inside = false;
  int examples = 0;
  while (std::getline(doc, line)) {
    if (!inside && line == "```toml") {
      inside = true;
      block.clear();
    } else if (inside && line == "```") {
      inside = false;
      SCOPED_TRACE("example " + std::to_string(examples + 1));
      const std::string path = write_deck("doc_example", block);
      const Deck deck = load_deck(path);
      EXPECT_NO_THROW(build_model(deck)->compile(deck.training.batch_size, deck.seed));
      std::remove(path.c_str());
      ++examples;
    } else if (inside) {
      block += line + "\n";
    }
  }
  EXPECT_GE(examples, 1);
}

TEST(Deck, SyntaxError) {
  expect_deck_error("syntax", replace(valid_deck, "seed = 3", "seed = = 3"), 3, 8,
                    "TOML syntax error", "");
}

TEST(Deck, UnknownKeySuggestsTheClosest) {
  expect_deck_error("unknown", replace(valid_deck, "epochs = 2", "epohcs = 2"), 26, 1,
                    "training.epohcs", "did you mean 'training.epochs'?");
}

TEST(Deck, WrongType) {
  expect_deck_error("type", replace(valid_deck, "batch_size = 64", "batch_size = \"64\""), 27, 14,
                    "training.batch_size", "expected an integer");
}

TEST(Deck, OutOfRange) {
  expect_deck_error("range", replace(valid_deck, "units = 16", "units = 0"), 16, 9,
                    "model.layers[0].units", "out of range");
}

TEST(Deck, UnknownLayerType) {
  expect_deck_error("layer", replace(valid_deck, "type = \"relu\"", "type = \"relux\""), 19, 8,
                    "model.layers[1].type", "allowed: dense, relu");
}

TEST(Deck, MissingRequiredKey) {
  expect_deck_error("missing", replace(valid_deck, "test_labels = \"d\"\n", ""), 5, 1,
                    "data.test_labels", "required key is missing");
}

}  // namespace
