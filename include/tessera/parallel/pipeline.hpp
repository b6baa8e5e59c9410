// Pipeline parallelism: the layers of a model split into S stages, each on
// its own ranks. A stage runs its layers only; the activation at a stage
// boundary goes to the next stage's rank and its gradient comes back, point
// to point. The micro-batches of a step run in a one-forward-one-backward
// (1F1B) order, so stage s holds at most S - s micro-batches in flight, each
// in its own replica of the model (its own workspace, sized to the stage's
// layers; the same weights).
// With S x D ranks, rank r is stage r / D and data rank r % D: the D ranks of
// a stage split every micro-batch as in data parallelism and sum their
// gradients; the S ranks of a data rank form one pipeline. Every rank keeps
// the whole parameter buffer but updates, and keeps optimizer state for,
// its stage's slice only (an OptimizerSharding over the pipeline).
#pragma once

#include <tessera/model/model.hpp>
#include <tessera/parallel/communicator.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

// Where the stages start: first[0] = 0, first[s] the first layer of stage s.
struct PipelinePlan {
  std::vector<std::size_t> first;

  int stages() const { return static_cast<int>(first.size()); }
  LayerRange stage(int s) const {
    return {first.at(s), s + 1 < stages() ? first[s + 1] : static_cast<std::size_t>(-1)};
  }
};

// Layers a stage may start at: every later layer reads only the output of
// the layer before it or later ones (one activation crosses the boundary;
// not inside a residual block), and no parameter is tied across it.
std::vector<std::size_t> pipeline_cut_points(const Model& model);
// The estimated work of layer i for balancing: forward and backward FLOPs
// plus 4 FLOPs per byte of compulsory memory traffic.
double pipeline_layer_cost(const Model& model, std::size_t i);
// The stages whose largest cost is the least possible.
PipelinePlan balanced_pipeline(const Model& model, int stages);
// Stages that start at the named layers (stages - 1 names, in order).
PipelinePlan pipeline_at(const Model& model, const std::vector<std::string>& first_layers);
// "stage 1: stem..s1b1_out (52% of the cost), stage 2: ...".
std::string describe_pipeline(const Model& model, const PipelinePlan& plan);

// The order of a step's work on one stage: forward or backward of a micro-batch.
struct PipelineOp {
  bool forward = true;
  std::int64_t micro = 0;
};
// 1F1B: S - s - 1 forwards, then one forward and one backward in turn, then
// the remaining backwards. Forward-only (evaluation): the forwards in order.
std::vector<PipelineOp> pipeline_schedule(int stage, int stages, std::int64_t micro_batches,
                                          bool backward);
// Micro-batches one stage holds at once: min(S - s, M).
inline std::int64_t pipeline_in_flight(int stage, int stages, std::int64_t micro_batches) {
  const std::int64_t left = stages - stage;
  return left < micro_batches ? left : micro_batches;
}

class Pipeline {
 public:
  // Collective over `world`, whose size must be a multiple of plan.stages().
  Pipeline(const Communicator& world, const PipelinePlan& plan, std::int64_t micro_batches);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  const PipelinePlan& plan() const { return plan_; }
  int stages() const { return plan_.stages(); }
  int stage() const { return stage_; }
  bool first_stage() const { return stage_ == 0; }
  bool last_stage() const { return stage_ + 1 == stages(); }
  // This stage's layers (clamped to the model).
  LayerRange layers(const Model& model) const;
  std::int64_t micro_batches() const { return micro_batches_; }
  // Replicas of the model this stage needs (including the model itself).
  std::int64_t in_flight() const { return pipeline_in_flight(stage_, stages(), micro_batches_); }
  // The ranks of this stage (they split every micro-batch) and the ranks of
  // this rank's pipeline (one per stage, in stage order).
  const Communicator& data() const { return *data_; }
  const Communicator& line() const { return *line_; }

  // Every stage's slice of a parameter or state store of `model`, in the
  // layout of OptimizerSharding and Communicator::gather_slices.
  void slices(const Model& model, const ParameterStore& store, std::vector<int>& offsets,
              std::vector<int>& counts) const;

  // Point to point, for micro-batch slot `slot` (< in_flight()). Sends
  // return at once (the buffer must stay untouched until wait(slot));
  // receives block. Activations go to the next stage, their gradients to
  // the previous one.
  void send_forward(std::int64_t slot, const Tensor<float>& activation);
  void receive_forward(const Tensor<float>& activation);
  void send_backward(std::int64_t slot, const Tensor<float>& gradient);
  void receive_backward(const Tensor<float>& gradient);
  // Completes the sends of `slot` (before its buffers are reused).
  void wait(std::int64_t slot);
  void wait_all();
  // Seconds spent blocked on receives and sends since the last reset.
  double waiting_seconds() const { return waiting_; }
  void reset_waiting() { waiting_ = 0; }

  // The L2 norm of the whole gradient buffer from every stage's part (each
  // rank's gradients are zero outside its stage): the chunk sums of
  // kernels::deterministic_sum_squares added over the pipeline, on every
  // rank. scratch: as for gradient_norm.
  double gradient_norm(const ExecSpace& exec, const ParameterStore& params,
                       const Kokkos::View<double*, MemSpace>& scratch) const;

 private:
  void send(std::int64_t slot, const Tensor<float>& values, int to, int tag);
  void receive(const Tensor<float>& values, int from, int tag);

  PipelinePlan plan_;
  std::int64_t micro_batches_ = 1;
  int stage_ = 0;
  std::unique_ptr<Communicator> data_, line_;  // split from the world; they free their MPI_Comm
  // Sends in flight per slot, and host copies when device memory is staged.
  std::vector<Requests> pending_;
  std::vector<std::vector<std::vector<float>>> staged_;
  double waiting_ = 0;
};

}  // namespace tessera
