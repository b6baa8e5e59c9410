// The training loop: seeded per-epoch shuffling, batches gathered on the
// device, forward, the loss, backward, optional gradient clipping, an
// optimizer step at the scheduled learning rate; evaluation; progress.
// A global batch runs as TrainOptions::accumulation_steps micro-batches
// whose gradients add up before its one optimizer step. With a communicator
// of several ranks it is data parallel: every micro-batch is split over the
// ranks (each works on its own shard of the same shuffled order) and
// gradients are averaged in buckets while the last backward runs. With a
// Pipeline, each rank runs its stage's layers on the micro-batches in 1F1B
// order, its stage's ranks split every micro-batch, and each rank updates
// its stage's parameters only.
#pragma once

#include <tessera/data/dataset.hpp>
#include <tessera/data/stream.hpp>
#include <tessera/model/loss.hpp>
#include <tessera/model/model.hpp>
#include <tessera/optim/optimizer.hpp>
#include <tessera/parallel/pipeline.hpp>
#include <tessera/settings/schedule.hpp>
#include <tessera/settings/train_options.hpp>
#include <tessera/train/exchange.hpp>
#include <tessera/train/schedule.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tessera {

// Means over every prediction: one per sample for a classifier, one per
// position for a sequence model (loss in nats per token).
struct Evaluation {
  double loss = 0;
  double accuracy = 0;
  std::int64_t samples = 0;
};

// What happened in one optimizer step.
struct StepReport {
  std::int64_t step = 0;   // 1-based count of optimizer steps taken
  int epoch = 0;           // 0-based
  std::int64_t batch = 0;  // samples in the global batch
  double loss = 0;         // mean over the global batch (and its positions)
  float lr = 0;
  float grad_norm = 0;             // global gradient norm, before any clipping
  std::int64_t step_in_epoch = 0;  // 0-based index of this step within the epoch
  float loss_scale = 1;            // the loss was multiplied by this (1: no loss scaling)
  bool skipped = false;            // gradients not finite under dynamic loss scaling: no update
};

// Where dynamic loss scaling stands: the scale of the next step and the
// finite steps taken since the scale last changed.
struct LossScaleState {
  float scale = 1;
  std::int64_t good_steps = 0;
};

struct EpochReport {
  int epoch = 0;
  Evaluation train;  // running mean over the epoch's batches
  float lr = 0;      // learning rate of the epoch's last step
  PhaseTimes time;
  // Gradient communication in flight while backward still ran, and its
  // share of all gradient communication (the rest is in time.communication).
  double overlapped_seconds = 0;
  double overlap_fraction = 0;
  double seconds = 0;
  double samples_per_second = 0;   // over all ranks
  std::int64_t skipped_steps = 0;  // by dynamic loss scaling
  // Pipelines: the seconds this rank waited for its neighbour stages, and
  // the mean over all ranks of that wait's share of the epoch (the bubble).
  double pipeline_wait_seconds = 0;
  double bubble_fraction = 0;
};

// The steps of an epoch begun (Trainer::begin_epoch): [first, last) of
// its `steps`; last < steps when TrainOptions::max_steps ends the run
// inside the epoch.
struct EpochPlan {
  int epoch = 0;
  std::int64_t first = 0, last = 0, steps = 0;
};

// One global batch of the epoch begun (Trainer::batch): step `index` of the
// epoch, places [start, start + size) of its shuffled order.
struct Batch {
  std::int64_t index = 0, start = 0, size = 0;
};

// A training step is Trainer::step: the model's gradients zeroed, the step's
// schedule (train/schedule.hpp: micro-batches, or this rank's pipeline
// stage in 1F1B order) running forward, the loss and backward, the gradient
// exchange (train/exchange.hpp: none, buckets, ZeRO-1, a pipeline stage's
// sum) finishing, the loss checked, the gradients unscaled, clipped and
// applied at the scheduled learning rate, the parameters shared. A loop of
// one's own (docs/examples/custom_loop.cpp) goes
//   for each epoch: plan = begin_epoch(data, epoch);
//                   for s in [plan.first, plan.last): step(batch(s));
//                   end_epoch();
// which is what train_epoch does, with progress lines.
class Trainer {
 public:
  // comm: the ranks training together (nullptr or one rank: this process
  // alone). The model must be compiled for options.max_shard(ranks).
  // pipeline: this rank's stage of a pipeline over comm (whose ranks are
  // stages x data ranks), with pipeline->in_flight() - 1 replicas of the
  // model (compiled to share its weights) for the micro-batches in flight.
  Trainer(Model& model, Optimizer& optimizer, const TrainOptions& options,
          const Communicator* comm = nullptr, Pipeline* pipeline = nullptr,
          std::vector<Model*> replicas = {});

