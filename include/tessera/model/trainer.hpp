// The training loop: seeded per-epoch shuffling, batches gathered on the
// device, forward, fused loss, backward, optional gradient clipping, an
// optimizer step at the scheduled learning rate; evaluation; progress.
#pragma once

#include <tessera/data/dataset.hpp>
#include <tessera/model/model.hpp>
#include <tessera/optim/optimizer.hpp>
#include <tessera/optim/schedule.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace tessera {

struct TrainOptions {
  int epochs = 1;
  std::int64_t batch_size = 128;
  std::uint64_t seed = 0;
  std::int64_t log_every = 100;  // steps between progress lines; 0 = none
  LrSchedule schedule;           // the learning rate of every step
  float clip_norm = 0.0f;        // > 0: clip gradients to this global norm
};

struct Evaluation {
  double loss = 0;
  double accuracy = 0;
  std::int64_t samples = 0;
};

// What happened in one optimizer step.
struct StepReport {
  std::int64_t step = 0;  // 1-based count of optimizer steps taken
  int epoch = 0;          // 0-based
  std::int64_t batch = 0;
  double loss = 0;        // mean over the batch
  float lr = 0;
  float grad_norm = 0;    // global gradient norm, before any clipping
};

// Seconds spent per phase of the training steps (each phase ends with a
// device fence, so the phases add up to the loop's wall time).
struct PhaseTimes {
  double data = 0;           // gathering the batch
  double forward = 0;        // forward pass and loss
  double backward = 0;       // backward pass
  double optimizer = 0;      // gradient norm, clipping, update
  double communication = 0;  // gradient averaging between ranks
};

struct EpochReport {
  int epoch = 0;
  Evaluation train;  // running mean over the epoch's batches
  float lr = 0;      // learning rate of the epoch's last step
  PhaseTimes time;
  double seconds = 0;
  double samples_per_second = 0;
};

class Trainer {
 public:
  Trainer(Model& model, Optimizer& optimizer, const TrainOptions& options);

  // Trains one epoch (0-based); progress lines go to `log` when set.
  EpochReport train_epoch(const Dataset& data, int epoch,
                          const std::function<void(const std::string&)>& log = {});
  Evaluation evaluate(const Dataset& data);
  // Called after every optimizer step (metrics files, tests).
  void on_step(std::function<void(const StepReport&)> callback) { on_step_ = std::move(callback); }
  std::int64_t step() const { return step_; }
  // Learning rate of the latest step.
  float lr() const { return lr_; }
  // Global gradient norm of the latest step, before any clipping.
  float grad_norm() const { return grad_norm_; }

 private:
  void ensure_buffers(const Dataset& data);
  Evaluation run_batches(const Dataset& data, const Vector<std::int64_t>& order, bool train,
                         const std::function<void(const std::string&)>& log, int epoch);

  Model& model_;
  Optimizer& optimizer_;
  TrainOptions options_;
  std::function<void(const StepReport&)> on_step_;
  std::int64_t step_ = 0;
  float lr_ = 0;
  float grad_norm_ = 0;
  [[noreturn]] void throw_non_finite_gradient(int epoch, std::int64_t batch_index);

  Kokkos::View<double*, MemSpace> norm_scratch_;
  PhaseTimes time_;
  Vector<int> batch_labels_;
  Vector<float> sample_loss_;
  Vector<int> sample_correct_;
  // Host copies of the per-sample results, kept so no step allocates.
  Vector<float>::HostMirror sample_loss_host_;
  Vector<int>::HostMirror sample_correct_host_;
  Vector<std::int64_t> order_;
  Vector<std::int64_t> identity_order_;
};

// Seeded permutation of 0..n-1 for one epoch, identical on every backend.
std::vector<std::int64_t> shuffled_order(std::int64_t n, std::uint64_t seed, int epoch);

}  // namespace tessera
