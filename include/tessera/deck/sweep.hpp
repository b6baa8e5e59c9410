// Sweep files: TOML files that describe a hyperparameter search over a deck:
// which deck settings vary (named by the key paths --set takes), how trials
// are chosen (a grid, seeded random draws, or successive halving), what
// ranks them, and how many MPI ranks each trial gets. Errors read like a
// deck's: "file:line:column: key: message". Plain host code, like the deck
// reader; app/sweep.hpp plans and runs the trials.
#pragma once

#include <tessera/core/enum_names.hpp>
#include <tessera/deck/deck.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera {

// One value a parameter takes: the TOML text a trial's --set receives
// ("0.01", "128", "\"adam\"") and how tables show it (0.01, 128, adam).
struct SweepValue {
  std::string text;
  std::string label;
  bool numeric = false;  // an integer or a float (plots put it on an axis)
  double number = 0;
};

enum class Distribution {
  grid,        // every value, in every combination with the other grid parameters
  choice,      // one of the values, drawn uniformly
  uniform,     // drawn uniformly in [low, high]
  log_uniform  // drawn so that its logarithm is uniform in [log low, log high]
};
inline constexpr EnumNames<Distribution, 4> distributions{
    "distribution",
    {{Distribution::grid, "grid"},
     {Distribution::choice, "choice"},
     {Distribution::uniform, "uniform"},
     {Distribution::log_uniform, "log_uniform"}}};
inline const char* distribution_name(Distribution d) { return distributions.name(d); }

struct SweepParameter {
  std::string key;       // deck key path, e.g. "optimizer.lr" or "model.layers[0].units"
  std::string location;  // "file:line:column" of the key
  Distribution distribution = Distribution::grid;
  std::vector<SweepValue> values;  // grid, choice
  double low = 0, high = 0;        // uniform, log_uniform
  bool integer = false;            // uniform, log_uniform between integer bounds

  bool sampled() const { return distribution != Distribution::grid; }
  // The value for a uniform draw u in [0, 1): an entry of `values` for grid
  // and choice; for uniform and log_uniform a number in [low, high], an
  // integer when the bounds are integers, else rounded to 6 significant
  // digits so that the value a trial used is exactly the text it shows.
  SweepValue draw(double u) const;
};

enum class SweepStrategy {
  grid,    // every combination of the grid parameters
  random,  // `trials` draws of every parameter, from `seed`
  halving  // successive halving over the grid (or over `trials` draws)
};
inline constexpr EnumNames<SweepStrategy, 3> sweep_strategies{
    "strategy",
    {{SweepStrategy::grid, "grid"},
     {SweepStrategy::random, "random"},
     {SweepStrategy::halving, "halving"}}};
inline const char* strategy_name(SweepStrategy s) { return sweep_strategies.name(s); }

struct SweepSpec {
  std::string path;
  std::string text;  // the file as written
  std::string name;  // [sweep] name; default: the file name without .sweep.toml or .toml
  // [sweep] output_dir; default output/sweeps/<name>
  std::string output_dir;
  SweepStrategy strategy = SweepStrategy::grid;
  int ranks_per_trial = 1;
  int trials = 0;  // random: the number of trials; halving: draws instead of the grid (0: grid)
  std::uint64_t seed = 0;
  std::vector<std::string> set;  // "key=value" applied to every trial, before the parameters
  std::vector<SweepParameter> parameters;

  std::string metric = "validation_accuracy";  // validation_accuracy | validation_loss
  bool maximize = true;

  // Successive halving: rung budgets min_epochs * reduction^k epochs, below
  // the deck's training.epochs, and a last rung at training.epochs; each
  // rung keeps the best 1 / reduction of the trials.
  int min_epochs = 1;
  int reduction = 3;
  int max_epochs = 0;  // the deck's training.epochs (with `set` applied)

  // "file:line:column" of each section and key the file gives (as
  // Deck::locations), and of what replaced one ("--output-dir DIR").
  std::map<std::string, std::string> locations;
  // The location of `key`, else of its section, else the file's path.
  std::string location(const std::string& key) const { return key_location(locations, key, path); }
};

// The sections [sweep], [objective] and [halving], declared key by key
// (deck/keys.hpp); the [[parameters]] entries have a reader of their own.
const std::vector<Section<SweepSpec>>& sweep_sections();
// Their key tables, as docs/sweeps.md carries them.
std::string sweep_key_reference();

// Parses and validates a sweep file for `deck` (loaded with any --set
// overrides of the command line): every parameter and `set` key must be a
// setting of the deck, the objective's validation split must exist, and the
// strategy's own keys must fit. Throws DeckError with file:line:column.
SweepSpec load_sweep(const std::string& path, const Deck& deck);
SweepSpec parse_sweep(const std::string& text, const std::string& path, const Deck& deck);

// The deck a trial runs: `deck`'s text with its own overrides, then the
// sweep's `set`, then `extra` (a trial's parameters and output directory).
Deck trial_deck(const Deck& deck, const SweepSpec& spec, const std::vector<std::string>& extra);

}  // namespace tessera
