// Decks: every shipped deck parses and builds; each class of error names
// file:line:column and the key.
#include <tessera/app/sweep.hpp>
#include <tessera/core/machine.hpp>
#include <tessera/deck/build.hpp>
#include <tessera/kernels/mixed_gemm.hpp>
#include <tessera/layers/conv.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/dropout.hpp>
#include <tessera/layers/pool.hpp>
#include <tessera/settings/device_mpi.hpp>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "key_tables.hpp"
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

// Every enum <-> name table: each name reads back as its value, no name
// or value appears twice, and an unknown name is an error that lists them.
template <class E, std::size_t N>
void expect_table(const EnumNames<E, N>& table, const char* fn) {
  std::set<std::string> names;
  std::set<int> values;
  for (const auto& entry : table.entries) {
    EXPECT_TRUE(names.insert(entry.name).second) << table.what << ": '" << entry.name << "' twice";
    EXPECT_TRUE(values.insert(static_cast<int>(entry.value)).second)
        << table.what << " value twice";
    EXPECT_EQ(table.value(entry.name, fn), entry.value) << entry.name;
    EXPECT_STREQ(table.name(entry.value), entry.name);
  }
  EXPECT_EQ(table.names().size(), N);
  test::expect_error(
      [&] { table.value("no such name", fn); },
      std::string(fn) + ": unknown " + table.what + " 'no such name'; allowed: " + table.list());
  EXPECT_STREQ(table.name(static_cast<E>(N + 7)), "?");
}

TEST(EnumNames, EveryTableRoundTrips) {
  expect_table(float_formats, "tessera::float_format_from_name");
  expect_table(schedule_types, "tessera::schedule_type");
  expect_table(init_names, "tessera::init_from_name");
  expect_table(distributions, "tessera::parse_sweep");
  expect_table(sweep_strategies, "tessera::parse_sweep");
  expect_table(trial_states, "tessera::Sweep");
  expect_table(vector_isas, "tessera::isa_name");
  expect_table(kernels::mixed_gemm_methods, "tessera::kernels::mixed_gemm");
  expect_table(device_mpi_names, "tessera::device_mpi_from_name");
  EXPECT_EQ(schedule_types.list(), "constant, step, multistep, exponential, cosine");
  EXPECT_EQ(
      weight_initializer_names(),
      (std::vector<std::string>{"he_uniform", "he_normal", "xavier_uniform", "xavier_normal"}));
}

TEST(Deck, ValidDeckParsesAndBuilds) {
  const std::string path = write_deck("valid", valid_deck);
  const Deck deck = load_deck(path);
  EXPECT_EQ(deck.training.seed, 3u);
  EXPECT_EQ(deck.training.epochs, 2);
  EXPECT_EQ(deck.training.batch_size, 64);
  ASSERT_EQ(deck.layers.size(), 3u);
  EXPECT_EQ(deck.layers[2].options_of<Dense>().units, 10);
  auto model = build_model(deck);
  model->compile(deck.training.batch_size, deck.training.seed);
  EXPECT_EQ(model->output_shape(), (Shape{10}));
  std::remove(path.c_str());
}

TEST(Deck, BiasKeyLeavesTheBiasOut) {
  const std::string text =
      test::replace_once(valid_deck, "units = 16\n", "units = 16\nbias = false\n");
  const Deck deck = parse_deck(text, "bias.toml");
  EXPECT_FALSE(deck.layers[0].options_of<Dense>().bias);
  EXPECT_TRUE(deck.layers[2].options_of<Dense>().bias);
  auto model = build_model(deck);
  model->compile(4, deck.training.seed);
  std::vector<std::string> names;
  for (const auto& e : model->parameters().entries()) names.push_back(e.layer + "." + e.spec.name);
  EXPECT_EQ(names, (std::vector<std::string>{"dense0.weight", "dense2.weight", "dense2.bias"}));
  expect_deck_error("bias_type",
                    test::replace_once(valid_deck, "units = 16\n", "units = 16\nbias = 0\n"), 17, 8,
                    "model.layers[0].bias", "expected a boolean");
  expect_deck_error(
      "bias_relu",
      test::replace_once(valid_deck, "type = \"relu\"\n", "type = \"relu\"\nbias = true\n"), 20, 1,
      "model.layers[1].bias", "unknown key");
}

// Decks holding every floating-point key, with valid values (two decks:
// some keys belong to one optimizer or schedule type only).
const char* every_float_key_adamw = R"([data]
train_images = "a"
train_labels = "b"
test_images = "c"
test_labels = "d"
normalize_mean = 0.5
normalize_std = 0.25
validation_split = 0.1

[model]
input_shape = [1, 4, 4]

[[model.layers]]
type = "conv2d"
out_channels = 2
kernel = 3

[[model.layers]]
type = "batchnorm"
momentum = 0.1
eps = 1e-5

[[model.layers]]
type = "leakyrelu"
slope = 0.1

[[model.layers]]
type = "dropout"
rate = 0.2

[[model.layers]]
type = "layernorm"
eps = 1e-5

[[model.layers]]
type = "dense"
units = 3

[loss]
label_smoothing = 0.1

[optimizer]
type = "adamw"
lr = 0.001
weight_decay = 0.01
beta1 = 0.9
beta2 = 0.999
eps = 1e-8

[schedule]
type = "cosine"
min_lr = 0.0001
warmup_steps = 10
warmup_start_factor = 0.1

[training]
clip_norm = 1.0

[parallel]
bucket_mb = 1.0

[checkpoint]
every_minutes = 1.0
)";

const char* every_float_key_sgd = R"([data]
train_images = "a"
train_labels = "b"
test_images = "c"
test_labels = "d"

[model]
input_shape = [4]

[[model.layers]]
type = "dense"
units = 3

[optimizer]
type = "sgd"
lr = 0.1
momentum = 0.9

[schedule]
type = "exponential"
gamma = 0.9
)";

// nan, infinities, values beyond single precision and absurdly large ones
// fail at the key's line and column, whatever the key's own range.
// A tie names a layer declared before the one that ties.
TEST(Deck, TieNamesAnEarlierLayer) {
  expect_deck_error(
      "tie_unknown", test::replace_once(valid_deck, "units = 10\n", "units = 10\ntie = \"fc\"\n"),
      24, 7, "model.layers[2].tie", "'fc' is not the name of a layer declared before this one");
}

