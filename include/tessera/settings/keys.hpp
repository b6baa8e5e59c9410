// A declared key, the one mechanism behind a layer type's keys
// (layers/registry.hpp) and a deck section's (deck/keys.hpp): its kind, its
// range, whether it is required, a phrase and a help for the reference,
// and where its value goes in the settings it belongs to (a layer's
// Options, a Deck, a SweepSpec). Plain C++: the deck reader includes it.
#pragma once

#include <tessera/settings/range.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera {

// What a key holds.
enum class KeyKind {
  integer,          // a TOML integer
  number,           // a TOML number (an integer is accepted)
  boolean,          // true or false
  choice,           // one string of a fixed list
  extent2,          // one positive integer for both axes, or [rows, columns]
  layer,            // the name of a layer declared earlier ("" for none)
  text,             // any string
  integers,         // an array of integers, each in the key's range
  texts,            // an array of strings
  choice_or_texts,  // one string of a fixed list, or an array of strings
  tables            // an array of tables with a reader of their own (model.layers)
};

// A key's value as read from a deck, handed to the key's setter.
struct KeyValue {
  std::int64_t integer = 0;            // integer
  double number = 0;                   // number
  bool boolean = false;                // boolean
  std::string text;                    // choice, layer, text; choice_or_texts given a string
  std::int64_t pair[2] = {0, 0};       // extent2: rows, columns
  std::vector<std::int64_t> integers;  // integers
  std::vector<std::string> texts;      // texts; choice_or_texts given an array
};

// A value a key's setter refuses: the reader reports `what()` at the key,
// or at entry `entry` of an array.
class KeyRefused : public std::runtime_error {
 public:
  static constexpr std::size_t whole = static_cast<std::size_t>(-1);
  explicit KeyRefused(const std::string& message, std::size_t entry = whole)
      : std::runtime_error(message), entry_(entry) {}
  std::size_t entry() const { return entry_; }

 private:
  std::size_t entry_;
};

template <class Target>
struct Key {
  std::string name;
  KeyKind kind = KeyKind::integer;
  bool required = false;
  Range range;                       // integer, number, each entry of extent2 and integers
  std::vector<std::string> choices;  // choice
  // The values of the section's selector key this key applies to (empty:
  // every value); a deck that gives it under another value is refused.
  std::vector<std::string> applies_to;
  std::string default_text;  // the reference's default when it follows other keys, e.g. "= kernel"
  std::string note;          // a rule the range and choices do not state, e.g. "at most kernel / 2"
  std::string help;          // one phrase: what the key does (deck sections)
  std::string range_hint;    // added to an out-of-range message
  // Stores a read value; may throw KeyRefused, reported at the key.
  std::function<void(Target&, const KeyValue&)> set;
  // The value in `target` as a deck would write it (strings without quotes
  // for deck sections).
  std::function<std::string(const Target&)> show;
};

}  // namespace tessera
