// Reading declared keys (deck/keys.hpp, layers/registry.hpp) with the
// Reader: one function reads a value of any kind, one a whole declared
// section. Private to src/deck.
#pragma once

#include <tessera/deck/keys.hpp>

#include <map>
#include <string>
#include <vector>

#include "reader.hpp"

namespace tessera::impl {

// An integer range's end: Range::no_end (2^63) is INT64_MAX.
inline std::int64_t integer_end(double v) {
  return v >= Range::no_end ? INT64_MAX : static_cast<std::int64_t>(v);
}

// "[1, 16777216]", "[0, 1)", "(0, 1]": an interval in messages, integers
// written whole. (std::string first: GCC 12 as C++20 warns falsely,
// -Wrestrict, on literal + temporary string; GCC bug 105329.)
inline std::string range_interval(const Range& range, bool integral) {
  const auto end = [&](double v) {
    return integral ? std::to_string(integer_end(v)) : Reader::number(v);
  };
  return std::string(range.low_open ? "(" : "[") + end(range.low) + ", " + end(range.high) +
         (range.high_open ? ")" : "]");
}

// The value of `key` in table t (which has it), read as `kind` and checked
// against `range` (a value outside adds range_hint to the message) and
// `choices`; errors name prefix + key.
KeyValue read_value(const Reader& r, const toml::table& t, const std::string& prefix,
                    const std::string& key, KeyKind kind, const Range& range,
                    const std::vector<std::string>& choices, const std::string& range_hint = "");

// A rule's failure at a key of table t, or at t when the key is absent.
class TableFailure : public KeyFailure {
 public:
  TableFailure(const Reader& r, const toml::table& t, std::string prefix)
      : r_(r), t_(t), prefix_(std::move(prefix)) {}
  [[noreturn]] void fail(const std::string& key, const std::string& message) const override {
    const toml::node* node = t_.get(key);
    r_.fail(node ? node->source() : t_.source(), prefix_ + key, message);
  }
  bool given(const std::string& key) const override { return t_.get(key) != nullptr; }

 private:
  const Reader& r_;
  const toml::table& t_;
  std::string prefix_;
};

// Reads section s of root into target: unknown keys are refused (with the
// nearest known one), the selector first, then every key the deck gives,
// each checked and stored by its declaration, then the section's rules.
// Records "file:line:column" of the table and of every key given in
// `locations` ("section" and "section.key").
template <class Target>
void read_section(const Reader& r, const toml::table& root, const Section<Target>& s,
                  Target& target, std::map<std::string, std::string>& locations) {
  const toml::table& t = r.table(root, s.name, s.required);
  const std::string prefix = s.name + ".";
  if (root.get(s.name)) locations[s.name] = r.location(t.source());
  std::vector<std::string> names;
  for (const auto& k : s.keys) names.push_back(k.name);
  r.only_keys(t, prefix, names);
  const auto read = [&](const Key<Target>& k) {
    const toml::node* node = t.get(k.name);
    if (k.kind == KeyKind::tables) return;  // read by the section's own reader
    if (!node) {
      if (k.required) r.fail(t.source(), prefix + k.name, "required key is missing");
      return;
    }
    const KeyValue value =
        read_value(r, t, prefix, k.name, k.kind, k.range, k.choices, k.range_hint);
    try {
      k.set(target, value);
    } catch (const KeyRefused& e) {
      const toml::array* entries = node->as_array();
      const bool entry = entries && e.entry() < entries->size();
      r.fail(entry ? (*entries)[e.entry()].source() : node->source(), prefix + k.name, e.what());
    }
    locations[prefix + k.name] = r.location(node->source());
  };
  std::string selected;
  if (!s.selector.empty()) {
    const Key<Target>& selector = *s.key(s.selector);
    read(selector);
    selected = selector.show(target);
    if (s.select) s.select(target, selected);
    std::vector<Reader::KeyUse> uses;
    for (const auto& k : s.keys) uses.push_back({k.name, k.applies_to});
    r.keys_for_type(t, prefix, selected, uses, s.selector);
  }
  for (const auto& k : s.keys) {
    if (k.name == s.selector) continue;
    const bool applies = k.applies_to.empty() || std::find(k.applies_to.begin(), k.applies_to.end(),
                                                           selected) != k.applies_to.end();
    if (applies) read(k);
  }
  if (s.finish) s.finish(target, TableFailure(r, t, prefix));
}

}  // namespace tessera::impl
