// Trains a small Dense + BatchNorm model with Adam on XOR data, resuming from
// the directory's latest checkpoint when there is one, and commits a
// checkpoint after every epoch; prints each path written and the L2 norms of
// the parameters it holds, for checkpoint_h5dump.sh to compare against
// tessera-inspect.
// Usage: checkpoint_probe <directory> <epochs>
#include <tessera/core/runtime.hpp>
#include <tessera/io/checkpoint.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/norm.hpp>
#include <tessera/optim/adam.hpp>
#include <tessera/train/trainer.hpp>

#include <cstdio>
#include <string>

#include "../tessera_test.hpp"

int main(int argc, char** argv) {
  using namespace tessera;
  Runtime runtime(argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: checkpoint_probe <directory> <epochs>\n");
    return 2;
  }
  const std::string deck = "[run]\nname = \"checkpoint_probe\"\nseed = 11\n";
  const Dataset data = test::xor_dataset(200, 17);
  Model model(Shape{2});
  model.add<Dense>("fc1", 16).add<BatchNorm>("bn").add<ReLU>("relu").add<Dense>("fc2", 2);
  TrainOptions options;
  options.batch_size = 32;
  options.seed = 11;
  options.schedule.base_lr = 0.01f;
  model.compile(options.batch_size, options.seed);
  Adam adam;
  CheckpointDirectory directory(argv[1], 3);
  CheckpointInfo info;
  if (directory.has_latest()) {
    const std::string from = directory.resolve();
    info = load_checkpoint(from, model, adam);
    std::printf("resumed %s at step %lld\n", from.c_str(),
                static_cast<long long>(info.cursor.step));
  }
  info.deck_path = "checkpoint_probe.toml";
  info.deck_text = deck;
  info.seed = options.seed;
  info.global_batch = options.batch_size;
  // The schedule as a deck of 2 epochs of 7 steps describes it.
  info.schedule = "type=constant lr=0.01 warmup_steps=0 steps_per_epoch=7 epochs=2";
  Trainer trainer(model, adam, options);
  trainer.on_step([&](const StepReport& r) {
    info.metrics += "{\"type\":\"step\",\"loss\":" + std::to_string(r.loss) + "}\n";
  });
  const int first = info.cursor.epoch;
  for (int epoch = first; epoch < first + std::stoi(argv[2]); ++epoch) {
    trainer.train_epoch(data, epoch);
    info.cursor = {epoch + 1, 0, adam.step_count()};
    info.lr = trainer.lr();
    const std::string path = directory.commit(model, adam, info);
    std::printf("committed %s step %lld\n", path.c_str(), static_cast<long long>(info.cursor.step));
    std::fflush(stdout);
  }
  const auto values = test::to_host(model.parameters().values());
  for (const auto& e : model.parameters().entries()) {
    double sum = 0;
    for (std::int64_t i = 0; i < e.spec.shape.numel(); ++i)
      sum += static_cast<double>(values[e.offset + i]) * values[e.offset + i];
    std::printf("norm %s/%s %.9g\n", e.layer.c_str(), e.spec.name.c_str(), std::sqrt(sum));
  }
  return 0;
}
