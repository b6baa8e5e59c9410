// tessera-train: train the model an input deck describes and report its
// test accuracy; under mpiexec, data parallel over the ranks. The run itself
// is tessera::Run (app/run.hpp); this file reads the command line, prints,
// and maps failures to exit statuses: 2 for bad input (deck, data, output
// directory, checkpoint; every rank agrees), 1 for a failure every rank saw
// during training, and an abort of the whole job for a failure only one
// rank saw.
#include <tessera/app/run.hpp>
#include <tessera/core/runtime.hpp>
#include <tessera/deck/sweep.hpp>
#include <tessera/layers/registry.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>

#include "cli.hpp"
#include "progress.hpp"

namespace {

// --inject-fault: make one rank fail on purpose, for the tests that prove a
// failing rank brings the whole job down instead of leaving it hanging.
struct Fault {
  std::string what;       // "data" or "step"
  std::int64_t step = 0;  // for "step": the optimizer step (1-based) after which to fail
  int rank = -1;
  bool here(int r) const { return rank == r; }
};

Fault parse_fault(const std::string& text) {
  const auto at = text.rfind('@');
  Fault f;
  try {
    if (at == std::string::npos) throw std::invalid_argument("no @");
    f.rank = std::stoi(text.substr(at + 1));
    const std::string what = text.substr(0, at);
    if (what == "data") {
      f.what = what;
    } else if (what.rfind("step:", 0) == 0) {
      f.what = "step";
      f.step = std::stoll(what.substr(5));
    } else {
      throw std::invalid_argument(what);
    }
  } catch (const std::exception&) {
    throw std::invalid_argument("'" + text + "': expected data@RANK or step:N@RANK");
  }
  return f;
}

// What the command line asked for.
struct CommandLine {
  std::string deck_path;
  bool check_only = false;
  bool list_layers = false;
  bool list_keys = false;
  std::vector<std::string> overrides;
  std::string restart;
  bool overwrite = false;
  std::string progress = "auto";
  std::string fault_text;
  Fault fault;
};

void declare_options(CLI::App& app, CommandLine& cl) {
  app.add_option("deck", cl.deck_path, "input deck (TOML); see docs/decks.md");
  app.add_flag("--check", cl.check_only,
               "validate the deck and its data files, print the model summary, every "
               "setting (with where the deck or --set gave it) and every layer's options, do not "
               "train");
  app.add_flag(
      "--list-layers", cl.list_layers,
      "print the layer types a deck can use, their keys and defaults (markdown), and exit");
  app.add_flag("--list-keys", cl.list_keys,
               "print every section's keys, a deck's and a sweep file's, with their types, "
               "defaults, allowed values and meaning (markdown), and exit");
  app.add_option("--set", cl.overrides,
                 "override a deck value, e.g. --set training.epochs=3 or "
                 "--set model.layers[0].units=64 (repeatable; the value is TOML, or else a string)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--restart", cl.restart,
                 "resume from a checkpoint: a file, a directory (its latest), or 'latest' (the "
                 "newest in the deck's checkpoint.directory)");
  app.add_flag("--overwrite", cl.overwrite,
               "start a new run in an output folder that holds an earlier run: remove its "
               "metrics.jsonl and checkpoints first (without it such a run is refused)");
  app.add_option("--progress", cl.progress, tessera::app::progress_modes_help)
      ->check(CLI::IsMember({"auto", "bar", "lines"}));
  app.add_option("--inject-fault", cl.fault_text,
                 "testing: make one rank fail, data@RANK (cannot read its data) or step:N@RANK "
                 "(fails after optimizer step N)")
      ->check([&cl](const std::string& text) {
        try {
          cl.fault = parse_fault(text);
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
        return std::string();
      });
}

// Reads the deck and its data files (every rank's verdict), describes the
// run and prepares it (output folder, data, restart). Returns the exit
// status when the program ends here: 0 after --check, 2 for bad input.
std::optional<int> start_run(const CommandLine& cl, const tessera::Communicator& world,
                             const std::string& who, std::unique_ptr<tessera::Run>& run) {
  const bool root = world.rank() == 0;
  try {
    tessera::Deck deck;
    std::string failure;
    try {
      deck = tessera::load_deck(cl.deck_path, cl.overrides);
      tessera::check_data_files(deck);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    world.agree(failure);
    run = std::make_unique<tessera::Run>(std::move(deck));
    if (root) std::cout << tessera::build_description() << "\n" << run->description() << std::flush;
    if (cl.check_only) {
      if (root)
        std::cout << "settings:\n"
                  << tessera::deck_settings(run->deck()) << "layer options:\n"
                  << run->layer_options() << "deck OK\n";
      return 0;
    }
    tessera::RunCallbacks hooks;
    hooks.before_data = [&](int rank) {
      if (cl.fault.what == "data" && cl.fault.here(rank)) {
        throw tessera::Error(run->deck().data_files.at(0).path +
                             ": cannot read (fault injected by --inject-fault)");
      }
    };
    run->prepare(cl.restart, hooks, nullptr,
                 cl.overwrite ? tessera::EarlierRun::replace : tessera::EarlierRun::refuse);
    if (root) {
      std::cout << run->data_description() << "\nmetrics: " << run->metrics_path()
                << "\ncallbacks, in order on every rank: " << run->callbacks() << "\n";
      if (!run->resumed_from().empty()) std::cout << run->resumed_from() << "\n";
      if (!run->kernels().empty()) std::cout << run->kernels() << "\n";
      if (run->first_epoch() >= run->deck().training.epochs)
        std::cout << "the checkpoint has finished all " << run->deck().training.epochs
                  << " epochs of the deck; raise training.epochs to train further\n";
      std::cout << std::flush;
    }
  } catch (const tessera::CollectiveError& e) {
    // Every rank raised it: bad input (deck, data, output, checkpoint).
    if (root)
      std::cerr << (std::string(e.what()).rfind("data error: ", 0) == 0 ? "tessera-train: " : "")
                << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    // One write: under mpiexec the launcher's own messages must not land
    // inside the line.
    std::cerr << who + "error: " + e.what() + "\n" << std::flush;
    world.abort(1);
  }
  return std::nullopt;
}

// Trains with a progress display and prints the test results; the exit
// status: 0, or 1 for a failure every rank saw (one only this rank saw
// aborts the job).
int train(tessera::Run& run, const CommandLine& cl, const std::string& who) {
  const tessera::Deck& deck = run.deck();
  const Fault& fault = cl.fault;
  const int ranks = run.comm().size();
  const bool root = run.comm().rank() == 0;
  tessera::app::Progress progress(root, tessera::app::progress_bar(cl.progress),
                                  run.steps_per_epoch(), deck.training.epochs);
  tessera::RunCallbacks callbacks;
  const std::int64_t samples = run.training_data().size();
  callbacks.on_step = [&](const tessera::StepReport& r) {
    progress.step(r, std::min(samples, (r.step_in_epoch + 1) * deck.training.batch_size), samples);
    if (fault.what == "step" && fault.here(run.comm().rank()) && r.step == fault.step)
      throw tessera::Error("fault injected by --inject-fault after optimizer step " +
                           std::to_string(r.step));
  };
  // Without a terminal, a plain line every log_every steps.
  callbacks.log = [&](const std::string& line) {
    if (!progress.terminal()) std::cout << line << std::endl;
  };
  callbacks.evaluating = [&](const std::string& set, std::int64_t done, std::int64_t total) {
    progress.evaluating(set, done, total);
  };
  callbacks.on_epoch = [&](const tessera::EpochSummary& e) {
    progress.end_epoch();
    std::cout << tessera::epoch_line(e, ranks) << std::endl;
  };
  try {
    const tessera::RunResult result = run.train(callbacks);
    progress.end_epoch();
    if (root)
      std::cout << std::fixed << std::setprecision(4) << "test loss " << result.test.loss
                << "\ntest accuracy: " << result.test.accuracy << std::endl;
  } catch (const tessera::CollectiveError& e) {
    // Every rank saw the same (a non-finite loss or gradient): no abort.
    if (root) std::cerr << "tessera-train: error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    // Only this rank knows: the others wait in a collective, so end them all.
    std::cerr << who + "error: " + e.what() + "; stopping every rank\n" << std::flush;
    run.comm().abort(1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-train: train the model an input deck describes"};
  CommandLine cl;
  declare_options(app, cl);
  // Help, version and command-line errors are answered before MPI and Kokkos
  // start, by the first rank of a job only.
  if (const auto status = tessera::app::parse_command_line(app, argc, argv, "tessera-train"))
    return *status;
  const bool first = tessera::app::first_rank();
  if (cl.list_layers) {
    if (first) std::cout << tessera::layer_reference_markdown();
    return 0;
  }
  if (cl.list_keys) {
    if (first)
      std::cout << tessera::deck_key_reference() << "# Sweep files (tessera-sweep)\n\n"
                << tessera::sweep_key_reference();
    return 0;
  }
  if (cl.deck_path.empty()) {
    if (first)
      std::cerr << "tessera-train: a deck is required\nrun 'tessera-train --help' for usage\n";
    return 2;
  }

  tessera::Runtime runtime(argc, argv);
  const tessera::Communicator world;
  // Errors seen by one rank carry its rank when there are several.
  const std::string who = world.size() > 1
                              ? "tessera-train: rank " + std::to_string(world.rank()) + ": "
                              : "tessera-train: ";
  std::unique_ptr<tessera::Run> run;
  if (const auto status = start_run(cl, world, who, run)) return *status;
  return train(*run, cl, who);
}
