// Sweeps without training: the sweep file's parsing and every class of its
// errors at file:line:column, the trials of each strategy, successive
// halving's rungs and promotions, the ranking and tables, and the log a
// resumed sweep reads.
#include <tessera/app/sweep.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "key_tables.hpp"
#include "tessera_test.hpp"

namespace {

using namespace tessera;

const char* mlp_deck = R"([run]
seed = 3

[data]
train_images = "a"
train_labels = "b"
test_images = "c"
test_labels = "d"
validation_split = 0.2

[model]
input_shape = [784]

[[model.layers]]
type = "dense"
units = 16

[[model.layers]]
type = "relu"

[[model.layers]]
type = "dense"
units = 10

[optimizer]
type = "sgd"
lr = 0.05

[training]
epochs = 9
batch_size = 64
)";

const char* grid_sweep = R"([sweep]
strategy = "grid"
output_dir = "out/s"

[[parameters]]
key = "optimizer.lr"
grid = [0.001, 0.01, 0.1]

[[parameters]]
key = "model.layers[0].units"
grid = [32, 64]
)";

Deck deck() { return parse_deck(mlp_deck, "mlp.toml"); }

// Expects "sweep.toml:line:column: key: ..." containing `fragment`.
void expect_sweep_error(const std::string& text, int line, int column, const std::string& key,
                        const std::string& fragment, const Deck& base = deck()) {
  try {
    parse_sweep(text, "sweep.toml", base);
    ADD_FAILURE() << "expected a DeckError at " << line << ":" << column << " " << key;
  } catch (const DeckError& e) {
    const std::string msg = e.what();
    const std::string location =
        "sweep.toml:" + std::to_string(line) + ":" + std::to_string(column) + ": " + key + ": ";
    EXPECT_EQ(msg.rfind(location, 0), 0u) << "message: " << msg << "\nexpected start: " << location;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST(SweepFile, GridParsesWithDefaults) {
  const SweepSpec spec = parse_sweep(grid_sweep, "dir/lr_width.toml", deck());
  EXPECT_EQ(spec.name, "lr_width");
  EXPECT_EQ(spec.output_dir, "out/s");
  EXPECT_EQ(spec.strategy, SweepStrategy::grid);
  EXPECT_EQ(spec.ranks_per_trial, 1);
  EXPECT_EQ(spec.metric, "validation_accuracy");
  EXPECT_TRUE(spec.maximize);
  EXPECT_EQ(spec.max_epochs, 9);
  ASSERT_EQ(spec.parameters.size(), 2u);
  EXPECT_EQ(spec.parameters[0].key, "optimizer.lr");
  EXPECT_EQ(spec.parameters[0].location, "dir/lr_width.toml:6:7");
  ASSERT_EQ(spec.parameters[0].values.size(), 3u);
  EXPECT_EQ(spec.parameters[0].values[1].text, "0.01");
  EXPECT_DOUBLE_EQ(spec.parameters[0].values[1].number, 0.01);
  EXPECT_EQ(spec.parameters[1].values[0].text, "32");
  EXPECT_TRUE(spec.parameters[1].values[0].numeric);
}

TEST(SweepFile, ShippedSweepFilesParse) {
  // Every shipped sweep file sweeps the MLP deck.
  const std::string root = test::source_dir();
  const Deck mlp = load_deck(root + "/inputs/fashion_mnist_mlp.toml");
  int files = 0;
  for (const auto& dir : {"/inputs", "/tests/app"})
    for (const auto& entry : std::filesystem::directory_iterator(root + dir)) {
      const std::string path = entry.path().string();
      if (path.size() < 11 || path.compare(path.size() - 11, 11, ".sweep.toml") != 0) continue;
      SCOPED_TRACE(path);
      const SweepSpec spec = load_sweep(path, mlp);
      EXPECT_FALSE(plan_trials(spec).empty());
      EXPECT_EQ(spec.name + ".sweep.toml", entry.path().filename().string());
      ++files;
    }
  EXPECT_GE(files, 4);
  // So does the example in docs/sweeps.md.
  std::ifstream doc(root + "/docs/sweeps.md");
  const std::string text{std::istreambuf_iterator<char>(doc), std::istreambuf_iterator<char>()};
  const auto begin = text.find("```toml\n"), end = text.find("```\n", begin + 8);
  ASSERT_NE(end, std::string::npos) << "docs/sweeps.md has no ```toml example";
  const SweepSpec example = parse_sweep(text.substr(begin + 8, end - begin - 8), "sweeps.md", mlp);
  EXPECT_EQ(plan_trials(example).size(), 8u);
  EXPECT_EQ(parse_sweep(grid_sweep, "x/mlp.sweep.toml", deck()).name, "mlp");
  EXPECT_EQ(parse_sweep(test::replace_once(grid_sweep, "output_dir = \"out/s\"\n", ""),
                        "mlp.sweep.toml", deck())
                .output_dir,
            "output/sweeps/mlp");
}

TEST(SweepFile, ValuesOfEveryTypeBecomeSetTextTheDeckReads) {
  const std::string text = R"([sweep]
strategy = "random"
trials = 2
set = ["optimizer.type=\"adam\"", "optimizer.lr=0.001"]

[[parameters]]
key = "optimizer.type"
choice = ["adam", "adamw"]

[[parameters]]
key = "optimizer.lr"
choice = [1e-3, 1.0, 2, 80.0, 1e5, 2.5e-6]

[objective]
metric = "validation_loss"
)";
  const SweepSpec spec = parse_sweep(text, "sweep.toml", deck());
  EXPECT_FALSE(spec.maximize);
  EXPECT_EQ(spec.set.size(), 2u);
  EXPECT_EQ(spec.parameters[0].values[1].text, "\"adamw\"");
  EXPECT_EQ(spec.parameters[0].values[1].label, "adamw");
  EXPECT_EQ(spec.parameters[1].values[0].text, "0.001");
  EXPECT_EQ(spec.parameters[1].values[1].text, "1.0");
  EXPECT_EQ(spec.parameters[1].values[2].text, "2");
  EXPECT_EQ(spec.parameters[1].values[3].text, "80.0");
  EXPECT_EQ(spec.parameters[1].values[4].text, "100000.0");
  EXPECT_EQ(spec.parameters[1].values[5].text, "2.5e-06");
  const Deck trial = trial_deck(deck(), spec, {"optimizer.type=\"adamw\"", "optimizer.lr=1.0"});
  EXPECT_EQ(trial.optimizer.type, "adamw");
  EXPECT_FLOAT_EQ(trial.training.schedule.base_lr, 1.0f);
}

TEST(SweepFile, ErrorsNameFileLineColumnAndKey) {
  expect_sweep_error(test::replace_once(grid_sweep, "strategy = \"grid\"", "strategi = \"grid\""),
                     2, 1, "sweep.strategi", "did you mean 'sweep.strategy'?");
  expect_sweep_error(test::replace_once(grid_sweep, "\"grid\"\n", "\"hyperband\"\n"), 2, 12,
                     "sweep.strategy",
                     "'hyperband' is not supported; allowed: grid, random, halving");
  expect_sweep_error(test::replace_once(grid_sweep, "output_dir", "trials = 4\noutput_dir"), 3, 1,
                     "sweep.trials", "does not apply to strategy 'grid'");
  expect_sweep_error(
      test::replace_once(grid_sweep, "[0.001, 0.01, 0.1]", "[0.001, 0.01, 0.1]\nchoice = [1]"), 8,
      10, "parameters[0].choice", "has grid already");
  expect_sweep_error(test::replace_once(grid_sweep, "grid = [32, 64]", ""), 9, 1,
                     "parameters[1].grid", "needs one of grid, choice, uniform, log_uniform");
  expect_sweep_error(test::replace_once(grid_sweep, "[32, 64]", "[32, 32]"), 11, 13,
                     "parameters[1].grid", "value 32 appears twice");
  expect_sweep_error(test::replace_once(grid_sweep, "[32, 64]", "[]"), 11, 8, "parameters[1].grid",
                     "non-empty array");
  expect_sweep_error(test::replace_once(grid_sweep, "[32, 64]", "[[32], 64]"), 11, 9,
                     "parameters[1].grid", "expected integers, numbers, strings or booleans");
  expect_sweep_error(
      test::replace_once(grid_sweep, "\"model.layers[0].units\"", "\"optimizer.lr\""), 10, 7,
      "parameters[1].key", "'optimizer.lr' is swept twice");
  expect_sweep_error(test::replace_once(grid_sweep, "\"optimizer.lr\"", "\"run.output_dir\""), 6, 7,
                     "parameters[0].key", "its own output and checkpoint directory");
  expect_sweep_error("[sweep]\nstrategy = \"grid\"\n", 1, 1, "parameters",
                     "at least one [[parameters]] entry is required");
  expect_sweep_error("[sweep\n", 1, 7, "TOML syntax error", "");
}

TEST(SweepFile, KeysMustBeSettingsOfTheDeck) {
  // A mistyped key fails at the parameter, with the deck's suggestion.
  expect_sweep_error(test::replace_once(grid_sweep, "\"optimizer.lr\"", "\"optimizer.lrr\""), 6, 7,
                     "parameters[0].key",
                     "'optimizer.lrr' is not a setting of the deck mlp.toml: --set "
                     "optimizer.lrr=0.001: optimizer.lrr: unknown key (did you mean "
                     "'optimizer.lr'?)");
  expect_sweep_error(test::replace_once(grid_sweep, "layers[0]", "layers[7]"), 10, 7,
                     "parameters[1].key", "'layers' has 3 entries");
  expect_sweep_error(test::replace_once(grid_sweep, "\"optimizer.lr\"", "\"optimiser.lr\""), 6, 7,
                     "parameters[0].key", "optimiser: unknown key");
  // A value the deck refuses only fails its trials: it may be a
  // combination that other parameters make valid.
  const SweepSpec spec = parse_sweep(
      test::replace_once(grid_sweep, "[0.001, 0.01, 0.1]", "[1000.0, 0.1]"), "s.toml", deck());
  EXPECT_THROW(trial_deck(deck(), spec, trial_overrides(spec, plan_trials(spec)[0])), DeckError);
  EXPECT_NO_THROW(trial_deck(deck(), spec, trial_overrides(spec, plan_trials(spec)[2])));
}

TEST(SweepFile, SetEntriesAreCheckedOneByOne) {
  expect_sweep_error(
      test::replace_once(grid_sweep, "output_dir = \"out/s\"",
                         "set = [\"training.batch_size=32\",\n       \"training.epochs=0\"]"),
      4, 8, "sweep.set",
      "the deck refuses it: --set training.epochs=0: training.epochs: value 0 is out of range");
  expect_sweep_error(
      test::replace_once(grid_sweep, "output_dir = \"out/s\"", "set = [\"training.epochs\"]"), 3, 8,
      "sweep.set", "expected \"key.path=value\" strings");
  expect_sweep_error(test::replace_once(grid_sweep, "output_dir = \"out/s\"",
                                        "set = [\"checkpoint.directory=x\"]"),
                     3, 8, "sweep.set", "its own output and checkpoint directory");
}

TEST(SweepFile, StrategiesAcceptTheirOwnDistributions) {
  const std::string uniform =
      test::replace_once(grid_sweep, "grid = [0.001, 0.01, 0.1]", "uniform = [0.1, 1]");
  expect_sweep_error(uniform, 7, 11, "parameters[0].uniform",
                     "strategy 'grid' runs every combination of grid values");
  expect_sweep_error(test::replace_once(uniform, "\"grid\"", "\"halving\""), 7, 11,
                     "parameters[0].uniform", "strategy 'halving' without sweep.trials");
  expect_sweep_error(test::replace_once(uniform, "\"grid\"", "\"random\""), 1, 1, "sweep.trials",
                     "required for strategy 'random'");
  EXPECT_NO_THROW(parse_sweep(test::replace_once(uniform, "\"grid\"", "\"random\"\ntrials = 3"),
                              "s.toml", deck()));
  EXPECT_NO_THROW(parse_sweep(test::replace_once(uniform, "\"grid\"", "\"halving\"\ntrials = 3"),
                              "s.toml", deck()));
  const std::string random = test::replace_once(grid_sweep, "\"grid\"", "\"random\"\ntrials = 3");
  expect_sweep_error(test::replace_once(random, "grid = [0.001, 0.01, 0.1]", "uniform = [1, 0.5]"),
                     8, 11, "parameters[0].uniform", "low < high");
  expect_sweep_error(
      test::replace_once(random, "grid = [0.001, 0.01, 0.1]", "log_uniform = [0, 1]"), 8, 16,
      "parameters[0].log_uniform", "must be above 0");
  expect_sweep_error(test::replace_once(random, "grid = [0.001, 0.01, 0.1]", "uniform = [1]"), 8,
                     11, "parameters[0].uniform", "expected [low, high]");
}

TEST(SweepFile, ObjectiveAndHalvingChecks) {
  // Tuning on the test set is refused.
  const Deck no_split =
      parse_deck(test::replace_once(mlp_deck, "validation_split = 0.2\n", ""), "mlp.toml");
  expect_sweep_error(std::string(grid_sweep) + "\n[objective]\nmetric = \"validation_loss\"\n", 14,
                     10, "objective.metric", "has no data.validation_split", no_split);
  // Without [objective], at the sweep's `set`, or at the file's first line.
  expect_sweep_error(
      test::replace_once(grid_sweep, "output_dir", "set = [\"run.seed=1\"]\noutput_dir"), 3, 7,
      "objective.metric", "has no data.validation_split", no_split);
  expect_sweep_error(grid_sweep, 1, 1, "objective.metric", "has no data.validation_split",
                     no_split);
  EXPECT_NO_THROW(
      parse_sweep(test::replace_once(grid_sweep, "output_dir",
                                     "set = [\"data.validation_split=0.1\"]\noutput_dir"),
                  "s.toml", no_split));
  expect_sweep_error(std::string(grid_sweep) + "\n[objective]\ngoal = \"best\"\n", 14, 8,
                     "objective.goal", "allowed: maximize, minimize");
  expect_sweep_error(std::string(grid_sweep) + "\n[halving]\nreduction = 2\n", 13, 1, "halving",
                     "applies to strategy 'halving' only");
  const std::string halving = test::replace_once(grid_sweep, "\"grid\"", "\"halving\"");
  expect_sweep_error(halving + "\n[halving]\nmin_epochs = 9\n", 14, 14, "halving.min_epochs",
                     "below the 9 epochs of the deck");
  // The deck's epochs leave no room for rungs: at the strategy.
  expect_sweep_error(
      halving, 2, 12, "halving.min_epochs", "below the 1 epochs of the deck",
      parse_deck(test::replace_once(mlp_deck, "epochs = 9", "epochs = 1"), "mlp.toml"));
  expect_sweep_error(halving + "\n[halving]\nreduction = 1\n", 14, 13, "halving.reduction",
                     "out of range [2, 1000]");
  expect_sweep_error(test::replace_once(halving, "\"optimizer.lr\"", "\"training.epochs\""), 6, 7,
                     "parameters[0].key", "successive halving decides how many epochs");
  const SweepSpec spec = parse_sweep(
      test::replace_once(halving, "output_dir", "set = [\"training.epochs=27\"]\noutput_dir"),
      "s.toml", deck());
  EXPECT_EQ(spec.max_epochs, 27);
  EXPECT_EQ(spec.min_epochs, 1);
  EXPECT_EQ(spec.reduction, 3);
}

TEST(SweepPlan, GridEnumeratesEveryCombinationLastParameterFastest) {
  const SweepSpec spec = parse_sweep(grid_sweep, "s.toml", deck());
  const auto trials = plan_trials(spec);
  ASSERT_EQ(trials.size(), 6u);
  std::vector<std::string> seen;
  for (const auto& t : trials) {
    EXPECT_EQ(t.index, static_cast<int>(seen.size()));
    seen.push_back(t.values[0].text + "/" + t.values[1].text);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"0.001/32", "0.001/64", "0.01/32", "0.01/64", "0.1/32",
                                            "0.1/64"}));
  EXPECT_EQ(trial_overrides(spec, trials[3]),
            (std::vector<std::string>{"optimizer.lr=0.01", "model.layers[0].units=64"}));
}

