// The training step's mechanism: a batch's micro-batches (alone, data
// parallel, or as one stage of a 1F1B pipeline), the finish of a step
// (gradient exchange, loss check, unscaling, clipping, the update, the
// parameter gather), progress lines, and the loop over an epoch's batches.
#include <tessera/optim/clip.hpp>
#include <tessera/train/trainer.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace tessera {

namespace {
// Splits wall time into phases: stop(bucket) fences the device, then adds
// the time since the previous stop (or start) to the bucket.
class PhaseClock {
 public:
  void start() {
    Kokkos::fence();
    last_ = std::chrono::steady_clock::now();
  }
  void stop(double& bucket) {
    Kokkos::fence();
    const auto now = std::chrono::steady_clock::now();
    bucket += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  std::chrono::steady_clock::time_point last_;
};
}  // namespace

void Trainer::load_batch(const Dataset& data, const Vector<std::int64_t>& order, std::int64_t first,
                         std::int64_t batch, Model& model, const WindowDraw& draw,
                         BatchStream* stream) {
  const ExecSpace& exec = this->exec();
  const auto labels =
      Kokkos::subview(batch_labels_, std::pair<std::int64_t, std::int64_t>(0, batch * positions_));
  if (stream)
    stream->next(exec, model.input(batch), labels);
  else
    gather_batch(exec, data, order, first, model.input(batch), labels, draw);
}

void Trainer::evaluate_loss(Model& model, const Tensor<float>& output, std::int64_t batch,
                            std::int64_t global, bool train, double* sums) {
  const ExecSpace& exec = this->exec();
  const auto labels =
      Kokkos::subview(batch_labels_, std::pair<std::int64_t, std::int64_t>(0, batch * positions_));
  // Scaling by a power of two after the division keeps every gradient
  // an exact multiple of the unscaled one.
  loss_->evaluate(exec, output, labels,
                  scale_.scale * (1.0f / static_cast<float>(global * positions_)),
                  model.output_gradient(batch), sample_loss_, sample_correct_, train);
  Kokkos::deep_copy(exec, sample_loss_host_, sample_loss_);
  Kokkos::deep_copy(exec, sample_correct_host_, sample_correct_);
  exec.fence();
  for (std::int64_t i = 0; i < batch * positions_; ++i) {
    sums[0] += sample_loss_host_(i);
    sums[1] += sample_correct_host_(i);
  }
}

template <class Clock>
void Trainer::pipeline_batch(const Dataset& data, const Vector<std::int64_t>& order, bool train,
                             std::int64_t start, std::int64_t global, const WindowDraw& draw,
                             bool sync, BatchStream* stream, Clock& clock, double* sums) {
  Pipeline& pipe = *pipeline_;
  const LayerRange range = pipe.layers(model_);
  const std::int64_t micro_steps = options_.accumulation_steps;
  const auto slots = static_cast<std::int64_t>(slots_.size());
  for (const PipelineOp& op : pipeline_schedule(pipe.stage(), pipe.stages(), micro_steps, train)) {
    const Shard micro = shard_of(global, static_cast<int>(op.micro), static_cast<int>(micro_steps));
    const Shard part = shard_of(micro.count, data_rank_, data_ranks_);
    const std::int64_t batch = part.count, offset = micro.offset + part.offset;
    // Every stage of this pipeline has the same share: all skip it together.
    if (batch == 0) continue;
    const std::int64_t slot = op.micro % slots;
    Model& model = *slots_[slot];
    pipe.wait(slot);
    const StepContext ctx{train,       options_.seed, step_, offset, sync ? sync_.get() : nullptr,
                          micro.count, nullptr,       exec()};
    if (op.forward) {
      if (pipe.first_stage() || pipe.last_stage()) {
        load_batch(data, order, start + offset, batch, model, draw, stream);
        clock.stop(time_.data);
      }
      if (!pipe.first_stage()) {
        pipe.receive_forward(model.activation(range.first - 1, batch));
        clock.stop(time_.communication);
      }
      const Tensor<float> output = model.forward(batch, ctx, {}, range);
      if (pipe.last_stage())
        evaluate_loss(model, output, batch, global, train, sums);
      else
        pipe.send_forward(slot, output);
      clock.stop(time_.forward);
      continue;
    }
    if (!pipe.last_stage()) {
      pipe.receive_backward(model.activation_gradient(range.last - 1, batch));
      clock.stop(time_.communication);
    }
    model.backward(batch, ctx, nullptr, range);
    if (!pipe.first_stage())
      pipe.send_backward(slot, model.activation_gradient(range.first - 1, batch));
    clock.stop(time_.backward);
  }
  pipe.wait_all();
  clock.stop(time_.communication);
}

void Trainer::check_sync_batchnorm(std::int64_t n) const {
  // Synchronised statistics need samples on every rank in every micro-batch.
  const std::int64_t batch_size = options_.batch_size, micro_steps = options_.accumulation_steps;
  const std::int64_t last = n % batch_size ? n % batch_size : batch_size;
  const std::int64_t smallest = std::min(batch_size, last) / micro_steps;
  if (smallest < data_ranks_)
    throw CollectiveError(
        "tessera::Trainer: synchronised BatchNorm needs at least one sample per "
        "rank in every micro-batch; batch size " +
        std::to_string(batch_size) + " in " + std::to_string(micro_steps) +
        " micro-batch(es) over " + std::to_string(n) + " samples leaves micro-batches of " +
        std::to_string(smallest) + " for " + std::to_string(data_ranks_) +
        " ranks; choose another batch size");
}

template <class Clock>
void Trainer::micro_batches(const Dataset& data, const Vector<std::int64_t>& order, bool train,
                            std::int64_t start, std::int64_t global, const WindowDraw& draw,
                            bool sync, BatchStream* stream, Clock& clock, double* sums) {
  const std::int64_t micro_steps = options_.accumulation_steps;
  for (std::int64_t m = 0; m < micro_steps; ++m) {
    // Micro-batch m of the global batch, then this rank's share of it.
    const Shard micro = shard_of(global, static_cast<int>(m), static_cast<int>(micro_steps));
    const Shard part = shard_of(micro.count, rank_, ranks_);
    const std::int64_t batch = part.count, offset = micro.offset + part.offset;
    const bool last_micro = m + 1 == micro_steps;
    const StepContext ctx{train,       options_.seed, step_, offset, sync ? sync_.get() : nullptr,
                          micro.count, nullptr,       exec()};
    if (batch > 0) {
      load_batch(data, order, start + offset, batch, model_, draw, stream);
      clock.stop(time_.data);
      const Tensor<float> output = model_.forward(batch, ctx, before_layer_);
      evaluate_loss(model_, output, batch, global, train, sums);
    }
    // Backward reads every parameter; a rank without samples waits here.
    settle_parameters();
    clock.stop(time_.forward);
    if (!train) continue;
    // Gradients are averaged while the last micro-batch runs backward.
    if (last_micro && averager_) averager_->begin();
    if (batch > 0) model_.backward(batch, ctx, last_micro ? after_layer_ : nullptr);
    clock.stop(time_.backward);
  }
}

template <class Clock>
StepReport Trainer::finish_step(int epoch, std::int64_t s, std::int64_t steps, std::int64_t global,
                                double* sums, Clock& clock) {
  if (averager_) {
    averager_->finish();
    clock.stop(time_.communication);
  }
  if (pipeline_ && data_ranks_ > 1) {
    // The stage's ranks sum their gradients (zero outside the stage).
    const OptimizerSharding& mine = *stage_slices_;
    data_comm_->sum(
        Vector<float>(model_.parameters().gradients().data() + mine.offset(), mine.count()));
    clock.stop(time_.communication);
  }
  // One process communicates nothing: its time goes to the next phase.
  if (ranks_ > 1) {
    comm_->sum(sums, 2);
    clock.stop(time_.communication);
  }
  const double batch_loss = sums[0];
  if (!std::isfinite(batch_loss))
    throw CollectiveError("tessera::Trainer: non-finite loss at epoch " +
                          std::to_string(epoch + 1) + ", step " + std::to_string(s + 1) +
                          " (optimizer step " + std::to_string(step_ + 1) +
                          "); the weights were not updated with it; lower the learning rate, "
                          "clip gradients or check the data");
  const float scale = scale_.scale;
  double norm = 0;
  const bool update = unscale_gradients(epoch, s, norm);
  grad_norm_ = static_cast<float>(norm);
  // The cosine schedule spans the whole run: options_.epochs epochs. A
  // skipped step keeps its place in it, as in the data order.
  lr_ = options_.schedule.lr(step_, steps, options_.total_steps(steps));
  if (update) {
    if (options_.clip_norm > 0) clip_to_norm(exec(), model_.parameters(), norm, options_.clip_norm);
    optimizer_.step(exec(), model_.parameters(), lr_);
  } else {
    ++skipped_;
  }
  clock.stop(time_.optimizer);
  if (update && sharding_) {
    // Overlapped: the next forward pass waits for each bucket in turn.
    if (before_layer_)
      sharding_->start_gather();
    else
      sharding_->gather_parameters(model_.parameters());
    clock.stop(time_.communication);
  }
  if (ranks_ > 1) {
    average_state();
    clock.stop(time_.communication);
  }
  ++step_;
  return StepReport{
      step_, epoch, global, batch_loss / static_cast<double>(global * positions_), lr_, grad_norm_,
      s,     scale, !update};
}

std::string Trainer::progress_line(const StepReport& r, std::int64_t steps, std::int64_t samples,
                                   double done, double seconds, const double* totals) const {
  const double predictions = done * static_cast<double>(positions_);
  std::ostringstream os;
  os << std::fixed << "epoch " << r.epoch + 1 << " step " << r.step_in_epoch + 1 << "/" << steps
     << "  loss " << std::setprecision(4) << totals[0] / predictions << "  acc "
     << totals[1] / predictions << "  lr " << std::defaultfloat << std::setprecision(4) << r.lr
     << std::fixed << "  ";
  if (options_.loss_scaling.dynamic)
    os << "loss scale " << std::setprecision(0) << scale_.scale << " (" << skipped_
       << " skipped)  ";
  const std::int64_t left = samples - r.step_in_epoch * options_.batch_size - r.batch;
  os << std::setprecision(0) << done / seconds << " samples/s  ETA " << std::setprecision(1)
     << seconds / done * static_cast<double>(left) << " s";
  return os.str();
}

Evaluation Trainer::run_batches(const Dataset& data, const Vector<std::int64_t>& order, bool train,
                                const std::function<void(const std::string&)>& log, int epoch,
                                std::int64_t first_step) {
  const std::int64_t n = data.size();
  const std::int64_t batch_size = options_.batch_size;
  const WindowDraw draw{options_.seed, epoch};
  const std::int64_t steps = steps_per_epoch(n);
  TESSERA_REQUIRE(first_step >= 0 && first_step < steps,
                  "tessera::Trainer: epoch " << epoch + 1 << " has " << steps
                                             << " steps; cannot start at step " << first_step + 1);
  // Training stops within the epoch once the run's max_steps are taken.
  const std::int64_t left = options_.max_steps > 0 ? options_.max_steps - step_ : steps;
  const std::int64_t last =
      train ? std::min(steps, first_step + std::max<std::int64_t>(left, 1)) : steps;
  const bool sync = train && sync_ != nullptr;
  if (sync) check_sync_batchnorm(n);
  // A streamed dataset is read ahead: this rank's share of every batch left.
  // Inner pipeline stages take no data.
  std::unique_ptr<BatchStream> stream;
  const bool takes_data = !pipeline_ || pipeline_->first_stage() || pipeline_->last_stage();
  if (data.streamed() && takes_data) stream = plan_stream(data, order, first_step, last);
  if (sharding_) sharding_->reset_gather_wait();
  // Sums over the samples seen so far: loss, correct predictions.
  double totals[2] = {0, 0};
  std::int64_t samples = 0;
  const auto started = std::chrono::steady_clock::now();
  PhaseClock clock;
  for (std::int64_t s = first_step; s < last; ++s) {
    const std::int64_t start = s * batch_size;
    // The last batch of an epoch holds the remainder; its gradient is the
    // mean over its own samples.
    const std::int64_t global = std::min(batch_size, n - start);
    samples += global;
    clock.start();
    if (train) model_.zero_gradients();
    // Summed on the host in sample order: the same total for any thread count.
    double sums[2] = {0, 0};
    if (pipeline_)
      pipeline_batch(data, order, train, start, global, draw, sync, stream.get(), clock, sums);
    else
      micro_batches(data, order, train, start, global, draw, sync, stream.get(), clock, sums);
    if (train) {
      const StepReport report = finish_step(epoch, s, steps, global, sums, clock);
      totals[0] += sums[0];
      totals[1] += sums[1];
      if (on_step_) on_step_(report);
      if (log && options_.log_every > 0 && ((s + 1) % options_.log_every == 0 || s + 1 == last)) {
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        const double done = static_cast<double>(start + global - first_step * batch_size);
        log(progress_line(report, steps, n, done, seconds, totals));
      }
    } else {
      totals[0] += sums[0];
      totals[1] += sums[1];
      if (on_evaluation_batch_) on_evaluation_batch_(start + global, n);
    }
  }
  if (sharding_) {
    // Waiting for parameters inside forward is communication, not compute;
    // the wait for the last step's parameters is communication too.
    const double in_forward = sharding_->gather_wait_seconds();
    settle_parameters();
    time_.forward -= in_forward;
    time_.communication += sharding_->gather_wait_seconds();
  }
  if (!train && comm_ != nullptr) comm_->sum(totals, 2);
  Evaluation result;
  result.samples = samples;
  const double predictions = static_cast<double>(result.samples * positions_);
  result.loss = totals[0] / predictions;
  result.accuracy = totals[1] / predictions;
  if (!train && !std::isfinite(result.loss))
    throw CollectiveError("tessera::Trainer: non-finite loss in the evaluation; check the data");
  return result;
}

}  // namespace tessera
