// Deck sections declared the way layer types declare their keys: each key of
// [run], [data], [model], [loss], [optimizer], [schedule], [training],
// [precision], [parallel], [checkpoint] (and of a sweep file's [sweep],
// [objective], [halving]) is one declaration with its kind, range, help and
// where its value goes; the default is the value the settings struct holds
// when the deck leaves the key out. The deck reader, `--set`, `--check`'s
// settings list, `tessera-train --list-keys` and the key tables of
// docs/decks.md and docs/sweeps.md (checked by a test) all read these
// declarations, so adding a key is one declaration where its section is
// declared (src/deck/sections.cpp, src/deck/sweep.cpp).
//
//   SectionBuilder<Deck>("training")
//       .integer("epochs", [](auto& d) -> auto& { return d.training.epochs; },
//                Range::closed(1, 1000000), "passes over the training set")
//
// Plain C++ without Kokkos, like the rest of the deck reader.
#pragma once

#include <tessera/settings/keys.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tessera {

// A rule between keys fails through this: at the key where the deck (or a
// --set) gave it, else at its section's table, as "file:line:column: key:
// message".
class KeyFailure {
 public:
  virtual ~KeyFailure() = default;
  [[noreturn]] virtual void fail(const std::string& key, const std::string& message) const = 0;
  // Whether the section gives `key` (after --set).
  virtual bool given(const std::string& key) const = 0;
};

template <class Target>
struct Section {
  std::string name;       // "training": the table [training]
  bool required = false;  // the deck must have the table
  // The key whose value decides which keys apply ("type", "format"); it is
  // read first. Empty: every key applies.
  std::string selector;
  std::vector<Key<Target>> keys;
  // After the selector is read, before the other keys: defaults that follow
  // it (each optimizer type's own). May be empty.
  std::function<void(Target&, const std::string& selected)> select;
  // After every key: defaults that follow other keys and the rules between
  // keys. May be empty.
  std::function<void(Target&, const KeyFailure&)> finish;

  const Key<Target>* key(const std::string& key_name) const {
    for (const auto& k : keys)
      if (k.name == key_name) return &k;
    return nullptr;
  }
};

namespace impl {

// "key=value" text of a TOML string.
inline std::string quoted(const std::string& text) { return "\"" + text + "\""; }

// "[1, 28, 28]", "[\"a\", \"b\"]": a list as a deck writes it.
template <class T>
std::string list_text(const std::vector<T>& items) {
  std::string out;
  for (const auto& item : items) {
    if constexpr (std::is_same_v<T, std::string>)
      out += (out.empty() ? "" : ", ") + quoted(item);
    else
      out += (out.empty() ? "" : ", ") + std::to_string(item);
  }
  return "[" + out + "]";
}

// "1 to 100", "≥ 0" (no upper end: 2^63 or more), "(0, 1]", "[0, 1)";
// an integer key's ends in full.
inline std::string range_text(const Range& range, bool integral) {
  if (range.high >= Range::no_end) return "≥ " + end_text(range.low);
  if (integral)
    return std::to_string(static_cast<std::int64_t>(range.low)) + " to " +
           std::to_string(static_cast<std::int64_t>(range.high));
  return range.text();
}

// A key's reference row: | `key` | type | default | allowed | help |.
template <class Target>
std::string key_reference_row(const Key<Target>& key, const Target& defaults) {
  const char* type = "";
  switch (key.kind) {
    case KeyKind::integer:
      type = "integer";
      break;
    case KeyKind::number:
      type = "number";
      break;
    case KeyKind::boolean:
      type = "boolean";
      break;
    case KeyKind::extent2:
      type = "integer or [rows, columns]";
      break;
    case KeyKind::choice:
    case KeyKind::layer:
    case KeyKind::text:
      type = "string";
      break;
    case KeyKind::integers:
      type = "array of integers";
      break;
    case KeyKind::texts:
      type = "array of strings";
      break;
    case KeyKind::choice_or_texts:
      type = "string or array of strings";
      break;
    case KeyKind::tables:
      type = "array of tables";
      break;
  }
  std::string fallback = key.default_text;
  if (fallback.empty()) {
    if (key.required) {
      fallback = "required";
    } else {
      const std::string shown = key.show ? key.show(defaults) : "";
      const bool text = key.kind == KeyKind::choice || key.kind == KeyKind::text;
      fallback = "`" + (text ? quoted(shown) : shown) + "`";
    }
  }
  std::vector<std::string> allowed;
  if (key.range.bounded)
    allowed.push_back(
        range_text(key.range, key.kind == KeyKind::integer || key.kind == KeyKind::integers));
  if (!key.choices.empty()) {
    std::string list;
    for (const auto& c : key.choices) list += (list.empty() ? "`" : ", `") + c + "`";
    allowed.push_back(list);
  }
  if (!key.note.empty()) allowed.push_back(key.note);
  if (!key.applies_to.empty()) {
    std::string list;
    for (const auto& v : key.applies_to) list += (list.empty() ? "`" : ", `") + v + "`";
    allowed.push_back(list + " only");
  }
  std::string allowed_column;
  for (const auto& a : allowed) allowed_column += (allowed_column.empty() ? "" : "; ") + a;
  return "| `" + key.name + "` | " + type + " | " + fallback + " | " + allowed_column +
         (allowed_column.empty() ? "| " : " | ") + key.help + " |\n";
}

}  // namespace impl

