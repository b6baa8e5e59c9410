// The step's two schedules (train/schedule.hpp).
#include <tessera/train/schedule.hpp>

namespace tessera {

MicroBatches::MicroBatches(Model& model, GradientExchange& exchange, std::int64_t micro_batches,
                           int rank, int ranks)
    : model_(model),
      exchange_(exchange),
      micro_batches_(micro_batches),
      rank_(rank),
      ranks_(ranks) {}

void MicroBatches::run(MicroBatchWork& work) {
  const std::int64_t global = work.global();
  for (std::int64_t m = 0; m < micro_batches_; ++m) {
    // Micro-batch m of the global batch, then this rank's share of it.
    const Shard micro = shard_of(global, static_cast<int>(m), static_cast<int>(micro_batches_));
    const Shard part = shard_of(micro.count, rank_, ranks_);
    const std::int64_t batch = part.count, offset = micro.offset + part.offset;
    const StepContext ctx = work.context(offset, micro.count);
    if (batch > 0) {
      work.load(model_, offset, batch);
      work.lap(&PhaseTimes::data);
      work.loss(model_, model_.forward(batch, ctx), batch);
    }
    // Backward reads every parameter; a rank without samples waits here.
    exchange_.settle();
    work.lap(&PhaseTimes::forward);
    if (!work.training()) continue;
    // The exchange runs while the last micro-batch runs backward.
    if (m + 1 == micro_batches_) exchange_.begin_last_backward();
    if (batch > 0) model_.backward(batch, ctx);
    work.lap(&PhaseTimes::backward);
  }
}

OneFOneB::OneFOneB(Pipeline& pipeline, std::vector<Model*> slots, int rank, int ranks)
    : pipeline_(pipeline), slots_(std::move(slots)), rank_(rank), ranks_(ranks) {}

void OneFOneB::run(MicroBatchWork& work) {
  Pipeline& pipe = pipeline_;
  const LayerRange range = pipe.layers(*slots_.front());
  const std::int64_t global = work.global(), micro_steps = pipe.micro_batches();
  const auto slots = static_cast<std::int64_t>(slots_.size());
  for (const PipelineOp& op :
       pipeline_schedule(pipe.stage(), pipe.stages(), micro_steps, work.training())) {
    const Shard micro = shard_of(global, static_cast<int>(op.micro), static_cast<int>(micro_steps));
    const Shard part = shard_of(micro.count, rank_, ranks_);
    const std::int64_t batch = part.count, offset = micro.offset + part.offset;
    // Every stage of this pipeline has the same share: all skip it together.
    if (batch == 0) continue;
    const std::int64_t slot = op.micro % slots;
    Model& model = *slots_[slot];
    pipe.wait(slot);
    const StepContext ctx = work.context(offset, micro.count);
    if (op.forward) {
      if (pipe.first_stage() || pipe.last_stage()) {
        work.load(model, offset, batch);
        work.lap(&PhaseTimes::data);
      }
      if (!pipe.first_stage()) {
        pipe.receive_forward(model.activation(range.first - 1, batch));
        work.lap(&PhaseTimes::communication);
      }
      const Tensor<float> output = model.forward(batch, ctx, range);
      if (pipe.last_stage())
        work.loss(model, output, batch);
      else
        pipe.send_forward(slot, output);
      work.lap(&PhaseTimes::forward);
      continue;
    }
    if (!pipe.last_stage()) {
      pipe.receive_backward(model.activation_gradient(range.last - 1, batch));
      work.lap(&PhaseTimes::communication);
    }
    model.backward(batch, ctx, range);
    if (!pipe.first_stage())
      pipe.send_backward(slot, model.activation_gradient(range.first - 1, batch));
    work.lap(&PhaseTimes::backward);
  }
  pipe.wait_all();
  work.lap(&PhaseTimes::communication);
}

}  // namespace tessera