const char* random_sweep = R"([sweep]
strategy = "random"
trials = 400
seed = 5

[[parameters]]
key = "optimizer.lr"
log_uniform = [1e-4, 1.0]

[[parameters]]
key = "model.layers[0].units"
uniform = [8, 12]

[[parameters]]
key = "run.seed"
choice = [1, 2]

[[parameters]]
key = "optimizer.momentum"
uniform = [0.5, 0.9]
)";

TEST(SweepPlan, RandomDrawsAreSeededAndFollowTheirDistributions) {
  const SweepSpec spec = parse_sweep(random_sweep, "s.toml", deck());
  const auto trials = plan_trials(spec);
  ASSERT_EQ(trials.size(), 400u);
  // The same seed draws the same trials; another seed others.
  const auto again = plan_trials(spec);
  SweepSpec reseeded = spec;
  reseeded.seed = 6;
  const auto other = plan_trials(reseeded);
  int differ = 0;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    EXPECT_EQ(trial_overrides(spec, trials[i]), trial_overrides(spec, again[i]));
    differ += trials[i].values[0].text != other[i].values[0].text;
  }
  EXPECT_GT(differ, 390);

  std::map<int, int> decades, units, seeds;
  for (const auto& t : trials) {
    const double lr = t.values[0].number;
    ASSERT_GE(lr, 1e-4);
    ASSERT_LE(lr, 1.0);
    // The text is what the trial uses: 6 significant digits, a TOML float.
    EXPECT_EQ(std::strtod(t.values[0].text.c_str(), nullptr), lr);
    EXPECT_NE(t.values[0].text.find_first_of(".e"), std::string::npos) << t.values[0].text;
    ++decades[static_cast<int>(std::floor(-std::log10(lr)))];
    const double u = t.values[1].number;
    ASSERT_EQ(u, std::floor(u)) << "integer bounds draw integers";
    EXPECT_EQ(t.values[1].text, std::to_string(static_cast<int>(u)));
    ++units[static_cast<int>(u)];
    ++seeds[static_cast<int>(t.values[2].number)];
    EXPECT_GE(t.values[3].number, 0.5);
    EXPECT_LE(t.values[3].number, 0.9);
  }
  // log_uniform: each of the 4 decades gets about a quarter (100 +- 40);
  // uniform integers 8..12 about a fifth each, ends included; choice halves.
  ASSERT_EQ(decades.size(), 4u);
  for (const auto& [decade, count] : decades) EXPECT_NEAR(count, 100, 40) << "decade " << decade;
  ASSERT_EQ(units.size(), 5u);
  for (const auto& [u, count] : units) EXPECT_NEAR(count, 80, 35) << "units " << u;
  EXPECT_NEAR(seeds[1], 200, 50);

  // A parameter's draws do not depend on the others: dropping one leaves them.
  SweepSpec fewer = spec;
  fewer.parameters.erase(fewer.parameters.begin() + 1);
  const auto fewer_trials = plan_trials(fewer);
  for (std::size_t i = 0; i < trials.size(); ++i)
    EXPECT_EQ(fewer_trials[i].values[0].text, trials[i].values[0].text);
}

