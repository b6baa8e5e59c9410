// Sweep file parsing with the deck reader: every error names the sweep
// file, line and column, the key, and what was expected. Parameters are
// checked against the deck they sweep by applying them as --set overrides,
// so a key path means exactly what it means to tessera-train.
#include <tessera/deck/sweep.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "reader.hpp"

namespace tessera {

namespace {

using impl::Reader;

// The shortest decimal text that reads back as `value`, and reads as a TOML
// float (a deck's float keys take integers too, but the label should say
// what the trial used).
std::string float_text(double value, int max_digits = 17) {
  char buffer[40];
  for (int digits = 1; digits <= max_digits; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (digits == max_digits || std::strtod(buffer, nullptr) == value) break;
  }
  // %g writes 80 with one digit as 8e+01; positional notation reads better
  // wherever it is no longer than 16 digits.
  const double magnitude = std::fabs(value);
  if (std::strchr(buffer, 'e') && magnitude >= 1e-4 && magnitude < 1e16) {
    const int digits = static_cast<int>(std::floor(std::log10(magnitude))) + 1;
    char positional[40];
    std::snprintf(positional, sizeof positional, "%.*g", std::max(digits, 1), value);
    if (std::strtod(positional, nullptr) == value && !std::strchr(positional, 'e'))
      std::snprintf(buffer, sizeof buffer, "%s", positional);
  }
  std::string text = buffer;
  if (text.find_first_of(".eEni") == std::string::npos) text += ".0";
  return text;
}

SweepValue integer_value(std::int64_t v) {
  SweepValue out;
  out.text = out.label = std::to_string(v);
  out.numeric = true;
  out.number = static_cast<double>(v);
  return out;
}

SweepValue float_value(double v, int digits = 17) {
  SweepValue out;
  out.text = out.label = float_text(v, digits);
  out.numeric = true;
  out.number = std::strtod(out.text.c_str(), nullptr);
  return out;
}

// A grid or choice entry: a TOML scalar.
SweepValue scalar_value(const Reader& r, const toml::node& node, const std::string& key) {
  if (const auto v = node.value_exact<std::int64_t>()) return integer_value(*v);
  if (const auto v = node.value_exact<double>()) {
    if (!std::isfinite(*v)) r.fail(node.source(), key, "values must be finite numbers");
    return float_value(*v);
  }
  if (const auto v = node.value_exact<bool>()) {
    SweepValue out;
    out.text = out.label = *v ? "true" : "false";
    return out;
  }
  if (const auto v = node.value_exact<std::string>()) {
    SweepValue out;
    out.label = *v;
    out.text = "\"";
    for (char c : *v)
      out.text += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    out.text += "\"";
    return out;
  }
  r.fail(node.source(), key, "expected integers, numbers, strings or booleans");
}

SweepParameter read_parameter(const Reader& r, const toml::table& t, std::size_t index) {
  const std::string prefix = "parameters[" + std::to_string(index) + "].";
  const std::vector<std::string> kinds = distributions.names();
  std::vector<std::string> keys = kinds;
  keys.insert(keys.begin(), "key");
  r.only_keys(t, prefix, keys);
  SweepParameter p;
  p.key = r.get<std::string>(t, prefix, "key", "", true);
  p.location = r.location(t.get("key")->source());
  r.check(!p.key.empty() && p.key.find_first_of("= ") == std::string::npos, t, prefix, "key",
          "expected a deck key path such as \"optimizer.lr\" or \"model.layers[0].units\"");
  const toml::node* spec = nullptr;
  std::string kind;
  for (const auto& k : kinds) {
    const toml::node* node = t.get(k);
    if (!node) continue;
    if (spec)
      r.fail(node->source(), prefix + k,
             "a parameter takes one of " + distributions.list() + "; this one has " + kind +
                 " already");
    spec = node;
    kind = k;
  }
  if (!spec)
    r.fail(t.source(), prefix + "grid",
           "parameter '" + p.key + "' needs one of " + distributions.list());
  const std::string key = prefix + kind;
  const toml::array* values = spec->as_array();
  p.distribution = distributions.value(kind, "tessera::parse_sweep");
  if (!p.sampled() || p.distribution == Distribution::choice) {
    if (!values || values->empty())
      r.fail(spec->source(), key, "expected a non-empty array of values, e.g. [0.01, 0.1]");
    for (const auto& node : *values) {
      SweepValue v = scalar_value(r, node, key);
      for (const auto& seen : p.values)
        if (seen.text == v.text) r.fail(node.source(), key, "value " + v.label + " appears twice");
      p.values.push_back(std::move(v));
    }
    return p;
  }
  const std::string expected = "expected [low, high], two numbers with low < high";
  if (!values || values->size() != 2) r.fail(spec->source(), key, expected);
  const auto low = (*values)[0].value<double>(), high = (*values)[1].value<double>();
  if (!low || !high || !std::isfinite(*low) || !std::isfinite(*high) || !(*low < *high))
    r.fail(spec->source(), key, expected);
  if (p.distribution == Distribution::log_uniform && *low <= 0)
    r.fail((*values)[0].source(), key, "the low bound of a log_uniform range must be above 0");
  p.low = *low;
  p.high = *high;
  p.integer = (*values)[0].is_integer() && (*values)[1].is_integer();
  return p;
}

}  // namespace

SweepValue SweepParameter::draw(double u) const {
  if (!values.empty()) {
    const auto i = static_cast<std::size_t>(u * static_cast<double>(values.size()));
    return values[std::min(i, values.size() - 1)];
  }
  const bool log = distribution == Distribution::log_uniform;
  const double a = log ? std::log(low) : low, b = log ? std::log(high) : high;
  if (integer) {
    // Every integer of the range equally likely (uniform), or equally
    // likely per unit of logarithm (log_uniform), ends included.
    const double lo = log ? std::log(low - 0.5 > 0 ? low - 0.5 : low) : low - 0.5;
    const double hi = log ? std::log(high + 0.5) : high + 0.5;
    const double x = log ? std::exp(lo + u * (hi - lo)) : lo + u * (hi - lo);
    const auto v = static_cast<std::int64_t>(std::llround(x));
    return integer_value(std::clamp<std::int64_t>(v, static_cast<std::int64_t>(low),
                                                  static_cast<std::int64_t>(high)));
  }
  const double x = log ? std::exp(a + u * (b - a)) : a + u * (b - a);
  SweepValue v = float_value(std::clamp(x, low, high), 6);
  if (v.number > high) v = float_value(high);
  if (v.number < low) v = float_value(low);
  return v;
}

SweepSpec load_sweep(const std::string& path, const Deck& deck) {
  std::ifstream file(path);
  if (!file) throw DeckError(path + ": cannot open the sweep file: " + std::strerror(errno));
  const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  return parse_sweep(text, path, deck);
}

Deck trial_deck(const Deck& deck, const SweepSpec& spec, const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = deck.overrides;
  overrides.insert(overrides.end(), spec.set.begin(), spec.set.end());
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return parse_deck(deck.text, deck.path, overrides);
}

SweepSpec parse_sweep(const std::string& text, const std::string& path, const Deck& deck) {
  SweepSpec spec;
  spec.path = path;
  spec.text = text;
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << path << ":" << e.source().begin.line << ":" << e.source().begin.column
       << ": TOML syntax error: " << e.description();
    throw DeckError(os.str());
  }
  const Reader r(path);
  r.only_keys(root, "", {"sweep", "objective", "halving", "parameters"});