TEST(Deck, EveryFloatingPointKeyRejectsNonFiniteAndAbsurdValues) {
  int keys = 0;
  for (const char* text : {every_float_key_adamw, every_float_key_sgd}) {
    ASSERT_NO_THROW(parse_deck(text, "floats.toml"));
    std::istringstream lines(text);
    std::string line, table;
    for (int number = 1; std::getline(lines, line); ++number) {
      if (line.rfind("[[", 0) == 0) {
        table = line.substr(2, line.find("]]") - 2);
        continue;
      }
      if (line.rfind("[", 0) == 0) {
        table = line.substr(1, line.find(']') - 1);
        continue;
      }
      const auto equals = line.find(" = ");
      if (equals == std::string::npos) continue;
      const std::string key = line.substr(0, equals), value = line.substr(equals + 3);
      // Floating-point keys: the values written with a point or an exponent.
      if (value.find_first_of(".e") == std::string::npos || value[0] == '"') continue;
      ++keys;
      for (const std::string bad : {"nan", "inf", "-inf", "1e300", "-1e300", "3.5e38", "1e30"}) {
        // The same text with this line's value replaced.
        std::istringstream again(text);
        std::string broken, other;
        for (int n = 1; std::getline(again, other); ++n)
          broken += (n == number ? key + " = " + bad : other) + "\n";
        SCOPED_TRACE(table + "." + key + " = " + bad);
        try {
          parse_deck(broken, "floats.toml");
          ADD_FAILURE() << "accepted";
        } catch (const DeckError& e) {
          const std::string msg = e.what();
          const std::string where =
              "floats.toml:" + std::to_string(number) + ":" + std::to_string(key.size() + 4) + ": ";
          EXPECT_EQ(msg.rfind(where, 0), 0u) << msg;
          EXPECT_NE(msg.find("." + key + ": "), std::string::npos) << msg;
        }
      }
    }
  }
  // Every floating-point key of the deck reference is in the two decks.
  EXPECT_EQ(keys, 22);
}

TEST(Deck, IntegersBeyondTheirSettingDoNotWrapIntoRange) {
  // 2^32 + 1 would become 1 epoch in a 32-bit integer.
  expect_deck_error("epochs_wrap",
                    test::replace_once(valid_deck, "epochs = 2", "epochs = 4294967297"), 26, 10,
                    "training.epochs", "out of range");
}

TEST(Deck, NormalisationOnThe0To255ScaleIsCaught) {
  const std::string with_stats = test::replace_once(
      valid_deck, "test_labels = \"d\"\n", "test_labels = \"d\"\nnormalize_mean = 72.94\n");
  expect_deck_error("mean_255", with_stats, 10, 18, "data.normalize_mean", "divide them by 255");
  const std::string with_std = test::replace_once(valid_deck, "test_labels = \"d\"\n",
                                                  "test_labels = \"d\"\nnormalize_std = 90.0\n");
  expect_deck_error("std_255", with_std, 10, 17, "data.normalize_std", "out of range [0.001, 1]");
}

TEST(Deck, EveryShippedDeckParses) {
  int decks = 0;
  for (const auto& dir : {"inputs", "tests/app"}) {
    for (const auto& entry : std::filesystem::directory_iterator(test::source_dir() + "/" + dir)) {
      // *.sweep.toml are sweep files (test_sweep parses them).
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() != ".toml" || name.rfind("bad_", 0) == 0 ||
          name.find(".sweep.toml") != std::string::npos)
        continue;
      SCOPED_TRACE(entry.path().string());
      const Deck deck = load_deck(entry.path().string());
      auto model = build_model(deck);
      EXPECT_NO_THROW(model->compile(deck.training.batch_size, deck.training.seed));
      ++decks;
    }
  }
  EXPECT_GE(decks, 2);
}

// The examples in the deck reference are decks too.
TEST(Deck, DocumentationExamplesParse) {
  std::ifstream doc(test::source_dir() + "/docs/decks.md");
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
      EXPECT_NO_THROW(build_model(deck)->compile(deck.training.batch_size, deck.training.seed));
      std::remove(path.c_str());
      ++examples;
    } else if (inside) {
      block += line + "\n";
    }
  }
  EXPECT_GE(examples, 1);
}

TEST(Deck, OverridesFromTheCommandLine) {
  const std::string path = write_deck("overrides", valid_deck);
  const Deck deck = load_deck(path, {"training.epochs=7", "model.layers[0].units=32",
                                     "run.name=trial", "optimizer.lr=0.5", "schedule.type=cosine"});
  EXPECT_EQ(deck.training.epochs, 7);
  EXPECT_EQ(deck.layers[0].options_of<Dense>().units, 32);
  EXPECT_EQ(deck.run.name, "trial");  // not TOML, so taken as a string
  EXPECT_EQ(deck.run.output_dir, "output/trial");
  EXPECT_FLOAT_EQ(deck.training.schedule.base_lr, 0.5f);
  EXPECT_EQ(deck.training.schedule.type, ScheduleType::cosine);  // creates the [schedule] table
  EXPECT_EQ(deck.overrides.size(), 5u);
  EXPECT_EQ(deck.text.find("epochs = 2"), deck.text.find("epochs"));  // the file as written
  EXPECT_EQ(deck.test_samples, 0);  // the whole test file by default
  EXPECT_EQ(load_deck(path, {"data.test_samples=500"}).test_samples, 500);
  const auto expect_override_error = [&](const std::string& o, const std::string& message) {
    try {
      load_deck(path, {o});
      ADD_FAILURE() << o << ": expected a DeckError";
    } catch (const DeckError& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  expect_override_error(
      "training.epochs=0",
      "--set training.epochs=0: training.epochs: value 0 is out of range [1, 1000000]");
  expect_override_error(
      "data.test_samples=-1",
      "--set data.test_samples=-1: data.test_samples: value -1 is out of range [0, "
      "9223372036854775807]");
  expect_override_error(
      "training.epohcs=3",
      "--set training.epohcs=3: training.epohcs: unknown key (did you mean "
      "'training.epochs'?); allowed: epochs, batch_size, accumulation_steps, max_steps, "
      "log_every, clip_norm, recompute, eval_every, early_stop_patience, early_stop_min_delta");
  expect_override_error("model.layers[5].units=3",
                        "--set model.layers[5].units=3: 'layers' has 3 entries");
  // An index too long for any integer type (found by fuzz_deck).
  expect_override_error("model.layers[99999999999999999999999999].units=3",
                        "--set model.layers[99999999999999999999999999].units=3: 'layers' has 3 "
                        "entries");
  expect_override_error("epochs", "--set epochs: expected key.path=value");
  expect_override_error("run.seed.x=1", "--set run.seed.x=1: 'seed' is a value, not a table");
  expect_override_error("model.layers[x].units=1",
                        "--set model.layers[x].units=1: 'layers[x]' is not a key or key[index]");
  std::remove(path.c_str());
}

TEST(Deck, DataFilesAreCheckedWithTheirLocation) {
  const std::string data = ::testing::TempDir() + "tessera_deck_data_" + std::to_string(::getpid());
  std::ofstream(data) << "x";
  std::string text = valid_deck;
  for (const char* key : {"\"a\"", "\"b\"", "\"c\""})
    text = test::replace_once(text, key, "\"" + data + "\"");
  const std::string path = write_deck("data_files", text);
  const Deck deck = load_deck(path);
  try {
    check_data_files(deck);
    FAIL() << "test_labels names a missing file";
  } catch (const DeckError& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ":9:15: data.test_labels: cannot read 'd': No such file or directory");
  }
  const Deck fixed = load_deck(path, {"data.test_labels=" + data});
  EXPECT_NO_THROW(check_data_files(fixed));
  std::remove(path.c_str());
  std::remove(data.c_str());
}

TEST(Deck, DataPathsExpandTesseraDataDir) {
  const test::EnvironmentGuard guard("TESSERA_DATA_DIR");
  const std::string text =
      test::replace_once(valid_deck, "\"a\"", "\"${TESSERA_DATA_DIR}/train.gz\"");
  ::unsetenv("TESSERA_DATA_DIR");
  EXPECT_EQ(parse_deck(text, "dir.toml").train_images, std::string(default_data_dir) + "/train.gz");
  ::setenv("TESSERA_DATA_DIR", "/scratch/fmnist", 1);
  const Deck deck = parse_deck(text, "dir.toml");
  EXPECT_EQ(deck.train_images, "/scratch/fmnist/train.gz");
  EXPECT_EQ(deck.data_files.at(0).path, "/scratch/fmnist/train.gz");
  EXPECT_EQ(deck.train_labels, "b");  // a path without the variable stays as written
  EXPECT_NE(deck.text.find("${TESSERA_DATA_DIR}"), std::string::npos);  // as written
  ::setenv("TESSERA_DATA_DIR", "", 1);
  EXPECT_EQ(parse_deck(text, "dir.toml").train_images, std::string(default_data_dir) + "/train.gz");
  expect_deck_error(
      "other_variable", test::replace_once(valid_deck, "\"a\"", "\"${HOME}/train.gz\""), 6, 16,
      "data.train_images", "only ${TESSERA_DATA_DIR} or ${TESSERA_TOKEN_DIR} are expanded");
}

// One rule for every shipped deck: image data under ${TESSERA_DATA_DIR},
// token files under ${TESSERA_TOKEN_DIR}, each moved by its variable alone.
TEST(Deck, ShippedDecksFindTheirDataThroughTheDataVariables) {
  const test::EnvironmentGuard data("TESSERA_DATA_DIR"), tokens("TESSERA_TOKEN_DIR");
  ::setenv("TESSERA_DATA_DIR", "/scratch/images", 1);
  ::setenv("TESSERA_TOKEN_DIR", "/scratch/tokens", 1);
  int decks = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::source_dir() + "/inputs")) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".toml" || path.find(".sweep.") != std::string::npos) continue;
    const Deck deck = load_deck(path);
    ASSERT_FALSE(deck.data_files.empty()) << path;
    const std::string expected =
        deck.data_format == "tokens" ? "/scratch/tokens/" : "/scratch/images/";
    for (const auto& f : deck.data_files)
      EXPECT_EQ(f.path.rfind(expected, 0), 0u) << path << ": data." << f.key << " = " << f.path;
    ++decks;
  }
  EXPECT_GE(decks, 4);
  ::unsetenv("TESSERA_TOKEN_DIR");
  const Deck gpt = load_deck(test::source_dir() + "/inputs/tiny_gpt.toml");
  EXPECT_EQ(gpt.train_tokens, std::string(default_token_dir) + "/devil.train.bin");
  EXPECT_EQ(data_dir("TESSERA_TOKEN_DIR"), default_token_dir);
}

