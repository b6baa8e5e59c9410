// tessera-sweep: a hyperparameter search over a deck, described by a sweep
// file (docs/sweeps.md), with its trials run concurrently on groups of MPI
// ranks. The sweep itself is tessera::Sweep (app/sweep.hpp); this file reads
// the command line, prints, and maps failures to exit statuses: 2 for bad
// input on every rank (deck, sweep file, data files, the sweep directory),
// 1 when the sweep could not finish or no trial succeeded.
#include "cli.hpp"

#include <tessera/app/sweep.hpp>
#include <tessera/core/runtime.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <iomanip>
#include <iostream>

namespace {

// --plan: the trials and rungs, without training.
void print_plan(const tessera::SweepSpec& spec, const std::vector<tessera::Trial>& trials,
                int groups) {
  const auto rungs = tessera::sweep_rungs(spec, static_cast<int>(trials.size()));
  std::cout << "sweep " << spec.name << ": strategy " << tessera::strategy_name(spec.strategy)
            << ", " << trials.size() << " trials on " << groups << " group"
            << (groups > 1 ? "s" : "") << " of " << spec.ranks_per_trial << " rank"
            << (spec.ranks_per_trial > 1 ? "s" : "") << ", objective " << spec.metric << " ("
            << (spec.maximize ? "maximize" : "minimize") << ")\n";
  int epochs = 0, trained_to = 0;
  for (std::size_t k = 0; k < rungs.size(); ++k) {
    std::cout << "rung " << k << ": " << rungs[k].trials << " trials to " << rungs[k].epochs
              << " epochs\n";
    epochs += rungs[k].trials * (rungs[k].epochs - trained_to);
    trained_to = rungs[k].epochs;
  }
  std::cout << "epochs to train at most: " << epochs << " (every trial to " << spec.max_epochs
            << " epochs: " << spec.max_epochs * static_cast<int>(trials.size()) << ")\n";
  for (const auto& t : trials) {
    std::cout << "trial " << t.index << " ("
              << tessera::trial_directory(t.index, static_cast<int>(trials.size())) << "):";
    for (const auto& o : tessera::trial_overrides(spec, t)) std::cout << " " << o;
    std::cout << "\n";
  }
}

// The deck, the sweep file and the data files of its trials into deck and
// spec; what failed ("" when nothing did).
std::string read_inputs(const std::string& deck_path, const std::string& sweep_path,
                        const std::vector<std::string>& overrides, const std::string& output_dir,
                        tessera::Deck& deck, tessera::SweepSpec& spec) {
  try {
    deck = tessera::load_deck(deck_path, overrides);
    spec = tessera::load_sweep(sweep_path, deck);
    if (!output_dir.empty()) {
      spec.output_dir = output_dir;
      spec.locations["sweep.output_dir"] = "--output-dir " + output_dir;
    }
    tessera::check_data_files(tessera::trial_deck(deck, spec, {}));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The sweep's first lines: the build, the deck, strategy, trials, groups,
// objective and directory.
void print_start(const tessera::SweepSpec& spec, const tessera::Deck& deck,
                 const tessera::Sweep& sweep) {
  std::cout << tessera::build_description() << "\nsweep " << spec.name << ": deck " << deck.path
            << ", strategy " << tessera::strategy_name(spec.strategy) << ", "
            << sweep.trials().size() << " trials on " << sweep.groups() << " group"
            << (sweep.groups() > 1 ? "s" : "") << " of " << spec.ranks_per_trial << " rank"
            << (spec.ranks_per_trial > 1 ? "s" : "") << "; objective " << spec.metric << " ("
            << (spec.maximize ? "maximize" : "minimize")
            << ")\nsweep directory: " << spec.output_dir << "\n";
  if (!sweep.resumed_from().empty()) std::cout << sweep.resumed_from() << "\n";
  std::cout << std::flush;
}

// Whether any trial succeeded (the best one did not fail).
bool succeeded(const tessera::SweepSummary& summary) {
  return !summary.ranked.empty() && summary.ranked.front().state != tessera::TrialState::failed;
}

// The results table, what was trained, where the files are, and the best
// trial's command alone.
void print_results(const tessera::SweepSpec& spec, const tessera::Deck& deck,
                   const tessera::SweepSummary& summary, double seconds) {
  std::cout << "\n"
            << tessera::results_markdown(spec, summary.trials, summary.outcomes) << "\n"
            << summary.jobs_run << " trial jobs run now, " << std::fixed << std::setprecision(1)
            << seconds << " s; " << summary.epochs_trained << " epochs trained in all (every "
            << "trial to " << spec.max_epochs << " epochs: " << summary.epochs_full << ")\n"
            << "results: " << spec.output_dir << "/results.md, " << spec.output_dir
            << "/results.csv; log: " << spec.output_dir << "/sweep.jsonl\n"
            << "plot: python3 scripts/plot_sweep.py " << spec.output_dir << "\n";
  if (succeeded(summary)) {
    const auto& best = summary.ranked.front();
    std::cout << "best: trial " << best.trial << "; alone: "
              << tessera::reproduce_command(deck, spec,
                                            summary.trials.at(static_cast<std::size_t>(best.trial)),
                                            spec.output_dir + "/best")
              << "\n";
  } else {
    std::cerr << "tessera-sweep: every trial failed\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-sweep: a hyperparameter search over a deck (see docs/sweeps.md)"};
  std::string deck_path, sweep_path, output_dir;
  std::vector<std::string> overrides;
  bool plan_only = false;
  app.add_option("deck", deck_path, "input deck (TOML); see docs/decks.md")->required();
  app.add_option("sweep", sweep_path, "sweep file (TOML); see docs/sweeps.md")->required();
  app.add_option("--set", overrides,
                 "override a deck value for every trial, as tessera-train --set (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--output-dir", output_dir,
                 "the sweep directory, instead of the sweep file's sweep.output_dir");
  app.add_flag("--plan", plan_only,
               "validate the deck and sweep file, print the trials and rungs, do not train");
  // Help, version and command-line errors are answered before MPI and Kokkos
  // start, by the first rank of a job only.
  if (const auto status = tessera::app::parse_command_line(app, argc, argv, "tessera-sweep"))
    return *status;

  tessera::Runtime runtime(argc, argv);
  const tessera::Communicator world;
  const bool root = world.rank() == 0;

  const auto started = std::chrono::steady_clock::now();
  std::unique_ptr<tessera::Sweep> sweep;
  tessera::Deck deck;
  tessera::SweepSpec spec;
  try {
    // The deck, the sweep file and the data: every rank's verdict.
    const std::string failure =
        read_inputs(deck_path, sweep_path, overrides, output_dir, deck, spec);
    try {
      world.agree(failure);
    } catch (const tessera::CollectiveError& e) {
      // Every rank reads the same files, so rank 0's own message (file:line:
      // column first) says it best; another rank's when rank 0 had none.
      if (root) std::cerr << (failure.empty() ? e.what() : failure) << "\n";
      return 2;
    }
    sweep = std::make_unique<tessera::Sweep>(spec, deck);
    if (plan_only) {
      if (root) print_plan(spec, sweep->trials(), sweep->groups());
      return 0;
    }
    sweep->prepare();
  } catch (const tessera::CollectiveError& e) {
    if (root) std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tessera-sweep: rank " << world.rank() << ": error: " << e.what() << std::endl;
    world.abort(1);
  }

  if (root) print_start(spec, deck, *sweep);
  tessera::SweepCallbacks callbacks;
  callbacks.log = [](const std::string& line) { std::cout << line << std::endl; };
  tessera::SweepSummary summary;
  try {
    summary = sweep->run(callbacks);
  } catch (const tessera::CollectiveError& e) {
    if (root) std::cerr << "tessera-sweep: error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tessera-sweep: rank " << world.rank() << ": error: " << e.what()
              << "; stopping every rank" << std::endl;
    world.abort(1);
  }
  if (root)
    print_results(
        spec, deck, summary,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return succeeded(summary) ? 0 : 1;
}