  // [sweep]
  const auto& sweep = r.table(root, "sweep", false);
  const std::string s = "sweep.";
  r.only_keys(sweep, s,
              {"name", "strategy", "ranks_per_trial", "trials", "seed", "output_dir", "set"});
  // "mlp.sweep.toml" is sweep "mlp".
  std::string stem = path.substr(path.find_last_of('/') + 1);
  for (const std::string suffix : {".toml", ".sweep"})
    if (stem.size() > suffix.size() &&
        stem.compare(stem.size() - suffix.size(), suffix.size(), suffix) == 0)
      stem.resize(stem.size() - suffix.size());
  spec.name = r.get<std::string>(sweep, s, "name", stem.empty() ? "sweep" : stem);
  r.check(!spec.name.empty() && spec.name.find('/') == std::string::npos, sweep, s, "name",
          "must be a non-empty name without '/'");
  spec.output_dir = r.get<std::string>(sweep, s, "output_dir", "output/sweeps/" + spec.name);
  r.check(!spec.output_dir.empty(), sweep, s, "output_dir", "must not be empty");
  spec.output_dir_location =
      sweep.get("output_dir") ? r.location(sweep.get("output_dir")->source()) : path;
  const std::string strategy =
      r.choice(sweep, s, "strategy", strategy_name(SweepStrategy::grid), sweep_strategies.names());
  spec.strategy = sweep_strategies.value(strategy, "tessera::parse_sweep");
  r.keys_for_type(sweep, s, strategy,
                  {{"trials", {"random", "halving"}}, {"seed", {"random", "halving"}}});
  spec.ranks_per_trial = r.get<int>(sweep, s, "ranks_per_trial", 1);
  r.require_range(sweep, s, "ranks_per_trial", spec.ranks_per_trial, 1, 1 << 20);
  spec.ranks_per_trial_location = r.location(
      sweep.get("ranks_per_trial") ? sweep.get("ranks_per_trial")->source() : sweep.source());
  r.check(spec.strategy != SweepStrategy::random || sweep.get("trials"), sweep, s, "trials",
          "required for strategy 'random': how many trials to draw");
  spec.trials = r.get<int>(sweep, s, "trials", 0);
  r.require_range(sweep, s, "trials", spec.trials, spec.strategy == SweepStrategy::random ? 1 : 0,
                  100000);
  const auto seed = r.get<std::int64_t>(sweep, s, "seed", 0);
  r.require_range<std::int64_t>(sweep, s, "seed", seed, 0, INT64_MAX);
  spec.seed = static_cast<std::uint64_t>(seed);