SweepSpec halving_spec(int min_epochs, int reduction, int max_epochs) {
  SweepSpec spec =
      parse_sweep(test::replace_once(grid_sweep, "\"grid\"", "\"halving\""), "s.toml", deck());
  spec.min_epochs = min_epochs;
  spec.reduction = reduction;
  spec.max_epochs = max_epochs;
  return spec;
}

std::vector<std::pair<int, int>> pairs(const std::vector<Rung>& rungs) {
  std::vector<std::pair<int, int>> out;
  for (const auto& r : rungs) out.emplace_back(r.epochs, r.trials);
  return out;
}

TEST(SweepPlan, HalvingRungs) {
  using P = std::vector<std::pair<int, int>>;
  EXPECT_EQ(pairs(sweep_rungs(halving_spec(1, 3, 9), 9)), (P{{1, 9}, {3, 3}, {9, 1}}));
  EXPECT_EQ(pairs(sweep_rungs(halving_spec(1, 3, 9), 27)), (P{{1, 27}, {3, 9}, {9, 3}}));
  EXPECT_EQ(pairs(sweep_rungs(halving_spec(2, 3, 10), 20)), (P{{2, 20}, {6, 6}, {10, 2}}));
  EXPECT_EQ(pairs(sweep_rungs(halving_spec(1, 2, 8), 8)), (P{{1, 8}, {2, 4}, {4, 2}, {8, 1}}));
  // Once one trial is left it goes straight to the deck's epochs.
  EXPECT_EQ(pairs(sweep_rungs(halving_spec(1, 3, 9), 3)), (P{{1, 3}, {9, 1}}));
  EXPECT_EQ(pairs(sweep_rungs(halving_spec(1, 3, 9), 1)), (P{{9, 1}}));
  // Epochs a 9-trial halving trains, each rung continuing its trials:
  // 9 x 1 + 3 x (3 - 1) + 1 x (9 - 3) = 21, against 81 for the grid.
  int epochs = 0, before = 0;
  for (const auto& r : sweep_rungs(halving_spec(1, 3, 9), 9)) {
    epochs += r.trials * (r.epochs - before);
    before = r.epochs;
  }
  EXPECT_EQ(epochs, 21);
  const SweepSpec grid = parse_sweep(grid_sweep, "s.toml", deck());
  EXPECT_EQ(pairs(sweep_rungs(grid, 6)), (P{{9, 6}}));
}

