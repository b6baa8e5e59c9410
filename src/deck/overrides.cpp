// --set key.path=value: command-line overrides applied to the parsed deck
// before it is validated, so their errors read like the deck's own.
#include "reader.hpp"

#include <algorithm>

namespace tessera::impl {

// One "a.b[2].c=value" from the command line, applied to the parsed deck.
// The value is TOML (3, 0.5, true, [1, 2], "text"); anything that does not
// parse as TOML is taken as a string, so --set run.name=trial7 works.
void apply_override(toml::table& root, const std::string& spec) {
  const auto equals = spec.find('=');
  if (equals == std::string::npos || equals == 0)
    throw DeckError("--set " + spec + ": expected key.path=value");
  const std::string key = spec.substr(0, equals), text = spec.substr(equals + 1);
  // Past this point every failure is about the path.
  const auto fail = [&](const std::string& why) -> void {
    throw DeckKeyError("--set " + spec + ": " + why, key);
  };
  const std::string origin = "--set " + spec;
  toml::table parsed;
  try {
    parsed = toml::parse("value = " + text, origin);
  } catch (const toml::parse_error&) {
    try {
      parsed = toml::parse("value = " + toml_string(text), origin);
    } catch (const toml::parse_error& e) {
      throw DeckError("--set " + spec + ": the value is not TOML: " + std::string(e.description()));
    }
  }
  toml::node& value = *parsed.get("value");

  // Walk the path, creating tables that do not exist yet.
  toml::table* table = &root;
  std::size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    std::string segment =
        key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    long index = -1;
    if (const auto bracket = segment.find('['); bracket != std::string::npos) {
      const auto close = segment.find(']', bracket);
      const std::string digits =
          segment.substr(bracket + 1, close == std::string::npos ? 0 : close - bracket - 1);
      if (close != segment.size() - 1 || digits.empty() ||
          digits.find_first_not_of("0123456789") != std::string::npos)
        fail("'" + segment + "' is not a key or key[index]");
      // Saturates instead of overflowing: any index past the array fails below
      // with the array's size.
      index = 0;
      for (const char c : digits) index = std::min(index * 10 + (c - '0'), 1L << 40);
      segment = segment.substr(0, bracket);
    }
    if (segment.empty()) fail("empty key in '" + key + "'");
    const bool last = dot == std::string::npos;
    if (index >= 0) {
      toml::array* array = table->get_as<toml::array>(segment);
      if (!array) fail("'" + segment + "' is not an array in the deck");
      if (static_cast<std::size_t>(index) >= array->size())
        fail("'" + segment + "' has " + std::to_string(array->size()) + " entries");
      if (last) {
        array->replace(array->begin() + index, std::move(value));
        return;
      }
      table = (*array)[static_cast<std::size_t>(index)].as_table();
      if (!table) fail("'" + segment + "[" + std::to_string(index) + "]' is not a table");
    } else if (last) {
      table->insert_or_assign(segment, std::move(value));
      return;
    } else {
      if (!table->contains(segment)) table->insert(segment, toml::table{});
      table = table->get_as<toml::table>(segment);
      if (!table) fail("'" + segment + "' is a value, not a table");
    }
    start = dot + 1;
  }
}

}  // namespace tessera::impl

namespace tessera {

std::string toml_string(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return quoted + "\"";
}

}  // namespace tessera
