// One deck value of any declared kind, read and checked: every error names
// file:line:column, the key, and what was expected.
#include <tessera/deck/keys.hpp>

#include "sections.hpp"

namespace tessera::impl {

namespace {

// A window extent: one integer in `range` for both axes, or [rows, columns].
void read_extent2(const Reader& r, const toml::node& node, const std::string& key,
                  const Range& range, std::int64_t out[2]) {
  const std::string expected = "expected an integer >= " + Reader::number(range.low) +
                               " or an array [rows, columns] of them (at most " +
                               Reader::number(range.high) + ")";
  const auto read = [&](const toml::node& item) {
    const auto v = item.value_exact<std::int64_t>();
    if (!v || !range.contains(static_cast<double>(*v))) r.fail(item.source(), key, expected);
    return *v;
  };
  if (const auto* a = node.as_array()) {
    if (a->size() != 2) r.fail(node.source(), key, expected);
    out[0] = read((*a)[0]);
    out[1] = read((*a)[1]);
    return;
  }
  out[0] = out[1] = read(node);
}

// An array's entries, each read by `entry` (which fails at the entry).
template <class F>
void read_array(const Reader& r, const toml::node& node, const std::string& key,
                const std::string& expected, F entry) {
  const toml::array* a = node.as_array();
  if (!a) r.fail(node.source(), key, expected);
  for (const auto& item : *a) entry(item);
}

}  // namespace

KeyValue read_value(const Reader& r, const toml::table& t, const std::string& prefix,
                    const std::string& name, KeyKind kind, const Range& range,
                    const std::vector<std::string>& choices, const std::string& range_hint) {
  const toml::node& node = *t.get(name);
  const std::string key = prefix + name;
  const bool integral = kind == KeyKind::integer || kind == KeyKind::integers;
  const auto in_range = [&](const toml::node& at, double v) {
    if (!range.contains(v))
      r.fail(at.source(), key,
             "value " + (integral ? std::to_string(integer_end(v)) : Reader::number(v)) +
                 " is out of range " + range_interval(range, integral) + range_hint);
  };
  KeyValue value;
  switch (kind) {
    case KeyKind::integer:
      value.integer = r.get<std::int64_t>(t, prefix, name, 0);
      in_range(node, static_cast<double>(value.integer));
      break;
    case KeyKind::number:
      value.number = r.get<float>(t, prefix, name, 0.0f);
      in_range(node, value.number);
      break;
    case KeyKind::boolean:
      value.boolean = r.get<bool>(t, prefix, name, false);
      break;
    case KeyKind::choice:
      value.text = r.choice(t, prefix, name, "", choices);
      break;
    case KeyKind::extent2:
      read_extent2(r, node, key, range, value.pair);
      break;
    case KeyKind::layer:
    case KeyKind::text:
      value.text = r.get<std::string>(t, prefix, name, "");
      break;
    case KeyKind::integers:
      read_array(r, node, key, "expected an array of integers", [&](const toml::node& item) {
        const auto v = item.value_exact<std::int64_t>();
        if (!v) r.fail(item.source(), key, "expected an array of integers");
        in_range(item, static_cast<double>(*v));
        value.integers.push_back(*v);
      });
      break;
    case KeyKind::texts:
      read_array(r, node, key, "expected an array of strings", [&](const toml::node& item) {
        const auto v = item.value_exact<std::string>();
        if (!v) r.fail(item.source(), key, "expected an array of strings");
        value.texts.push_back(*v);
      });
      break;
    case KeyKind::choice_or_texts:
      if (node.is_string()) {
        value.text = r.choice(t, prefix, name, "", choices);
        break;
      }
      read_array(r, node, key, "expected one of the names or an array of strings",
                 [&](const toml::node& item) {
                   const auto v = item.value_exact<std::string>();
                   if (!v) r.fail(item.source(), key, "expected an array of strings");
                   value.texts.push_back(*v);
                 });
      break;
    case KeyKind::tables:
      r.fail(node.source(), key, "an array of tables has a reader of its own");
  }
  return value;
}

}  // namespace tessera::impl