TrialOutcome outcome(int trial, int rung, TrialState state, int epochs, double accuracy,
                     double loss = 1.0) {
  TrialOutcome o;
  o.trial = trial;
  o.rung = rung;
  o.state = state;
  o.epochs = epochs;
  o.validation.accuracy = accuracy;
  o.validation.loss = loss;
  if (state == TrialState::failed) o.error = "tessera::Trainer: non-finite loss";
  if (state == TrialState::finished) o.test = {0.5, accuracy - 0.01, 100};
  return o;
}

TEST(SweepPlan, PromotionAndStandingsNeverDependOnOrder) {
  SweepSpec spec = halving_spec(1, 3, 9);
  const auto P = TrialState::paused, F = TrialState::finished, X = TrialState::failed;
  std::vector<TrialOutcome> rung0{outcome(0, 0, P, 1, 0.70), outcome(1, 0, X, 0, 0),
                                  outcome(2, 0, P, 1, 0.80), outcome(3, 0, P, 1, 0.75),
                                  outcome(4, 0, P, 1, 0.80)};
  // Ties go to the lower trial number; failures are never promoted.
  EXPECT_EQ(promote(spec, rung0, 2), (std::vector<int>{2, 4}));
  std::vector<TrialOutcome> reversed(rung0.rbegin(), rung0.rend());
  EXPECT_EQ(promote(spec, reversed, 3), (std::vector<int>{2, 4, 3}));
  EXPECT_EQ(promote(spec, rung0, 10), (std::vector<int>{2, 4, 3, 0}));
  spec.maximize = false;
  spec.metric = "validation_loss";
  std::vector<TrialOutcome> losses{outcome(0, 0, P, 1, 0, 0.5), outcome(1, 0, P, 1, 0, 0.3),
                                   outcome(2, 0, P, 1, 0, 0.4)};
  EXPECT_EQ(promote(spec, losses, 2), (std::vector<int>{1, 2}));

  // Standings: each trial's furthest outcome; further first, failures last.
  spec = halving_spec(1, 3, 9);
  std::vector<TrialOutcome> all = rung0;
  all.push_back(outcome(2, 1, P, 3, 0.83));
  all.push_back(outcome(4, 1, P, 3, 0.85));
  all.push_back(outcome(4, 2, F, 9, 0.86));
  const auto ranked = standings(spec, all);
  std::vector<int> order;
  for (const auto& o : ranked) order.push_back(o.trial);
  EXPECT_EQ(order, (std::vector<int>{4, 2, 3, 0, 1}));
  EXPECT_EQ(ranked[0].state, TrialState::finished);
  EXPECT_EQ(ranked[1].state, TrialState::paused);
  // 1 + 0 + 3 + 1 + 9 epochs: a trial continues its run from rung to rung.
  EXPECT_EQ(epochs_trained(all), 14);
  std::vector<TrialOutcome> shuffled{all[6], all[1], all[5], all[0], all[3], all[2], all[4]};
  std::vector<int> again;
  for (const auto& o : standings(spec, shuffled)) again.push_back(o.trial);
  EXPECT_EQ(again, order);
}