// The location of `key` ("data.validation_split") in `locations`, else of
// its section ("data"), else `fallback`.
inline std::string key_location(const std::map<std::string, std::string>& locations,
                                const std::string& key, const std::string& fallback) {
  for (std::string k = key;; k = k.substr(0, k.rfind('.'))) {
    const auto found = locations.find(k);
    if (found != locations.end()) return found->second;
    if (k.find('.') == std::string::npos) return fallback;
  }
}

// The reference table of one section, as docs/decks.md carries it (the
// last column there is the reference's own longer text).
template <class Target>
std::string section_reference_markdown(const Section<Target>& section, const Target& defaults) {
  std::string out = "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const auto& key : section.keys) out += impl::key_reference_row(key, defaults);
  return out;
}

// Declares a section key by key. Each value goes where `ref` points: a
// generic lambda `[](auto& t) -> auto& { return t.member; }`, so that it
// reads a const Target too; the default is what that member holds in a
// default Target.
template <class Target>
class SectionBuilder {
 public:
  explicit SectionBuilder(std::string name, bool required = false) {
    section_.name = std::move(name);
    section_.required = required;
  }

  // The range must lie within what the member holds (checked here, once),
  // so that the range check keeps every value from wrapping.
  template <class Ref>
  SectionBuilder& integer(const char* name, Ref ref, Range range, std::string help) {
    using T = std::decay_t<decltype(ref(std::declval<Target&>()))>;
    using Limits = std::numeric_limits<T>;
    if (!range.bounded || range.low < static_cast<double>(Limits::min()) ||
        range.high > static_cast<double>(Limits::max()))
      throw std::logic_error("tessera::SectionBuilder: [" + section_.name + "] " + name +
                             ": the range " + range.interval() +
                             " exceeds what the key's member holds");
    return add(
        name, KeyKind::integer, range, std::move(help),
        [ref](Target& t, const KeyValue& v) { ref(t) = static_cast<T>(v.integer); },
        [ref](const Target& t) { return std::to_string(ref(t)); });
  }

  template <class Ref>
  SectionBuilder& number(const char* name, Ref ref, Range range, std::string help) {
    using T = std::decay_t<decltype(ref(std::declval<Target&>()))>;
    return add(
        name, KeyKind::number, range, std::move(help),
        [ref](Target& t, const KeyValue& v) { ref(t) = static_cast<T>(v.number); },
        [ref](const Target& t) { return impl::number_text(ref(t)); });
  }

