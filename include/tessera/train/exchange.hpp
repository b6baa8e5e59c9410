// The gradient exchange of a training step: how the ranks' gradients meet
// before the update, and how the updated parameters reach every rank. One
// interface, which the trainer composes with the step's schedule
// (train/schedule.hpp); make_exchange picks the implementation from the
// options and the ranks:
//   none     one rank alone: nothing to exchange;
//   buckets  data parallel: the gradients summed over the ranks in buckets,
//            each started as the last micro-batch's backward completes it
//            (GradientAverager, through the model's layer hooks);
//   ZeRO-1   the buckets reduced to each rank's slice of the optimizer
//            (OptimizerSharding), which updates its slice; the parameters
//            then gathered, overlapped with the next forward pass when
//            TrainOptions::overlap_gather (each layer waits for its own);
//   stage    a pipeline stage's ranks sum the stage's gradients; each rank
//            updates its stage's slice.
// Every member that communicates is collective over the exchange's ranks.
#pragma once

#include <tessera/model/model.hpp>
#include <tessera/optim/optimizer.hpp>
#include <tessera/parallel/gradient_averager.hpp>
#include <tessera/parallel/optimizer_sharding.hpp>
#include <tessera/parallel/pipeline.hpp>
#include <tessera/settings/train_options.hpp>

#include <memory>

namespace tessera {

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;
  // "none", "buckets", "ZeRO-1" or "stage".
  virtual const char* name() const = 0;
  // Before the backward pass of the step's last micro-batch: the buckets
  // that pass completes start while it runs.
  virtual void begin_last_backward() {}
  // After the step's backward passes: the gradients the update reads (all,
  // or this rank's slice) hold the sum over the ranks. Returns whether it
  // communicated (its time is communication).
  virtual bool finish() { return false; }
  // The global L2 norm of the summed gradients, the same on every rank.
  virtual double gradient_norm(const ExecSpace& exec, const ParameterStore& params,
                               const Kokkos::View<double*, MemSpace>& scratch) const;
  // After the update: the parameters a rank updated sent to the others (or
  // started, when the next forward pass waits for them). Returns whether
  // it communicated.
  virtual bool share_parameters(ParameterStore& /*params*/) { return false; }
  // Waits for parameters still in flight: every rank then holds the whole
  // updated model.
  virtual void settle() {}
  // The optimizer's slice this rank updates (ZeRO-1, a pipeline stage);
  // nullptr when it updates every parameter.
  virtual OptimizerSharding* slices() const { return nullptr; }
  // Seconds of gradient communication that overlapped backward, and their
  // share of all gradient communication, since reset_times().
  virtual double overlapped_seconds() const { return 0; }
  virtual double overlap_fraction() const { return 0; }
  // Seconds forward passes waited for parameters in flight, since
  // reset_times().
  virtual double parameter_wait_seconds() const { return 0; }
  virtual void reset_times() {}
};

// The exchange for `options` on `comm` (nullptr or one rank: none) or, with
// `pipeline`, for its stage. The exchange adds its hooks to `model` and
// removes them when it goes, so the model must outlive it.
std::unique_ptr<GradientExchange> make_exchange(Model& model, Optimizer& optimizer,
                                                const TrainOptions& options,
                                                const Communicator* comm, Pipeline* pipeline);

}  // namespace tessera
