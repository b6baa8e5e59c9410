// The schedule of a training step: the order in which one global batch's
// micro-batches run forward, the loss and backward on this rank. One
// interface, which the trainer composes with the gradient exchange
// (train/exchange.hpp):
//   MicroBatches  the micro-batches one after another on this rank's model,
//                 each split over the data ranks (one micro-batch: the plain
//                 step); the exchange starts with the last backward;
//   OneFOneB      this rank's pipeline stage in 1F1B order, a model replica
//                 per micro-batch in flight, activations and their gradients
//                 sent to the neighbour stages.
// A schedule asks the step it runs for data, contexts, the loss and the
// clock through MicroBatchWork; the trainer provides it.
#pragma once

#include <tessera/model/model.hpp>
#include <tessera/parallel/pipeline.hpp>
#include <tessera/train/exchange.hpp>

#include <cstdint>
#include <vector>

namespace tessera {

// Seconds spent per phase of the training steps (each phase ends with a
// device fence, so the phases add up to the loop's wall time).
struct PhaseTimes {
  double data = 0;           // gathering the batch
  double forward = 0;        // forward pass and loss
  double backward = 0;       // backward pass
  double optimizer = 0;      // gradient norm, clipping, update
  double communication = 0;  // waiting for ranks: loss sums, gradient averaging after backward
};

// What a schedule asks of the step (or evaluation batch) it runs.
class MicroBatchWork {
 public:
  virtual ~MicroBatchWork() = default;
  virtual bool training() const = 0;
  // Samples in the global batch.
  virtual std::int64_t global() const = 0;
  // The layers' context for this rank's share of a micro-batch: it starts
  // at place `offset` of the global batch; the micro-batch holds `micro`
  // samples over all ranks.
  virtual StepContext context(std::int64_t offset, std::int64_t micro) const = 0;
  // This rank's `batch` samples from place `offset` of the global batch
  // into model's input, and their labels.
  virtual void load(Model& model, std::int64_t offset, std::int64_t batch) = 0;
  // The loss of those samples from model's output: fills the model's output
  // gradient and adds to the step's sums.
  virtual void loss(Model& model, const Tensor<float>& output, std::int64_t batch) = 0;
  // Fences and adds the time since the last lap to one phase.
  virtual void lap(double PhaseTimes::*phase) = 0;
};

class StepSchedule {
 public:
  virtual ~StepSchedule() = default;
  // "micro-batches" or "1F1B".
  virtual const char* name() const = 0;
  // One global batch: its micro-batches' forward, loss and, when training,
  // backward (parameter gradients add up in the model).
  virtual void run(MicroBatchWork& work) = 0;
};

class MicroBatches final : public StepSchedule {
 public:
  // rank of ranks split every micro-batch; exchange: the step's, started
  // before the last micro-batch's backward.
  MicroBatches(Model& model, GradientExchange& exchange, std::int64_t micro_batches, int rank,
               int ranks);
  const char* name() const override { return "micro-batches"; }
  void run(MicroBatchWork& work) override;

 private:
  Model& model_;
  GradientExchange& exchange_;
  std::int64_t micro_batches_;
  int rank_, ranks_;
};

class OneFOneB final : public StepSchedule {
 public:
  // slots: the stage's model, then its replicas (one per micro-batch in
  // flight); rank of ranks: this rank among the stage's data ranks.
  OneFOneB(Pipeline& pipeline, std::vector<Model*> slots, int rank, int ranks);
  const char* name() const override { return "1F1B"; }
  void run(MicroBatchWork& work) override;

 private:
  Pipeline& pipeline_;
  std::vector<Model*> slots_;
  int rank_, ranks_;
};

}  // namespace tessera
