// Training loop and evaluation.
#include <tessera/core/random.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/reduce.hpp>
#include <tessera/optim/clip.hpp>
#include <tessera/train/trainer.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace tessera {

namespace {
// Keeps the shuffle stream apart from initialisation streams for the same seed.
constexpr std::uint64_t shuffle_stream = 0x5348554646ULL;

// A free function: CUDA forbids device lambdas inside private member functions.
void fill_identity(const ExecSpace& exec, const Vector<std::int64_t>& order) {
  kernels::impl::parallel_for(
      "tessera::Trainer::identity_order", Kokkos::RangePolicy<ExecSpace>(exec, 0, order.extent(0)),
      kernels::Work{kernels::bytes_of<std::int64_t>(order.extent(0)), 0},
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

void Trainer::throw_non_finite_gradient(int epoch, std::int64_t batch_index) {
  // Name the first parameter whose gradient is not finite. With a sharded
  // optimizer each rank holds the summed gradients of its slice only: each
  // looks there, and the ranks agree on the first.
  const auto& store = model_.parameters();
  const OptimizerSharding* slices = sharding();
  const std::int64_t lo = slices ? slices->offset() : 0;
  const std::int64_t hi = slices ? lo + slices->count() : store.count();
  std::uint64_t first = store.entries().size();
  for (std::size_t i = 0; i < store.entries().size(); ++i) {
    const ParameterEntry& e = store.entries()[i];
    const std::int64_t begin = std::max(lo, e.offset);
    const std::int64_t end = std::min(hi, e.offset + e.spec.shape.numel());
    if (begin >= end) continue;
    const double sum = kernels::deterministic_sum_squares(
        exec(),
        Kokkos::subview(store.gradients(), std::pair<std::int64_t, std::int64_t>(begin, end)),
        norm_scratch_);
    if (!std::isfinite(sum)) {
      first = i;
      break;
    }
  }
  if (slices)
    for (const std::uint64_t other : comm_->gather(first)) first = std::min(first, other);
  const std::string culprit = first < store.entries().size() ? store.entries()[first].layer + "." +
                                                                   store.entries()[first].spec.name
                                                             : "unknown";
  // Gradients are averaged, so every rank sees the same: no rank waits.
  std::ostringstream os;
  os << "tessera::Trainer: non-finite gradient at epoch " << epoch + 1 << ", step "
     << batch_index + 1 << " (optimizer step " << step_ + 1 << "), first in " << culprit
     << "; the weights were not updated with it; ";
  if (options_.loss_scaling.dynamic)
    os << "dynamic loss scaling has halved the scale down to 1 without finite gradients; ";
  os << "lower the learning rate, clip gradients or check the data";
  throw CollectiveError(os.str());
}

void Trainer::attach_pipeline(std::vector<Model*> replicas) {
  TESSERA_REQUIRE(comm_ != nullptr, "tessera::Trainer: a pipeline needs the communicator it spans");
  TESSERA_REQUIRE(!options_.shard_optimizer,
                  "tessera::Trainer: a pipeline updates each stage's parameters on its own "
                  "ranks already; it cannot also shard the optimizer over the data ranks");
  TESSERA_REQUIRE(pipeline_->micro_batches() == options_.accumulation_steps,
                  "tessera::Trainer: the pipeline was set up for "
                      << pipeline_->micro_batches() << " micro-batches, the options have "
                      << options_.accumulation_steps);
  TESSERA_REQUIRE(static_cast<std::int64_t>(replicas.size()) + 1 == pipeline_->in_flight(),
                  "tessera::Trainer: stage " << pipeline_->stage() + 1 << " holds "
                                             << pipeline_->in_flight()
                                             << " micro-batches at once and needs as many "
                                                "models; got the model and "
                                             << replicas.size() << " replicas");
  for (Model* r : replicas) {
    TESSERA_REQUIRE(r != nullptr && r->compiled() && r->max_batch() == model_.max_batch() &&
                        r->parameters().values().data() == model_.parameters().values().data(),
                    "tessera::Trainer: a pipeline replica must be compiled for the model's "
                    "batch and share its weights (Model::compile(max_batch, model))");
    r->set_execution_space(exec());
    slots_.push_back(r);
  }
  const LayerRange stage = pipeline_->layers(model_);
  for (const Model* m : slots_)
    TESSERA_REQUIRE(m->workspace().first <= stage.first && stage.last <= m->workspace().last,
                    "tessera::Trainer: stage "
                        << pipeline_->stage() + 1 << " runs layers [" << stage.first << ", "
                        << stage.last << "); a model's workspace holds layers ["
                        << m->workspace().first << ", " << m->workspace().last
                        << ") (compile it for the stage's layers)");
  pipeline_->slices(model_, model_.state(), state_offsets_, state_counts_);
}

void Trainer::set_up_step() {
  exchange_ = make_exchange(model_, optimizer_, options_, comm_, pipeline_);
  if (pipeline_)
    schedule_ = std::make_unique<OneFOneB>(*pipeline_, slots_, data_rank_, data_ranks_);
  else
    schedule_ = std::make_unique<MicroBatches>(model_, *exchange_, options_.accumulation_steps,
                                               rank_, ranks_);
  if (options_.sync_batchnorm && data_ranks_ > 1)
    sync_ = std::make_unique<CommunicatorSync>(*data_comm_);
}

Trainer::Trainer(Model& model, Optimizer& optimizer, const TrainOptions& options,
                 const Communicator* comm, Pipeline* pipeline, std::vector<Model*> replicas)
    : model_(model), optimizer_(optimizer), options_(options), comm_(comm), pipeline_(pipeline) {
  TESSERA_REQUIRE(model.compiled(), "tessera::Trainer: compile() the model first");
  if (comm != nullptr) {
    rank_ = comm->rank();
    ranks_ = comm->size();
  }
  data_comm_ = pipeline ? &pipeline->data() : comm;
  if (data_comm_ != nullptr) {
    data_rank_ = data_comm_->rank();
    data_ranks_ = data_comm_->size();
  }
  slots_.push_back(&model);
  if (pipeline) attach_pipeline(std::move(replicas));
  options.validate();
  const std::int64_t shard = options.max_shard(data_ranks_);
  TESSERA_REQUIRE(shard <= model.max_batch(),
                  "tessera::Trainer: batch size "
                      << options.batch_size << " in " << options.accumulation_steps
                      << " micro-batch(es) over " << data_ranks_
                      << " rank(s) needs shards of up to " << shard
                      << " samples; the model was compiled for " << model.max_batch()
                      << " (compile it for TrainOptions::max_shard(ranks))");
  const LossScaling& scaling = options.loss_scaling;
  if (scaling.dynamic) {
    TESSERA_REQUIRE(LossScaling::valid_scale(scaling.initial),
                    "tessera::Trainer: initial loss scale " << scaling.initial
                                                            << " must be a power of two from 1 to "
                                                            << LossScaling::max_scale);
    TESSERA_REQUIRE(scaling.growth_interval >= 1, "tessera::Trainer: loss scale growth interval "
                                                      << scaling.growth_interval
                                                      << " must be >= 1 step");
    scale_.scale = scaling.initial;
  }
  loss_ = make_loss(options.loss);
  set_up_step();
  // The gradient norm is taken every step, clipping or not: a non-finite
  // gradient must stop the run before it reaches the weights.
  norm_scratch_ = Kokkos::View<double*, MemSpace>(
      "tessera::Trainer::norm_scratch",
      kernels::deterministic_sum_scratch(model.parameters().count()));
  // A model's output holds `positions_` predictions per sample, each over
  // the classes of its last axis: one for a classifier, one per token of a
  // language model. Losses and accuracies are means over all predictions.
  const Shape out = model.output_shape();
  classes_ = out[out.rank() - 1];
  positions_ = out.numel() / classes_;
  batch_labels_ = Vector<int>("tessera::Trainer::batch_labels", shard * positions_);
  sample_loss_ = Vector<float>("tessera::Trainer::sample_loss", shard * positions_);
  sample_correct_ = Vector<int>("tessera::Trainer::sample_correct", shard * positions_);
  sample_loss_host_ = Kokkos::create_mirror_view(sample_loss_);
  sample_correct_host_ = Kokkos::create_mirror_view(sample_correct_);
}

void Trainer::set_loss_scale(const LossScaleState& state) {
  TESSERA_REQUIRE(options_.loss_scaling.dynamic,
                  "tessera::Trainer::set_loss_scale: the trainer has no dynamic loss scaling");
  TESSERA_REQUIRE(LossScaling::valid_scale(state.scale) && state.good_steps >= 0,
                  "tessera::Trainer::set_loss_scale: scale "
                      << state.scale << " after " << state.good_steps
                      << " finite steps; the scale must be a power of two from 1 to "
                      << LossScaling::max_scale << " and the steps >= 0");
  scale_ = state;
}

bool Trainer::unscale_gradients(int epoch, std::int64_t batch_index, double& norm) {
  const ExecSpace& exec = this->exec();
  ParameterStore& params = model_.parameters();
  // Division by a power of two: exact unless a value turns subnormal.
  if (scale_.scale != 1) kernels::scale_in_place(exec, params.gradients(), 1.0 / scale_.scale);
  norm = exchange_->gradient_norm(exec, params, norm_scratch_);
  const LossScaling& scaling = options_.loss_scaling;
  if (std::isfinite(norm)) {
    if (scaling.dynamic && ++scale_.good_steps >= scaling.growth_interval) {
      scale_.good_steps = 0;
      scale_.scale = std::min(2 * scale_.scale, LossScaling::max_scale);
    }
    return true;
  }
  // Gradients are summed over the ranks, so every rank decides the same.
  if (!scaling.dynamic || scale_.scale <= 1) throw_non_finite_gradient(epoch, batch_index);
  scale_.scale /= 2;
  scale_.good_steps = 0;
  return false;
}

void Trainer::set_step(std::int64_t step) {
  TESSERA_REQUIRE(step >= 0, "tessera::Trainer::set_step: step " << step << " must be >= 0");
  step_ = step;
}

std::int64_t Trainer::steps_per_epoch(std::int64_t samples) const {
  return (samples + options_.batch_size - 1) / options_.batch_size;
}

// Local BatchNorm leaves each rank with running statistics of its own shards;
// their mean keeps every rank's model (and checkpoint) the same.
void Trainer::average_state() {
  if (data_ranks_ == 1 || sync_ || model_.state().count() == 0) return;
  data_comm_->sum(model_.state().values());
  kernels::scale_in_place(exec(), model_.state().values(), 1.0 / data_ranks_);
}

void Trainer::settle_parameters() { exchange_->settle(); }

void Trainer::gather_model() {
  settle_parameters();
  if (!pipeline_) return;
  ScopedRegion region("tessera::Trainer::gather_model");
  const Communicator& line = pipeline_->line();
  const auto gather = [&](const Vector<float>& values, const std::vector<int>& offsets,
                          const std::vector<int>& counts) {
    const int s = pipeline_->stage();
    const Vector<float> mine("tessera::Trainer::gather_model::mine", counts[s]);
    Kokkos::deep_copy(mine, Kokkos::subview(values, std::pair<std::int64_t, std::int64_t>(
                                                        offsets[s], offsets[s] + counts[s])));
    line.gather_slices(mine, values, counts, offsets);
  };
  const OptimizerSharding& stage = *exchange_->slices();
  gather(model_.parameters().values(), stage.offsets(), stage.counts());
  if (model_.state().count() > 0) gather(model_.state().values(), state_offsets_, state_counts_);
}

void Trainer::ensure_buffers(const Dataset& data) {
  TESSERA_REQUIRE(data.size() > 0, "tessera::Trainer: the dataset is empty");
  const Shape input = with_batch(model_.input_shape(), 1);
  const std::int64_t features = data.token_stream() || data.streamed()
                                    ? data.sample_shape.numel()
                                    : static_cast<std::int64_t>(data.samples.extent(1));
  TESSERA_REQUIRE(features == input.inner(), "tessera::Trainer: dataset samples have "
                                                 << features << " features, the model's input "
                                                 << input << " takes " << input.inner());
  TESSERA_REQUIRE(data.label_positions() == positions_,
                  "tessera::Trainer: the dataset has "
                      << data.label_positions() << " label(s) per sample, the model's output "
                      << model_.output_shape() << " makes " << positions_
                      << " prediction(s) over its last axis");
  TESSERA_REQUIRE(data.classes <= classes_, "tessera::Trainer: the dataset's labels run to "
                                                << data.classes - 1 << ", the model's output "
                                                << model_.output_shape() << " predicts " << classes_
                                                << " classes");
  if (static_cast<std::int64_t>(order_.extent(0)) < data.size())
    order_ = Vector<std::int64_t>("tessera::Trainer::order", data.size());
  if (static_cast<std::int64_t>(identity_order_.extent(0)) != data.size()) {
    identity_order_ = Vector<std::int64_t>("tessera::Trainer::identity_order", data.size());
    fill_identity(exec(), identity_order_);
  }
}

// The rows of this rank's part of each micro-batch, in the order
// the schedule takes them.
std::unique_ptr<BatchStream> Trainer::plan_stream(const Dataset& data,
                                                  const Vector<std::int64_t>& order,
                                                  std::int64_t first_step,
                                                  std::int64_t steps) const {
  const bool takes_data = !pipeline_ || pipeline_->first_stage() || pipeline_->last_stage();
  if (!data.streamed() || !takes_data) return nullptr;
  const auto order_host = Kokkos::create_mirror_view(order);
  Kokkos::deep_copy(order_host, order);
  const std::int64_t micro_steps = options_.accumulation_steps;
  std::vector<std::int64_t> rows, counts;
  for (std::int64_t s = first_step; s < steps; ++s) {
    const Batch b = batch_at(s, data.size());
    for (std::int64_t m = 0; m < micro_steps; ++m) {
      const Shard micro = shard_of(b.size, static_cast<int>(m), static_cast<int>(micro_steps));
      const Shard part = shard_of(micro.count, data_rank_, data_ranks_);
      if (part.count == 0) continue;
      counts.push_back(part.count);
      for (std::int64_t i = 0; i < part.count; ++i)
        rows.push_back(order_host(b.start + micro.offset + part.offset + i));
    }
  }
  return std::make_unique<BatchStream>(data, std::move(rows), std::move(counts));
}

}  // namespace tessera
