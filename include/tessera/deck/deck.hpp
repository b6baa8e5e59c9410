// Input decks: TOML files that describe a whole run. Errors carry
// file:line:column, the key, and what was expected.
// Parsing is plain host code with no Kokkos in sight, so GPU builds compile
// it with the host compiler; deck/build.hpp turns a Deck into engine objects.
#pragma once

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

// One [[model.layers]] entry; which fields apply depends on the type (see
// docs/decks.md).
struct LayerDeck {
  std::string type;
  std::string name;
  std::string location;             // "file:line:column" of the entry
  std::vector<std::string> inputs;  // empty: the previous layer
  std::int64_t units = 0;           // dense
  std::string init;                 // dense, conv2d weights; empty: the layer's default
  bool bias = true;                 // dense, conv2d
  std::int64_t out_channels = 0;    // conv2d
  std::int64_t kernel[2] = {0, 0};  // conv2d, maxpool2d, avgpool2d: rows, columns
  std::int64_t stride[2] = {1, 1};  // conv2d; pools default to the kernel
  std::int64_t padding[2] = {0, 0};
  float rate = 0.0f;                // dropout
  float momentum = 0.1f;            // batchnorm
  float eps = 1e-5f;                // batchnorm, layernorm
  float slope = 0.01f;              // leakyrelu
};

// The layer types a deck may name, in the order docs/decks.md lists them.
const std::vector<std::string>& deck_layer_types();
// The names a layer's `init` key takes (tessera::init_from_name knows them all).
const std::vector<std::string>& deck_weight_initializers();

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
