// tessera-train: train the model an input deck describes and report its
// test accuracy; under mpiexec, data parallel over the ranks.
//
// Every step that can fail on one rank alone (reading the deck, the data,
// the output directory) ends in a collective verdict, so all ranks stop
// together with the failing rank's message; a failure during training that
// only one rank sees aborts the whole job.
#include <tessera/core/runtime.hpp>
#include <tessera/data/dataset.hpp>
#include <tessera/data/hdf5.hpp>
#include <tessera/deck/build.hpp>
#include <tessera/io/checkpoint.hpp>
#include <tessera/model/trainer.hpp>
#include <tessera/parallel/communicator.hpp>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <chrono>
#include <cmath>
#include <iostream>
#include <sstream>

#include "progress.hpp"

namespace {

// --inject-fault: make one rank fail on purpose, for the tests that prove a
// failing rank brings the whole job down instead of leaving it hanging.
struct Fault {
  std::string what;     // "data" or "step"
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
    throw CLI::ValidationError("--inject-fault", "'" + text + "': expected data@RANK or step:N@RANK");
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::Runtime runtime(argc, argv);
  const tessera::Communicator world;
  const bool root = world.rank() == 0;
  // Errors seen by one rank carry its rank when there are several.
  const std::string who =
      world.size() > 1 ? "tessera-train: rank " + std::to_string(world.rank()) + ": " : "tessera-train: ";

  CLI::App app{"tessera-train: train the model an input deck describes"};
  std::string deck_path;
  bool check_only = false;
  std::vector<std::string> overrides;
  std::string fault_text;
  std::string restart;
  bool list_layers = false;
  app.add_option("deck", deck_path, "input deck (TOML); see docs/decks.md");
  app.add_flag("--check", check_only,
               "validate the deck and its data files, print the model summary and every "
               "layer's options, do not train");
  app.add_flag("--list-layers", list_layers,
               "print the layer types a deck can use, their keys and defaults (markdown), and exit");
  app.add_option("--set", overrides,
                 "override a deck value, e.g. --set training.epochs=3 or "
                 "--set model.layers[0].units=64 (repeatable; the value is TOML, or else a string)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--restart", restart,
                 "resume from a checkpoint: a file, a directory (its latest), or 'latest' (the "
                 "newest in the deck's checkpoint.directory)");
  app.add_option("--inject-fault", fault_text,
                 "testing: make one rank fail, data@RANK (cannot read its data) or step:N@RANK "
                 "(fails after optimizer step N)");
  Fault fault;
  try {
    app.parse(argc, argv);
    if (!fault_text.empty()) fault = parse_fault(fault_text);
  } catch (const CLI::CallForHelp& e) {
    if (root) std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    if (root) std::cerr << "tessera-train: " << e.what() << "\n" << "run 'tessera-train --help' for usage\n";
    return 2;
  }
  if (list_layers) {
    if (root) std::cout << tessera::layer_reference_markdown();
    return 0;
  }
  if (deck_path.empty()) {
    if (root) std::cerr << "tessera-train: a deck is required\nrun 'tessera-train --help' for usage\n";
    return 2;
  }

  // Runs one start-up step on every rank and agrees on the outcome: a bad
  // deck, data file or output directory on any rank stops all of them with
  // status 2, rank 0 printing the (first) failing rank's message.
  const auto agree = [&](const std::function<void()>& step) {
    std::string failure;
    try {
      step();
    } catch (const std::exception& e) {
      failure = e.what();
      if (failure.empty()) failure = "unknown error";
    }
    world.agree(failure);
  };