TEST(Deck, Hdf5DataKeys) {
  const std::string hdf5_data =
      "[data]\nformat = \"hdf5\"\ntrain_file = \"t.h5\"\ntest_file = \"v.h5\"\n";
  std::string text = valid_deck;
  text = text.substr(text.find("[model]"));
  const std::string path = write_deck("hdf5", hdf5_data + "\n" + text);
  const Deck deck = load_deck(path, {"data.labels_dataset=y"});
  EXPECT_EQ(deck.data_format, "hdf5");
  EXPECT_EQ(deck.train_file, "t.h5");
  EXPECT_EQ(deck.images_dataset, "images");
  EXPECT_EQ(deck.labels_dataset, "y");
  EXPECT_FALSE(deck.streaming);
  EXPECT_EQ(deck.max_resident_mb, 0);
  ASSERT_EQ(deck.data_files.size(), 2u);
  EXPECT_EQ(deck.data_files[1].location, path + ":4:13");
  const Deck streamed = load_deck(path, {"data.streaming=true", "data.max_resident_mb=512"});
  EXPECT_TRUE(streamed.streaming);
  EXPECT_EQ(streamed.max_resident_mb, 512);
  EXPECT_EQ(streamed.location("data.max_resident_mb"), "--set data.max_resident_mb=512");
  std::remove(path.c_str());
  expect_deck_error("hdf5_negative_limit", hdf5_data + "max_resident_mb = -1\n\n" + text, 5, 19,
                    "data.max_resident_mb", "out of range");
  expect_deck_error("idx_streaming",
                    test::replace_once(valid_deck, "test_labels = \"d\"",
                                       "test_labels = \"d\"\nstreaming = true"),
                    10, 1, "data.streaming", "does not apply to format 'idx'; it applies to: hdf5");
  expect_deck_error("hdf5_idx_key", hdf5_data + "train_images = \"a\"\n\n" + text, 5, 1,
                    "data.train_images", "does not apply to format 'hdf5'; it applies to: idx");
  expect_deck_error("hdf5_missing_file",
                    "[data]\nformat = \"hdf5\"\ntrain_file = \"t.h5\"\n\n" + text, 1, 1,
                    "data.test_file", "required key is missing");
  expect_deck_error("idx_dataset_key",
                    test::replace_once(valid_deck, "test_labels = \"d\"",
                                       "test_labels = \"d\"\nimages_dataset = \"x\""),
                    10, 1, "data.images_dataset",
                    "does not apply to format 'idx'; it applies to: hdf5");
}

// --set data.format=F runs an IDX deck on HDF5 (or tokens) data: the deck's
// keys of its own format give way; those given with --set stay, and are
// still checked against the new format.
TEST(Deck, SetDataFormatSwitchesTheDeckToAnotherFormat) {
  const Deck hdf5 = parse_deck(valid_deck, "switch.toml",
                               {"data.format=hdf5", "data.train_file=t.h5", "data.test_file=v.h5"});
  EXPECT_EQ(hdf5.data_format, "hdf5");
  EXPECT_EQ(hdf5.train_file, "t.h5");
  ASSERT_EQ(hdf5.data_files.size(), 2u);
  EXPECT_TRUE(hdf5.train_images.empty());
  // Without the switch the deck's format stays, and a key of another format
  // is still an error.
  try {
    parse_deck(valid_deck, "switch.toml", {"data.train_file=t.h5"});
    ADD_FAILURE() << "a key of another format was accepted";
  } catch (const DeckError& e) {
    EXPECT_NE(std::string(e.what()).find("data.train_file: does not apply to format 'idx'"),
              std::string::npos)
        << e.what();
  }
  try {
    parse_deck(
        valid_deck, "switch.toml",
        {"data.format=hdf5", "data.train_file=t.h5", "data.test_file=v.h5", "data.train_images=a"});
    ADD_FAILURE() << "an IDX key given with --set was dropped";
  } catch (const DeckError& e) {
    EXPECT_NE(std::string(e.what()).find("data.train_images: does not apply to format 'hdf5'"),
              std::string::npos)
        << e.what();
  }
}

