// Fuzz target: the deck reader. The input is deck text; leading lines
// "#set key=value" become --set overrides (as the command line gives them).
// A deck either parses, or fails with tessera::DeckError; one that parses
// builds its layers (options checked by each layer's constructor), which may
// fail only with tessera::Error. Anything else (a crash, another exception,
// a sanitizer report) is a finding.
#include <tessera/core/error.hpp>
#include <tessera/deck/build.hpp>
#include <tessera/deck/deck.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tessera::fuzz::ensure_kokkos();
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  while (text.rfind("#set ", 0) == 0) {
    const auto end = text.find('\n');
    overrides.push_back(text.substr(5, end == std::string::npos ? std::string::npos : end - 5));
    text = end == std::string::npos ? std::string() : text.substr(end + 1);
  }
  tessera::Deck deck;
  try {
    deck = tessera::parse_deck(text, "fuzz.toml", overrides);
  } catch (const tessera::DeckError&) {
    return 0;
  }
  try {
    tessera::build_model(deck);
  } catch (const tessera::Error&) {
  }
  return 0;
}
