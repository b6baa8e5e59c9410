// Pipeline stages: where a model may be cut, balanced plans, the 1F1B
// order, and the point-to-point traffic between stages.
#include <tessera/core/profiling.hpp>
#include <tessera/kernels/reduce.hpp>
#include <tessera/parallel/pipeline.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>

namespace tessera {

namespace {
constexpr int activation_tag = 1, gradient_tag = 2;

// Parameters a layer ties to an earlier layer's, by that layer's index.
std::vector<std::size_t> tied_owners(const Model& model, std::size_t i) {
  std::vector<std::size_t> owners;
  const auto& layers = model.layers();
  for (const auto& spec : layers[i]->parameter_specs(model.layer_input_shapes(i, 1))) {
    if (spec.tied_layer.empty()) continue;
    for (std::size_t j = 0; j < i; ++j)
      if (layers[j]->name() == spec.tied_layer) owners.push_back(j);
  }
  return owners;
}
}  // namespace

std::vector<std::size_t> pipeline_cut_points(const Model& model) {
  TESSERA_REQUIRE(model.inferred(),
                  "tessera::pipeline_cut_points: infer() or compile() the model first");
  const std::size_t n = model.layers().size();
  // lowest[f]: the lowest node any layer from f on reads; a stage may
  // start at f when that is node f (the output of layer f - 1).
  std::vector<std::size_t> lowest(n + 1, n + 1);
  for (std::size_t i = n; i-- > 0;) {
    lowest[i] = lowest[i + 1];
    for (const std::size_t node : model.layer_inputs(i)) lowest[i] = std::min(lowest[i], node);
  }
  std::vector<bool> tied_across(n + 1, false);
  for (std::size_t i = 0; i < n; ++i)
    for (const std::size_t owner : tied_owners(model, i))
      for (std::size_t f = owner + 1; f <= i; ++f) tied_across[f] = true;
  std::vector<std::size_t> cuts;
  for (std::size_t f = 1; f < n; ++f)
    if (lowest[f] == f && !tied_across[f]) cuts.push_back(f);
  return cuts;
}

double pipeline_layer_cost(const Model& model, std::size_t i) {
  const LayerCost c = model.layer_cost(i);
  return c.forward.flops + c.backward.flops + 4.0 * (c.forward.bytes + c.backward.bytes);
}

PipelinePlan balanced_pipeline(const Model& model, int stages) {
  const std::vector<std::size_t> cuts = pipeline_cut_points(model);
  TESSERA_REQUIRE(stages >= 1 && static_cast<std::size_t>(stages) <= cuts.size() + 1,
                  "tessera::balanced_pipeline: "
                      << stages << " stages asked of a model that splits into " << cuts.size() + 1
                      << " at most (a stage boundary cannot fall inside a residual block or "
                         "between a layer and one that shares its weights); use fewer stages");
  const std::size_t n = model.layers().size();
  std::vector<double> prefix(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + pipeline_layer_cost(model, i);
  // Candidate starts: 0, then the cut points. best[s][k]: the least largest
  // stage cost of stages 0..s covering layers [0, end_of(k)); from[s][k]:
  // the candidate where stage s then starts.
  std::vector<std::size_t> starts{0};
  starts.insert(starts.end(), cuts.begin(), cuts.end());
  const std::size_t c = starts.size();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages, std::vector<double>(c + 1, inf));
  std::vector<std::vector<std::size_t>> from(stages, std::vector<std::size_t>(c + 1, 0));
  const auto end_of = [&](std::size_t k) { return k < c ? starts[k] : n; };
  for (std::size_t k = 1; k <= c; ++k) best[0][k] = prefix[end_of(k)];
  for (int s = 1; s < stages; ++s)
    for (std::size_t k = 1; k <= c; ++k)
      for (std::size_t j = 1; j < k; ++j) {
        const double v = std::max(best[s - 1][j], prefix[end_of(k)] - prefix[end_of(j)]);
        if (v < best[s][k]) {
          best[s][k] = v;
          from[s][k] = j;
        }
      }
  PipelinePlan plan;
  plan.first.assign(static_cast<std::size_t>(stages), 0);
  std::size_t k = c;
  for (int s = stages - 1; s > 0; --s) {
    k = from[s][k];
    plan.first[s] = starts[k];
  }
  return plan;
}

PipelinePlan pipeline_at(const Model& model, const std::vector<std::string>& first_layers) {
  const std::vector<std::size_t> cuts = pipeline_cut_points(model);
  const auto& layers = model.layers();
  PipelinePlan plan;
  plan.first.push_back(0);
  for (const std::string& name : first_layers) {
    std::size_t i = 0;
    while (i < layers.size() && layers[i]->name() != name) ++i;
    TESSERA_REQUIRE(i < layers.size(), "tessera::pipeline_at: no layer is named '" << name << "'");
    std::string allowed;
    for (const std::size_t f : cuts) allowed += (allowed.empty() ? "" : ", ") + layers[f]->name();
    TESSERA_REQUIRE(std::find(cuts.begin(), cuts.end(), i) != cuts.end(),
                    "tessera::pipeline_at: a stage cannot start at layer '"
                        << name
                        << "': a later layer reads an earlier output than its input (a residual "
                           "block), or a tied parameter spans it; stages may start at "
                        << (allowed.empty() ? std::string("no layer") : allowed));
    TESSERA_REQUIRE(i > plan.first.back(),
                    "tessera::pipeline_at: stage boundaries must follow the "
                    "layer order; '"
                        << name << "' comes before '" << layers[plan.first.back()]->name() << "'");
    plan.first.push_back(i);
  }
  return plan;
}

std::string describe_pipeline(const Model& model, const PipelinePlan& plan) {
  const std::size_t n = model.layers().size();
  double total = 0;
  std::vector<double> cost(n);
  for (std::size_t i = 0; i < n; ++i) total += cost[i] = pipeline_layer_cost(model, i);
  std::ostringstream os;
  for (int s = 0; s < plan.stages(); ++s) {
    const LayerRange r = plan.stage(s);
    const std::size_t last = std::min(r.last, n);
    double mine = 0;
    for (std::size_t i = r.first; i < last; ++i) mine += cost[i];
    os << (s ? ", " : "") << "stage " << s + 1 << ": " << model.layers()[r.first]->name() << ".."
       << model.layers()[last - 1]->name() << " (" << std::fixed << std::setprecision(0)
       << 100 * mine / total << "% of the cost)";
  }
  return os.str();
}

std::vector<PipelineOp> pipeline_schedule(int stage, int stages, std::int64_t micro_batches,
                                          bool backward) {
  std::vector<PipelineOp> ops;
  if (!backward) {
    for (std::int64_t m = 0; m < micro_batches; ++m) ops.push_back({true, m});
    return ops;
  }
  const std::int64_t warmup = std::min<std::int64_t>(stages - stage - 1, micro_batches);
  std::int64_t forward = 0, back = 0;
  for (; forward < warmup; ++forward) ops.push_back({true, forward});
  for (; forward < micro_batches; ++forward, ++back) {
    ops.push_back({true, forward});
    ops.push_back({false, back});
  }
  for (; back < micro_batches; ++back) ops.push_back({false, back});
  return ops;
}

Pipeline::Pipeline(const Communicator& world, const PipelinePlan& plan, std::int64_t micro_batches)
    : plan_(plan), micro_batches_(micro_batches) {
  const int stages = plan.stages();
  TESSERA_REQUIRE(stages >= 1 && world.size() % stages == 0,
                  "tessera::Pipeline: " << stages << " stages need a rank count divisible by "
                                        << stages << "; the job has " << world.size() << " ranks");
  TESSERA_REQUIRE(micro_batches >= 1,
                  "tessera::Pipeline: " << micro_batches << " micro-batches; at least 1");
  const int data_ranks = world.size() / stages;
  stage_ = world.rank() / data_ranks;
  const int data_rank = world.rank() % data_ranks;
  data_ = std::make_unique<Communicator>(world.split(stage_, data_rank));
  line_ = std::make_unique<Communicator>(world.split(data_rank, stage_));
  pending_.resize(static_cast<std::size_t>(in_flight()));
  staged_.resize(static_cast<std::size_t>(in_flight()));
}

Pipeline::~Pipeline() {
  // Sends still in flight after an error: their partners are gone too.
  for (Requests& slot : pending_) slot.release();
  // The stage's communicator, then the pipeline's.
  data_.reset();
  line_.reset();
}

LayerRange Pipeline::layers(const Model& model) const {
  LayerRange r = plan_.stage(stage_);
  r.last = std::min(r.last, model.layers().size());
  return r;
}

void Pipeline::slices(const Model& model, const ParameterStore& store, std::vector<int>& offsets,
                      std::vector<int>& counts) const {
  TESSERA_REQUIRE(
      store.count() <= std::numeric_limits<int>::max(),
      "tessera::Pipeline::slices: " << store.count() << " values exceed MPI's int counts");
  std::map<std::string, int> stage_of;
  for (int s = 0; s < stages(); ++s) {
    const LayerRange r = plan_.stage(s);
    for (std::size_t i = r.first; i < std::min(r.last, model.layers().size()); ++i)
      stage_of[model.layers()[i]->name()] = s;
  }
  // Entries follow the layer order, so each stage's are contiguous.
  std::vector<std::int64_t> begin(stages(), -1), end(stages(), -1);
  for (const ParameterEntry& e : store.entries()) {
    const int s = stage_of.at(e.layer);
    if (begin[s] < 0) begin[s] = e.offset;
    end[s] = e.offset + e.spec.shape.numel();
  }
  offsets.assign(stages(), 0);
  counts.assign(stages(), 0);
  std::int64_t next = 0;
  for (int s = 0; s < stages(); ++s) {
    offsets[s] = static_cast<int>(next);
    if (begin[s] < 0) continue;  // a stage without parameters
    TESSERA_REQUIRE(begin[s] == next, "tessera::Pipeline::slices: stage "
                                          << s + 1 << "'s values start at " << begin[s]
                                          << ", not where the stages before end (" << next
                                          << "); report this as a bug");
    counts[s] = static_cast<int>(end[s] - begin[s]);
    next = end[s];
  }
}

void Pipeline::send(std::int64_t slot, const Tensor<float>& values, int to, int tag) {
  auto& pending = pending_.at(static_cast<std::size_t>(slot));
  const int count = static_cast<int>(values.numel());
  if (count == 0) return;
  Kokkos::fence();
  float* data = values.data();
  if (!line_->direct()) {
    auto& staged = staged_[static_cast<std::size_t>(slot)];
    staged.emplace_back(static_cast<std::size_t>(count));
    Kokkos::deep_copy(Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                          staged.back().data(), staged.back().size()),
                      values.flat());
    data = staged.back().data();
  }
  pending.add(line_->start_send(data, count, to, tag));
}

