// The device memory a run holds, by part, and the line that states it.
#include <tessera/app/run.hpp>
#include <tessera/parallel/optimizer_sharding.hpp>
#include <tessera/parallel/pipeline.hpp>

#include "run_state.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace tessera {

Run::Memory Run::memory() const {
  Memory m;
  const ParameterStore& params = model_->parameters();
  m.parameters = params.count() * 4;
  m.gradients = params.count() * 4;
  m.state = model_->state().count() * 4;
  // The parameters this rank's optimizer updates: its stage's slice in a
  // pipeline, its ZeRO-1 slice when sharded.
  std::int64_t updated = params.count();
  LayerRange stage;
  if (pipeline_) {
    stage = pipeline_->layers(*model_);
    std::vector<int> offsets, counts;
    pipeline_->slices(*model_, params, offsets, counts);
    updated = counts[pipeline_->stage()];
    m.copies = pipeline_->in_flight();
  } else if (deck_.training.shard_optimizer) {
    updated = OptimizerSharding::slice(updated, comm_->rank(), comm_->size()).count;
  }
  const std::int64_t per_parameter = deck_.optimizer.type == "sgd" ? 1 : 2;
  m.optimizer = per_parameter * updated * 4;
  m.activations = model_->activation_memory(stage);
  return m;
}

std::string Run::memory_description() const { return memory_description(memory()); }

std::string Run::memory_description(const Memory& m) const {
  using impl::mib;
  const ActivationMemory& a = m.activations;
  const BufferPlan other = a.plan == BufferPlan::shared ? BufferPlan::separate : BufferPlan::shared;
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << "memory per rank: parameters " << mib(m.parameters)
     << " MiB, their gradients " << mib(m.gradients) << " MiB, layer state " << mib(m.state)
     << " MiB, optimizer state " << mib(m.optimizer) << " MiB; activations " << mib(a.total())
     << " MiB (memory.buffers = \"" << buffer_plans.name(a.plan) << "\", training.recompute = \""
     << recompute_modes.name(a.recompute) << "\": layer outputs and their gradients "
     << mib(a.nodes(a.plan)) << ", kept by layers for backward " << mib(a.kept(a.plan))
     << ", other layer buffers " << mib(a.layer_buffers) << ", temporaries "
     << mib(a.temporaries(a.plan)) << ")";
  if (m.copies > 1) os << " x " << m.copies << " micro-batches in flight";
  os << "; in all " << mib(m.total()) << " MiB (memory.buffers = \"" << buffer_plans.name(other)
     << "\": " << mib(m.total(other))
     << " MiB; shared with training.recompute = \"blocks\": " << mib(m.total_blocks()) << " MiB)";
  if (deck_.memory.cap_mb > 0) os << ", cap " << deck_.memory.cap_mb << " MiB";
  return os.str();
}

}  // namespace tessera
