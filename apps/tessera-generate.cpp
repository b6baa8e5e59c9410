// tessera-generate: sample text from a language-model checkpoint written by
// tessera-train (a `tokens` deck whose model maps token ids [T] to logits
// [T, vocabulary]). The model is rebuilt from the deck stored in the
// checkpoint; each new token is drawn from the softmax of the logits at the
// last position of the context (its last T tokens), at a temperature and
// optionally among the k most likely tokens only, from counter-based random
// numbers: the same seed prints the same text. Byte-level tokens are
// printed as bytes.
#include <tessera/core/random.hpp>
#include <tessera/core/runtime.hpp>
#include <tessera/deck/build.hpp>
#include <tessera/io/checkpoint.hpp>
#include <tessera/optim/optimizer.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>

#include "cli.hpp"

namespace {

struct Options {
  std::string checkpoint, prompt = "\n";
  std::int64_t tokens = 400;
  double temperature = 0.8;
  std::int64_t top_k = 0;
  std::uint64_t seed = 1;
};

// A token drawn from softmax(logits / temperature) over the top_k largest
// (all when top_k is 0), with uniform u in [0, 1).
std::int64_t draw(const std::vector<double>& logits, const Options& o, double u) {
  std::vector<std::int64_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](std::int64_t a, std::int64_t b) { return logits[a] > logits[b]; });
  if (o.top_k > 0 && o.top_k < static_cast<std::int64_t>(ids.size())) ids.resize(o.top_k);
  std::vector<double> weights;
  double total = 0;
  for (auto id : ids) {
    weights.push_back(std::exp((logits[id] - logits[ids[0]]) / o.temperature));
    total += weights.back();
  }
  double target = u * total;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    target -= weights[i];
    if (target < 0) return ids[i];
  }
  return ids.back();
}

int generate(const Options& o) {
  const std::string path = tessera::resolve_checkpoint(o.checkpoint);
  const tessera::CheckpointInfo info = tessera::read_checkpoint_info(path);
  const tessera::Deck deck =
      tessera::parse_deck(info.deck_text, info.deck_path, info.deck_overrides);
  auto model = tessera::build_model(deck);
  model->compile(1, deck.training.seed);
  const auto optimizer = tessera::make_optimizer(deck.optimizer);
  tessera::load_checkpoint(path, *model, *optimizer);
  const tessera::Shape in = model->input(1).shape(), out = model->output_shape();
  if (in.rank() != 2 || out.rank() != 2 || out[0] != in[1]) {
    std::cerr << "tessera-generate: " << path << ": the model maps " << in << " to "
              << tessera::with_batch(out, 1)
              << "; a language model maps token ids [1, T] to logits [1, T, vocabulary]\n";
    return 2;
  }
  const std::int64_t positions = in[1], vocabulary = out[1];
  std::vector<std::int64_t> context;
  for (unsigned char c : o.prompt) context.push_back(c);
  if (context.empty()) context.push_back('\n');
  for (auto id : context)
    if (id >= vocabulary) {
      std::cerr << "tessera-generate: the prompt holds byte " << id << ", beyond the model's "
                << vocabulary << " tokens\n";
      return 2;
    }
  std::cout << o.prompt << std::flush;
  tessera::StepContext eval;
  eval.training = false;
  auto input = Kokkos::create_mirror_view(model->input(1).flat());
  for (std::int64_t i = 0; i < o.tokens; ++i) {
    // The last `positions` tokens; the causal model ignores what follows them.
    const std::int64_t length = std::min<std::int64_t>(positions, context.size());
    const std::int64_t first = static_cast<std::int64_t>(context.size()) - length;
    for (std::int64_t t = 0; t < positions; ++t)
      input(t) = t < length ? static_cast<float>(context[first + t]) : 0.0f;
    Kokkos::deep_copy(model->input(1).flat(), input);
    const auto logits =
        Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model->forward(1, eval).flat());
    std::vector<double> row(vocabulary);
    for (std::int64_t v = 0; v < vocabulary; ++v) row[v] = logits((length - 1) * vocabulary + v);
    const std::int64_t next = draw(row, o, tessera::counter_uniform(o.seed, 0x47454e, i));
    context.push_back(next);
    if (vocabulary <= 256)
      std::cout << static_cast<char>(next) << std::flush;
    else
      std::cout << next << " " << std::flush;
  }
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-generate: sample text from a language-model checkpoint"};
  Options o;
  app.add_option("checkpoint", o.checkpoint,
                 "a checkpoint file, or a checkpoint directory (its latest)")
      ->required();
  app.add_option("--prompt", o.prompt, "text the sample continues (default: a newline)");
  app.add_option("--tokens", o.tokens, "tokens to generate (default 400)")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 24));
  app.add_option("--temperature", o.temperature, "softmax temperature (default 0.8)")
      ->check(CLI::Range(1e-3, 100.0));
  app.add_option("--top-k", o.top_k, "draw among the k most likely tokens only (default 0: all)")
      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 24));
  app.add_option("--seed", o.seed, "seed of the draws (default 1)");
  // Help, version and command-line errors are answered before Kokkos starts.
  if (const auto status = tessera::app::parse_command_line(app, argc, argv, "tessera-generate"))
    return *status;
  tessera::Runtime runtime(argc, argv);
  try {
    return generate(o);
  } catch (const tessera::DeckError& e) {
    std::cerr << "tessera-generate: " << e.what() << "\n";
    return 2;
  } catch (const tessera::Error& e) {
    std::cerr << "tessera-generate: " << e.what() << "\n";
    return 2;
  }
}
