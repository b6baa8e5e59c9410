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

#include <tessera/settings/keys.hpp>

#include <any>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

class Layer;

// A layer type's key: its value goes into the layer's Options, held in a
// std::any.
using LayerKey = Key<std::any>;

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