  // Keys the sweep sets itself for every trial.
  const auto own_key = [](const std::string& key) {
    return key == "run.output_dir" || key == "checkpoint.directory";
  };
  const std::string own_message =
      "the sweep gives every trial its own output and checkpoint directory "
      "(<sweep.output_dir>/trials/<trial>); set sweep.output_dir instead";

  // `set`: overrides of every trial, each checked on the deck in turn, so a
  // bad one is reported at its own entry.
  std::vector<std::string> applied = deck.overrides;
  Deck base = deck;
  if (const toml::node* node = sweep.get("set")) {
    const toml::array* items = node->as_array();
    if (!items)
      r.fail(node->source(), s + "set", "expected an array of \"key.path=value\" strings");
    for (const auto& item : *items) {
      const auto entry = item.value_exact<std::string>();
      const auto equals = entry ? entry->find('=') : std::string::npos;
      if (!entry || equals == std::string::npos || equals == 0)
        r.fail(item.source(), s + "set",
               "expected \"key.path=value\" strings, e.g. \"data.validation_split=0.1\"");
      if (own_key(entry->substr(0, equals))) r.fail(item.source(), s + "set", own_message);
      applied.push_back(*entry);
      try {
        base = parse_deck(deck.text, deck.path, applied);
      } catch (const DeckError& e) {
        r.fail(item.source(), s + "set", std::string("the deck refuses it: ") + e.what());
      }
      spec.set.push_back(*entry);
    }
  }

