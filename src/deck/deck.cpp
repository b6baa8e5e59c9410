// Deck parsing and validation with toml++. Every error names the file,
// line and column, the key, and what was expected.
#include <tessera/deck/deck.hpp>
#include <tessera/layers/registry.hpp>

// CUDA's host headers define __noinline__ as a macro, which breaks toml++'s
// attribute probes under nvcc; this file has no device code, so hide it.
#if defined(__noinline__)
#pragma push_macro("__noinline__")
#undef __noinline__
#define TESSERA_RESTORE_NOINLINE
#endif
#include <toml++/toml.h>
#if defined(TESSERA_RESTORE_NOINLINE)
#pragma pop_macro("__noinline__")
#endif

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <vector>

namespace tessera {

namespace {

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
    os << (where.path ? *where.path : path_) << ":" << where.begin.line << ":" << where.begin.column;
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
      fail(key_source(key, node), prefix + k,
           "unknown key" + (best.empty() ? "" : " (did you mean '" + prefix + best + "'?)") +
               "; allowed: " + join(allowed));
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
  void keys_for_type(const toml::table& t, const std::string& prefix, const std::string& type,
                     const std::vector<KeyUse>& uses) const {
    for (const auto& [key, node] : t) {
      const std::string k(key.str());
      const auto use = std::find_if(uses.begin(), uses.end(), [&](const KeyUse& u) { return u.key == k; });
      if (use == uses.end() || use->types.empty() ||
          std::find(use->types.begin(), use->types.end(), type) != use->types.end())
        continue;
      fail(key_source(key, node), prefix + k,
           "does not apply to type '" + type + "'; it applies to: " + join(use->types));
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

void read_optimizer(const Reader& r, const toml::table& opt, Deck::Optimizer& out) {
  const std::string p = "optimizer.";
  const std::vector<std::string> sgd{"sgd"}, adam{"adam", "adamw"};
  r.only_keys(opt, p, {"type", "lr", "weight_decay", "momentum", "nesterov", "beta1", "beta2", "eps"});
  out.type = r.choice(opt, p, "type", "sgd", {"sgd", "adam", "adamw"});
  r.keys_for_type(opt, p, out.type,
                  {{"momentum", sgd}, {"nesterov", sgd}, {"beta1", adam}, {"beta2", adam}, {"eps", adam}});
  out.lr = r.get<float>(opt, p, "lr", out.type == "sgd" ? 0.01f : 0.001f);
  r.require_range(opt, p, "lr", out.lr, 0.0f, 100.0f);
  out.weight_decay = r.get<float>(opt, p, "weight_decay", out.type == "adamw" ? 0.01f : 0.0f);
  r.require_range(opt, p, "weight_decay", out.weight_decay, 0.0f, 1.0f);
  out.momentum = r.get<float>(opt, p, "momentum", 0.0f);
  r.require_range(opt, p, "momentum", out.momentum, 0.0f, 0.999999f);
  out.nesterov = r.get<bool>(opt, p, "nesterov", false);
  r.check(!out.nesterov || out.momentum > 0, opt, p, "nesterov", "Nesterov momentum needs optimizer.momentum > 0");
  out.beta1 = r.get<float>(opt, p, "beta1", 0.9f);
  r.require_range(opt, p, "beta1", out.beta1, 0.0f, 0.999999f);
  out.beta2 = r.get<float>(opt, p, "beta2", 0.999f);
  r.require_range(opt, p, "beta2", out.beta2, 0.0f, 0.999999f);
  out.eps = r.get<float>(opt, p, "eps", 1e-8f);
  r.check(out.eps > 0.0f && out.eps <= 1.0f, opt, p, "eps",
          "value " + Reader::number(out.eps) + " is out of range (0, 1]");
}

void read_schedule(const Reader& r, const toml::table& sch, float lr, Deck::Schedule& out) {
  const std::string p = "schedule.";
  r.only_keys(sch, p, {"type", "step_size", "gamma", "milestones", "min_lr", "warmup_steps",
                       "warmup_start_factor"});
  out.type = r.choice(sch, p, "type", "constant", {"constant", "step", "multistep", "exponential", "cosine"});
  r.keys_for_type(sch, p, out.type,
                  {{"step_size", {"step"}},
                   {"gamma", {"step", "multistep", "exponential"}},
                   {"milestones", {"multistep"}},
                   {"min_lr", {"cosine"}}});
  const bool needs_gamma = out.type == "exponential";
  r.check(!needs_gamma || sch.get("gamma"), sch, p, "gamma", "required for type 'exponential'");
  out.gamma = r.get<float>(sch, p, "gamma", 0.1f);
  r.check(out.gamma > 0.0f && out.gamma <= 1.0f, sch, p, "gamma",
          "value " + Reader::number(out.gamma) + " is out of range (0, 1]");
  r.check(out.type != "step" || sch.get("step_size"), sch, p, "step_size", "required for type 'step'");
  out.step_size = r.get<std::int64_t>(sch, p, "step_size", 1);
  r.require_range<std::int64_t>(sch, p, "step_size", out.step_size, 1, 1000000);
  if (out.type == "multistep") {
    const toml::node* node = sch.get("milestones");
    r.check(node, sch, p, "milestones", "required for type 'multistep': an array of increasing epochs, e.g. [30, 60]");
    const toml::array* milestones = node->as_array();
    r.check(milestones && !milestones->empty(), sch, p, "milestones",
            "expected a non-empty array of increasing epochs, e.g. [30, 60]");
    for (const auto& m : *milestones) {
      const auto v = m.value_exact<std::int64_t>();
      if (!v || *v < 1) r.fail(m.source(), p + "milestones", "expected integers >= 1 (epochs)");
      if (!out.milestones.empty() && *v <= out.milestones.back())
        r.fail(m.source(), p + "milestones",
               "epoch " + std::to_string(*v) + " does not follow " + std::to_string(out.milestones.back()) +
                   "; milestones must increase");
      out.milestones.push_back(*v);
    }
  }
  out.min_lr = r.get<float>(sch, p, "min_lr", 0.0f);
  r.check(out.min_lr >= 0.0f && out.min_lr <= lr, sch, p, "min_lr",
          "value " + Reader::number(out.min_lr) + " is out of range [0, optimizer.lr = " +
              Reader::number(lr) + "]");
  out.warmup_steps = r.get<std::int64_t>(sch, p, "warmup_steps", 0);
  r.require_range<std::int64_t>(sch, p, "warmup_steps", out.warmup_steps, 0, INT64_MAX);
  out.warmup_start_factor = r.get<float>(sch, p, "warmup_start_factor", 0.0f);
  r.require_range(sch, p, "warmup_start_factor", out.warmup_start_factor, 0.0f, 1.0f);
  r.check(out.warmup_steps > 0 || !sch.get("warmup_start_factor"), sch, p, "warmup_start_factor",
          "has no effect without schedule.warmup_steps > 0");
}

void read_checkpoint(const Reader& r, const toml::table& ckpt, const std::string& output_dir,
                     Deck::Checkpoint& out) {
  const std::string p = "checkpoint.";
  r.only_keys(ckpt, p, {"directory", "keep", "every_epochs", "every_steps", "every_minutes"});
  out.directory = r.get<std::string>(ckpt, p, "directory", output_dir + "/checkpoints");
  r.check(!out.directory.empty(), ckpt, p, "directory", "must not be empty");
  out.keep = r.get<int>(ckpt, p, "keep", 3);
  r.require_range(ckpt, p, "keep", out.keep, 1, 1000000);
  out.every_epochs = r.get<int>(ckpt, p, "every_epochs", 1);
  r.require_range(ckpt, p, "every_epochs", out.every_epochs, 0, 1000000);
  out.every_steps = r.get<std::int64_t>(ckpt, p, "every_steps", 0);
  r.require_range<std::int64_t>(ckpt, p, "every_steps", out.every_steps, 0, INT64_MAX);
  out.every_minutes = r.get<float>(ckpt, p, "every_minutes", 0.0f);
  r.require_range(ckpt, p, "every_minutes", out.every_minutes, 0.0f, 1e6f);
}

}  // namespace

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

// "[1, 16777216]", "[0, 1)", "(0, 1]": an interval in messages.
std::string range_interval(const Range& range) {
  return (range.low_open ? "(" : "[") + Reader::number(range.low) + ", " +
         Reader::number(range.high) + (range.high_open ? ")" : "]");
}

// One key of a layer entry, by the kind its layer type registered.
KeyValue read_layer_key(const Reader& r, const toml::table& lt, const std::string& prefix,
                        const LayerKey& spec) {
  const toml::node& node = *lt.get(spec.name);
  const std::string key = prefix + spec.name;
  KeyValue value;
  const auto in_range = [&](double v) {
    if (!spec.range.contains(v))
      r.fail(node.source(), key,
             "value " + Reader::number(v) + " is out of range " + range_interval(spec.range));
  };
  switch (spec.kind) {
    case KeyKind::integer:
      value.integer = r.get<std::int64_t>(lt, prefix, spec.name, 0);
      in_range(static_cast<double>(value.integer));
      break;
    case KeyKind::number:
      value.number = r.get<float>(lt, prefix, spec.name, 0.0f);
      in_range(value.number);
      break;
    case KeyKind::boolean:
      value.boolean = r.get<bool>(lt, prefix, spec.name, false);
      break;
    case KeyKind::choice:
      value.text = r.choice(lt, prefix, spec.name, "", spec.choices);
      break;
    case KeyKind::extent2:
      read_extent2(r, node, key, spec.range, value.pair);
      break;
  }
  return value;
}

LayerDeck read_layer(const Reader& r, const toml::table& lt, std::size_t index,
                     std::set<std::string>& names) {
  const std::string prefix = "model.layers[" + std::to_string(index) + "].";
  LayerDeck layer;
  layer.location = r.location(lt.source());
  layer.type = r.get<std::string>(lt, prefix, "type", "", true);
  const LayerType* type = find_layer_type(layer.type);
  if (!type)
    r.fail(lt.get("type")->source(), prefix + "type",
           "unknown layer type '" + layer.type + "'; allowed: " + layer_type_names());
  layer.layer_type = type;
  std::vector<std::string> allowed = {"type", "name", "inputs"};
  for (const auto& k : type->keys) allowed.push_back(k.name);
  r.only_keys(lt, prefix, allowed);

  layer.name = r.get<std::string>(lt, prefix, "name", layer.type + std::to_string(index));
  r.check(!layer.name.empty(), lt, prefix, "name", "layer names must not be empty");
  if (!names.insert(layer.name).second)
    r.fail(lt.get("name") ? lt.get("name")->source() : lt.source(), prefix + "name",
           "layer name '" + layer.name + "' is used twice (or is the reserved name 'input')");

  const bool merges = type->arity < 0;
  if (const toml::node* node = lt.get("inputs")) {
    const toml::array* a = node->as_array();
    if (!a) r.fail(node->source(), prefix + "inputs", "expected an array of layer names");
    for (const auto& item : *a) {
      const auto name = item.value_exact<std::string>();
      if (!name) r.fail(item.source(), prefix + "inputs", "expected layer names (strings)");
      // Names are inserted in declaration order, so this also rejects cycles.
      if (!names.count(*name) || *name == layer.name)
        r.fail(item.source(), prefix + "inputs",
               "'" + *name + "' is not 'input' or the name of a layer declared before this one");
      layer.inputs.push_back(*name);
    }
    const std::string takes =
        merges ? "two or more inputs"
               : (type->arity == 1 ? std::string("exactly one input")
                                   : "exactly " + std::to_string(type->arity) + " inputs");
    r.check(merges ? layer.inputs.size() >= 2
                   : layer.inputs.size() == static_cast<std::size_t>(type->arity),
            lt, prefix, "inputs", "a " + layer.type + " layer takes " + takes);
  } else if (merges) {
    r.fail(lt.source(), prefix + "inputs",
           "required for " + layer.type + ": the names of two or more layers to merge");
  }

  // Every key the type registered, over the defaults of its Options struct.
  layer.options = type->default_options();
  for (const auto& spec : type->keys) {
    if (!lt.get(spec.name)) {
      if (spec.required) r.fail(lt.source(), prefix + spec.name, "required key is missing");
      continue;
    }
    spec.set(layer.options, read_layer_key(r, lt, prefix, spec));
  }
  if (type->complete) type->complete(layer.options);
  return layer;
}
}  // namespace

namespace {
// One "a.b[2].c=value" from the command line, applied to the parsed deck.
// The value is TOML (3, 0.5, true, [1, 2], "text"); anything that does not
// parse as TOML is taken as a string, so --set run.name=trial7 works.
void apply_override(toml::table& root, const std::string& spec) {
  const auto fail = [&](const std::string& why) -> void {
    throw DeckError("--set " + spec + ": " + why);
  };
  const auto equals = spec.find('=');
  if (equals == std::string::npos || equals == 0) fail("expected key.path=value");
  const std::string key = spec.substr(0, equals), text = spec.substr(equals + 1);
  const std::string origin = "--set " + spec;
  toml::table parsed;
  try {
    parsed = toml::parse("value = " + text, origin);
  } catch (const toml::parse_error&) {
    std::string quoted = "\"";
    for (char c : text) quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    try {
      parsed = toml::parse("value = " + quoted + "\"", origin);
    } catch (const toml::parse_error& e) {
      fail(std::string("the value is not TOML: ") + std::string(e.description()));
    }
  }
  toml::node& value = *parsed.get("value");

  // Walk the path, creating tables that do not exist yet.
  toml::table* table = &root;
  std::size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    std::string segment = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    long index = -1;
    if (const auto bracket = segment.find('['); bracket != std::string::npos) {
      const auto close = segment.find(']', bracket);
      const std::string digits = segment.substr(bracket + 1, close == std::string::npos ? 0 : close - bracket - 1);
      if (close != segment.size() - 1 || digits.empty() ||
          digits.find_first_not_of("0123456789") != std::string::npos)
        fail("'" + segment + "' is not a key or key[index]");
      index = std::stol(digits);
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
}  // namespace

Deck load_deck(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream file(path);
  if (!file) {
    throw DeckError(path + ": cannot open the deck file: " + std::strerror(errno));
  }
  const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  return parse_deck(text, path, overrides);
}

Deck parse_deck(const std::string& text, const std::string& path,
                const std::vector<std::string>& overrides) {
  Deck deck;
  deck.path = path;
  deck.overrides = overrides;
  deck.text = text;
  toml::table root;
  try {
    root = toml::parse(deck.text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << path << ":" << e.source().begin.line << ":" << e.source().begin.column
       << ": TOML syntax error: " << e.description();
    throw DeckError(os.str());
  }
  for (const auto& o : overrides) apply_override(root, o);
  const Reader r(path);
  r.only_keys(root, "", {"run", "data", "model", "loss", "optimizer", "schedule", "training",
                         "parallel", "checkpoint"});

  const auto& run = r.table(root, "run", false);
  r.only_keys(run, "run.", {"name", "seed", "output_dir"});
  deck.run_name = r.get<std::string>(run, "run.", "name", "run");
  r.check(!deck.run_name.empty() && deck.run_name.find('/') == std::string::npos, run, "run.",
          "name", "must be a non-empty name without '/'");
  deck.output_dir = r.get<std::string>(run, "run.", "output_dir", "output/" + deck.run_name);
  r.check(!deck.output_dir.empty(), run, "run.", "output_dir", "must not be empty");
  const auto seed = r.get<std::int64_t>(run, "run.", "seed", 0);
  r.require_range<std::int64_t>(run, "run.", "seed", seed, 0, INT64_MAX);
  deck.seed = static_cast<std::uint64_t>(seed);

  const auto& data = r.table(root, "data", true);
  r.only_keys(data, "data.", {"format", "train_images", "train_labels", "test_images", "test_labels",
                              "train_file", "test_file", "images_dataset", "labels_dataset",
                              "normalize_mean", "normalize_std", "validation_split",
                              "train_samples"});
  deck.data_format = r.choice(data, "data.", "format", "idx", {"idx", "hdf5"});
  const std::vector<std::string> idx{"idx"}, hdf5{"hdf5"};
  r.keys_for_type(data, "data.", deck.data_format,
                  {{"train_images", idx}, {"train_labels", idx}, {"test_images", idx},
                   {"test_labels", idx}, {"train_file", hdf5}, {"test_file", hdf5},
                   {"images_dataset", hdf5}, {"labels_dataset", hdf5}});
  using FileKey = std::pair<const char*, std::string*>;
  const std::vector<FileKey> files =
      deck.data_format == "idx"
          ? std::vector<FileKey>{{"train_images", &deck.train_images},
                                 {"train_labels", &deck.train_labels},
                                 {"test_images", &deck.test_images},
                                 {"test_labels", &deck.test_labels}}
          : std::vector<FileKey>{{"train_file", &deck.train_file}, {"test_file", &deck.test_file}};
  for (const auto& [key, target] : files) {
    *target = r.get<std::string>(data, "data.", key, "", true);
    deck.data_files.push_back({key, *target, r.location(data.get(key)->source())});
  }
  deck.images_dataset = r.get<std::string>(data, "data.", "images_dataset", "images");
  deck.labels_dataset = r.get<std::string>(data, "data.", "labels_dataset", "labels");
  // Pixels are scaled to [0, 1] before (x - mean) / std, so a mean outside
  // [0, 1] or a std above 1 is a setting for another scale (0 to 255).
  const std::string scale_hint =
      "; pixels are scaled to [0, 1] before normalising (for statistics on the 0-255 scale, "
      "divide them by 255)";
  deck.normalize_mean = r.get<float>(data, "data.", "normalize_mean", 0.0f);
  r.check(deck.normalize_mean >= 0.0f && deck.normalize_mean <= 1.0f, data, "data.",
          "normalize_mean",
          "value " + Reader::number(deck.normalize_mean) + " is out of range [0, 1]" + scale_hint);
  deck.normalize_std = r.get<float>(data, "data.", "normalize_std", 1.0f);
  r.check(deck.normalize_std >= 1e-3f && deck.normalize_std <= 1.0f, data, "data.",
          "normalize_std",
          "value " + Reader::number(deck.normalize_std) + " is out of range [0.001, 1]" + scale_hint);
  deck.validation_split = r.get<float>(data, "data.", "validation_split", 0.0f);
  r.require_range(data, "data.", "validation_split", deck.validation_split, 0.0f, 0.9f);
  if (const toml::node* split = data.get("validation_split"))
    deck.validation_split_location = r.location(split->source());
  deck.train_samples = r.get<std::int64_t>(data, "data.", "train_samples", 0);
  r.require_range<std::int64_t>(data, "data.", "train_samples", deck.train_samples, 0, INT64_MAX);

  const auto& model = r.table(root, "model", true);
  r.only_keys(model, "model.", {"input_shape", "layers"});
  const toml::array* shape = model.get_as<toml::array>("input_shape");
  if (!shape) r.fail(model.source(), "model.input_shape", "required array of 1 to 3 positive integers, e.g. [784]");
  for (const auto& d : *shape) {
    auto v = d.value_exact<std::int64_t>();
    if (!v || *v <= 0) r.fail(d.source(), "model.input_shape", "expected positive integers");
    deck.input_shape.push_back(*v);
  }
  if (deck.input_shape.empty() || deck.input_shape.size() > 3)
    r.fail(shape->source(), "model.input_shape", "expected 1 to 3 dimensions");
  deck.input_shape_location = r.location(shape->source());
  const toml::array* layers = model.get_as<toml::array>("layers");
  if (!layers || layers->empty())
    r.fail(model.source(), "model.layers", "at least one [[model.layers]] entry is required");
  std::set<std::string> names{"input"};
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const toml::table* lt = (*layers)[i].as_table();
    if (!lt) r.fail((*layers)[i].source(), "model.layers[" + std::to_string(i) + "]", "expected a table");
    deck.layers.push_back(read_layer(r, *lt, i, names));
  }

  const auto& loss = r.table(root, "loss", false);
  r.only_keys(loss, "loss.", {"type", "label_smoothing"});
  deck.loss.type = r.choice(loss, "loss.", "type", "cross_entropy", {"cross_entropy"});
  deck.loss.label_smoothing = r.get<float>(loss, "loss.", "label_smoothing", 0.0f);
  r.require_range(loss, "loss.", "label_smoothing", deck.loss.label_smoothing, 0.0f, 0.99f);

  read_optimizer(r, r.table(root, "optimizer", false), deck.optimizer);
  read_schedule(r, r.table(root, "schedule", false), deck.optimizer.lr, deck.schedule);

  const auto& training = r.table(root, "training", false);
  r.only_keys(training, "training.", {"epochs", "batch_size", "log_every", "clip_norm", "eval_every"});
  deck.training.epochs = r.get<int>(training, "training.", "epochs", 1);
  r.require_range(training, "training.", "epochs", deck.training.epochs, 1, 1000000);
  deck.training.batch_size = r.get<std::int64_t>(training, "training.", "batch_size", 128);
  r.require_range<std::int64_t>(training, "training.", "batch_size", deck.training.batch_size, 1, 1 << 20);
  deck.training.log_every = r.get<std::int64_t>(training, "training.", "log_every", 100);
  r.require_range<std::int64_t>(training, "training.", "log_every", deck.training.log_every, 0, INT64_MAX);
  deck.training.clip_norm = r.get<float>(training, "training.", "clip_norm", 0.0f);
  r.require_range(training, "training.", "clip_norm", deck.training.clip_norm, 0.0f, 1e6f);
  deck.training.eval_every = r.get<int>(training, "training.", "eval_every", 1);
  r.require_range(training, "training.", "eval_every", deck.training.eval_every, 0, 1000000);

  const auto& parallel = r.table(root, "parallel", false);
  r.only_keys(parallel, "parallel.", {"bucket_mb", "overlap", "batchnorm", "gpu_aware_mpi"});
  deck.parallel.bucket_mb = r.get<float>(parallel, "parallel.", "bucket_mb", 1.0f);
  r.require_range(parallel, "parallel.", "bucket_mb", deck.parallel.bucket_mb, 1e-6f, 4096.0f);
  deck.parallel.overlap = r.get<bool>(parallel, "parallel.", "overlap", true);
  deck.parallel.batchnorm = r.choice(parallel, "parallel.", "batchnorm", "local", {"local", "sync"});
  deck.parallel.gpu_aware_mpi =
      r.choice(parallel, "parallel.", "gpu_aware_mpi", "auto", {"auto", "on", "off"});

  read_checkpoint(r, r.table(root, "checkpoint", false), deck.output_dir, deck.checkpoint);
  return deck;
}

void check_data_files(const Deck& deck) {
  for (const auto& f : deck.data_files)
    if (!std::ifstream(f.path))
      throw DeckError(f.location + ": data." + f.key + ": cannot read '" + f.path + "': " +
                      std::strerror(errno));
}

}  // namespace tessera
