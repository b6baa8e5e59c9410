// Input decks: TOML files that describe a whole run. Errors carry
// file:line:column, the key, and what was expected.
// Parsing is plain host code with no Kokkos in sight, so GPU builds compile
// it with the host compiler; deck/build.hpp turns a Deck into engine objects.
#pragma once

#include <tessera/deck/keys.hpp>
#include <tessera/layers/registry.hpp>
#include <tessera/model/memory.hpp>
#include <tessera/settings/kernel_settings.hpp>
#include <tessera/settings/optimizer_params.hpp>
#include <tessera/settings/run_options.hpp>
#include <tessera/settings/train_options.hpp>

#include <any>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

// A deck error: what() is "file:line:column: key: message".
class DeckError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A key the deck does not have: an unknown key, or a --set path that names
// no value (a missing array entry, a value where a table should be). key()
// is the path as far as it was understood, e.g. "optimizer.lrr"; a sweep
// file uses it to tell a mistyped parameter from a bad value.
class DeckKeyError : public DeckError {
 public:
  DeckKeyError(const std::string& message, std::string key)
      : DeckError(message), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

// One [[model.layers]] entry: its type from the layer registry and that
// type's Options (every key the deck gave, the rest at their defaults).
struct LayerDeck {
  std::string type;
  std::string name;
  std::string location;             // "file:line:column" of the entry
  std::vector<std::string> inputs;  // empty: the previous layer
  const LayerType* layer_type = nullptr;
  std::any options;  // the layer class's Options

  // The options as the layer class takes them, e.g. options_of<Conv2D>().kernel.
  template <class L>
  const typename L::Options& options_of() const {
    return std::any_cast<const typename L::Options&>(options);
  }
};

// A whole run: the deck's text, the data, the model, and the engine's own
// settings structs (no copies: the Trainer, the optimizer and the Run take
// them as they are).
struct Deck {
  std::string path;
  std::string text;                    // the deck file as written
  std::vector<std::string> overrides;  // --set key.path=value, applied in order

  std::string data_format = "idx";                                   // a name of data_formats()
  std::string train_images, train_labels, test_images, test_labels;  // idx
  std::string train_file, test_file;                                 // hdf5
  std::string images_dataset = "images", labels_dataset = "labels";  // hdf5
  bool streaming = false;  // hdf5: samples read from the file batch by batch
  // hdf5: > 0 caps the memory (MiB) a data set may take on a rank: loaded
  // whole as float samples, or the streaming buffers.
  std::int64_t max_resident_mb = 0;
  std::string train_tokens, test_tokens;  // tokens
  std::string token_type = "uint16";      // tokens: "uint16" | "int32"
  // Every data file key the format uses, with its value and where it was set.
  struct DataFile {
    std::string key, path, location;  // location: "file:line:column" or "--set ..."
    bool training = true;             // of the training set (else of the test set)
  };
  std::vector<DataFile> data_files;
  float normalize_mean = 0.0f;
  float normalize_std = 1.0f;
  float validation_split = 0.0f;   // share of the training file held out (its last samples)
  std::int64_t train_samples = 0;  // > 0: train on the first this many samples only
  std::int64_t test_samples = 0;   // > 0: evaluate on the first this many test samples only

  std::vector<std::int64_t> input_shape;
  std::vector<LayerDeck> layers;

  OptimizerParams optimizer;  // [optimizer]; its lr is training.schedule.base_lr
  // [run] seed, [training], [schedule], [loss] and [parallel] (but gpu_aware_mpi).
  TrainOptions training;
  RunOptions run;                      // [run] name and output_dir, eval_every, [checkpoint]
  std::string gpu_aware_mpi = "auto";  // "auto" | "on" | "off"
  // [parallel] pipeline: the layers split into this many stages over the
  // ranks, starting at the named layers (stages - 1 names; none: balanced).
  int pipeline_stages = 1;
  std::vector<std::string> stage_boundaries;
  // [memory]: how the activation gradients share memory, and the device
  // memory a rank's run may plan for (MiB; 0: no limit).
  // [training] recompute: which outputs a step keeps (Model::set_recompute).
  struct Memory {
    BufferPlan buffers = BufferPlan::shared;
    double cap_mb = 0;
    Recompute recompute;
  } memory;
  // [kernels]: how each layer's kernels are chosen (model/kernels.hpp).
  KernelSettings kernels;

  // Where each section and key the deck gives stands: "file:line:column",
  // or "--set key=value", under "section" and "section.key".
  std::map<std::string, std::string> locations;
  // The location of `key` ("data.validation_split"), else of its section,
  // else the deck's path: where a later error about its value points.
  std::string location(const std::string& key) const;
};

// Every section of a deck, declared key by key (deck/keys.hpp), in the
// order they are read and listed (src/deck/sections.cpp).
const std::vector<Section<Deck>>& deck_sections();
// The key tables of every section, as `tessera-train --list-keys` prints
// them and docs/decks.md carries them (a test compares the two).
std::string deck_key_reference();
// Every setting of `deck` that applies, one "  section.key = value" line
// each, with the location of those the deck (or --set) gives.
std::string deck_settings(const Deck& deck);

// A format of [data]: the keys naming the training set's files and the
// test set's, in the order its reader takes them, and its other keys. The
// keys of other formats are refused. (Tessera's run reads each format with
// a reader of the same name, src/app/run.cpp.)
struct DataFormat {
  std::string name;
  std::vector<std::string> train, test;
  std::vector<std::string> keys;
};
const std::vector<DataFormat>& data_formats();

// `text` as a TOML basic string: in quotes, with '"' and '\\' escaped (a
// value of an override or a sweep that must stay a string).
std::string toml_string(const std::string& text);

// Parses and validates a deck after applying `overrides` ("key.path=value",
// e.g. "training.epochs=3" or "model.layers[2].units=64"); throws DeckError.
Deck load_deck(const std::string& path, const std::vector<std::string>& overrides = {});
// The same for deck text already in memory; `path` names it in messages.
Deck parse_deck(const std::string& text, const std::string& path,
                const std::vector<std::string>& overrides = {});

// Every data file the deck names can be opened; throws DeckError with the
// location of the key otherwise.
void check_data_files(const Deck& deck);

// Data paths in decks may use two variables, one per kind of data, each the
// environment variable of that name or its default where it is unset or
// empty:
//   ${TESSERA_DATA_DIR}   image datasets: Fashion-MNIST's IDX files and the
//                         HDF5 files made from them (default: the directory
//                         of Debian's dataset-fashion-mnist package);
//   ${TESSERA_TOKEN_DIR}  token files (tessera-tokenize's output; default
//                         where scripts/setup.sh writes them).
// No other variable is expanded; another ${...} is an error (DeckError with
// the path and the variables there are). A relative path is relative to
// the working directory.
struct DataDirectory {
  const char* variable;
  const char* default_value;
  const char* holds;
};
inline constexpr DataDirectory data_directories[] = {
    {"TESSERA_DATA_DIR", "/usr/share/datasets/fashion-mnist", "image datasets"},
    {"TESSERA_TOKEN_DIR", "/var/lib/tessera", "token files"}};
inline constexpr const char* default_data_dir = data_directories[0].default_value;
inline constexpr const char* default_token_dir = data_directories[1].default_value;
// The directory `variable` stands for: the environment's value, or its
// default.
std::string data_dir(const std::string& variable = "TESSERA_DATA_DIR");
std::string expand_data_path(const std::string& path);

}  // namespace tessera
