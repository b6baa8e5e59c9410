// The list of layer types, and what is derived from the registry: lookup,
// the reference table of docs/decks.md, option descriptions.
#include <tessera/layers/impl/registration.hpp>
#include <tessera/layers/registry.hpp>

#include <sstream>

// Every layer type, in the order the deck reference lists them: one line
// each, naming <name>_layer_type(), which the layer's own source defines.
#define TESSERA_FOR_EACH_LAYER_TYPE(X) \
  X(dense)                             \
  X(embedding)                         \
  X(causalselfattention)               \
  X(conv2d)                            \
  X(maxpool2d)                         \
  X(avgpool2d)                         \
  X(globalavgpool)                     \
  X(batchnorm)                         \
  X(layernorm)                         \
  X(dropout)                           \
  X(relu)                              \
  X(leakyrelu)                         \
  X(gelu)                              \
  X(tanh)                              \
  X(sigmoid)                           \
  X(softmax)                           \
  X(flatten)                           \
  X(add)                               \
  X(concat)

namespace tessera {

#define TESSERA_DECLARE_LAYER_TYPE(name) LayerType name##_layer_type();
TESSERA_FOR_EACH_LAYER_TYPE(TESSERA_DECLARE_LAYER_TYPE)
#undef TESSERA_DECLARE_LAYER_TYPE

const std::vector<LayerType>& layer_types() {
#define TESSERA_LAYER_TYPE_ENTRY(name) name##_layer_type(),
  static const std::vector<LayerType> types = {
      TESSERA_FOR_EACH_LAYER_TYPE(TESSERA_LAYER_TYPE_ENTRY)};
#undef TESSERA_LAYER_TYPE_ENTRY
  return types;
}

const LayerType* find_layer_type(const std::string& name) {
  for (const auto& type : layer_types())
    if (type.name == name) return &type;
  return nullptr;
}

std::string layer_type_names() {
  std::string out;
  for (const auto& type : layer_types()) out += (out.empty() ? "" : ", ") + type.name;
  return out;
}

const std::vector<std::string>& weight_initializer_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> fan_based;
    for (const auto& entry : init_names.entries)
      if (is_fan_based(entry.value)) fan_based.emplace_back(entry.name);
    return fan_based;
  }();
  return names;
}

const LayerKey* LayerType::key(const std::string& key_name) const {
  for (const auto& k : keys)
    if (k.name == key_name) return &k;
  return nullptr;
}

std::string LayerType::describe(const std::any& options) const {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : " ") + k.name + "=" + k.show(options);
  return out;
}

std::string layer_reference_markdown() {
  std::ostringstream os;
  os << "| `type` | inputs | keys (default) | output |\n|---|---|---|---|\n";
  for (const auto& type : layer_types()) {
    const std::any defaults = type.default_options();
    std::string keys;
    for (const auto& k : type.keys) {
      std::string text = "`" + k.name + "` (";
      if (k.required)
        text += "required";
      else if (!k.default_text.empty())
        text += k.default_text;
      else  // appended piecewise: GCC 12 as C++20 warns falsely (-Wrestrict) on "`" + ...
        text.append("`").append(k.show(defaults)).append("`");
      if (k.range.bounded) text += ", " + k.range.text();
      if (!k.choices.empty()) {
        std::string choices;
        for (const auto& c : k.choices) choices += (choices.empty() ? "" : ", ") + c;
        text += "; " + choices;
      }
      if (!k.note.empty()) text += "; " + k.note;
      keys += (keys.empty() ? "" : ", ") + text + ")";
    }
    os << "| `" << type.name << "` | "
       << (type.arity < 0 ? std::string("two or more") : std::to_string(type.arity)) << " | "
       << (keys.empty() ? "—" : keys) << " | " << type.output << " |\n";
  }
  return os.str();
}

}  // namespace tessera
