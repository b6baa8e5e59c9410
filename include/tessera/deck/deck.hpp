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

struct LayerDeck {
  std::string type;  // "dense" | "relu"
  std::string name;
  std::int64_t units = 0;
};

struct Deck {
  std::string path;
  std::string text;

  std::string run_name = "run";
  std::uint64_t seed = 0;

  std::string train_images, train_labels, test_images, test_labels;
  float normalize_mean = 0.0f;
  float normalize_std = 1.0f;

  std::vector<std::int64_t> input_shape;
  std::vector<LayerDeck> layers;

  struct Optimizer {
    std::string type = "sgd";
    float lr = 0.01f;
    float momentum = 0.0f;
    float weight_decay = 0.0f;
    bool nesterov = false;
  } optimizer;

  struct Training {
    int epochs = 1;
    std::int64_t batch_size = 128;
    std::int64_t log_every = 100;
  } training;
};

// Parses and validates a deck; throws DeckError.
Deck load_deck(const std::string& path);

}  // namespace tessera
