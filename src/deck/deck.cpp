// Deck parsing with toml++: the --set overrides, then every section as
// src/deck/sections.cpp declares it, and the [[model.layers]] entries by
// their registered types. Every error names the file, line and column, the
// key, and what was expected. Defaults come from the engine's settings
// structs, never from here.
#include <tessera/deck/deck.hpp>
#include <tessera/layers/registry.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "reader.hpp"
#include "sections.hpp"

namespace tessera {

namespace {

using impl::Reader;

LayerDeck read_layer(const Reader& r, const toml::table& lt, std::size_t index,
                     std::set<std::string>& names) {
  const std::string prefix = "model.layers[" + std::to_string(index) + "].";
  LayerDeck layer;
  layer.location = r.location(lt.source());
  layer.type = r.get<std::string>(lt, prefix, "type", "", true);
  const LayerType* type = find_layer_type(layer.type);
  if (!type)
    r.fail(lt.get("type")->source(), prefix + "type",
           "unknown layer type '" + layer.type + "'; allowed: " + layer_type_names());
  layer.layer_type = type;
  std::vector<std::string> allowed = {"type", "name", "inputs"};
  for (const auto& k : type->keys) allowed.push_back(k.name);
  r.only_keys(lt, prefix, allowed);

  layer.name = r.get<std::string>(lt, prefix, "name", layer.type + std::to_string(index));
  r.check(!layer.name.empty(), lt, prefix, "name", "layer names must not be empty");
  if (!names.insert(layer.name).second)
    r.fail(lt.get("name") ? lt.get("name")->source() : lt.source(), prefix + "name",
           "layer name '" + layer.name + "' is used twice (or is the reserved name 'input')");

  const bool merges = type->arity < 0;
  if (const toml::node* node = lt.get("inputs")) {
    const toml::array* a = node->as_array();
    if (!a) r.fail(node->source(), prefix + "inputs", "expected an array of layer names");
    for (const auto& item : *a) {
      const auto name = item.value_exact<std::string>();
      if (!name) r.fail(item.source(), prefix + "inputs", "expected layer names (strings)");
      // Names are inserted in declaration order, so this also rejects cycles.
      if (!names.count(*name) || *name == layer.name)
        r.fail(item.source(), prefix + "inputs",
               "'" + *name + "' is not 'input' or the name of a layer declared before this one");
      layer.inputs.push_back(*name);
    }
    const std::string takes =
        merges ? "two or more inputs"
               : (type->arity == 1 ? std::string("exactly one input")
                                   : "exactly " + std::to_string(type->arity) + " inputs");
    r.check(merges ? layer.inputs.size() >= 2
                   : layer.inputs.size() == static_cast<std::size_t>(type->arity),
            lt, prefix, "inputs", "a " + layer.type + " layer takes " + takes);
  } else if (merges) {
    r.fail(lt.source(), prefix + "inputs",
           "required for " + layer.type + ": the names of two or more layers to merge");
  }

  // Every key the type registered, over the defaults of its Options struct.
  layer.options = type->default_options();
  for (const auto& spec : type->keys) {
    if (!lt.get(spec.name)) {
      if (spec.required) r.fail(lt.source(), prefix + spec.name, "required key is missing");
      continue;
    }
    const KeyValue value =
        impl::read_value(r, lt, prefix, spec.name, spec.kind, spec.range, spec.choices);
    if (spec.kind == KeyKind::layer && !value.text.empty() &&
        (!names.count(value.text) || value.text == "input" || value.text == layer.name))
      r.fail(lt.get(spec.name)->source(), prefix + spec.name,
             "'" + value.text + "' is not the name of a layer declared before this one");
    spec.set(layer.options, value);
  }
  if (type->complete) type->complete(layer.options);
  return layer;
}

// [model]'s [[model.layers]] entries, each by its registered type.
void read_layers(const Reader& r, const toml::table& model, Deck& deck) {
  const toml::array* layers = model.get_as<toml::array>("layers");
  if (!layers || layers->empty())
    r.fail(model.source(), "model.layers", "at least one [[model.layers]] entry is required");
  std::set<std::string> names{"input"};
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const toml::table* lt = (*layers)[i].as_table();
    if (!lt)
      r.fail((*layers)[i].source(), "model.layers[" + std::to_string(i) + "]", "expected a table");
    deck.layers.push_back(read_layer(r, *lt, i, names));
  }
}
}  // namespace