  // Trains one epoch (0-based) from its step first_step (0-based; a restart
  // resumes mid-epoch); progress lines go to `log` when set. Every rank
  // holds the whole dataset and trains on its shard of each batch.
  EpochReport train_epoch(const Dataset& data, int epoch,
                          const std::function<void(const std::string&)>& log = {},
                          std::int64_t first_step = 0);
  // Begins epoch `epoch` (0-based) of training on `data` from its step
  // first_step: shuffles the data (seeded by the options' seed and the
  // epoch), reads a streamed dataset ahead, resets the epoch's times.
  EpochPlan begin_epoch(const Dataset& data, int epoch, std::int64_t first_step = 0);
  // Step `index` of the epoch begun. A streamed dataset serves the batches
  // of [plan.first, plan.last) in order only.
  Batch batch(std::int64_t index) const;
  // One optimizer step on a batch of the epoch begun (all ranks take the
  // same batch; each trains on its shard); on_step's callback runs after it.
  StepReport step(const Batch& batch);
  // Ends the epoch begun: waits for parameters in flight; the epoch's
  // loss and accuracy over the steps taken, its times and throughput.
  EpochReport end_epoch();
  // Loss and accuracy over the whole dataset (split over the ranks).
  Evaluation evaluate(const Dataset& data);
  // Optimizer steps in one epoch of `samples` samples.
  std::int64_t steps_per_epoch(std::int64_t samples) const;
  // Called after every optimizer step (metrics files, tests).
  // With a sharded optimizer and TrainOptions::overlap_gather, the step's
  // parameters are still being gathered when it runs (the next forward
  // pass waits for them): call settle_parameters() before reading them.
  void on_step(std::function<void(const StepReport&)> callback) { on_step_ = std::move(callback); }
  // Called after every batch of an evaluation with the samples evaluated so
  // far and the dataset's size (progress displays).
  void on_evaluation_batch(std::function<void(std::int64_t done, std::int64_t total)> callback) {
    on_evaluation_batch_ = std::move(callback);
  }
  // Collective. Waits for a parameter gather in flight (see on_step); every
  // rank then holds the whole updated model. train_epoch, evaluate and
  // gather_model settle by themselves.
  void settle_parameters();
  std::int64_t step() const { return step_; }
  // Resumes the step count (with the optimizer's, from a checkpoint).
  void set_step(std::int64_t step);
  // Learning rate of the latest step.
  float lr() const { return lr_; }
  // Global gradient norm of the latest step, before any clipping.
  float grad_norm() const { return grad_norm_; }
  // Dynamic loss scaling's state (scale 1 without loss scaling); a restart
  // sets it from the checkpoint.
  LossScaleState loss_scale() const { return scale_; }
  void set_loss_scale(const LossScaleState& state);
  // With TrainOptions::shard_optimizer on several ranks: the optimizer's
  // shard (checkpoints gather and restarts take the state through it);
  // nullptr otherwise.
  // With a pipeline: the stages' slices (each rank updates its own).
  OptimizerSharding* sharding() const { return exchange_->slices(); }
  // The step's two parts.
  const GradientExchange& exchange() const { return *exchange_; }
  const StepSchedule& schedule() const { return *schedule_; }
  // Collective. With a pipeline: every stage's parameters and state copied
  // into the model of each pipeline's first rank (world rank 0 included),
  // which then holds the whole model, e.g. for a checkpoint. Else nothing.
  void gather_model();
  // The ranks whose parameter buffers are replicas of this rank's: all of
  // comm, or the ranks of this pipeline stage.
  const Communicator* replica_comm() const { return data_comm_; }

