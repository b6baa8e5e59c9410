// ZeRO-1: shards of the optimizer state, parameter gathering, and the
// whole state for checkpoints.
#include <tessera/core/profiling.hpp>
#include <tessera/parallel/gradient_averager.hpp>
#include <tessera/parallel/optimizer_sharding.hpp>

#include <limits>

namespace tessera {

namespace {
// The state buffers of two optimizers of the same type, paired by name.
void require_same_buffers(const std::vector<std::pair<std::string, Vector<float>>>& a,
                          const std::vector<std::pair<std::string, Vector<float>>>& b,
                          const Optimizer& whole, const Optimizer& shard) {
  bool same = a.size() == b.size();
  for (std::size_t i = 0; same && i < a.size(); ++i) same = a[i].first == b[i].first;
  TESSERA_REQUIRE(same, "tessera::OptimizerSharding: the whole state of "
                            << whole.name() << " and the sharded state of " << shard.name()
                            << " hold different buffers; use optimizers of the same type");
}
}  // namespace

OptimizerSharding::OptimizerSharding(const Communicator& comm, Optimizer& optimizer,
                                     const ParameterStore& params)
    : comm_(comm), optimizer_(optimizer) {
  TESSERA_REQUIRE(
      params.count() <= std::numeric_limits<int>::max(),
      "tessera::OptimizerSharding: " << params.count() << " parameters exceed MPI's int counts");
  for (int r = 0; r < comm.size(); ++r) {
    const Shard shard = shard_of(params.count(), r, comm.size());
    offsets_.push_back(static_cast<int>(shard.offset));
    counts_.push_back(static_cast<int>(shard.count));
  }
  optimizer.set_shard(offset(), count());
}

void OptimizerSharding::gather_parameters(const ParameterStore& params) const {
  ScopedRegion region("tessera::OptimizerSharding::gather_parameters");
  comm_.allgather_slices(params.values(), counts_, offsets_);
}

void OptimizerSharding::gather_state(Optimizer* whole, const ParameterStore& params) const {
  ScopedRegion region("tessera::OptimizerSharding::gather_state");
  const bool root = comm_.rank() == 0;
  TESSERA_REQUIRE(!root || (whole != nullptr && !whole->sharded()),
                  "tessera::OptimizerSharding::gather_state: rank 0 needs an optimizer without a "
                  "shard to gather the whole state into");
  const auto mine = optimizer_.state_buffers();
  // Every rank allocates at the same step, so all or none hold state.
  if (!mine.empty() && root) whole->allocate(params);
  const auto all = root ? whole->state_buffers() : mine;
  if (root && !mine.empty()) require_same_buffers(all, mine, *whole, optimizer_);
  for (std::size_t i = 0; i < mine.size(); ++i)
    comm_.gather_slices(mine[i].second, all[i].second, counts_, offsets_);
  if (root) whole->set_step_count(optimizer_.step_count());
}

void OptimizerSharding::take_state(const Optimizer& whole, const ParameterStore& params) {
  ScopedRegion region("tessera::OptimizerSharding::take_state");
  TESSERA_REQUIRE(!whole.sharded(),
                  "tessera::OptimizerSharding::take_state: the source optimizer is sharded too");
  const auto all = whole.state_buffers();
  optimizer_.set_step_count(whole.step_count());
  if (all.empty()) return;  // saved before the first step: the state is zero
  optimizer_.allocate(params);
  const auto mine = optimizer_.state_buffers();
  require_same_buffers(all, mine, whole, optimizer_);
  const std::pair<std::int64_t, std::int64_t> range(offset(), offset() + count());
  for (std::size_t i = 0; i < mine.size(); ++i)
    Kokkos::deep_copy(mine[i].second, Kokkos::subview(all[i].second, range));
}

}  // namespace tessera
