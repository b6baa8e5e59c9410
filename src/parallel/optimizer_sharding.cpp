// ZeRO-1: shards of the optimizer state, parameter gathering, and the
// whole state for checkpoints.
#include <tessera/core/profiling.hpp>
#include <tessera/kernels/reduce.hpp>
#include <tessera/parallel/gradient_averager.hpp>
#include <tessera/parallel/optimizer_sharding.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
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
    const Shard s = slice(params.count(), r, comm.size());
    offsets_.push_back(static_cast<int>(s.offset));
    counts_.push_back(static_cast<int>(s.count));
  }
  optimizer.set_shard(offset(), count());
}

Shard OptimizerSharding::slice(std::int64_t count, int rank, int ranks) {
  const std::int64_t chunk = kernels::deterministic_chunk;
  const Shard shard = shard_of((count + chunk - 1) / chunk, rank, ranks);
  const std::int64_t begin = std::min(shard.offset * chunk, count);
  const std::int64_t end = std::min((shard.offset + shard.count) * chunk, count);
  return Shard{begin, end - begin};
}

OptimizerSharding::OptimizerSharding(const Communicator& comm, Optimizer& optimizer,
                                     std::vector<int> offsets, std::vector<int> counts)
    : comm_(comm), optimizer_(optimizer), offsets_(std::move(offsets)), counts_(std::move(counts)) {
  TESSERA_REQUIRE(
      offsets_.size() == static_cast<std::size_t>(comm.size()) && counts_.size() == offsets_.size(),
      "tessera::OptimizerSharding: " << offsets_.size() << " offsets and " << counts_.size()
                                     << " counts for " << comm.size() << " ranks");
  optimizer.set_shard(offset(), count());
}

double OptimizerSharding::gradient_norm(const ExecSpace& exec, const ParameterStore& params,
                                        const Kokkos::View<double*, MemSpace>& scratch) const {
  ScopedRegion region("tessera::OptimizerSharding::gradient_norm");
  const auto mine = Kokkos::subview(
      params.gradients(), std::pair<std::int64_t, std::int64_t>(offset(), offset() + count()));
  const std::vector<double> own =
      kernels::deterministic_chunk_sums_squares_on_host(exec, mine, scratch);
  // Every chunk sum in chunk order, added as deterministic_sum_squares adds
  // them for the whole buffer.
  const std::vector<double> all = comm_.allgather(own);
  double total = 0;
  for (const double c : all) total += c;
  return std::sqrt(total);
}

void OptimizerSharding::gather_parameters(const ParameterStore& params) const {
  ScopedRegion region("tessera::OptimizerSharding::gather_parameters");
  comm_.allgather_slices(params.values(), counts_, offsets_);
}

OptimizerSharding::~OptimizerSharding() {
  // Unwinding from an error on this rank: the other ranks posted the same
  // gather, so it completes; its status no longer matters.
  if (!in_flight_) return;
  try {
    requests_.wait_all(waited_, requests_.size());
  } catch (const Error&) {
  }
}

void OptimizerSharding::gather_in_buckets(const ParameterStore& params,
                                          const std::vector<GradientAverager::Bucket>& buckets) {
  TESSERA_REQUIRE(!in_flight_,
                  "tessera::OptimizerSharding::gather_in_buckets: a gather is in "
                  "flight; settle() it first");
  // The averager lists its buckets from the last layer backwards.
  std::vector<GradientAverager::Bucket> order(buckets.rbegin(), buckets.rend());
  std::int64_t end = 0;
  buckets_.clear();
  for (const GradientAverager::Bucket& b : order) {
    TESSERA_REQUIRE(b.offset == end && b.count > 0,
                    "tessera::OptimizerSharding::gather_in_buckets: bucket ["
                        << b.offset << ", " << b.offset + b.count
                        << ") does not follow the buckets before it, which end at " << end);
    buckets_.push_back(GatherBucket{b.offset, b.count, b.ready_after,
                                    slice_parts(b.offset, b.count, offsets_, counts_)});
    end = b.offset + b.count;
  }
  TESSERA_REQUIRE(end == params.count(),
                  "tessera::OptimizerSharding::gather_in_buckets: the "
                  "buckets cover "
                      << end << " of " << params.count() << " parameters");
  values_ = params.values();
  if (!comm_.direct())
    staging_ = Vector<float, HostSpace>("tessera::OptimizerSharding::staging", values_.size());
  requests_ = Requests(buckets_.size());
  waited_ = buckets_.size();
  bucketed_ = true;
}

void OptimizerSharding::start_gather() {
  TESSERA_REQUIRE(bucketed_,
                  "tessera::OptimizerSharding::start_gather: call gather_in_buckets first");
  TESSERA_REQUIRE(!in_flight_,
                  "tessera::OptimizerSharding::start_gather: the last gather is still in flight");
  if (comm_.size() == 1 || buckets_.empty()) return;
  ScopedRegion region("tessera::OptimizerSharding::start_gather");
  // The step's updates must be complete before MPI reads them.
  Kokkos::fence();
  float* base = values_.data();
  if (!comm_.direct()) {
    const std::pair<std::int64_t, std::int64_t> mine(offset(), offset() + count());
    Kokkos::deep_copy(Kokkos::subview(staging_, mine), Kokkos::subview(values_, mine));
    base = staging_.data();
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    requests_.set(
        b, comm_.start_allgather_slices(base, buckets_[b].parts.counts, buckets_[b].parts.offsets));
  waited_ = 0;
  in_flight_ = true;
}

void OptimizerSharding::wait_bucket(std::size_t b) {
  requests_.wait(b);
  if (!comm_.direct()) {
    const std::pair<std::int64_t, std::int64_t> range(buckets_[b].offset,
                                                      buckets_[b].offset + buckets_[b].count);
    Kokkos::deep_copy(Kokkos::subview(values_, range), Kokkos::subview(staging_, range));
  }
}

void OptimizerSharding::wait_for_layer(std::size_t layer) {
  if (!in_flight_) return;
  const auto started = std::chrono::steady_clock::now();
  while (waited_ < buckets_.size() && buckets_[waited_].first_layer <= layer)
    wait_bucket(waited_++);
  if (waited_ == buckets_.size()) {
    in_flight_ = false;
  } else {
    // Open MPI progresses non-blocking collectives inside MPI calls.
    requests_.test_all(waited_, buckets_.size());
  }
  wait_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

void OptimizerSharding::settle() {
  if (!in_flight_) return;
  ScopedRegion region("tessera::OptimizerSharding::settle");
  // Every bucket starts at or before the last layer there could be.
  wait_for_layer(std::numeric_limits<std::size_t>::max());
}

void OptimizerSharding::gather_state(Optimizer* whole, const ParameterStore& params) const {
  ScopedRegion region("tessera::OptimizerSharding::gather_state");
  const bool root = comm_.rank() == 0;
  TESSERA_REQUIRE(!root || (whole != nullptr && !whole->sharded()),
                  "tessera::OptimizerSharding::gather_state: rank 0 needs an optimizer without a "
                  "shard to gather the whole state into");
  // Every rank allocates at the same step, so all or none hold state.
  if (!optimizer_.state_allocated()) {
    if (root) whole->set_step_count(optimizer_.step_count());
    return;
  }
  const auto mine = optimizer_.state_buffers();
  if (root) whole->allocate(params);
  const auto all = root ? whole->state_buffers() : mine;
  if (root) require_same_buffers(all, mine, *whole, optimizer_);
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