  try {
    tessera::Deck deck;
    std::unique_ptr<tessera::Model> model;
    agree([&] {
      deck = tessera::load_deck(deck_path, overrides);
      tessera::check_data_files(deck);
      try {
        model = tessera::build_model(deck);
        // Each rank holds its shard of the global batch.
        model->compile((deck.training.batch_size + world.size() - 1) / world.size(), deck.seed);
      } catch (const tessera::LayerError& e) {
        // Shapes that do not fit are deck errors: point at the layer's entry.
        throw tessera::DeckError(deck.layers.at(e.layer()).location + ": model.layers[" +
                                 std::to_string(e.layer()) + "]: " + e.what());
      }
    });
    std::string deck_identity = deck.text;
    for (const auto& o : deck.overrides) deck_identity += "\n--set " + o;
    tessera::require_same_on_every_rank(world, tessera::content_hash(deck_identity), "the deck",
                                        "start every rank with the same deck file and --set options");
    const tessera::Communicator comm(MPI_COMM_WORLD,
                                     tessera::device_mpi_from_name(deck.parallel.gpu_aware_mpi));
    tessera::TrainOptions options = tessera::train_options(deck);
    options.comm = &comm;
    if (root) {
      std::cout << tessera::build_description() << "\n"
                << "deck " << deck.path << " (run '" << deck.run_name << "')\n"
                << model->summary() << "optimizer " << deck.optimizer.type << ", lr "
                << deck.optimizer.lr << ", schedule " << deck.schedule.type;
      if (deck.schedule.warmup_steps > 0)
        std::cout << " after " << deck.schedule.warmup_steps << " warmup steps";
      if (deck.training.clip_norm > 0)
        std::cout << ", gradients clipped to norm " << deck.training.clip_norm;
      std::cout << "\n";
      if (comm.size() > 1)
        std::cout << comm.size() << " ranks, global batch " << deck.training.batch_size
                  << " (shards of up to " << model->max_batch() << "), BatchNorm "
                  << deck.parallel.batchnorm << ", gradients averaged over " << comm.transport()
                  << (deck.parallel.overlap ? " during backward" : " after backward") << "\n";
      std::cout << std::flush;
    }
    if (check_only) {
      if (root) {
        std::cout << "layer options:\n";
        for (const auto& l : deck.layers)
          std::cout << "  " << l.name << " (" << l.type << ")"
                    << (l.layer_type->keys.empty() ? "" : ": " + l.layer_type->describe(l.options))
                    << "\n";
        std::cout << "deck OK\n";
      }
      return 0;
    }

    tessera::Dataset train, test;
    try {
      agree([&] {
        const auto load = [&](const std::string& images, const std::string& labels,
                              const std::string& file) {
          if (fault.what == "data" && fault.here(world.rank()))
            throw tessera::Error((deck.data_format == "hdf5" ? file : images) +
                                 ": cannot read (fault injected by --inject-fault)");
          return deck.data_format == "hdf5"
                     ? tessera::load_hdf5_dataset(file, deck.images_dataset, deck.labels_dataset,
                                                  deck.normalize_mean, deck.normalize_std)
                     : tessera::load_idx_dataset(images, labels, deck.normalize_mean,
                                                 deck.normalize_std);
        };
        train = load(deck.train_images, deck.train_labels, deck.train_file);
        test = load(deck.test_images, deck.test_labels, deck.test_file);
      });
    } catch (const tessera::CollectiveError& e) {
      // Bad input, like a bad deck: the message names the file.
      if (root) std::cerr << "tessera-train: data error: " << e.what() << "\n";
      return 2;
    }
    agree([&] {
      const std::int64_t model_values = model->input(1).shape().inner();
      for (const auto* set : {&train, &test}) {
        if (set->sample_shape.numel() == model_values) continue;
        throw tessera::DeckError(deck.input_shape_location + ": model.input_shape: the model takes " +
                                 std::to_string(model_values) + " values per sample, the data's " +
                                 "samples have shape " + tessera::to_string(set->sample_shape) +
                                 " (" + std::to_string(set->sample_shape.numel()) + " values)");
      }
    });
    // A quick trial or a benchmark may train on the head of the file only.
    if (deck.train_samples > 0 && deck.train_samples < train.size())
      train = tessera::slice(train, 0, deck.train_samples);
    // The validation split is the tail of the training file, before shuffling.
    tessera::Dataset validation;
    if (deck.validation_split > 0) {
      const auto held = static_cast<std::int64_t>(std::llround(deck.validation_split * train.size()));
      if (held < 1 || held >= train.size())
        throw tessera::DeckError(deck.validation_split_location + ": data.validation_split: " +
                                 tessera::app::format_number(deck.validation_split) + " of " +
                                 std::to_string(train.size()) + " training samples leaves " +
                                 std::to_string(held) + " for validation and " +
                                 std::to_string(train.size() - held) +
                                 " for training; both need at least one");
      validation = tessera::slice(train, train.size() - held, held);
      train = tessera::slice(train, 0, train.size() - held);
    }
    if (root)
      std::cout << "data: " << train.size() << " training, " << validation.size()
                << " validation and " << test.size() << " test samples of shape "
                << train.sample_shape << "\n";

    // Metrics come from rank 0 only.
    std::unique_ptr<tessera::app::MetricsFile> metrics;
    agree([&] {
      if (!root) return;
      std::error_code made;
      std::filesystem::create_directories(deck.output_dir, made);
      metrics = std::make_unique<tessera::app::MetricsFile>(deck.output_dir + "/metrics.jsonl");
      if (made || !metrics->ok())
        throw tessera::DeckError("tessera-train: cannot write metrics to " + metrics->path() + ": " +
                                 (made ? made.message() : std::string("cannot open the file")) +
                                 " (set run.output_dir to a writable directory)");
    });
    // Checkpoints carry the run's metrics so far (rank 0 writes both).
    std::string history;
    const auto record = [&](const nlohmann::json& line) {
      if (!metrics) return;
      metrics->write(line);
      history += line.dump() + "\n";
    };
    record({{"type", "run"}, {"deck", deck.path}, {"overrides", deck.overrides},
            {"build", tessera::build_description()}, {"ranks", comm.size()},
            {"epochs", deck.training.epochs}, {"batch_size", deck.training.batch_size},
            {"seed", deck.seed}});
    if (root) std::cout << "metrics: " << metrics->path() << "\n";

    // Every rank initialised the same weights from the seed; rank 0's are
    // broadcast anyway and the replicas compared, so no rank starts apart.
    comm.broadcast(model->parameters().values());
    comm.broadcast(model->state().values());
    tessera::require_same_weights_on_every_rank(comm, model->parameters().values(),
                                                "the initial weights");

    const auto optimizer = tessera::make_optimizer(tessera::optimizer_params(deck));
    tessera::Trainer trainer(*model, *optimizer, options);
    const std::int64_t steps_per_epoch = trainer.steps_per_epoch(train.size());

    // Resume: every rank loads the same file, so the replicas stay equal.
    tessera::TrainingCursor cursor;
    tessera::CheckpointDirectory checkpoints(deck.checkpoint.directory, deck.checkpoint.keep);
    if (!restart.empty()) {
      std::string from;
      agree([&] {
        from = restart == "latest" ? checkpoints.resolve("latest") : tessera::resolve_checkpoint(restart);
        const tessera::CheckpointInfo saved = tessera::read_checkpoint_info(from);
        const auto mismatch = [&](const std::string& what, const std::string& then, const std::string& now) {
          if (then != now)
            throw tessera::Error(from + ": written with " + what + " " + then + ", the deck has " + now +
                                 "; an exact restart needs the same (tessera-inspect shows the "
                                 "checkpoint's deck)");
        };
        mismatch("training.batch_size", std::to_string(saved.global_batch),
                 std::to_string(deck.training.batch_size));
        mismatch("run.seed", std::to_string(saved.seed), std::to_string(deck.seed));
        tessera::load_checkpoint(from, *model, *optimizer);
        cursor = saved.cursor;
        if (root) history = saved.metrics;
      });
      tessera::require_same_weights_on_every_rank(comm, model->parameters().values(),
                                                  "the weights loaded with --restart",
                                                  "give every rank the same --restart");
      trainer.set_step(cursor.step);
      if (root)
        std::cout << "resuming from " << from << ": epoch " << cursor.epoch + 1 << ", step "
                  << cursor.batch << " of " << steps_per_epoch << " in it, " << cursor.step
                  << " optimizer steps taken\n";
      record({{"type", "restart"}, {"from", from}, {"step", cursor.step}, {"ranks", comm.size()}});
    }

    // After a barrier, rank 0 writes (parameters are replicated); every rank
    // learns whether it worked.
    std::int64_t last_checkpoint = cursor.step;
    auto last_checkpoint_time = std::chrono::steady_clock::now();
    const auto save = [&](const tessera::TrainingCursor& at) {
      if (at.step == last_checkpoint) return;
      comm.barrier();
      std::string written;
      try {
        agree([&] {
          if (!root) return;
          tessera::CheckpointInfo info;
          info.deck_path = deck.path;
          info.deck_text = deck.text;
          info.deck_overrides = deck.overrides;
          info.seed = deck.seed;
          info.cursor = at;
          info.world_size = comm.size();
          info.global_batch = deck.training.batch_size;
          info.lr = trainer.lr();
          std::ostringstream schedule;
          schedule << "type=" << deck.schedule.type << " lr=" << deck.optimizer.lr
                   << " warmup_steps=" << deck.schedule.warmup_steps
                   << " steps_per_epoch=" << steps_per_epoch << " epochs=" << deck.training.epochs;
          info.schedule = schedule.str();
          info.metrics = history;
          written = checkpoints.commit(*model, *optimizer, info);
        });
      } catch (const tessera::CollectiveError& e) {
        throw tessera::CollectiveError(std::string("cannot write a checkpoint: ") + e.what() +
                                       "; the previous checkpoints are untouched");
      }
      last_checkpoint = at.step;
      last_checkpoint_time = std::chrono::steady_clock::now();
      if (root) record({{"type", "checkpoint"}, {"path", written}, {"step", at.step}});
    };
    // Wall-clock checkpoints: rank 0's clock decides for every rank.
    const auto minutes_due = [&] {
      if (deck.checkpoint.every_minutes <= 0) return false;
      int due = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_checkpoint_time)
                        .count() >= 60.0 * deck.checkpoint.every_minutes;
      MPI_Bcast(&due, 1, MPI_INT, 0, comm.comm());
      return due != 0;
    };

