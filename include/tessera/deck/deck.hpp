// Input decks: TOML files that describe a whole run. Errors carry
// file:line:column, the key, and what was expected.
// Parsing is plain host code with no Kokkos in sight, so GPU builds compile
// it with the host compiler; deck/build.hpp turns a Deck into engine objects.
#pragma once

#include <tessera/layers/registry.hpp>

#include <any>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera {

// A deck error: what() is "file:line:column: key: message".
class DeckError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One [[model.layers]] entry: its type from the layer registry and that
// type's Options (every key the deck gave, the rest at their defaults).
struct LayerDeck {
  std::string type;
  std::string name;
  std::string location;             // "file:line:column" of the entry
  std::vector<std::string> inputs;  // empty: the previous layer
  const LayerType* layer_type = nullptr;
  std::any options;                 // the layer class's Options

  // The options as the layer class takes them, e.g. options_of<Conv2D>().kernel.
  template <class L>
  const typename L::Options& options_of() const {
    return std::any_cast<const typename L::Options&>(options);
  }
};

struct Deck {
  std::string path;
  std::string text;                    // the deck file as written
  std::vector<std::string> overrides;  // --set key.path=value, applied in order

  std::string run_name = "run";
  std::string output_dir;  // default "output/<run name>", relative to the working directory
  std::uint64_t seed = 0;

  std::string data_format = "idx";  // "idx" | "hdf5"
  std::string train_images, train_labels, test_images, test_labels;  // idx
  std::string train_file, test_file;                                  // hdf5
  std::string images_dataset = "images", labels_dataset = "labels";  // hdf5
  // Every data file key the format uses, with its value and where it was set.
  struct DataFile {
    std::string key, path, location;  // location: "file:line:column" or "--set ..."
  };
  std::vector<DataFile> data_files;
  float normalize_mean = 0.0f;
  float normalize_std = 1.0f;
  float validation_split = 0.0f;  // share of the training file held out (its last samples)
  std::string validation_split_location;  // "file:line:column" when set
  std::int64_t train_samples = 0;  // > 0: train on the first this many samples only

  std::vector<std::int64_t> input_shape;
  std::string input_shape_location;  // "file:line:column"
  std::vector<LayerDeck> layers;

  struct Loss {
    std::string type = "cross_entropy";
    float label_smoothing = 0.0f;
  } loss;

  // Defaults that depend on the type are filled in by load_deck.
  struct Optimizer {
    std::string type = "sgd";  // "sgd" | "adam" | "adamw"
    float lr = 0.01f;
    float weight_decay = 0.0f;
    float momentum = 0.0f;  // sgd
    bool nesterov = false;  // sgd
    float beta1 = 0.9f;     // adam, adamw
    float beta2 = 0.999f;   // adam, adamw
    float eps = 1e-8f;      // adam, adamw
  } optimizer;

  struct Schedule {
    std::string type = "constant";  // "constant" | "step" | "multistep" | "exponential" | "cosine"
    std::int64_t step_size = 1;      // step
    float gamma = 0.1f;              // step, multistep, exponential
    std::vector<std::int64_t> milestones;  // multistep
    float min_lr = 0.0f;             // cosine
    std::int64_t warmup_steps = 0;
    float warmup_start_factor = 0.0f;
  } schedule;

  struct Training {
    int epochs = 1;
    std::int64_t batch_size = 128;
    std::int64_t log_every = 100;
    float clip_norm = 0.0f;  // 0 = off
    int eval_every = 1;      // epochs between evaluations; 0 = only after the last
  } training;

  // Data parallelism under mpiexec (see docs/decks.md).
  struct Parallel {
    float bucket_mb = 1.0f;             // gradient averaging bucket, MiB
    bool overlap = true;                // average buckets while backward runs
    std::string batchnorm = "local";    // "local" | "sync"
    std::string gpu_aware_mpi = "auto"; // "auto" | "on" | "off"
  } parallel;

  // When and where training writes checkpoints (docs/checkpoint.md); each
  // frequency is independent and 0 turns it off.
  struct Checkpoint {
    std::string directory;          // default "<output_dir>/checkpoints"
    int keep = 3;                   // newest checkpoints kept
    int every_epochs = 1;
    std::int64_t every_steps = 0;
    float every_minutes = 0.0f;     // wall-clock minutes since the previous checkpoint
  } checkpoint;
};

// Parses and validates a deck after applying `overrides` ("key.path=value",
// e.g. "training.epochs=3" or "model.layers[2].units=64"); throws DeckError.
Deck load_deck(const std::string& path, const std::vector<std::string>& overrides = {});
// The same for deck text already in memory; `path` names it in messages.
Deck parse_deck(const std::string& text, const std::string& path,
                const std::vector<std::string>& overrides = {});

// Every data file the deck names can be opened; throws DeckError with the
// location of the key otherwise.
void check_data_files(const Deck& deck);

}  // namespace tessera
