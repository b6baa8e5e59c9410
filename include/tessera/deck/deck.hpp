// Input decks: TOML files that describe a whole run. Errors carry
// file:line:column, the key, and what was expected.
#pragma once

#include <tessera/model/model.hpp>
#include <tessera/model/trainer.hpp>

#include <cstdint>
#include <memory>
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

  kernels::SgdParams sgd;
  TrainOptions training;
};

// Parses and validates a deck; throws DeckError.
Deck load_deck(const std::string& path);

// Builds (uncompiled) the model the deck describes.
std::unique_ptr<Model> build_model(const Deck& deck);

}  // namespace tessera