  // [[parameters]]
  const toml::node* params = root.get("parameters");
  const toml::array* list = params ? params->as_array() : nullptr;
  if (!list || list->empty())
    r.fail(params ? params->source() : root.source(), "parameters",
           "at least one [[parameters]] entry is required");
  for (std::size_t i = 0; i < list->size(); ++i) {
    const toml::table* t = (*list)[i].as_table();
    if (!t)
      r.fail((*list)[i].source(), "parameters[" + std::to_string(i) + "]", "expected a table");
    SweepParameter p = read_parameter(r, *t, i);
    const std::string prefix = "parameters[" + std::to_string(i) + "].";
    const toml::node& key_node = *t->get("key");
    for (const auto& other : spec.parameters)
      if (other.key == p.key)
        r.fail(key_node.source(), prefix + "key", "'" + p.key + "' is swept twice");
    if (own_key(p.key)) r.fail(key_node.source(), prefix + "key", own_message);
    if (spec.strategy == SweepStrategy::halving && p.key == "training.epochs")
      r.fail(key_node.source(), prefix + "key",
             "successive halving decides how many epochs each trial trains; training.epochs "
             "(the deck's, or one in sweep.set) is the budget of the trials that go furthest");
    // The key must name a setting of the deck: a value that the deck
    // refuses makes trials fail, but a key it does not know makes them all.
    std::vector<std::string> probe = applied;
    probe.push_back(p.key + "=" + p.draw(0.0).text);
    try {
      (void)parse_deck(deck.text, deck.path, probe);
    } catch (const DeckKeyError& e) {
      r.fail(key_node.source(), prefix + "key",
             "'" + p.key + "' is not a setting of the deck " + deck.path + ": " + e.what());
    } catch (const DeckError&) {
    }
    const bool enumerated = spec.strategy == SweepStrategy::grid ||
                            (spec.strategy == SweepStrategy::halving && spec.trials == 0);
    if (enumerated && p.sampled()) {
      const std::string kind = distribution_name(p.distribution);
      r.fail(t->get(kind)->source(), prefix + kind,
             "strategy '" + strategy + "'" +
                 (spec.strategy == SweepStrategy::halving ? " without sweep.trials" : "") +
                 " runs every combination of grid values; use grid = [...], or draw values with "
                 "strategy 'random' or sweep.trials");
    }
    spec.parameters.push_back(std::move(p));
  }
  if (spec.strategy == SweepStrategy::grid ||
      (spec.strategy == SweepStrategy::halving && spec.trials == 0)) {
    double combinations = 1;
    for (const auto& p : spec.parameters) combinations *= static_cast<double>(p.values.size());
    if (combinations > 100000)
      r.fail(params->source(), "parameters",
             "the grid has " + Reader::number(combinations) +
                 " combinations; at most 100000 (draw values with strategy 'random')");
  }

  // [objective]
  const auto& objective = r.table(root, "objective", false);
  const std::string o = "objective.";
  r.only_keys(objective, o, {"metric", "goal"});
  spec.metric = r.choice(objective, o, "metric", "validation_accuracy",
                         {"validation_accuracy", "validation_loss"});
  const std::string goal =
      r.choice(objective, o, "goal", spec.metric == "validation_loss" ? "minimize" : "maximize",
               {"maximize", "minimize"});
  spec.maximize = goal == "maximize";
  // A check of a key the file may leave out fails at the key, else at the
  // nearest thing the file has: its table, the [sweep] key that asked for
  // it, or the file's first line.
  const auto fail_near = [&](std::initializer_list<const toml::node*> nodes, const std::string& key,
                             const std::string& message) {
    for (const toml::node* node : nodes)
      if (node) r.fail(node->source(), key, message);
    throw DeckError(path + ":1:1: " + key + ": " + message);
  };
  if (!(base.validation_split > 0))
    fail_near({objective.get("metric"), root.get("objective"), sweep.get("set")}, o + "metric",
              spec.metric + " needs a validation split, and the deck " + deck.path +
                  " has no data.validation_split; add set = [\"data.validation_split=0.1\"] to "
                  "[sweep] (ranking trials on the test set would tune them to it)");

  // [halving]
  const toml::node* halving_node = root.get("halving");
  if (halving_node && spec.strategy != SweepStrategy::halving)
    r.fail(halving_node->source(), "halving",
           "applies to strategy 'halving' only; this sweep's strategy is '" + strategy + "'");
  spec.max_epochs = base.training.epochs;
  if (spec.strategy == SweepStrategy::halving) {
    const auto& halving = r.table(root, "halving", false);
    const std::string h = "halving.";
    r.only_keys(halving, h, {"min_epochs", "reduction"});
    spec.min_epochs = r.get<int>(halving, h, "min_epochs", spec.min_epochs);
    if (spec.min_epochs < 1 || spec.min_epochs >= spec.max_epochs)
      fail_near({halving.get("min_epochs"), halving_node, sweep.get("strategy")}, h + "min_epochs",
                "value " + std::to_string(spec.min_epochs) + " must be at least 1 and below the " +
                    std::to_string(spec.max_epochs) +
                    " epochs of the deck (training.epochs), the budget of the last rung");
    spec.reduction = r.get<int>(halving, h, "reduction", spec.reduction);
    r.require_range(halving, h, "reduction", spec.reduction, 2, 1000);
  }
  return spec;
}

}  // namespace tessera
