// tessera-predict --describe: the layer graph of a deck's model as JSON,
// with every layer's options as the layer uses them (the registry's keys,
// defaults filled), its input and output shapes, and the checkpoint
// datasets that hold its parameters and state. tessera-export reads it to
// write ONNX and PyTorch files; docs/export.md describes the format.
#pragma once

#include <tessera/core/float_format.hpp>
#include <tessera/core/version.hpp>
#include <tessera/deck/deck.hpp>
#include <tessera/layers/layer.hpp>
#include <tessera/model/model.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace tessera::app {

inline nlohmann::ordered_json shape_json(const Shape& shape) {
  nlohmann::ordered_json dims = nlohmann::ordered_json::array();
  for (int d = 0; d < shape.rank(); ++d) dims.push_back(shape[d]);
  return dims;
}

// A key's value as JSON, from the text the registry shows it as (what a
// deck would write): "3", "1e-05", "true", "[3, 3]", "\"embed\"", "he_uniform".
inline nlohmann::ordered_json key_value_json(KeyKind kind, const std::string& text) {
  switch (kind) {
    case KeyKind::integer:
      return std::stoll(text);
    case KeyKind::number:
      return std::stod(text);
    case KeyKind::boolean:
      return text == "true";
    case KeyKind::extent2: {
      if (text.empty() || text[0] != '[') return {std::stoll(text), std::stoll(text)};
      const auto comma = text.find(',');
      return {std::stoll(text.substr(1)), std::stoll(text.substr(comma + 1))};
    }
    default:
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"')
        return text.substr(1, text.size() - 2);
      return text;
  }
}

inline nlohmann::ordered_json datasets_json(const ParameterStore& store, const std::string& group,
                                            const std::string& layer) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& e : store.entries())
    if (e.layer == layer)
      out.push_back({{"name", e.spec.name},
                     {"shape", shape_json(e.spec.shape)},
                     {"dataset", "/" + group + "/" + layer + "/" + e.spec.name}});
  return out;
}

// The description of a compiled model built from `deck`, whose weights are
// (or will be read) in `checkpoint`.
inline nlohmann::ordered_json describe_model(const Deck& deck, const Model& model,
                                             const std::string& checkpoint) {
  const auto& layers = model.layers();
  nlohmann::ordered_json out = {{"format", "tessera-model-description"},
                                {"version", 1},
                                {"tessera_version", TESSERA_VERSION_STRING},
                                {"deck", deck.path},
                                {"checkpoint", checkpoint},
                                {"compute", float_format_name(deck.training.compute)},
                                {"input",
                                 {{"shape", shape_json(model.input_shape())},
                                  {"token_ids", !layers.empty() && layers[0]->reads_token_ids()}}},
                                {"output",
                                 {{"layer", layers.empty() ? "input" : layers.back()->name()},
                                  {"shape", shape_json(model.output_shape())}}}};
  nlohmann::ordered_json described = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Layer& layer = *layers[i];
    const LayerDeck& entry = deck.layers.at(i);
    nlohmann::ordered_json inputs = nlohmann::ordered_json::array(),
                           input_shapes = nlohmann::ordered_json::array();
    const Shapes shapes = model.layer_input_shapes(i, 1);
    for (std::size_t k = 0; k < model.layer_inputs(i).size(); ++k) {
      const std::size_t node = model.layer_inputs(i)[k];
      inputs.push_back(node == 0 ? std::string("input") : layers[node - 1]->name());
      // Per sample: the batch of one dropped.
      std::vector<std::int64_t> dims;
      for (int d = 1; d < shapes[k].rank(); ++d) dims.push_back(shapes[k][d]);
      input_shapes.push_back(dims);
    }
    nlohmann::ordered_json options = nlohmann::ordered_json::object();
    for (const auto& key : entry.layer_type->keys)
      options[key.name] = key_value_json(key.kind, key.show(entry.options));
    // Parameters another layer owns and this one shares (a head tied to its embedding).
    nlohmann::ordered_json tied = nlohmann::ordered_json::array();
    for (const auto& spec : layer.parameter_specs(shapes))
      if (!spec.tied_layer.empty())
        tied.push_back({{"name", spec.name},
                        {"layer", spec.tied_layer},
                        {"dataset", "/parameters/" + spec.tied_layer + "/" + spec.name}});
    described.push_back(
        {{"name", layer.name()},
         {"type", entry.type},
         {"class", layer.type()},
         {"location", entry.location},
         {"inputs", inputs},
         {"input_shapes", input_shapes},
         {"output_shape", shape_json(model.layer_output_shape(i))},
         {"options", options},
         {"parameters", datasets_json(model.parameters(), "parameters", layer.name())},
         {"tied", tied},
         {"state", datasets_json(model.state(), "state", layer.name())}});
  }
  out["layers"] = described;
  return out;
}

}  // namespace tessera::app
