// Training loop and evaluation.
#include <tessera/core/random.hpp>
#include <tessera/kernels/loss.hpp>
#include <tessera/model/trainer.hpp>
#include <tessera/optim/clip.hpp>

#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace tessera {

namespace {
// Keeps the shuffle stream apart from initialisation streams for the same seed.
constexpr std::uint64_t shuffle_stream = 0x5348554646ULL;

// A free function: CUDA forbids device lambdas inside private member functions.
void fill_identity(const Vector<std::int64_t>& order) {
  Kokkos::parallel_for(
      "tessera::Trainer::identity_order", Kokkos::RangePolicy<ExecSpace>(0, order.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { order(i) = i; });
}
}  // namespace

std::vector<std::int64_t> shuffled_order(std::int64_t n, std::uint64_t seed, int epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[i] = i;
  for (std::int64_t i = n - 1; i > 0; --i) {
    const std::uint64_t r = counter_hash(seed, shuffle_stream + static_cast<std::uint64_t>(epoch),
                                         static_cast<std::uint64_t>(i));
    // Multiply-shift maps r to [0, i] without the bias of r % (i + 1).
    const auto j = static_cast<std::int64_t>(
        (static_cast<unsigned __int128>(r) * static_cast<unsigned __int128>(i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  return order;
}

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

void Trainer::throw_non_finite_gradient(int epoch, std::int64_t batch_index) {
  // Name the first parameter whose gradient is not finite.
  const auto& store = model_.parameters();
  std::string culprit = "unknown";
  for (std::size_t i = 0; i < store.entries().size(); ++i) {
    const double sum = kernels::deterministic_sum_squares(ExecSpace(), store.gradient(i).flat(), norm_scratch_);
    if (!std::isfinite(sum)) {
      culprit = store.entries()[i].layer + "." + store.entries()[i].spec.name;
      break;
    }
  }
  TESSERA_REQUIRE(false, "tessera::Trainer: non-finite gradient at epoch "
                             << epoch + 1 << ", step " << batch_index + 1 << " (optimizer step "
                             << step_ + 1 << "), first in " << culprit
                             << "; the weights were not updated with it; lower the learning rate, "
                                "clip gradients or check the data");
}

Trainer::Trainer(Model& model, Optimizer& optimizer, const TrainOptions& options)
    : model_(model), optimizer_(optimizer), options_(options) {
  TESSERA_REQUIRE(model.compiled(), "tessera::Trainer: compile() the model first");
  TESSERA_REQUIRE(options.batch_size > 0 && options.batch_size <= model.max_batch(),
                  "tessera::Trainer: batch size " << options.batch_size << " must be in [1, "
                                                  << model.max_batch()
                                                  << "] (the batch the model was compiled for)");
  TESSERA_REQUIRE(options.epochs >= 1, "tessera::Trainer: epochs " << options.epochs << " must be >= 1");
  TESSERA_REQUIRE(std::isfinite(options.clip_norm) && options.clip_norm >= 0,
                  "tessera::Trainer: clip_norm " << options.clip_norm
                                                 << " must be finite and >= 0 (0 = no clipping)");
  options.schedule.validate();
  // The gradient norm is taken every step, clipping or not: a non-finite
  // gradient must stop the run before it reaches the weights.
  norm_scratch_ = Kokkos::View<double*, MemSpace>(
      "tessera::Trainer::norm_scratch", kernels::deterministic_sum_scratch(model.parameters().count()));
  batch_labels_ = Vector<int>("tessera::Trainer::batch_labels", options.batch_size);
  sample_loss_ = Vector<float>("tessera::Trainer::sample_loss", options.batch_size);
  sample_correct_ = Vector<int>("tessera::Trainer::sample_correct", options.batch_size);
  sample_loss_host_ = Kokkos::create_mirror_view(sample_loss_);
  sample_correct_host_ = Kokkos::create_mirror_view(sample_correct_);
}

void Trainer::ensure_buffers(const Dataset& data) {
  TESSERA_REQUIRE(data.size() > 0, "tessera::Trainer: the dataset is empty");
  const Shape input = model_.input(1).shape();
  TESSERA_REQUIRE(static_cast<std::int64_t>(data.samples.extent(1)) == input.inner(),
                  "tessera::Trainer: dataset samples have " << data.samples.extent(1)
                      << " features, the model's input " << input << " takes " << input.inner());
  if (static_cast<std::int64_t>(order_.extent(0)) < data.size())
    order_ = Vector<std::int64_t>("tessera::Trainer::order", data.size());
  if (static_cast<std::int64_t>(identity_order_.extent(0)) != data.size()) {
    identity_order_ = Vector<std::int64_t>("tessera::Trainer::identity_order", data.size());
    fill_identity(identity_order_);
  }
}

Evaluation Trainer::run_batches(const Dataset& data, const Vector<std::int64_t>& order, bool train,
                                const std::function<void(const std::string&)>& log, int epoch) {
  const ExecSpace exec;
  const std::int64_t n = data.size();
  const std::int64_t batch_size = options_.batch_size;
  const std::int64_t steps = (n + batch_size - 1) / batch_size;
  const auto& loss_host = sample_loss_host_;
  const auto& correct_host = sample_correct_host_;
  double loss_sum = 0;
  std::int64_t correct = 0;
  const auto started = std::chrono::steady_clock::now();
  PhaseClock clock;
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::int64_t start = s * batch_size;
    // The last batch of an epoch holds the remainder; its gradient is the
    // mean over its own samples.
    const std::int64_t batch = std::min(batch_size, n - start);
    const auto labels = Kokkos::subview(batch_labels_, std::pair<std::int64_t, std::int64_t>(0, batch));
    clock.start();
    gather_batch(exec, data, order, start, model_.input(batch), labels);
    clock.stop(time_.data);
    const StepContext ctx{train, options_.seed, step_};
    const Tensor<float> logits = model_.forward(batch, ctx);
    kernels::softmax_cross_entropy(exec, logits.matrix(), labels, 1.0f / static_cast<float>(batch),
                                   model_.output_gradient(batch).matrix(), sample_loss_,
                                   sample_correct_);
    Kokkos::deep_copy(loss_host, sample_loss_);
    Kokkos::deep_copy(correct_host, sample_correct_);
    clock.stop(time_.forward);
    // Summed on the host in sample order: the same total for any thread count.
    double batch_loss = 0;
    for (std::int64_t i = 0; i < batch; ++i) {
      batch_loss += loss_host(i);
      correct += correct_host(i);
    }
    TESSERA_REQUIRE(std::isfinite(batch_loss),
                    "tessera::Trainer: non-finite loss at epoch "
                        << epoch + 1 << ", step " << s + 1
                        << (train ? " (optimizer step " + std::to_string(step_ + 1) +
                                        "); the weights were not updated with it; lower the "
                                        "learning rate, clip gradients or check the data"
                                  : " of the evaluation; check the data"));
    loss_sum += batch_loss;
    if (train) {
      model_.backward(batch, ctx);
      clock.stop(time_.backward);
      const double norm = gradient_norm(exec, model_.parameters(), norm_scratch_);
      if (!std::isfinite(norm)) throw_non_finite_gradient(epoch, s);
      grad_norm_ = static_cast<float>(norm);
      // The cosine schedule spans the whole run: options_.epochs epochs.
      lr_ = options_.schedule.lr(step_, steps, options_.epochs * steps);
      if (options_.clip_norm > 0) clip_to_norm(exec, model_.parameters(), norm, options_.clip_norm);
      optimizer_.step(model_.parameters(), lr_);
      clock.stop(time_.optimizer);
      ++step_;
      if (on_step_)
        on_step_(StepReport{step_, epoch, batch, batch_loss / static_cast<double>(batch), lr_,
                            grad_norm_});
      if (log && options_.log_every > 0 && ((s + 1) % options_.log_every == 0 || s + 1 == steps)) {
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        const double done = static_cast<double>(start + batch);
        std::ostringstream os;
        os << std::fixed << "epoch " << epoch + 1 << " step " << s + 1 << "/" << steps
           << "  loss " << std::setprecision(4) << loss_sum / done << "  acc "
           << static_cast<double>(correct) / done << "  lr " << std::defaultfloat
           << std::setprecision(4) << lr_ << std::fixed << "  " << std::setprecision(0)
           << done / seconds << " samples/s  ETA " << std::setprecision(1)
           << seconds / done * static_cast<double>(n - start - batch) << " s";
        log(os.str());
      }
    }
  }
  Evaluation result;
  result.samples = n;
  result.loss = loss_sum / static_cast<double>(n);
  result.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return result;
}

EpochReport Trainer::train_epoch(const Dataset& data, int epoch,
                                 const std::function<void(const std::string&)>& log) {
  ScopedRegion region("tessera::Trainer::train_epoch");
  ensure_buffers(data);
  const auto started = std::chrono::steady_clock::now();
  const auto order = shuffled_order(data.size(), options_.seed, epoch);
  const Kokkos::View<const std::int64_t*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      order_host(order.data(), order.size());
  Kokkos::deep_copy(Kokkos::subview(order_, std::pair<std::int64_t, std::int64_t>(0, data.size())),
                    order_host);
  EpochReport report;
  report.epoch = epoch;
  time_ = PhaseTimes{};
  report.train = run_batches(data, order_, true, log, epoch);
  report.time = time_;
  report.lr = lr_;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  report.samples_per_second = static_cast<double>(data.size()) / report.seconds;
  return report;
}

Evaluation Trainer::evaluate(const Dataset& data) {
  ScopedRegion region("tessera::Trainer::evaluate");
  ensure_buffers(data);
  return run_batches(data, identity_order_, false, {}, 0);
}

}  // namespace tessera
