// tessera-train: train the model an input deck describes and report its
// test accuracy.
#include <tessera/core/runtime.hpp>
#include <tessera/data/dataset.hpp>
#include <tessera/data/hdf5.hpp>
#include <tessera/deck/build.hpp>
#include <tessera/model/trainer.hpp>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "progress.hpp"

int main(int argc, char** argv) {
  tessera::Runtime runtime(argc, argv);
  const bool root = runtime.rank() == 0;

  CLI::App app{"tessera-train: train the model an input deck describes"};
  std::string deck_path;
  bool check_only = false;
  std::vector<std::string> overrides;
  app.add_option("deck", deck_path, "input deck (TOML); see docs/decks.md")->required();
  app.add_flag("--check", check_only,
               "validate the deck and its data files, print the model summary, do not train");
  app.add_option("--set", overrides,
                 "override a deck value, e.g. --set training.epochs=3 or "
                 "--set model.layers[0].units=64 (repeatable; the value is TOML, or else a string)")
      ->take_all()
      ->allow_extra_args(false);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    if (root) std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    if (root) std::cerr << "tessera-train: " << e.what() << "\n" << "run 'tessera-train --help' for usage\n";
    return 2;
  }

  try {
    const tessera::Deck deck = tessera::load_deck(deck_path, overrides);
    tessera::check_data_files(deck);
    std::unique_ptr<tessera::Model> model;
    try {
      model = tessera::build_model(deck);
      model->compile(deck.training.batch_size, deck.seed);
    } catch (const tessera::LayerError& e) {
      // Shapes that do not fit are deck errors: point at the layer's entry.
      throw tessera::DeckError(deck.layers.at(e.layer()).location + ": model.layers[" +
                               std::to_string(e.layer()) + "]: " + e.what());
    }
    const tessera::TrainOptions options = tessera::train_options(deck);
    if (root) {
      std::cout << tessera::build_description() << "\n"
                << "deck " << deck.path << " (run '" << deck.run_name << "')\n"
                << model->summary() << "optimizer " << deck.optimizer.type << ", lr "
                << deck.optimizer.lr << ", schedule " << deck.schedule.type;
      if (deck.schedule.warmup_steps > 0)
        std::cout << " after " << deck.schedule.warmup_steps << " warmup steps";
      if (deck.training.clip_norm > 0)
        std::cout << ", gradients clipped to norm " << deck.training.clip_norm;
      std::cout << "\n" << std::flush;
    }
    if (check_only) {
      if (root) std::cout << "deck OK\n";
      return 0;
    }

    tessera::Dataset train, test;
    try {
      const auto load = [&](const std::string& images, const std::string& labels,
                            const std::string& file) {
        return deck.data_format == "hdf5"
                   ? tessera::load_hdf5_dataset(file, deck.images_dataset, deck.labels_dataset,
                                                deck.normalize_mean, deck.normalize_std)
                   : tessera::load_idx_dataset(images, labels, deck.normalize_mean,
                                               deck.normalize_std);
      };
      train = load(deck.train_images, deck.train_labels, deck.train_file);
      test = load(deck.test_images, deck.test_labels, deck.test_file);
    } catch (const tessera::Error& e) {
      // Bad input, like a bad deck: the message names the file.
      if (root) std::cerr << "tessera-train: data error: " << e.what() << "\n";
      return 2;
    }
    const std::int64_t model_values = model->input(1).shape().inner();
    for (const auto* set : {&train, &test}) {
      if (set->sample_shape.numel() == model_values) continue;
      throw tessera::DeckError(deck.input_shape_location + ": model.input_shape: the model takes " +
                               std::to_string(model_values) + " values per sample, the data's " +
                               "samples have shape " + tessera::to_string(set->sample_shape) + " (" +
                               std::to_string(set->sample_shape.numel()) + " values)");
    }
    if (root)
      std::cout << "data: " << train.size() << " training and " << test.size()
                << " test samples of shape " << train.sample_shape << "\n";

    std::error_code made;
    std::filesystem::create_directories(deck.output_dir, made);
    tessera::app::MetricsFile metrics(deck.output_dir + "/metrics.jsonl");
    if (made || !metrics.ok()) {
      if (root)
        std::cerr << "tessera-train: cannot write metrics to " << metrics.path() << ": "
                  << (made ? made.message() : std::string("cannot open the file"))
                  << " (set run.output_dir to a writable directory)\n";
      return 2;
    }
    if (root) {
      metrics.write({{"type", "run"}, {"deck", deck.path}, {"overrides", deck.overrides},
                     {"build", tessera::build_description()}, {"epochs", deck.training.epochs},
                     {"batch_size", deck.training.batch_size}, {"seed", deck.seed}});
      std::cout << "metrics: " << metrics.path() << "\n";
    }

    const auto optimizer = tessera::make_optimizer(tessera::optimizer_params(deck));
    tessera::Trainer trainer(*model, *optimizer, options);
    const std::int64_t steps_per_epoch = (train.size() + options.batch_size - 1) / options.batch_size;
    tessera::app::Progress progress(root, ::isatty(STDOUT_FILENO) == 1, steps_per_epoch,
                                    deck.training.epochs);
    trainer.on_step([&](const tessera::StepReport& r) {
      const std::int64_t in_epoch = (r.step - 1) % steps_per_epoch + 1;
      progress.step(r, std::min(train.size(), in_epoch * options.batch_size), train.size());
      if (root)
        metrics.write({{"type", "step"}, {"step", r.step}, {"epoch", r.epoch + 1}, {"loss", r.loss},
                       {"lr", r.lr}, {"grad_norm", r.grad_norm}});
    });
    // Without a terminal, a plain line every log_every steps.
    const auto log = [&](const std::string& line) {
      if (root && !progress.terminal()) std::cout << line << std::endl;
    };
    tessera::Evaluation result;
    for (int epoch = 0; epoch < deck.training.epochs; ++epoch) {
      const auto report = trainer.train_epoch(train, epoch, log);
      result = trainer.evaluate(test);
      progress.end_epoch();
      if (!root) continue;
      const auto& t = report.time;
      std::cout << std::fixed << std::setprecision(4) << "epoch " << epoch + 1 << "/"
                << deck.training.epochs << ": train loss " << report.train.loss
                << ", train accuracy " << report.train.accuracy << ", test loss " << result.loss
                << ", test accuracy " << result.accuracy << ", lr " << std::defaultfloat
                << std::setprecision(4) << report.lr << std::fixed << ", " << std::setprecision(1)
                << report.seconds << " s, " << std::setprecision(0) << report.samples_per_second
                << " samples/s" << std::setprecision(2) << " (data " << t.data << " s, forward "
                << t.forward << " s, backward " << t.backward << " s, optimizer " << t.optimizer
                << " s)" << std::endl;
      metrics.write({{"type", "epoch"},
                     {"epoch", epoch + 1},
                     {"train_loss", report.train.loss},
                     {"train_accuracy", report.train.accuracy},
                     {"test_loss", result.loss},
                     {"test_accuracy", result.accuracy},
                     {"lr", report.lr},
                     {"seconds", report.seconds},
                     {"samples_per_second", report.samples_per_second},
                     {"time", {{"data", t.data}, {"forward", t.forward}, {"backward", t.backward},
                               {"optimizer", t.optimizer}, {"communication", t.communication}}}});
    }
    if (root) std::cout << std::fixed << std::setprecision(4) << "test accuracy: " << result.accuracy << std::endl;
  } catch (const tessera::DeckError& e) {
    if (root) std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    if (root) std::cerr << "tessera-train: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