TEST(SweepResults, TablesRankTrialsAndNameFailures) {
  const SweepSpec spec = parse_sweep(grid_sweep, "s.toml", deck());
  const auto trials = plan_trials(spec);
  const auto F = TrialState::finished;
  std::vector<TrialOutcome> all;
  for (int t = 0; t < 6; ++t)
    all.push_back(t == 4 ? outcome(t, 0, TrialState::failed, 2, 0)
                         : outcome(t, 0, F, 9, 0.5 + 0.01 * t, 1.0 / 3.0));
  const std::string csv = results_csv(spec, trials, all);
  const std::string md = results_markdown(spec, trials, all);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "rank,trial,directory,optimizer.lr,model.layers[0].units,state,epochs,"
            "validation_accuracy,validation_loss,test_accuracy,test_loss,error");
  // Best first, at full precision; the failed trial last with its error.
  EXPECT_NE(csv.find("\n1,5,trials/t005,0.1,64,finished,9,0.55,0.3333333333333333,"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find("\n6,4,trials/t004,0.1,32,failed,2,,,,,tessera::Trainer: non-finite loss\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(md.find("| 1 | 5 | 0.1 | 64 | finished | 9 | 0.5500 | 0.3333 | 0.5400 | 0.5000 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Trial 4 failed: tessera::Trainer: non-finite loss"), std::string::npos);
  EXPECT_NE(md.find("every trial to 9 epochs would take 54"), std::string::npos) << md;
  EXPECT_EQ(trial_directory(7, 8), "trials/t007");
  EXPECT_EQ(trial_directory(1234, 2000), "trials/t1234");
}

TEST(SweepLog, OutcomesRoundTripAndATornLineIsDropped) {
  const SweepSpec spec = parse_sweep(grid_sweep, "s.toml", deck());
  const std::string identity = sweep_identity(deck(), spec);
  EXPECT_EQ(identity.size(), 16u);
  const auto F = TrialState::finished;
  const TrialOutcome a = outcome(0, 0, F, 9, 0.123456789012345678, 0.1 + 0.2);
  const TrialOutcome b = outcome(3, 0, TrialState::failed, 1, 0);
  const std::string head = R"({"type":"sweep","identity":")" + identity + "\"}\n";
  const std::string text = head + outcome_record(spec, a) + "\n" +
                           R"({"type":"trial","trial":1,"state":"started"})" + "\n" +
                           outcome_record(spec, b) + "\n";
  const std::string torn = text + outcome_record(spec, a).substr(0, 30);
  const SweepLog log = read_sweep_log(torn, "sweep.jsonl", identity);
  EXPECT_EQ(log.starts, 1);
  EXPECT_EQ(log.complete, text.size());
  ASSERT_EQ(log.outcomes.size(), 2u);
  EXPECT_EQ(log.outcomes[0].validation.accuracy, a.validation.accuracy);  // bitwise
  EXPECT_EQ(log.outcomes[0].validation.loss, a.validation.loss);
  EXPECT_EQ(log.outcomes[0].test.accuracy, a.test.accuracy);
  EXPECT_EQ(log.outcomes[0].state, F);
  EXPECT_EQ(log.outcomes[1].state, TrialState::failed);
  EXPECT_EQ(log.outcomes[1].error, b.error);
  EXPECT_EQ(log.outcomes[1].epochs, 1);

  // A damaged line inside the log, or a log of another sweep, is refused.
  try {
    read_sweep_log(head + "{not json\n" + outcome_record(spec, a) + "\n", "sweep.jsonl", identity);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("sweep.jsonl:2: not a sweep log record", 0), 0u)
        << e.what();
  }
  SweepSpec other = spec;
  other.text += "\n# another sweep\n";
  try {
    read_sweep_log(text, "sweep.jsonl", sweep_identity(deck(), other));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sweep.jsonl:1: this directory holds a sweep of another"),
              std::string::npos)
        << e.what();
  }
  // The deck's overrides are part of the identity.
  EXPECT_NE(sweep_identity(parse_deck(mlp_deck, "mlp.toml", {"training.epochs=3"}), spec),
            identity);
}

