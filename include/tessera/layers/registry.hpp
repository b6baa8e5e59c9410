// The layer registry: every layer type a deck can name, described once, next
// to its class (`<type>_layer_type()` in the layer's source file), and listed
// in src/layers/registry.cpp. A type gives its deck name, the inputs it
// takes, its keys (kind, range, whether required, where the value goes in
// the layer's Options struct, whose member initialisers are the defaults),
// the output it produces, an example the generic tests run, and its builder.
// The deck reader, `tessera-train --check` and `--list-layers`, the layer
// table in docs/decks.md (checked by a test) and the registry tests all read
// it, so adding a layer touches its own files and one registration line.
//
// This header is plain C++ without Kokkos: the deck reader includes it, and
// GPU builds compile that reader with the host compiler.
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

class Layer;

// What a deck key holds.
enum class KeyKind {
  integer,  // a TOML integer
  number,   // a TOML number (an integer is accepted)
  boolean,  // true or false
  choice,   // one string of a fixed list
  extent2,  // one positive integer for both axes, or [rows, columns]
  layer     // the name of a layer declared earlier ("" for none)
};

// An interval a key's values must lie in; each end closed unless marked open.
struct Range {
  double low = 0, high = 0;
  bool low_open = false, high_open = false;
  bool bounded = false;  // false: any value

  static Range any() { return {}; }
  static Range closed(double low, double high) { return {low, high, false, false, true}; }
  static Range half_open(double low, double high) { return {low, high, false, true, true}; }
  static Range open_closed(double low, double high) { return {low, high, true, false, true}; }

  bool contains(double value) const;
  // "1 to 16777216" when closed, "[0, 1)" or "(0, 1]" otherwise.
  std::string text() const;
};

// A key's value as read from the deck, handed to the layer's options.
struct KeyValue {
  std::int64_t integer = 0;       // integer
  double number = 0;              // number
  bool boolean = false;           // boolean
  std::string text;               // choice, layer
  std::int64_t pair[2] = {0, 0};  // extent2: rows, columns
};

struct LayerKey {
  std::string name;
  KeyKind kind = KeyKind::integer;
  bool required = false;
  Range range;                       // integer, number, and each entry of an extent2
  std::vector<std::string> choices;  // choice
  std::string default_text;          // shown instead of the options' default, e.g. "= kernel"
  std::string note;                  // one phrase for the reference, e.g. "at most kernel / 2"
  // Stores a value into the layer's options (held in a std::any).
  std::function<void(std::any& options, const KeyValue& value)> set;
  // The key's value in `options` as a deck would write it.
  std::function<std::string(const std::any& options)> show;
};

// Shapes and keys the generic layer tests (tests/test_registry.cpp) build
// the layer from: a finite-difference gradient check on these input shapes
// (batch first), and a small convergence run with the layer inside a CNN,
// or, for a sequence layer, inside a small language model.
struct LayerExample {
  std::vector<std::vector<std::int64_t>> inputs;
  std::string keys;  // TOML lines for [[model.layers]], e.g. "units = 3"
  // What the layer works on in the convergence run: images [N, C, H, W]
  // after a convolution, or sequences: token ids [N, T] (`tokens`, the
  // layer reads the model input) or token vectors [N, T, C] after an
  // embedding (`vectors`).
  enum class Context { images, tokens, vectors };
  Context context = Context::images;
  // Token-id inputs (context tokens): the ids lie below this vocabulary.
  std::int64_t vocabulary = 0;
};

using LayerBuilder = std::function<std::unique_ptr<Layer>(
    const std::string& name, const std::any& options, std::vector<std::string> inputs)>;

struct LayerType {
  std::string name;  // the deck's `type`, e.g. "conv2d"
  int arity = 1;     // inputs taken: a fixed count, or -1 for two or more
  std::vector<LayerKey> keys;
  std::string output;  // the output shape, as the reference states it
  LayerExample example;
  std::function<std::any()> default_options;
  // After the deck's keys: fills defaults that follow other keys (a pool's
  // stride is its kernel unless given); may be empty.
  std::function<void(std::any& options)> complete;
  LayerBuilder build;

  const LayerKey* key(const std::string& key_name) const;
  // "key=value ..." for every key: the options as the layer will use them.
  std::string describe(const std::any& options) const;
};

// Every registered type, in the order the deck reference lists them.
const std::vector<LayerType>& layer_types();
// nullptr when no type has this deck name.
const LayerType* find_layer_type(const std::string& name);
// "dense, conv2d, ...": the deck names in order.
std::string layer_type_names();
// The table of layer types in docs/decks.md, generated from the registry.
std::string layer_reference_markdown();

// The names a weight initialiser key takes.
const std::vector<std::string>& weight_initializer_names();

}  // namespace tessera