 private:
  class Work;  // one batch's MicroBatchWork for the schedule
  // The constructor's pipeline part: checks the replicas and the stage's
  // layers.
  void attach_pipeline(std::vector<Model*> replicas);
  // The exchange and the schedule the options, ranks and pipeline ask for;
  // synchronised BatchNorm.
  void set_up_step();
  void ensure_buffers(const Dataset& data);
  // Global batch `index` of an epoch over `samples` samples; the last holds
  // the remainder.
  Batch batch_at(std::int64_t index, std::int64_t samples) const;
  // A streamed dataset's read-ahead of this rank's share of steps
  // [first_step, steps) in `order`; nullptr when the data is resident or
  // this rank (an inner pipeline stage) takes none.
  std::unique_ptr<BatchStream> plan_stream(const Dataset& data, const Vector<std::int64_t>& order,
                                           std::int64_t first_step, std::int64_t steps) const;
  void average_state();
  // Throws CollectiveError when synchronised BatchNorm would see a
  // micro-batch with no sample on some rank (n samples an epoch).
  void check_sync_batchnorm(std::int64_t n) const;
  // After a batch's backward (step s of `steps` in the epoch): the
  // gradients exchanged, sums (loss, correct predictions) added over the
  // ranks and the loss checked, the gradients unscaled, clipped and applied
  // at the step's learning rate, the parameters shared and the state
  // averaged; what the step did.
  template <class Clock>
  StepReport finish_step(int epoch, std::int64_t s, std::int64_t steps, std::int64_t global,
                         double* sums, Clock& clock);
  // The progress line after step r: `done` samples of the epoch's
  // `samples` in `seconds`, totals their loss and correct predictions.
  std::string progress_line(const StepReport& r, std::int64_t steps, std::int64_t samples,
                            double done, double seconds, const double* totals) const;
  // This rank's `batch` samples from place `first` of `order` (or the
  // stream's next) into model's input, and their labels.
  void load_batch(const Dataset& data, const Vector<std::int64_t>& order, std::int64_t first,
                  std::int64_t batch, Model& model, const WindowDraw& draw, BatchStream* stream);
  // The loss of one micro-batch of `model` (the model's output); adds the
  // loss and correct predictions to sums.
  void evaluate_loss(Model& model, const Tensor<float>& output, std::int64_t batch,
                     std::int64_t global, bool train, double* sums);
  // Means over the predictions of `samples` samples from their sums.
  Evaluation mean_of(const double* totals, std::int64_t samples) const;

  // The model's instance (Model::set_execution_space): every kernel of the
  // step, the replicas', the averager's and the optimizer's run on it.
  const ExecSpace& exec() const { return model_.execution_space(); }

  Model& model_;
  Optimizer& optimizer_;
  TrainOptions options_;
  const Communicator* comm_ = nullptr;
  std::unique_ptr<Loss> loss_;
  int rank_ = 0, ranks_ = 1;
  // The ranks that split every micro-batch: comm, or a pipeline stage's.
  const Communicator* data_comm_ = nullptr;
  int data_rank_ = 0, data_ranks_ = 1;
  Pipeline* pipeline_ = nullptr;
  std::vector<Model*> slots_;  // the model, then its replicas
  std::vector<int> state_offsets_, state_counts_;
  std::unique_ptr<GradientExchange> exchange_;
  std::unique_ptr<StepSchedule> schedule_;
  std::unique_ptr<CommunicatorSync> sync_;
  std::function<void(const StepReport&)> on_step_;
  // The epoch begun: its data, plan and stream, the step a stream serves
  // next, sums over its steps so far (loss, correct predictions).
  struct EpochRun {
    const Dataset* data = nullptr;
    EpochPlan plan;
    std::unique_ptr<BatchStream> stream;
    std::int64_t next = 0;
    double totals[2] = {0, 0};
    std::int64_t samples = 0;
    std::chrono::steady_clock::time_point started;
  };
  EpochRun epoch_;
  std::function<void(std::int64_t, std::int64_t)> on_evaluation_batch_;
  std::int64_t step_ = 0;
  float lr_ = 0;
  float grad_norm_ = 0;
  LossScaleState scale_;
  std::int64_t skipped_ = 0;  // steps skipped in the current epoch
  [[noreturn]] void throw_non_finite_gradient(int epoch, std::int64_t batch_index);
  // After the gradients of a step are summed: unscales them and returns
  // whether the update goes ahead (false: dynamic loss scaling skips it).
  bool unscale_gradients(int epoch, std::int64_t batch_index, double& norm);

  std::int64_t classes_ = 0;    // the last axis of the model's output
  std::int64_t positions_ = 1;  // predictions per sample
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
