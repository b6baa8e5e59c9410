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
#include "sections.hpp"

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
    out.text = toml_string(*v);
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

namespace {

// Keys the sweep sets itself for every trial.
bool own_key(const std::string& key) {
  return key == "run.output_dir" || key == "checkpoint.directory";
}
const char* const own_message =
    "the sweep gives every trial its own output and checkpoint directory "
    "(<sweep.output_dir>/trials/<trial>); set sweep.output_dir instead";

// "mlp.sweep.toml" is sweep "mlp".
std::string sweep_stem(const std::string& path) {
  std::string stem = path.substr(path.find_last_of('/') + 1);
  for (const std::string suffix : {".toml", ".sweep"})
    if (stem.size() > suffix.size() &&
        stem.compare(stem.size() - suffix.size(), suffix.size(), suffix) == 0)
      stem.resize(stem.size() - suffix.size());
  return stem.empty() ? "sweep" : stem;
}

const std::vector<std::string> drawn{"random", "halving"};

Section<SweepSpec> sweep_section() {
  return SectionBuilder<SweepSpec>("sweep")
      .named(
          "strategy", [](auto& s) -> auto& { return s.strategy; }, sweep_strategies,
          "how trials are chosen and trained")
      .selector("strategy")
      .integer(
          "ranks_per_trial", [](auto& s) -> auto& { return s.ranks_per_trial; },
          Range::closed(1, 1 << 20), "MPI ranks that train one trial together")
      .allowed("dividing the job's ranks")
      .integer(
          "trials", [](auto& s) -> auto& { return s.trials; }, Range::closed(0, 100000),
          "how many trials to draw; with halving, draws instead of the grid")
      .applies_to(drawn)
      .default_text("required for `random`")
      .integer(
          "seed", [](auto& s) -> auto& { return s.seed; }, Range::at_least(0), "seeds the draws")
      .applies_to(drawn)
      .custom(
          "set", KeyKind::texts, Range::any(), "overrides every trial gets, before its own values",
          [](SweepSpec& s, const KeyValue& v) {
            for (std::size_t i = 0; i < v.texts.size(); ++i) {
              const auto equals = v.texts[i].find('=');
              if (equals == std::string::npos || equals == 0)
                throw KeyRefused(
                    "expected \"key.path=value\" strings, e.g. \"data.validation_split=0.1\"", i);
              if (own_key(v.texts[i].substr(0, equals))) throw KeyRefused(own_message, i);
            }
            s.set = v.texts;
          },
          [](const SweepSpec& s) { return impl::list_text(s.set); })
      .default_text("`[]`")
      .allowed("`\"key.path=value\"`")
      .text(
          "name", [](auto& s) -> auto& { return s.name; }, "shown in the results")
      .default_text("the file name without `.sweep.toml` (or `.toml`)")
      .allowed("no `/`")
      .check([](const SweepSpec& s) {
        if (s.name.empty() || s.name.find('/') != std::string::npos)
          throw KeyRefused("must be a non-empty name without '/'");
      })
      .text(
          "output_dir", [](auto& s) -> auto& { return s.output_dir; }, "the sweep directory")
      .default_text("`\"output/sweeps/<name>\"`")
      .check([](const SweepSpec& s) {
        if (s.output_dir.empty()) throw KeyRefused("must not be empty");
      })
      .finish([](SweepSpec& s, const KeyFailure& f) {
        if (s.strategy == SweepStrategy::random && !f.given("trials"))
          f.fail("trials", "required for strategy 'random': how many trials to draw");
        if (s.strategy == SweepStrategy::random && s.trials < 1)
          f.fail("trials", "value " + std::to_string(s.trials) + " is out of range [1, 100000]");
        if (s.name.empty()) s.name = sweep_stem(s.path);
        if (s.output_dir.empty()) s.output_dir = "output/sweeps/" + s.name;
      });
}

Section<SweepSpec> objective_section() {
  return SectionBuilder<SweepSpec>("objective")
      .choice(
          "metric", [](auto& s) -> auto& { return s.metric; },
          {"validation_accuracy", "validation_loss"}, "what ranks the trials")
      .custom(
          "goal", KeyKind::choice, Range::any(), "whether higher or lower is better",
          [](SweepSpec& s, const KeyValue& v) { s.maximize = v.text == "maximize"; },
          [](const SweepSpec& s) { return std::string(s.maximize ? "maximize" : "minimize"); })
      .choices({"maximize", "minimize"})
      .default_text("`maximize` for accuracy, `minimize` for loss")
      .finish([](SweepSpec& s, const KeyFailure& f) {
        if (!f.given("goal")) s.maximize = s.metric != "validation_loss";
      });
}

Section<SweepSpec> halving_section() {
  return SectionBuilder<SweepSpec>("halving")
      .integer(
          "min_epochs", [](auto& s) -> auto& { return s.min_epochs; }, Range::closed(1, 1000000),
          "the epochs of the first rung")
      .allowed("below the deck's `training.epochs`")
      .integer(
          "reduction", [](auto& s) -> auto& { return s.reduction; }, Range::closed(2, 1000),
          "each rung trains this many times the epochs of the one before and keeps the best "
          "1 / reduction of its trials");
}

// sweep.set: each override checked on the deck in turn, so that a bad one
// is reported at its own entry. Returns the deck with all of them.
Deck apply_set(const Reader& r, const toml::table& root, const SweepSpec& spec, const Deck& deck) {
  std::vector<std::string> applied = deck.overrides;
  Deck base = deck;
  const toml::array* items = root["sweep"]["set"].as_array();
  for (std::size_t i = 0; i < spec.set.size(); ++i) {
    applied.push_back(spec.set[i]);
    try {
      base = parse_deck(deck.text, deck.path, applied);
    } catch (const DeckError& e) {
      r.fail((*items)[i].source(), "sweep.set", std::string("the deck refuses it: ") + e.what());
    }
  }
  return base;
}

// [[parameters]]: each entry read, its key checked against the deck (a
// key the deck does not know would fail every trial) and against the
// strategy.
void read_parameters(const Reader& r, const toml::table& root, SweepSpec& spec, const Deck& deck) {
  std::vector<std::string> applied = deck.overrides;
  applied.insert(applied.end(), spec.set.begin(), spec.set.end());
  const toml::node* params = root.get("parameters");
  const toml::array* list = params ? params->as_array() : nullptr;
  if (!list || list->empty())
    r.fail(params ? params->source() : root.source(), "parameters",
           "at least one [[parameters]] entry is required");
  const bool enumerated = spec.strategy == SweepStrategy::grid ||
                          (spec.strategy == SweepStrategy::halving && spec.trials == 0);
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
    std::vector<std::string> probe = applied;
    probe.push_back(p.key + "=" + p.draw(0.0).text);
    try {
      (void)parse_deck(deck.text, deck.path, probe);
    } catch (const DeckKeyError& e) {
      r.fail(key_node.source(), prefix + "key",
             "'" + p.key + "' is not a setting of the deck " + deck.path + ": " + e.what());
    } catch (const DeckError&) {
    }
    if (enumerated && p.sampled()) {
      const std::string kind = distribution_name(p.distribution);
      r.fail(t->get(kind)->source(), prefix + kind,
             "strategy '" + std::string(strategy_name(spec.strategy)) + "'" +
                 (spec.strategy == SweepStrategy::halving ? " without sweep.trials" : "") +
                 " runs every combination of grid values; use grid = [...], or draw values with "
                 "strategy 'random' or sweep.trials");
    }
    spec.parameters.push_back(std::move(p));
  }
  double combinations = 1;
  for (const auto& p : spec.parameters) combinations *= static_cast<double>(p.values.size());
  if (enumerated && combinations > 100000)
    r.fail(params->source(), "parameters",
           "the grid has " + Reader::number(combinations) +
               " combinations; at most 100000 (draw values with strategy 'random')");
}

