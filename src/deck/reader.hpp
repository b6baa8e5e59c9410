// The deck reader's TOML layer: toml++ included safely for every compiler,
// and a Reader whose every error names file:line:column and the key.
// Private to src/deck.
#pragma once

// CUDA's host headers define __noinline__ as a macro, which breaks toml++'s
// attribute probes under nvcc; the deck reader has no device code, so hide it.
#if defined(__noinline__)
#pragma push_macro("__noinline__")
#undef __noinline__
#define TESSERA_RESTORE_NOINLINE
#endif
#include <toml++/toml.h>
#if defined(TESSERA_RESTORE_NOINLINE)
#pragma pop_macro("__noinline__")
#undef TESSERA_RESTORE_NOINLINE
#endif

#include <tessera/deck/deck.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace tessera::impl {

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const toml::source_region& where, const std::string& key,
                         const std::string& message) const {
    throw DeckError(location(where) + ": " + key + ": " + message);
  }

  // "file:line:column", or "--set key=value" for a value from the command line.
  std::string location(const toml::source_region& where) const {
    if (where.path && where.path->rfind("--set ", 0) == 0) return *where.path;
    std::ostringstream os;
    os << (where.path ? *where.path : path_) << ":" << where.begin.line << ":"
       << where.begin.column;
    return os.str();
  }

  // Where a key stands; a key added by --set has no position of its own, its value has.
  static const toml::source_region& key_source(const toml::key& key, const toml::node& node) {
    return key.source().begin.line ? key.source() : node.source();
  }

  // Rejects keys of `table` outside `allowed`, suggesting the closest one.
  void only_keys(const toml::table& table, const std::string& prefix,
                 const std::vector<std::string>& allowed) const {
    for (const auto& [key, node] : table) {
      const std::string k(key.str());
      if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
      std::string best;
      std::size_t best_distance = 3;  // suggest only near misses
      for (const auto& a : allowed) {
        const std::size_t d = edit_distance(k, a);
        if (d < best_distance) best_distance = d, best = a;
      }
      throw DeckKeyError(location(key_source(key, node)) + ": " + prefix + k + ": unknown key" +
                             (best.empty() ? "" : " (did you mean '" + prefix + best + "'?)") +
                             "; allowed: " + join(allowed),
                         prefix + k);
    }
  }

  const toml::table& table(const toml::table& parent, const std::string& key, bool required) const {
    static const toml::table empty;
    const toml::node* node = parent.get(key);
    if (!node) {
      if (required) fail(parent.source(), key, "missing table [" + key + "]");
      return empty;
    }
    if (!node->is_table()) fail(node->source(), key, "expected a table");
    return *node->as_table();
  }

  template <class T>
  T get(const toml::table& t, const std::string& prefix, const std::string& key, const T& fallback,
        bool required = false) const {
    const toml::node* node = t.get(key);
    if (!node) {
      if (required) fail(t.source(), prefix + key, "required key is missing");
      return fallback;
    }
    if constexpr (std::is_same_v<T, bool>) {
      if (auto v = node->value_exact<bool>()) return *v;
      fail(node->source(), prefix + key, "expected a boolean (true or false)");
    } else if constexpr (std::is_integral_v<T>) {
      const auto v = node->value_exact<std::int64_t>();
      if (!v) fail(node->source(), prefix + key, "expected an integer");
      // A value the setting's type cannot hold must not wrap into range.
      using Limits = std::numeric_limits<T>;
      const bool fits =
          *v >= 0 ? static_cast<std::uint64_t>(*v) <= static_cast<std::uint64_t>(Limits::max())
                  : Limits::is_signed && *v >= static_cast<std::int64_t>(Limits::min());
      if (!fits)
        fail(node->source(), prefix + key,
             "value " + std::to_string(*v) + " is out of range [" +
                 std::to_string(std::numeric_limits<T>::min()) + ", " +
                 std::to_string(std::numeric_limits<T>::max()) + "]");
      return static_cast<T>(*v);
    } else if constexpr (std::is_floating_point_v<T>) {
      const auto v = node->value<double>();
      if (!v) fail(node->source(), prefix + key, "expected a number");
      // nan, inf and values beyond the setting's type (1e300 for a float)
      // are never meaningful settings.
      if (!std::isfinite(*v) || std::fabs(*v) > static_cast<double>(std::numeric_limits<T>::max()))
        fail(node->source(), prefix + key,
             "value " + number(*v) + " is not a finite number of " +
                 (sizeof(T) == sizeof(float) ? "single" : "double") + " precision");
      return static_cast<T>(*v);
    } else {
      if (auto v = node->value_exact<std::string>()) return *v;
      fail(node->source(), prefix + key, "expected a string");
    }
  }

  template <class T>
  void require_range(const toml::table& t, const std::string& prefix, const std::string& key,
                     T value, T low, T high) const {
    if (value >= low && value <= high) return;
    const toml::node* node = t.get(key);
    std::ostringstream os;
    os << "value " << value << " is out of range [" << low << ", " << high << "]";
    fail(node ? node->source() : t.source(), prefix + key, os.str());
  }

  // Fails at the key (or at its table when the key is absent) unless ok.
  void check(bool ok, const toml::table& t, const std::string& prefix, const std::string& key,
             const std::string& message) const {
    if (ok) return;
    const toml::node* node = t.get(key);
    fail(node ? node->source() : t.source(), prefix + key, message);
  }

  // A string key whose value must be one of `allowed`.
  std::string choice(const toml::table& t, const std::string& prefix, const std::string& key,
                     const std::string& fallback, const std::vector<std::string>& allowed) const {
    const auto value = get<std::string>(t, prefix, key, fallback);
    check(std::find(allowed.begin(), allowed.end(), value) != allowed.end(), t, prefix, key,
          "'" + value + "' is not supported; allowed: " + join(allowed));
    return value;
  }

  // A table whose keys depend on its `type`: unknown keys fail as in
  // only_keys, and a known key that the chosen type does not take fails
  // naming the types that do. An empty type list means every type.
  struct KeyUse {
    std::string key;
    std::vector<std::string> types;
  };
  // `selector`: the key whose value `type` is, as messages name it.
  void keys_for_type(const toml::table& t, const std::string& prefix, const std::string& type,
                     const std::vector<KeyUse>& uses, const std::string& selector = "type") const {
    for (const auto& [key, node] : t) {
      const std::string k(key.str());
      const auto use =
          std::find_if(uses.begin(), uses.end(), [&](const KeyUse& u) { return u.key == k; });
      if (use == uses.end() || use->types.empty() ||
          std::find(use->types.begin(), use->types.end(), type) != use->types.end())
        continue;
      fail(key_source(key, node), prefix + k,
           "does not apply to " + selector + " '" + type + "'; it applies to: " + join(use->types));
    }
  }

  static std::string number(double value) {
    std::ostringstream os;
    os << value;
    return os.str();
  }

  static std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
    return out;
  }

 private:
  static std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diagonal = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = up;
      }
    }
    return row[b.size()];
  }

  std::string path_;
};

// The TOML of `text`; a syntax error is a DeckError at file:line:column.
inline toml::table parse_toml(const std::string& text, const std::string& path) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << path << ":" << e.source().begin.line << ":" << e.source().begin.column
       << ": TOML syntax error: " << e.description();
    throw DeckError(os.str());
  }
}

// Applies one --set "a.b[2].c=value" to the parsed deck (overrides.cpp); the
// value is TOML, or else a string. Throws DeckError naming the option.
void apply_override(toml::table& root, const std::string& spec);

}  // namespace tessera::impl