TEST(Deck, SyntaxError) {
  expect_deck_error("syntax", test::replace_once(valid_deck, "seed = 3", "seed = = 3"), 3, 8,
                    "TOML syntax error", "");
}

TEST(Deck, UnknownKeySuggestsTheClosest) {
  expect_deck_error("unknown", test::replace_once(valid_deck, "epochs = 2", "epohcs = 2"), 26, 1,
                    "training.epohcs", "did you mean 'training.epochs'?");
}

TEST(Deck, WrongType) {
  expect_deck_error("type",
                    test::replace_once(valid_deck, "batch_size = 64", "batch_size = \"64\""), 27,
                    14, "training.batch_size", "expected an integer");
}

TEST(Deck, OutOfRange) {
  expect_deck_error("range", test::replace_once(valid_deck, "units = 16", "units = 0"), 16, 9,
                    "model.layers[0].units", "out of range");
}

TEST(Deck, UnknownLayerType) {
  expect_deck_error("layer", test::replace_once(valid_deck, "type = \"relu\"", "type = \"relux\""),
                    19, 8, "model.layers[1].type",
                    "unknown layer type 'relux'; allowed: " + layer_type_names());
}

// A small residual CNN: a graph of layers with named inputs, merges and
// window keys in both forms. (Every registered type is parsed from its own
// example in test_registry.cpp, so a new type needs no line here.)
const char* graph_deck = R"([data]
train_images = "a"
train_labels = "b"
test_images = "c"
test_labels = "d"

[model]
input_shape = [1, 12, 12]

[[model.layers]]
type = "conv2d"
name = "stem"
out_channels = 4
kernel = 3
padding = 1

[[model.layers]]
type = "batchnorm"
momentum = 0.2

[[model.layers]]
type = "relu"
name = "stem_relu"

[[model.layers]]
type = "conv2d"
out_channels = 4
kernel = [3, 1]
padding = [1, 0]

[[model.layers]]
type = "gelu"

[[model.layers]]
type = "add"
name = "residual"
inputs = ["stem_relu", "gelu4"]

[[model.layers]]
type = "maxpool2d"
kernel = 2

[[model.layers]]
type = "avgpool2d"
kernel = 3
stride = 1
padding = 1

[[model.layers]]
type = "globalavgpool"
name = "gap"
inputs = ["residual"]

[[model.layers]]
type = "flatten"
name = "flat"
inputs = ["avgpool2d7"]

[[model.layers]]
type = "concat"
inputs = ["flat", "gap"]

[[model.layers]]
type = "dense"
units = 16
init = "xavier_normal"

[[model.layers]]
type = "layernorm"

[[model.layers]]
type = "leakyrelu"
slope = 0.2

[[model.layers]]
type = "dropout"
rate = 0.3

[[model.layers]]
type = "tanh"

[[model.layers]]
type = "sigmoid"

[[model.layers]]
type = "dense"
units = 3
)";

TEST(Deck, AGraphOfLayersParsesAndBuilds) {
  const std::string path = write_deck("graph", graph_deck);
  const Deck deck = load_deck(path);
  ASSERT_EQ(deck.layers.size(), 18u);
  const auto& conv = deck.layers[3].options_of<Conv2D>();
  EXPECT_EQ(conv.kernel.h, 3);
  EXPECT_EQ(conv.kernel.w, 1);
  EXPECT_EQ(conv.padding.h, 1);
  EXPECT_EQ(conv.padding.w, 0);
  EXPECT_EQ(deck.layers[5].inputs, (std::vector<std::string>{"stem_relu", "gelu4"}));
  EXPECT_EQ(deck.layers[11].options_of<Dense>().init, Init::xavier_normal);
  EXPECT_EQ(deck.layers[0].options_of<Conv2D>().init, Init::he_uniform);
  EXPECT_FLOAT_EQ(deck.layers[14].options_of<Dropout>().rate, 0.3f);
  auto model = build_model(deck);
  // Pools default to stride = kernel.
  EXPECT_EQ(dynamic_cast<const MaxPool2D&>(*model->layers()[6]).stride().h, 2);
  model->compile(4, 0);
  EXPECT_EQ(model->layer_output_shape(6), (Shape{4, 6, 6}));
  EXPECT_EQ(model->layer_output_shape(10), (Shape{4 * 6 * 6 + 4}));
  EXPECT_EQ(model->output_shape(), (Shape{3}));
  EXPECT_STREQ(model->layers()[14]->type(), "Dropout");
  std::remove(path.c_str());
}

TEST(Deck, LayerErrors) {
  expect_deck_error("no_kernel",
                    test::replace_once(graph_deck, "kernel = 3\npadding = 1", "padding = 1"), 10, 1,
                    "model.layers[0].kernel", "required key is missing");
  expect_deck_error(
      "bad_kernel", test::replace_once(graph_deck, "kernel = [3, 1]", "kernel = [3, 0]"), 28, 14,
      "model.layers[3].kernel", "expected an integer >= 1 or an array [rows, columns]");
  expect_deck_error("later_input",
                    test::replace_once(graph_deck, "inputs = [\"stem_relu\", \"gelu4\"]",
                                       "inputs = [\"stem_relu\", \"gap\"]"),
                    37, 24, "model.layers[5].inputs",
                    "'gap' is not 'input' or the name of a layer declared before this one");
  expect_deck_error(
      "one_input",
      test::replace_once(graph_deck, "inputs = [\"flat\", \"gap\"]", "inputs = [\"flat\"]"), 61, 10,
      "model.layers[10].inputs", "a concat layer takes two or more inputs");
  expect_deck_error(
      "merge_without_inputs",
      test::replace_once(graph_deck, "name = \"residual\"\ninputs = [\"stem_relu\", \"gelu4\"]",
                         "name = \"residual\""),
      34, 1, "model.layers[5].inputs", "required for add");
  expect_deck_error("key_of_other_type", test::replace_once(graph_deck, "slope = 0.2", "units = 2"),
                    73, 1, "model.layers[13].units",
                    "unknown key; allowed: type, name, inputs, slope");
  expect_deck_error("rate", test::replace_once(graph_deck, "rate = 0.3", "rate = 1.0"), 77, 8,
                    "model.layers[14].rate", "out of range [0, 1)");
  expect_deck_error(
      "init", test::replace_once(graph_deck, "init = \"xavier_normal\"", "init = \"glorot\""), 66,
      8, "model.layers[11].init",
      "'glorot' is not supported; allowed: he_uniform, he_normal, xavier_uniform, xavier_normal");
  expect_deck_error("duplicate_name",
                    test::replace_once(graph_deck, "name = \"gap\"", "name = \"stem\""), 51, 8,
                    "model.layers[8].name", "layer name 'stem' is used twice");
}

// valid_deck has 27 lines: `extra` starts on line 28.
std::string with_tables(const std::string& extra) { return std::string(valid_deck) + extra; }

