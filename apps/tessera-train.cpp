// tessera-train: train the model an input deck describes and report its
// test accuracy.
#include <tessera/core/runtime.hpp>
#include <tessera/data/dataset.hpp>
#include <tessera/deck/build.hpp>
#include <tessera/model/trainer.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iomanip>
#include <iostream>

int main(int argc, char** argv) {
  tessera::Runtime runtime(argc, argv);
  const bool root = runtime.rank() == 0;

  CLI::App app{"tessera-train: train the model an input deck describes"};
  std::string deck_path;
  bool check_only = false;
  app.add_option("deck", deck_path, "input deck (TOML); see docs/decks.md")->required();
  app.add_flag("--check", check_only, "validate the deck, print the model summary, do not train");
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
    const tessera::Deck deck = tessera::load_deck(deck_path);
    auto model = tessera::build_model(deck);
    model->compile(deck.training.batch_size, deck.seed);
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

    const tessera::Dataset train = tessera::load_idx_dataset(
        deck.train_images, deck.train_labels, deck.normalize_mean, deck.normalize_std);
    const tessera::Dataset test = tessera::load_idx_dataset(
        deck.test_images, deck.test_labels, deck.normalize_mean, deck.normalize_std);
    if (root)
      std::cout << "data: " << train.size() << " training and " << test.size()
                << " test samples of shape " << train.sample_shape << "\n";

    const auto optimizer = tessera::make_optimizer(tessera::optimizer_params(deck));
    tessera::Trainer trainer(*model, *optimizer, options);
    const auto log = [root](const std::string& line) {
      if (root) std::cout << line << std::endl;
    };
    tessera::Evaluation result;
    for (int epoch = 0; epoch < deck.training.epochs; ++epoch) {
      const auto report = trainer.train_epoch(train, epoch, log);
      result = trainer.evaluate(test);
      if (root)
        std::cout << std::fixed << std::setprecision(4) << "epoch " << epoch + 1 << "/"
                  << deck.training.epochs << ": train loss " << report.train.loss
                  << ", train accuracy " << report.train.accuracy << ", test loss " << result.loss
                  << ", test accuracy " << result.accuracy << ", lr " << std::defaultfloat
                  << std::setprecision(4) << report.lr << std::fixed << ", " << std::setprecision(1)
                  << report.seconds << " s, " << std::setprecision(0)
                  << report.samples_per_second << " samples/s" << std::endl;
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
