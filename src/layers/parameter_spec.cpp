// Names of the parameter initialisers, as decks and messages spell them.
#include <tessera/layers/parameter_spec.hpp>

#include <utility>

namespace tessera {

namespace {
const std::pair<Init, const char*> init_names[] = {{Init::zeros, "zeros"},
                                                   {Init::ones, "ones"},
                                                   {Init::he_uniform, "he_uniform"},
                                                   {Init::he_normal, "he_normal"},
                                                   {Init::xavier_uniform, "xavier_uniform"},
                                                   {Init::xavier_normal, "xavier_normal"}};
}  // namespace

Init init_from_name(const std::string& name) {
  std::string known;
  for (const auto& [init, text] : init_names) {
    if (name == text) return init;
    known += (known.empty() ? "" : ", ") + std::string(text);
  }
  TESSERA_REQUIRE(
      false, "tessera::init_from_name: unknown initializer '" << name << "'; allowed: " << known);
}

const char* init_name(Init init) {
  for (const auto& [kind, text] : init_names)
    if (kind == init) return text;
  return "unknown";
}

}  // namespace tessera
