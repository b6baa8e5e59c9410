// The training step: one batch's work for the schedule (Trainer::Work), the
// finish of a step (gradient exchange, loss check, unscaling, clipping, the
// update, the parameters shared), the epoch's begin and end, progress lines,
// and the loops of train_epoch and evaluate over them.
#include <tessera/optim/clip.hpp>
#include <tessera/train/trainer.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace tessera {

namespace impl {
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
}  // namespace impl

// One batch as the schedule sees it: places [start, start + global) of
// order, loaded from data or the stream; the loss sums into sums.
class Trainer::Work final : public MicroBatchWork {
 public:
  Work(Trainer& t, const Dataset& data, const Vector<std::int64_t>& order, bool train,
       std::int64_t start, std::int64_t global, const WindowDraw& draw, BatchStream* stream,
       impl::PhaseClock& clock, double* sums)
      : t_(t),
        data_(data),
        order_(order),
        train_(train),
        start_(start),
        global_(global),
        draw_(draw),
        stream_(stream),
        clock_(clock),
        sums_(sums) {}

  bool training() const override { return train_; }
  std::int64_t global() const override { return global_; }
  StepContext context(std::int64_t offset, std::int64_t micro) const override {
    const BatchSync* sync = train_ ? t_.sync_.get() : nullptr;
    return StepContext{train_, t_.options_.seed, t_.step_, offset, sync, micro, nullptr, t_.exec()};
  }
  void load(Model& model, std::int64_t offset, std::int64_t batch) override {
    t_.load_batch(data_, order_, start_ + offset, batch, model, draw_, stream_);
  }
  void loss(Model& model, const Tensor<float>& output, std::int64_t batch) override {
    t_.evaluate_loss(model, output, batch, global_, train_, sums_);
  }
  void lap(double PhaseTimes::*phase) override { clock_.stop(t_.time_.*phase); }

 private:
  Trainer& t_;
  const Dataset& data_;
  const Vector<std::int64_t>& order_;
  bool train_;
  std::int64_t start_, global_;
  WindowDraw draw_;
  BatchStream* stream_;
  impl::PhaseClock& clock_;
  double* sums_;
};

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
StepReport Trainer::finish_step(int epoch, std::int64_t s, std::int64_t steps, std::int64_t global,
                                double* sums, Clock& clock) {
  if (exchange_->finish()) clock.stop(time_.communication);
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
  if (update && exchange_->share_parameters(model_.parameters())) clock.stop(time_.communication);
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

Evaluation Trainer::mean_of(const double* totals, std::int64_t samples) const {
  Evaluation result;
  result.samples = samples;
  const double predictions = static_cast<double>(samples * positions_);
  result.loss = totals[0] / predictions;
  result.accuracy = totals[1] / predictions;
  return result;
}

EpochPlan Trainer::begin_epoch(const Dataset& data, int epoch, std::int64_t first_step) {
  ensure_buffers(data);
  epoch_.started = std::chrono::steady_clock::now();
  const std::int64_t n = data.size(), steps = steps_per_epoch(n);
  TESSERA_REQUIRE(epoch >= 0 && first_step >= 0 && first_step < steps,
                  "tessera::Trainer::begin_epoch: epoch " << epoch + 1 << " has " << steps
                                                          << " steps; cannot start at step "
                                                          << first_step + 1);
  const auto order = shuffled_order(n, options_.seed, epoch);
  const Kokkos::View<const std::int64_t*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      order_host(order.data(), order.size());
  Kokkos::deep_copy(Kokkos::subview(order_, std::pair<std::int64_t, std::int64_t>(0, n)),
                    order_host);
  // Training stops within the epoch once the run's max_steps are taken.
  const std::int64_t left = options_.max_steps > 0 ? options_.max_steps - step_ : steps;
  const std::int64_t last = std::min(steps, first_step + std::max<std::int64_t>(left, 1));
  if (sync_) check_sync_batchnorm(n);
  time_ = PhaseTimes{};
  skipped_ = 0;
  exchange_->reset_times();
  if (pipeline_) pipeline_->reset_waiting();
  // A streamed dataset is read ahead: this rank's share of every batch left.
  epoch_.stream = plan_stream(data, order_, first_step, last);
  epoch_.data = &data;
  epoch_.plan = EpochPlan{epoch, first_step, last, steps};
  epoch_.next = first_step;
  epoch_.totals[0] = epoch_.totals[1] = 0;
  epoch_.samples = 0;
  return epoch_.plan;
}

Batch Trainer::batch(std::int64_t index) const {
  const EpochPlan& plan = epoch_.plan;
  TESSERA_REQUIRE(epoch_.data != nullptr, "tessera::Trainer::batch: begin_epoch() first");
  TESSERA_REQUIRE(index >= 0 && index < plan.steps, "tessera::Trainer::batch: step "
                                                        << index + 1 << " of an epoch of "
                                                        << plan.steps << " steps");
  return batch_at(index, epoch_.data->size());
}

Batch Trainer::batch_at(std::int64_t index, std::int64_t samples) const {
  // The last batch of an epoch holds the remainder; its gradient is the
  // mean over its own samples.
  const std::int64_t start = index * options_.batch_size;
  return Batch{index, start, std::min(options_.batch_size, samples - start)};
}

StepReport Trainer::step(const Batch& b) {
  TESSERA_REQUIRE(epoch_.data != nullptr, "tessera::Trainer::step: begin_epoch() first");
  const Batch expected = batch(b.index);
  TESSERA_REQUIRE(b.start == expected.start && b.size == expected.size,
                  "tessera::Trainer::step: batch [" << b.start << ", " << b.start + b.size
                                                    << ") is not step " << b.index + 1
                                                    << " of the epoch; take it from batch()");
  TESSERA_REQUIRE(!epoch_.stream || (b.index == epoch_.next && b.index < epoch_.plan.last),
                  "tessera::Trainer::step: a streamed dataset serves steps "
                      << epoch_.next + 1 << " to " << epoch_.plan.last
                      << " of the epoch in order; got step " << b.index + 1);
  impl::PhaseClock clock;
  clock.start();
  model_.zero_gradients();
  // Summed on the host in sample order: the same total for any thread count.
  double sums[2] = {0, 0};
  Work work(*this, *epoch_.data, order_, true, b.start, b.size,
            WindowDraw{options_.seed, epoch_.plan.epoch}, epoch_.stream.get(), clock, sums);
  schedule_->run(work);
  const StepReport report =
      finish_step(epoch_.plan.epoch, b.index, epoch_.plan.steps, b.size, sums, clock);
  epoch_.totals[0] += sums[0];
  epoch_.totals[1] += sums[1];
  epoch_.samples += b.size;
  epoch_.next = b.index + 1;
  if (on_step_) on_step_(report);
  return report;
}

EpochReport Trainer::end_epoch() {
  TESSERA_REQUIRE(epoch_.data != nullptr, "tessera::Trainer::end_epoch: begin_epoch() first");
  // Waiting for parameters inside forward is communication, not compute;
  // the wait for the last step's parameters is communication too.
  const double in_forward = exchange_->parameter_wait_seconds();
  settle_parameters();
  time_.forward -= in_forward;
  time_.communication += exchange_->parameter_wait_seconds();
  EpochReport report;
  report.epoch = epoch_.plan.epoch;
  report.train = mean_of(epoch_.totals, epoch_.samples);
  report.time = time_;
  report.overlapped_seconds = exchange_->overlapped_seconds();
  report.overlap_fraction = exchange_->overlap_fraction();
  report.lr = lr_;
  report.skipped_steps = skipped_;
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_.started).count();
  report.samples_per_second = static_cast<double>(report.train.samples) / report.seconds;
  if (pipeline_) {
    report.pipeline_wait_seconds = pipeline_->waiting_seconds();
    double share = report.pipeline_wait_seconds / report.seconds;
    comm_->sum(&share, 1);
    report.bubble_fraction = share / ranks_;
  }
  epoch_.data = nullptr;
  epoch_.stream.reset();
  return report;
}