    tessera::app::Progress progress(root, ::isatty(STDOUT_FILENO) == 1, steps_per_epoch,
                                    deck.training.epochs);
    trainer.on_step([&](const tessera::StepReport& r) {
      progress.step(r, std::min(train.size(), (r.step_in_epoch + 1) * options.batch_size),
                    train.size());
      record({{"type", "step"}, {"step", r.step}, {"epoch", r.epoch + 1}, {"loss", r.loss},
              {"lr", r.lr}, {"grad_norm", r.grad_norm}});
      if (fault.what == "step" && fault.here(comm.rank()) && r.step == fault.step)
        throw tessera::Error("fault injected by --inject-fault after optimizer step " +
                             std::to_string(r.step));
      const bool by_steps = deck.checkpoint.every_steps > 0 && r.step % deck.checkpoint.every_steps == 0;
      if (by_steps || minutes_due()) {
        const bool epoch_done = r.step_in_epoch + 1 == steps_per_epoch;
        save(tessera::TrainingCursor{epoch_done ? r.epoch + 1 : r.epoch,
                                     epoch_done ? 0 : r.step_in_epoch + 1, r.step});
      }
    });
    // Without a terminal, a plain line every log_every steps.
    const auto log = [&](const std::string& line) {
      if (root && !progress.terminal()) std::cout << line << std::endl;
    };
    tessera::Evaluation result;
    try {
      if (cursor.epoch >= deck.training.epochs) {
        if (root)
          std::cout << "the checkpoint has finished all " << deck.training.epochs
                    << " epochs of the deck; raise training.epochs to train further\n";
        result = trainer.evaluate(test);
      }
      for (int epoch = cursor.epoch; epoch < deck.training.epochs; ++epoch) {
        const auto report =
            trainer.train_epoch(train, epoch, log, epoch == cursor.epoch ? cursor.batch : 0);
        // Evaluated every eval_every epochs and after the last: on the
        // validation split when there is one, else on the test set.
        const bool last = epoch + 1 == deck.training.epochs;
        const int every = deck.training.eval_every;
        const bool evaluate = last || (every > 0 && (epoch + 1) % every == 0);
        const std::string set = validation.size() > 0 ? "validation" : "test";
        tessera::Evaluation evaluation;
        if (evaluate) evaluation = trainer.evaluate(validation.size() > 0 ? validation : test);
        if (evaluate && set == "test") result = evaluation;
        // Replicas must not drift apart (a cheap check, once an epoch).
        tessera::require_same_weights_on_every_rank(comm, model->parameters().values(),
                                                    "the weights after epoch " +
                                                        std::to_string(epoch + 1));
        progress.end_epoch();
        const auto& t = report.time;
        if (root) {
          std::cout << std::fixed << std::setprecision(4) << "epoch " << epoch + 1 << "/"
                    << deck.training.epochs << ": train loss " << report.train.loss
                    << ", train accuracy " << report.train.accuracy;
          if (evaluate)
            std::cout << ", " << set << " loss " << evaluation.loss << ", " << set << " accuracy "
                      << evaluation.accuracy;
          std::cout << ", lr " << std::defaultfloat << std::setprecision(4) << report.lr << std::fixed
                    << ", " << std::setprecision(1) << report.seconds << " s, "
                    << std::setprecision(0) << report.samples_per_second << " samples/s"
                    << std::setprecision(2) << " (data " << t.data << " s, forward " << t.forward
                    << " s, backward " << t.backward << " s, optimizer " << t.optimizer << " s";
          if (comm.size() > 1)
            std::cout << ", communication " << t.communication << " s exposed + "
                      << report.overlapped_seconds << " s overlapped ("
                      << std::setprecision(0) << 100 * report.overlap_fraction << "%)";
          std::cout << ")" << std::endl;
        }
        nlohmann::json line{{"type", "epoch"},
                            {"epoch", epoch + 1},
                            {"train_loss", report.train.loss},
                            {"train_accuracy", report.train.accuracy},
                            {"lr", report.lr},
                            {"seconds", report.seconds},
                            {"samples_per_second", report.samples_per_second},
                            {"time", {{"data", t.data}, {"forward", t.forward}, {"backward", t.backward},
                                      {"optimizer", t.optimizer}, {"communication", t.communication},
                                      {"communication_overlapped", report.overlapped_seconds}}},
                            {"overlap_fraction", report.overlap_fraction}};
        if (evaluate) {
          line[set + "_loss"] = evaluation.loss;
          line[set + "_accuracy"] = evaluation.accuracy;
        }
        record(line);
        // By epochs, and at the end of any run that checkpoints at all.
        const auto& c = deck.checkpoint;
        const bool any = c.every_epochs > 0 || c.every_steps > 0 || c.every_minutes > 0;
        if ((c.every_epochs > 0 && (epoch + 1) % c.every_epochs == 0) ||
            (any && epoch + 1 == deck.training.epochs))
          save(tessera::TrainingCursor{epoch + 1, 0, trainer.step()});
      }
    } catch (const tessera::CollectiveError& e) {
      // Every rank saw the same (a non-finite loss or gradient): no abort.
      if (root) std::cerr << "tessera-train: error: " << e.what() << std::endl;
      return 1;
    } catch (const std::exception& e) {
      // Only this rank knows: the others wait in a collective, so end them all.
      std::cerr << who << "error: " << e.what() << "; stopping every rank" << std::endl;
      comm.abort(1);
    }
    // The test set is held back until the end when a validation split is used.
    if (validation.size() > 0) {
      result = trainer.evaluate(test);
      record({{"type", "test"}, {"test_loss", result.loss}, {"test_accuracy", result.accuracy}});
    }
    if (root)
      std::cout << std::fixed << std::setprecision(4) << "test loss " << result.loss
                << "\ntest accuracy: " << result.accuracy << std::endl;
  } catch (const tessera::CollectiveError& e) {
    // Every rank raised it; deck-type failures come from the start-up steps.
    if (root) std::cerr << e.what() << "\n";
    return 2;
  } catch (const tessera::DeckError& e) {
    if (root) std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << who << "error: " << e.what() << std::endl;
    world.abort(1);
  }
  return 0;
}