void Pipeline::receive(const Tensor<float>& values, int from, int tag) {
  const int count = static_cast<int>(values.numel());
  if (count == 0) return;
  ScopedRegion region("tessera::Pipeline::receive");
  const auto started = std::chrono::steady_clock::now();
  if (line_->direct()) {
    Kokkos::fence();
    line_->receive(values.data(), count, from, tag);
  } else {
    std::vector<float> host(static_cast<std::size_t>(count));
    line_->receive(host.data(), count, from, tag);
    Kokkos::deep_copy(values.flat(),
                      Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                          host.data(), host.size()));
  }
  waiting_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

void Pipeline::send_forward(std::int64_t slot, const Tensor<float>& activation) {
  TESSERA_REQUIRE(!last_stage(), "tessera::Pipeline::send_forward: the last stage has no next");
  send(slot, activation, stage_ + 1, activation_tag);
}

void Pipeline::receive_forward(const Tensor<float>& activation) {
  TESSERA_REQUIRE(!first_stage(),
                  "tessera::Pipeline::receive_forward: the first stage has no previous");
  receive(activation, stage_ - 1, activation_tag);
}

void Pipeline::send_backward(std::int64_t slot, const Tensor<float>& gradient) {
  TESSERA_REQUIRE(!first_stage(),
                  "tessera::Pipeline::send_backward: the first stage has no previous");
  send(slot, gradient, stage_ - 1, gradient_tag);
}