EpochReport Trainer::train_epoch(const Dataset& data, int epoch,
                                 const std::function<void(const std::string&)>& log,
                                 std::int64_t first_step) {
  ScopedRegion region("tessera::Trainer::train_epoch");
  const EpochPlan plan = begin_epoch(data, epoch, first_step);
  const auto started = std::chrono::steady_clock::now();
  for (std::int64_t s = plan.first; s < plan.last; ++s) {
    const Batch b = batch(s);
    const StepReport report = step(b);
    if (log && options_.log_every > 0 &&
        ((s + 1) % options_.log_every == 0 || s + 1 == plan.last)) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const double done = static_cast<double>(b.start + b.size - plan.first * options_.batch_size);
      log(progress_line(report, plan.steps, data.size(), done, seconds, epoch_.totals));
    }
  }
  return end_epoch();
}

Evaluation Trainer::evaluate(const Dataset& data) {
  ScopedRegion region("tessera::Trainer::evaluate");
  ensure_buffers(data);
  const std::int64_t n = data.size(), steps = steps_per_epoch(n);
  const std::unique_ptr<BatchStream> stream = plan_stream(data, identity_order_, 0, steps);
  double totals[2] = {0, 0};
  impl::PhaseClock clock;
  for (std::int64_t s = 0; s < steps; ++s) {
    const Batch b = batch_at(s, n);
    clock.start();
    double sums[2] = {0, 0};
    Work work(*this, data, identity_order_, false, b.start, b.size, WindowDraw{options_.seed, 0},
              stream.get(), clock, sums);
    schedule_->run(work);
    totals[0] += sums[0];
    totals[1] += sums[1];
    if (on_evaluation_batch_) on_evaluation_batch_(b.start + b.size, n);
  }
  settle_parameters();
  if (comm_ != nullptr) comm_->sum(totals, 2);
  const Evaluation result = mean_of(totals, n);
  if (!std::isfinite(result.loss))
    throw CollectiveError("tessera::Trainer: non-finite loss in the evaluation; check the data");
  return result;
}

}  // namespace tessera
