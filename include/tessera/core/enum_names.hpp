// An enum's names, written once: one table of {value, name} pairs gives the
// name of a value, the value of a name (or an error that lists the names)
// and the list of names that decks, messages and reports use. Plain C++
// (the deck reader uses it).
#pragma once

#include <tessera/core/error.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace tessera {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// `what` names the kind of value in messages ("schedule", "initializer").
// Define a table once, beside the functions that use it:
//   constexpr EnumNames<Init, 2> init_names{"initializer", {{{Init::zeros, "zeros"},
//                                                            {Init::ones, "ones"}}}};
template <class E, std::size_t N>
struct EnumNames {
  const char* what;
  EnumName<E> entries[N];

  // The name of `value`, or "?" for a value outside the table.
  constexpr const char* name(E value) const {
    for (const auto& entry : entries)
      if (entry.value == value) return entry.name;
    return "?";
  }
  // The value named `text`; otherwise throws tessera::Error
  // "<fn>: unknown <what> '<text>'; allowed: a, b, c".
  E value(const std::string& text, const char* fn) const {
    for (const auto& entry : entries)
      if (text == entry.name) return entry.value;
    throw Error(std::string(fn) + ": unknown " + what + " '" + text + "'; allowed: " + list());
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : entries) out.emplace_back(entry.name);
    return out;
  }
  // "a, b, c".
  std::string list() const {
    std::string out;
    for (const auto& entry : entries) out += (out.empty() ? "" : ", ") + std::string(entry.name);
    return out;
  }
};

}  // namespace tessera