TEST(SweepPlan, ReproduceCommandQuotesForTheShell) {
  const SweepSpec spec =
      parse_sweep(test::replace_once(grid_sweep, "output_dir",
                                     "set = [\"optimizer.type=\\\"adam\\\"\"]\noutput_dir"),
                  "s.toml", parse_deck(mlp_deck, "my decks/mlp.toml"));
  const Deck base = parse_deck(mlp_deck, "my decks/mlp.toml", {"training.epochs=3"});
  // Its own output folder, so the rerun mixes with neither the deck's
  // default folder nor the trial's.
  EXPECT_EQ(reproduce_command(base, spec, plan_trials(spec)[1], "my sweeps/s/best"),
            "tessera-train 'my decks/mlp.toml' --set training.epochs=3 --set "
            "'optimizer.type=\"adam\"' --set optimizer.lr=0.001 --set 'model.layers[0].units=64' "
            "--set 'run.output_dir=my sweeps/s/best' --set "
            "'checkpoint.directory=my sweeps/s/best/checkpoints'");
}

// docs/sweeps.md states the keys of [sweep], [objective] and [halving] as
// their declarations do.
TEST(SweepFile, ReferenceTablesAreTheDeclarations) {
  test::expect_documented(sweep_key_reference(), "docs/sweeps.md", sweep_sections().size());
}

}  // namespace