void Pipeline::receive_backward(const Tensor<float>& gradient) {
  TESSERA_REQUIRE(!last_stage(), "tessera::Pipeline::receive_backward: the last stage has no next");
  receive(gradient, stage_ + 1, gradient_tag);
}

void Pipeline::wait(std::int64_t slot) {
  auto& pending = pending_.at(static_cast<std::size_t>(slot));
  if (pending.empty()) return;
  const auto started = std::chrono::steady_clock::now();
  pending.wait_all();
  pending.clear();
  staged_[static_cast<std::size_t>(slot)].clear();
  waiting_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

void Pipeline::wait_all() {
  for (std::int64_t slot = 0; slot < static_cast<std::int64_t>(pending_.size()); ++slot) wait(slot);
}

double Pipeline::gradient_norm(const ExecSpace& exec, const ParameterStore& params,
                               const Kokkos::View<double*, MemSpace>& scratch) const {
  ScopedRegion region("tessera::Pipeline::gradient_norm");
  std::vector<double> sums =
      kernels::deterministic_chunk_sums_squares_on_host(exec, params.gradients(), scratch);
  // Zeros outside each stage: a chunk within one stage is added exactly.
  line_->sum(sums.data(), static_cast<int>(sums.size()));
  double total = 0;
  for (const double c : sums) total += c;
  return std::sqrt(total);
}

}  // namespace tessera