// A check of a key the file may leave out fails at the key, else at the
// nearest thing the file has: its table, the [sweep] key that asked for
// it, or the file's first line.
[[noreturn]] void fail_near(const Reader& r, const std::string& path,
                            std::initializer_list<const toml::node*> nodes, const std::string& key,
                            const std::string& message) {
  for (const toml::node* node : nodes)
    if (node) r.fail(node->source(), key, message);
  throw DeckError(path + ":1:1: " + key + ": " + message);
}

// The objective ranks trials on a validation split: the deck must have one.
void check_objective(const Reader& r, const toml::table& root, const SweepSpec& spec,
                     const Deck& base) {
  if (base.validation_split > 0) return;
  fail_near(
      r, spec.path,
      {root["objective"]["metric"].node(), root.get("objective"), root["sweep"]["set"].node()},
      "objective.metric",
      spec.metric + " needs a validation split, and the deck " + base.path +
          " has no data.validation_split; add set = [\"data.validation_split=0.1\"] to "
          "[sweep] (ranking trials on the test set would tune them to it)");
}

// [halving], for strategy 'halving' only: its first rung below the deck's
// epochs.
void read_halving(const Reader& r, const toml::table& root, SweepSpec& spec) {
  const toml::node* halving = root.get("halving");
  if (spec.strategy != SweepStrategy::halving) {
    if (halving)
      r.fail(halving->source(), "halving",
             "applies to strategy 'halving' only; this sweep's strategy is '" +
                 std::string(strategy_name(spec.strategy)) + "'");
    return;
  }
  impl::read_section(r, root, sweep_sections()[2], spec, spec.locations);
  if (spec.min_epochs >= spec.max_epochs)
    fail_near(r, spec.path,
              {root["halving"]["min_epochs"].node(), halving, root["sweep"]["strategy"].node()},
              "halving.min_epochs",
              "value " + std::to_string(spec.min_epochs) + " must be at least 1 and below the " +
                  std::to_string(spec.max_epochs) +
                  " epochs of the deck (training.epochs), the budget of the last rung");
}

}  // namespace

SweepSpec parse_sweep(const std::string& text, const std::string& path, const Deck& deck) {
  SweepSpec spec;
  spec.path = path;
  spec.text = text;
  const toml::table root = impl::parse_toml(text, path);
  const Reader r(path);
  r.only_keys(root, "", {"sweep", "objective", "halving", "parameters"});
  const auto& sections = sweep_sections();
  impl::read_section(r, root, sections[0], spec, spec.locations);
  const Deck base = apply_set(r, root, spec, deck);
  read_parameters(r, root, spec, deck);
  impl::read_section(r, root, sections[1], spec, spec.locations);
  check_objective(r, root, spec, base);
  spec.max_epochs = base.training.epochs;
  read_halving(r, root, spec);
  return spec;
}

const std::vector<Section<SweepSpec>>& sweep_sections() {
  static const std::vector<Section<SweepSpec>> sections{sweep_section(), objective_section(),
                                                        halving_section()};
  return sections;
}

std::string sweep_key_reference() {
  SweepSpec defaults;
  std::string out;
  for (const auto& s : sweep_sections())
    out += "## `[" + s.name + "]`\n\n" + section_reference_markdown(s, defaults) + "\n";
  return out;
}

}  // namespace tessera