Deck load_deck(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream file(path);
  if (!file) {
    throw DeckError(path + ": cannot open the deck file: " + std::strerror(errno));
  }
  const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  return parse_deck(text, path, overrides);
}

namespace {

// --set data.format=F switches the deck's data to format F: the keys the
// deck wrote for its own format that F does not use are dropped (the
// files of the new format come with --set too), so that one deck runs on
// IDX, HDF5 or streamed data from the command line.
void switch_data_format(toml::table& root, const std::vector<std::string>& overrides) {
  std::set<std::string> set_keys;
  bool switched = false;
  for (const auto& o : overrides) {
    const std::string key = o.substr(0, o.find('='));
    set_keys.insert(key);
    switched = switched || key == "data.format";
  }
  toml::table* data = root.get_as<toml::table>("data");
  const auto* format = data ? data->get_as<std::string>("format") : nullptr;
  if (!switched || !format) return;
  std::set<std::string> own, others;
  for (const DataFormat& f : data_formats())
    for (const auto* keys : {&f.train, &f.test, &f.keys})
      (f.name == format->get() ? own : others).insert(keys->begin(), keys->end());
  for (const auto& key : others)
    if (!own.count(key) && !set_keys.count("data." + key)) data->erase(key);
}

}  // namespace

Deck parse_deck(const std::string& text, const std::string& path,
                const std::vector<std::string>& overrides) {
  Deck deck;
  deck.path = path;
  deck.overrides = overrides;
  deck.text = text;
  toml::table root = impl::parse_toml(deck.text, path);
  for (const auto& o : overrides) impl::apply_override(root, o);
  switch_data_format(root, overrides);
  const Reader r(path);
  std::vector<std::string> sections;
  for (const auto& section : deck_sections()) sections.push_back(section.name);
  r.only_keys(root, "", sections);
  for (const auto& section : deck_sections()) {
    impl::read_section(r, root, section, deck, deck.locations);
    if (section.name == "model") read_layers(r, *root.get_as<toml::table>("model"), deck);
  }
  return deck;
}

namespace {

// The data directory `variable` names, or nullptr.
const DataDirectory* find_data_directory(const std::string& variable) {
  for (const DataDirectory& d : data_directories)
    if (variable == d.variable) return &d;
  return nullptr;
}

std::string directory_of(const DataDirectory& d) {
  const char* dir = std::getenv(d.variable);
  return dir && *dir ? dir : d.default_value;
}

}  // namespace

std::string data_dir(const std::string& variable) {
  const DataDirectory* d = find_data_directory(variable);
  if (!d) throw Error("tessera::data_dir: '" + variable + "' is not a data directory variable");
  return directory_of(*d);
}

std::string expand_data_path(const std::string& path) {
  std::string out, known;
  for (const DataDirectory& d : data_directories)
    known += (known.empty() ? "${" : " or ${") + std::string(d.variable) + "}";
  for (std::size_t at = 0; at < path.size();) {
    const std::size_t open = path.find("${", at);
    if (open == std::string::npos) {
      out += path.substr(at);
      break;
    }
    out += path.substr(at, open - at);
    const std::size_t close = path.find('}', open);
    const std::string name =
        close == std::string::npos ? "" : path.substr(open + 2, close - open - 2);
    const DataDirectory* found = find_data_directory(name);
    if (!found)
      throw DeckError(
          "'" + path + "': only " + known + " are expanded in data paths (found '" +
          path.substr(open, close == std::string::npos ? std::string::npos : close - open + 1) +
          "')");
    out += directory_of(*found);
    at = close + 1;
  }
  return out;
}

void check_data_files(const Deck& deck) {
  for (const auto& f : deck.data_files)
    if (!std::ifstream(f.path))
      throw DeckError(f.location + ": data." + f.key + ": cannot read '" + f.path +
                      "': " + std::strerror(errno));
}

}  // namespace tessera