  template <class Ref>
  SectionBuilder& boolean(const char* name, Ref ref, std::string help) {
    return add(
        name, KeyKind::boolean, Range::any(), std::move(help),
        [ref](Target& t, const KeyValue& v) { ref(t) = v.boolean; },
        [ref](const Target& t) { return std::string(ref(t) ? "true" : "false"); });
  }

  template <class Ref>
  SectionBuilder& text(const char* name, Ref ref, std::string help) {
    return add(
        name, KeyKind::text, Range::any(), std::move(help),
        [ref](Target& t, const KeyValue& v) { ref(t) = v.text; },
        [ref](const Target& t) { return std::string(ref(t)); });
  }

  // A string of `choices` stored as it is written.
  template <class Ref>
  SectionBuilder& choice(const char* name, Ref ref, std::vector<std::string> choices,
                         std::string help) {
    text(name, ref, std::move(help));
    section_.keys.back().kind = KeyKind::choice;
    section_.keys.back().choices = std::move(choices);
    return *this;
  }

  // A string of `names` (an EnumNames table) stored as its value.
  template <class Ref, class Names>
  SectionBuilder& named(const char* name, Ref ref, const Names& names, std::string help) {
    add(
        name, KeyKind::choice, Range::any(), std::move(help),
        [ref, &names](Target& t, const KeyValue& v) {
          ref(t) = names.value(v.text, "tessera::parse_deck");
        },
        [ref, &names](const Target& t) { return std::string(names.name(ref(t))); });
    section_.keys.back().choices = names.names();
    return *this;
  }

  // Any other key: its own setter and shower.
  SectionBuilder& custom(const char* name, KeyKind kind, Range range, std::string help,
                         std::function<void(Target&, const KeyValue&)> set,
                         std::function<std::string(const Target&)> show) {
    return add(name, kind, range, std::move(help), std::move(set), std::move(show));
  }

  // Modifiers of the key declared last.
  SectionBuilder& required() {
    section_.keys.back().required = true;
    return *this;
  }
  SectionBuilder& applies_to(std::vector<std::string> values) {
    section_.keys.back().applies_to = std::move(values);
    return *this;
  }
  SectionBuilder& choices(std::vector<std::string> values) {
    section_.keys.back().choices = std::move(values);
    return *this;
  }
  SectionBuilder& default_text(std::string text) {
    section_.keys.back().default_text = std::move(text);
    return *this;
  }
  SectionBuilder& range_hint(std::string text) {
    section_.keys.back().range_hint = std::move(text);
    return *this;
  }
  SectionBuilder& allowed(std::string text) {
    section_.keys.back().note = std::move(text);
    return *this;
  }
  // Wraps the setter: check(target) after the value is stored; it throws
  // KeyRefused to refuse the value at the key.
  SectionBuilder& check(std::function<void(const Target&)> f) {
    auto set = section_.keys.back().set;
    section_.keys.back().set = [set, f](Target& t, const KeyValue& v) {
      set(t, v);
      f(t);
    };
    return *this;
  }

  // The section's selector: the key, declared already, read first.
  SectionBuilder& selector(const char* name) {
    section_.selector = name;
    return *this;
  }
  SectionBuilder& select(std::function<void(Target&, const std::string&)> f) {
    section_.select = std::move(f);
    return *this;
  }
  SectionBuilder& finish(std::function<void(Target&, const KeyFailure&)> f) {
    section_.finish = std::move(f);
    return *this;
  }

  operator Section<Target>() const { return section_; }

 private:
  SectionBuilder& add(const char* name, KeyKind kind, Range range, std::string help,
                      std::function<void(Target&, const KeyValue&)> set,
                      std::function<std::string(const Target&)> show) {
    Key<Target> key;
    key.name = name;
    key.kind = kind;
    key.range = range;
    key.help = std::move(help);
    key.set = std::move(set);
    key.show = std::move(show);
    section_.keys.push_back(std::move(key));
    return *this;
  }

  Section<Target> section_;
};

}  // namespace tessera
