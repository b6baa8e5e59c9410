// The training loop: seeded per-epoch shuffling, batches gathered on the
// device, forward, fused loss, backward, optimizer; evaluation; progress.
#pragma once

#include <tessera/data/dataset.hpp>
#include <tessera/model/model.hpp>
#include <tessera/optim/sgd.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace tessera {

struct TrainOptions {
  int epochs = 1;
  std::int64_t batch_size = 128;
  std::uint64_t seed = 0;
  std::int64_t log_every = 100;  // steps between progress lines; 0 = none
};

struct Evaluation {
  double loss = 0;
  double accuracy = 0;
  std::int64_t samples = 0;
};

struct EpochReport {
  int epoch = 0;
  Evaluation train;  // running mean over the epoch's batches
  double seconds = 0;
  double samples_per_second = 0;
};

class Trainer {
 public:
  Trainer(Model& model, Sgd& optimizer, const TrainOptions& options);

  // Trains one epoch (0-based); progress lines go to `log` when set.
  EpochReport train_epoch(const Dataset& data, int epoch,
                          const std::function<void(const std::string&)>& log = {});
  Evaluation evaluate(const Dataset& data);
  std::int64_t step() const { return step_; }

 private:
  void ensure_buffers(const Dataset& data);
  Evaluation run_batches(const Dataset& data, const Vector<std::int64_t>& order, bool train,
                         const std::function<void(const std::string&)>& log, int epoch);

  Model& model_;
  Sgd& optimizer_;
  TrainOptions options_;
  std::int64_t step_ = 0;
  Vector<int> batch_labels_;
  Vector<float> sample_loss_;
  Vector<int> sample_correct_;
  Vector<std::int64_t> order_;
  Vector<std::int64_t> identity_order_;
};

// Seeded permutation of 0..n-1 for one epoch, identical on every backend.
std::vector<std::int64_t> shuffled_order(std::int64_t n, std::uint64_t seed, int epoch);

}  // namespace tessera