TEST(Deck, OptimizerScheduleAndClippingBuild) {
  const std::string path = write_deck("adamw", with_tables(R"(clip_norm = 2.5

[optimizer]
type = "adamw"
lr = 0.002
beta1 = 0.8
beta2 = 0.99
eps = 1e-6

[schedule]
type = "multistep"
milestones = [3, 7]
gamma = 0.5
warmup_steps = 100
warmup_start_factor = 0.1
)"));
  const Deck deck = load_deck(path);
  EXPECT_EQ(deck.optimizer.type, "adamw");
  EXPECT_FLOAT_EQ(deck.optimizer.weight_decay(), 0.01f);  // AdamW's default
  const OptimizerParams& op = deck.optimizer;
  EXPECT_FLOAT_EQ(op.adam.beta1, 0.8f);
  EXPECT_FLOAT_EQ(op.adam.beta2, 0.99f);
  EXPECT_FLOAT_EQ(op.adam.eps, 1e-6f);
  EXPECT_EQ(make_optimizer(op)->name(), "AdamW");
  const LrSchedule& schedule = deck.training.schedule;
  EXPECT_EQ(schedule.type, ScheduleType::multistep);
  EXPECT_FLOAT_EQ(schedule.base_lr, 0.002f);
  EXPECT_EQ(schedule.milestones, (std::vector<std::int64_t>{3, 7}));
  EXPECT_FLOAT_EQ(schedule.gamma, 0.5f);
  EXPECT_EQ(schedule.warmup_steps, 100);
  EXPECT_FLOAT_EQ(schedule.warmup_start_factor, 0.1f);
  EXPECT_FLOAT_EQ(deck.training.clip_norm, 2.5f);
  std::remove(path.c_str());
}

TEST(Deck, OptimizerDefaultsDependOnTheType) {
  const std::string sgd_path = write_deck("sgd_defaults", valid_deck);
  const Deck sgd = load_deck(sgd_path);
  EXPECT_EQ(sgd.optimizer.type, "sgd");
  EXPECT_FLOAT_EQ(sgd.training.schedule.base_lr, 0.01f);
  EXPECT_EQ(sgd.training.schedule.type, ScheduleType::constant);
  EXPECT_FLOAT_EQ(sgd.training.clip_norm, 0.0f);
  const std::string adam_path =
      write_deck("adam_defaults", with_tables("[optimizer]\ntype = \"adam\"\n"));
  const Deck adam = load_deck(adam_path);
  EXPECT_FLOAT_EQ(adam.training.schedule.base_lr, 0.001f);
  EXPECT_FLOAT_EQ(adam.optimizer.weight_decay(), 0.0f);
  EXPECT_FLOAT_EQ(adam.optimizer.adam.beta1, 0.9f);
  EXPECT_FLOAT_EQ(adam.optimizer.adam.beta2, 0.999f);
  EXPECT_FLOAT_EQ(adam.optimizer.adam.eps, 1e-8f);
  EXPECT_EQ(make_optimizer(adam.optimizer)->name(), "Adam");
  std::remove(sgd_path.c_str());
  std::remove(adam_path.c_str());
}

TEST(Deck, OptimizerErrors) {
  const auto opt = [](const std::string& body) { return with_tables("[optimizer]\n" + body); };
  // Line 28 is [optimizer]; the body starts on line 29.
  expect_deck_error("opt_type", opt("type = \"adagrad\"\n"), 29, 8, "optimizer.type",
                    "'adagrad' is not supported; allowed: sgd, adam, adamw");
  expect_deck_error("opt_unknown", opt("betas = 0.9\n"), 29, 1, "optimizer.betas",
                    "unknown key (did you mean 'optimizer.beta1'?)");
  expect_deck_error("opt_momentum_adam", opt("type = \"adam\"\nmomentum = 0.9\n"), 30, 1,
                    "optimizer.momentum", "does not apply to type 'adam'; it applies to: sgd");
  expect_deck_error("opt_nesterov_adamw", opt("type = \"adamw\"\nnesterov = true\n"), 30, 1,
                    "optimizer.nesterov", "does not apply to type 'adamw'; it applies to: sgd");
  expect_deck_error("opt_beta1_sgd", opt("beta1 = 0.9\n"), 29, 1, "optimizer.beta1",
                    "does not apply to type 'sgd'; it applies to: adam, adamw");
  expect_deck_error("opt_eps_sgd", opt("type = \"sgd\"\neps = 1e-8\n"), 30, 1, "optimizer.eps",
                    "does not apply to type 'sgd'; it applies to: adam, adamw");
  expect_deck_error("opt_lr_type", opt("lr = \"0.1\"\n"), 29, 6, "optimizer.lr",
                    "expected a number");
  expect_deck_error("opt_lr_range", opt("lr = -0.1\n"), 29, 6, "optimizer.lr",
                    "out of range [0, 100]");
  expect_deck_error("opt_wd_range", opt("weight_decay = 2\n"), 29, 16, "optimizer.weight_decay",
                    "out of range [0, 1]");
  expect_deck_error("opt_beta2_range", opt("type = \"adam\"\nbeta2 = 1.0\n"), 30, 9,
                    "optimizer.beta2", "value 1 is out of range [0, 0.999999]");
  expect_deck_error("opt_beta1_type", opt("type = \"adam\"\nbeta1 = true\n"), 30, 9,
                    "optimizer.beta1", "expected a number");
  expect_deck_error("opt_eps_range", opt("type = \"adam\"\neps = 0.0\n"), 30, 7, "optimizer.eps",
                    "value 0 is out of range (0, 1]");
  expect_deck_error("opt_momentum_range", opt("momentum = 1.0\n"), 29, 12, "optimizer.momentum",
                    "out of range [0, 0.999999]");
  expect_deck_error("opt_nesterov_type", opt("momentum = 0.9\nnesterov = 1\n"), 30, 12,
                    "optimizer.nesterov", "expected a boolean");
  expect_deck_error("opt_nesterov_no_momentum", opt("nesterov = true\n"), 29, 12,
                    "optimizer.nesterov", "Nesterov momentum needs optimizer.momentum > 0");
}

TEST(Deck, ScheduleErrors) {
  const auto sch = [](const std::string& body) { return with_tables("[schedule]\n" + body); };
  // Line 28 is [schedule]; the body starts on line 29.
  expect_deck_error("sch_top", with_tables("[schedul]\n"), 28, 2, "schedul",
                    "unknown key (did you mean 'schedule'?)");
  expect_deck_error(
      "sch_type", sch("type = \"linear\"\n"), 29, 8, "schedule.type",
      "'linear' is not supported; allowed: constant, step, multistep, exponential, cosine");
  expect_deck_error("sch_unknown", sch("type = \"cosine\"\nwarmup_step = 10\n"), 30, 1,
                    "schedule.warmup_step", "unknown key (did you mean 'schedule.warmup_steps'?)");
  expect_deck_error("sch_gamma_cosine", sch("type = \"cosine\"\ngamma = 0.5\n"), 30, 1,
                    "schedule.gamma",
                    "does not apply to type 'cosine'; it applies to: step, multistep, exponential");
  expect_deck_error("sch_min_lr_step", sch("type = \"step\"\nstep_size = 2\nmin_lr = 0.001\n"), 31,
                    1, "schedule.min_lr", "does not apply to type 'step'; it applies to: cosine");
  expect_deck_error("sch_milestones_constant", sch("milestones = [2]\n"), 29, 1,
                    "schedule.milestones",
                    "does not apply to type 'constant'; it applies to: multistep");
  expect_deck_error(
      "sch_step_size_multistep", sch("type = \"multistep\"\nmilestones = [2]\nstep_size = 2\n"), 31,
      1, "schedule.step_size", "does not apply to type 'multistep'; it applies to: step");
  expect_deck_error("sch_step_size_missing", sch("type = \"step\"\n"), 28, 1, "schedule.step_size",
                    "required for type 'step'");
  expect_deck_error("sch_step_size_range", sch("type = \"step\"\nstep_size = 0\n"), 30, 13,
                    "schedule.step_size", "out of range [1, 1000000]");
  expect_deck_error("sch_step_size_type", sch("type = \"step\"\nstep_size = 2.5\n"), 30, 13,
                    "schedule.step_size", "expected an integer");
  expect_deck_error("sch_gamma_missing", sch("type = \"exponential\"\n"), 28, 1, "schedule.gamma",
                    "required for type 'exponential'");
  expect_deck_error("sch_gamma_range", sch("type = \"exponential\"\ngamma = 1.5\n"), 30, 9,
                    "schedule.gamma", "value 1.5 is out of range (0, 1]");
  expect_deck_error("sch_gamma_zero", sch("type = \"step\"\nstep_size = 1\ngamma = 0\n"), 31, 9,
                    "schedule.gamma", "value 0 is out of range (0, 1]");
  expect_deck_error("sch_milestones_missing", sch("type = \"multistep\"\n"), 28, 1,
                    "schedule.milestones", "required for type 'multistep'");
  expect_deck_error("sch_milestones_type", sch("type = \"multistep\"\nmilestones = 3\n"), 30, 14,
                    "schedule.milestones", "expected an array of integers");
  expect_deck_error("sch_milestones_empty", sch("type = \"multistep\"\nmilestones = []\n"), 30, 14,
                    "schedule.milestones", "expected a non-empty array of increasing epochs");
  expect_deck_error("sch_milestones_order", sch("type = \"multistep\"\nmilestones = [5, 5]\n"), 30,
                    18, "schedule.milestones",
                    "epoch 5 does not follow 5; milestones must increase");
  expect_deck_error("sch_milestones_value", sch("type = \"multistep\"\nmilestones = [2, 0]\n"), 30,
                    18, "schedule.milestones", "value 0 is out of range [1, 9223372036854775807]");
  expect_deck_error("sch_milestones_float", sch("type = \"multistep\"\nmilestones = [2.5]\n"), 30,
                    15, "schedule.milestones", "expected an array of integers");
  expect_deck_error("sch_min_lr_range", sch("type = \"cosine\"\nmin_lr = 0.5\n"), 30, 10,
                    "schedule.min_lr", "value 0.5 is out of range [0, optimizer.lr = 0.01]");
  expect_deck_error("sch_min_lr_type", sch("type = \"cosine\"\nmin_lr = \"0\"\n"), 30, 10,
                    "schedule.min_lr", "expected a number");
  expect_deck_error("sch_warmup_range", sch("warmup_steps = -1\n"), 29, 16, "schedule.warmup_steps",
                    "out of range");
  expect_deck_error("sch_warmup_type", sch("warmup_steps = 1.5\n"), 29, 16, "schedule.warmup_steps",
                    "expected an integer");
  expect_deck_error("sch_warmup_factor_range",
                    sch("warmup_steps = 10\nwarmup_start_factor = 1.5\n"), 30, 23,
                    "schedule.warmup_start_factor", "out of range [0, 1]");
  expect_deck_error("sch_warmup_factor_alone", sch("warmup_start_factor = 0.5\n"), 29, 23,
                    "schedule.warmup_start_factor",
                    "has no effect without schedule.warmup_steps > 0");
}

TEST(Deck, ClipNormErrors) {
  // clip_norm goes under [training], whose last line (27) is batch_size.
  expect_deck_error("clip_range", with_tables("clip_norm = -1.0\n"), 28, 13, "training.clip_norm",
                    "out of range [0, 1e+06]");
  expect_deck_error("clip_type", with_tables("clip_norm = \"off\"\n"), 28, 13, "training.clip_norm",
                    "expected a number");
  expect_deck_error("clip_unknown", with_tables("clipnorm = 1.0\n"), 28, 1, "training.clipnorm",
                    "unknown key (did you mean 'training.clip_norm'?)");
}

TEST(Deck, CheckpointKeys) {
  const std::string defaults_path = write_deck("ckpt_defaults", valid_deck);
  const Deck defaults = load_deck(defaults_path);
  EXPECT_EQ(defaults.run.checkpoint.directory, "output/t/checkpoints");
  EXPECT_EQ(defaults.run.checkpoint.keep, 3);
  EXPECT_EQ(defaults.run.checkpoint.every_epochs, 1);
  EXPECT_EQ(defaults.run.checkpoint.every_steps, 0);
  EXPECT_EQ(defaults.run.checkpoint.every_minutes, 0.0f);
  const Deck moved = load_deck(defaults_path, {"run.output_dir=runs/a"});
  EXPECT_EQ(moved.run.checkpoint.directory, "runs/a/checkpoints");

  const std::string path = write_deck("ckpt", with_tables(R"(
[checkpoint]
directory = "ckpt"
keep = 5
every_epochs = 0
every_steps = 100
every_minutes = 2.5
)"));
  const Deck deck = load_deck(path);
  EXPECT_EQ(deck.run.checkpoint.directory, "ckpt");
  EXPECT_EQ(deck.run.checkpoint.keep, 5);
  EXPECT_EQ(deck.run.checkpoint.every_epochs, 0);
  EXPECT_EQ(deck.run.checkpoint.every_steps, 100);
  EXPECT_EQ(deck.run.checkpoint.every_minutes, 2.5f);
  EXPECT_EQ(load_deck(path, {"checkpoint.every_minutes=1"}).run.checkpoint.every_minutes, 1.0f);
  std::remove(defaults_path.c_str());
  std::remove(path.c_str());
}

TEST(Deck, CheckpointErrors) {
  const auto ckpt = [](const std::string& body) { return with_tables("[checkpoint]\n" + body); };
  // Line 28 is [checkpoint]; the body starts on line 29.
  expect_deck_error("ckpt_unknown", ckpt("every_epoch = 2\n"), 29, 1, "checkpoint.every_epoch",
                    "unknown key (did you mean 'checkpoint.every_epochs'?)");
  expect_deck_error("ckpt_keep_zero", ckpt("keep = 0\n"), 29, 8, "checkpoint.keep",
                    "value 0 is out of range [1, 1000000]");
  expect_deck_error("ckpt_keep_type", ckpt("keep = 2.5\n"), 29, 8, "checkpoint.keep",
                    "expected an integer");
  expect_deck_error("ckpt_epochs_negative", ckpt("every_epochs = -1\n"), 29, 16,
                    "checkpoint.every_epochs", "out of range [0, 1000000]");
  expect_deck_error("ckpt_steps_negative", ckpt("every_steps = -5\n"), 29, 15,
                    "checkpoint.every_steps", "out of range");
  expect_deck_error("ckpt_minutes_negative", ckpt("every_minutes = -0.5\n"), 29, 17,
                    "checkpoint.every_minutes", "value -0.5 is out of range [0, 1e+06]");
  expect_deck_error("ckpt_minutes_type", ckpt("every_minutes = \"5\"\n"), 29, 17,
                    "checkpoint.every_minutes", "expected a number");
  expect_deck_error("ckpt_directory_empty", ckpt("directory = \"\"\n"), 29, 13,
                    "checkpoint.directory", "must not be empty");
  expect_deck_error("ckpt_directory_type", ckpt("directory = 3\n"), 29, 13, "checkpoint.directory",
                    "expected a string");
}

TEST(Deck, MissingRequiredKey) {
  expect_deck_error("missing", test::replace_once(valid_deck, "test_labels = \"d\"\n", ""), 5, 1,
                    "data.test_labels", "required key is missing");
}

TEST(Deck, PrecisionSection) {
  const std::string path = write_deck("precision_defaults", valid_deck);
  const LossScaling off = load_deck(path).training.loss_scaling;
  EXPECT_FALSE(off.dynamic);
  const LossScaling dynamic =
      load_deck(path, {"precision.loss_scale=\"dynamic\"", "precision.initial_loss_scale=1024",
                       "precision.loss_scale_growth_interval=50"})
          .training.loss_scaling;
  EXPECT_TRUE(dynamic.dynamic);
  EXPECT_EQ(dynamic.initial, 1024.0f);
  EXPECT_EQ(dynamic.growth_interval, 50);
  const LossScaling defaults =
      load_deck(path, {"precision.loss_scale=\"dynamic\""}).training.loss_scaling;
  EXPECT_EQ(defaults.initial, 65536.0f);
  EXPECT_EQ(defaults.growth_interval, 2000);
  std::remove(path.c_str());

  // The appended table starts on line 28, its first key on line 29.
  const auto precision = [](const std::string& body) {
    return with_tables("[precision]\n" + body);
  };
  expect_deck_error("precision_type", precision("loss_scale = \"static\"\n"), 29, 14,
                    "precision.loss_scale", "'static' is not supported; allowed: none, dynamic");
  expect_deck_error("precision_initial",
                    precision("loss_scale = \"dynamic\"\n"
                              "initial_loss_scale = 1000\n"),
                    30, 22, "precision.initial_loss_scale",
                    "must be a power of two from 1 to 16777216 (2^24)");
  expect_deck_error("precision_initial_large",
                    precision("loss_scale = \"dynamic\"\ninitial_loss_scale = 33554432\n"), 30, 22,
                    "precision.initial_loss_scale", "must be a power of two from 1");
  expect_deck_error("precision_interval",
                    precision("loss_scale = \"dynamic\"\nloss_scale_growth_interval = 0\n"), 30, 30,
                    "precision.loss_scale_growth_interval", "out of range");
  expect_deck_error("precision_without_dynamic", precision("initial_loss_scale = 1024\n"), 29, 1,
                    "precision.initial_loss_scale",
                    "does not apply to loss_scale 'none'; it applies to: dynamic");
  expect_deck_error("precision_unknown", precision("loss_scales = \"dynamic\"\n"), 29, 1,
                    "precision.loss_scales", "unknown key (did you mean 'precision.loss_scale'?)");
}

TEST(Deck, ParallelLossValidationAndEvaluationKeys) {
  const std::string defaults_path = write_deck("parallel_defaults", valid_deck);
  const Deck defaults = load_deck(defaults_path);
  EXPECT_EQ(defaults.training.bucket_bytes, 1 << 20);
  EXPECT_TRUE(defaults.training.overlap);
  EXPECT_FALSE(defaults.training.sync_batchnorm);
  EXPECT_EQ(defaults.gpu_aware_mpi, "auto");
  EXPECT_EQ(defaults.training.gradient_dtype, FloatFormat::fp32);
  EXPECT_EQ(defaults.training.loss.type, "cross_entropy");
  EXPECT_EQ(defaults.training.loss.label_smoothing, 0.0f);
  EXPECT_EQ(defaults.validation_split, 0.0f);
  EXPECT_EQ(defaults.run.eval_every, 1);
  EXPECT_EQ(defaults.training.accumulation_steps, 1);

  const Deck deck =
      load_deck(defaults_path,
                {"parallel.bucket_mb=0.5", "parallel.overlap=false", "parallel.batchnorm=\"sync\"",
                 "parallel.gpu_aware_mpi=\"off\"", "parallel.gradient_dtype=\"bf16\"",
                 "loss.label_smoothing=0.1", "data.validation_split=0.1", "training.eval_every=0",
                 "parallel.shard_optimizer=true", "parallel.overlap_gather=false"});
  const TrainOptions& options = deck.training;
  EXPECT_EQ(options.bucket_bytes, 1 << 19);
  EXPECT_FALSE(options.overlap);
  EXPECT_TRUE(options.sync_batchnorm);
  EXPECT_EQ(options.gradient_dtype, FloatFormat::bf16);
  EXPECT_TRUE(options.shard_optimizer);
  EXPECT_FALSE(defaults.training.shard_optimizer);
  EXPECT_FALSE(options.overlap_gather);
  EXPECT_TRUE(defaults.training.overlap_gather);
  EXPECT_EQ(options.loss.label_smoothing, 0.1f);
  EXPECT_EQ(deck.gpu_aware_mpi, "off");
  EXPECT_EQ(deck.validation_split, 0.1f);
  EXPECT_EQ(deck.run.eval_every, 0);
  std::remove(defaults_path.c_str());

  // The appended table starts on line 28, its first key on line 29.
  const auto parallel = [](const std::string& body) { return with_tables("[parallel]\n" + body); };
  expect_deck_error("parallel_bn", parallel("batchnorm = \"global\"\n"), 29, 13,
                    "parallel.batchnorm", "'global' is not supported; allowed: local, sync");
  expect_deck_error("parallel_gradient_dtype", parallel("gradient_dtype = \"fp8\"\n"), 29, 18,
                    "parallel.gradient_dtype", "'fp8' is not supported; allowed: fp32, bf16, fp16");
  for (const auto& name : float_format_names())
    EXPECT_EQ(float_format_name(float_format_from_name(name)), name);
  test::expect_error(
      [] { float_format_from_name("half"); },
      "tessera::float_format_from_name: unknown format 'half'; allowed: fp32, bf16, fp16");
  expect_deck_error("parallel_bucket", parallel("bucket_mb = 0\n"), 29, 13, "parallel.bucket_mb",
                    "out of range");
  expect_deck_error("parallel_unknown", parallel("overlab = true\n"), 29, 1, "parallel.overlab",
                    "unknown key (did you mean 'parallel.overlap'?)");
  expect_deck_error("parallel_shard", parallel("shard_optimizer = \"yes\"\n"), 29, 19,
                    "parallel.shard_optimizer", "expected a boolean");
  // Pipeline stages: a stage count, and optionally where stages 2.. start.
  EXPECT_EQ(defaults.pipeline_stages, 1);
  EXPECT_TRUE(defaults.stage_boundaries.empty());
  const std::string last = defaults.layers.back().name;
  const std::string staged_path = write_deck(
      "pipeline", parallel("pipeline_stages = 2\nstage_boundaries = [\"" + last + "\"]\n"));
  const Deck staged = load_deck(staged_path);
  std::remove(staged_path.c_str());
  EXPECT_EQ(staged.pipeline_stages, 2);
  EXPECT_EQ(staged.stage_boundaries, std::vector<std::string>{last});
  EXPECT_NE(staged.location("parallel.pipeline_stages").find(":29:19"), std::string::npos)
      << staged.location("parallel.pipeline_stages");
  expect_deck_error("pipeline_zero", parallel("pipeline_stages = 0\n"), 29, 19,
                    "parallel.pipeline_stages", "value 0 is out of range [1, 4096]");
  expect_deck_error("pipeline_sharded", parallel("pipeline_stages = 2\nshard_optimizer = true\n"),
                    29, 19, "parallel.pipeline_stages",
                    "cannot be combined with parallel.shard_optimizer = true");
  expect_deck_error("pipeline_bf16", parallel("pipeline_stages = 2\ngradient_dtype = \"bf16\"\n"),
                    29, 19, "parallel.pipeline_stages",
                    "cannot be combined with parallel.gradient_dtype = \"bf16\"");
  // 16-bit activations: the format, and no pipeline with them.
  EXPECT_EQ(defaults.training.compute, FloatFormat::fp32);
  const auto precision = [&](const std::string& body) {
    return with_tables("[precision]\n" + body);
  };
  const std::string bf16_path = write_deck("compute_bf16", precision("compute = \"bf16\"\n"));
  EXPECT_EQ(load_deck(bf16_path).training.compute, FloatFormat::bf16);
  std::remove(bf16_path.c_str());
  expect_deck_error("compute_fp8", precision("compute = \"fp8\"\n"), 29, 11, "precision.compute",
                    "'fp8' is not supported; allowed: fp32, bf16, fp16");
  // Pipeline stages exchange their boundaries' activations in float in
  // every compute format.
  const std::string pipeline16 = write_deck(
      "pipeline_compute", precision("compute = \"fp16\"\n[parallel]\npipeline_stages = 2\n"));
  const Deck staged16 = load_deck(pipeline16);
  EXPECT_EQ(staged16.pipeline_stages, 2);
  EXPECT_EQ(staged16.training.compute, FloatFormat::fp16);
  std::remove(pipeline16.c_str());
  expect_deck_error("pipeline_name",
                    parallel("pipeline_stages = 2\nstage_boundaries = [\"nope\"]\n"), 30, 21,
                    "parallel.stage_boundaries", "'nope' is not a layer name");
  expect_deck_error("pipeline_count",
                    parallel("pipeline_stages = 3\nstage_boundaries = [\"" + last + "\"]\n"), 30,
                    20, "parallel.stage_boundaries",
                    "names 1 layer(s); parallel.pipeline_stages = 3 needs 2");
  expect_deck_error("loss_type", with_tables("[loss]\ntype = \"mse\"\n"), 29, 8, "loss.type",
                    "'mse' is not supported; allowed: cross_entropy");
  expect_deck_error("loss_smoothing", with_tables("[loss]\nlabel_smoothing = 1.0\n"), 29, 19,
                    "loss.label_smoothing", "out of range");
}

// docs/decks.md states every section's keys as their declarations do: the
// same keys in the same order, with the type, default and allowed values
// that `tessera-train --list-keys` prints.
TEST(Deck, ReferenceTablesAreTheDeclarations) {
  test::expect_documented(deck_key_reference(), "docs/decks.md", deck_sections().size());
}

// An integer key's range must fit the member it fills: declared wider, the
// declaration fails at once (a value could otherwise wrap into range).
TEST(Deck, IntegerKeyRangesFitTheirMembers) {
  const auto epochs = [](auto& d) -> auto& { return d.training.epochs; };  // an int
  EXPECT_NO_THROW(SectionBuilder<Deck>("t").integer("epochs", epochs, Range::closed(1, 1e6), ""));
  EXPECT_THROW(SectionBuilder<Deck>("t").integer("epochs", epochs, Range::at_least(1), ""),
               std::logic_error);
  EXPECT_THROW(SectionBuilder<Deck>("t").integer("epochs", epochs, Range::any(), ""),
               std::logic_error);
}

// Early stopping watches the evaluations after epochs: it needs some.
TEST(Deck, EarlyStoppingNeedsEvaluations) {
  const std::string path = write_deck("early_stop", valid_deck);
  const Deck deck = load_deck(path, {"training.early_stop_patience=3"});
  EXPECT_EQ(deck.run.early_stop_patience, 3);
  EXPECT_EQ(deck.run.early_stop_min_delta, 0.0);
  try {
    load_deck(path, {"training.early_stop_patience=3", "training.eval_every=0"});
    ADD_FAILURE() << "early stopping without evaluations was accepted";
  } catch (const DeckError& e) {
    EXPECT_NE(std::string(e.what()).find("training.early_stop_patience: early stopping watches "
                                         "the evaluations after each epoch; set eval_every"),
              std::string::npos)
        << e.what();
  }
}

// One declaration adds a key everywhere: training.max_steps reads from the
// deck and from --set, is checked against its range, and is listed.
TEST(Deck, ADeclaredKeyIsReadCheckedAndListed) {
  const std::string path = write_deck("max_steps", valid_deck);
  EXPECT_EQ(load_deck(path).training.max_steps, 0);
  const Deck capped = load_deck(path, {"training.max_steps=7"});
  EXPECT_EQ(capped.training.max_steps, 7);
  EXPECT_EQ(capped.location("training.max_steps"), "--set training.max_steps=7");
  EXPECT_NE(deck_settings(capped).find("training.max_steps = 7  (--set training.max_steps=7)"),
            std::string::npos)
      << deck_settings(capped);
  EXPECT_NE(deck_key_reference().find("| `max_steps` | integer | `0` | ≥ 0 |"), std::string::npos);
  try {
    load_deck(path, {"training.max_steps=-1"});
    ADD_FAILURE() << "training.max_steps=-1: expected a DeckError";
  } catch (const DeckError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--set training.max_steps=-1: training.max_steps: value -1 is out of range "
              "[0, 9223372036854775807]");
  }
  // The total the schedule spreads over is capped by it.
  EXPECT_EQ(capped.training.total_steps(100), 7);
  EXPECT_EQ(load_deck(path).training.total_steps(100), 100 * load_deck(path).training.epochs);
  std::remove(path.c_str());
}

}  // namespace
