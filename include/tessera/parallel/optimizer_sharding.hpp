// Optimizer sharding over data-parallel ranks (ZeRO stage 1): each rank
// keeps the optimizer state of, and updates, one contiguous slice of the
// flat parameter buffer; gradients are reduce-scattered (each rank receives
// the sums of its slice only), and after the update every rank's slice is
// gathered on every rank. The optimizer state per rank is 1/N of the whole.
// Slices start at multiples of kernels::deterministic_chunk, so the
// gradient norm assembled from the slices' chunk sums is the norm of the
// whole buffer, bit for bit. Checkpoints hold the whole state (gathered on
// rank 0), so a run restarts on any number of ranks, sharded or not.
//
// The gathering either blocks (gather_parameters) or overlaps the next
// forward pass (start_gather): one non-blocking allgather per bucket of
// whole layers, and before each layer's forward a wait for the buckets
// that hold its parameters and those of the layers before it.
#pragma once

#include <tessera/model/parameters.hpp>
#include <tessera/optim/optimizer.hpp>
#include <tessera/parallel/communicator.hpp>
#include <tessera/parallel/gradient_averager.hpp>

#include <cstdint>
#include <vector>

namespace tessera {

class OptimizerSharding {
 public:
  // Shards `optimizer` (whose state must not be allocated yet) over the
  // ranks of `comm` for a store of params.count() parameters: rank r takes
  // the chunks shard_of(chunks, r, ranks) of it (a rank may take none).
  OptimizerSharding(const Communicator& comm, Optimizer& optimizer, const ParameterStore& params);
  // Slices given by the caller (a pipeline stage's parameters): rank r
  // takes [offsets[r], offsets[r] + counts[r]).
  OptimizerSharding(const Communicator& comm, Optimizer& optimizer, std::vector<int> offsets,
                    std::vector<int> counts);
  OptimizerSharding(const OptimizerSharding&) = delete;
  OptimizerSharding& operator=(const OptimizerSharding&) = delete;
  // Waits for a gather still in flight (MPI must not write into freed memory).
  ~OptimizerSharding();

  // Rank `rank`'s slice of a store of `count` parameters shared by `ranks`
  // (what the first constructor gives it): whole chunks of
  // kernels::deterministic_chunk, shard_of(chunks, rank, ranks).
  static Shard slice(std::int64_t count, int rank, int ranks);

  // Whether this rank gathers the whole state (rank 0 of the communicator).
  bool root() const { return comm_.rank() == 0; }

  // This rank's slice, and every rank's (MPI's counts and displacements).
  std::int64_t offset() const { return offsets_[comm_.rank()]; }
  std::int64_t count() const { return counts_[comm_.rank()]; }
  const std::vector<int>& offsets() const { return offsets_; }
  const std::vector<int>& counts() const { return counts_; }

  // The L2 norm of the whole gradient buffer from every rank's slice (each
  // holding its summed gradients): the value gradient_norm gives for the
  // whole buffer, on every rank. scratch: as for gradient_norm.
  double gradient_norm(const ExecSpace& exec, const ParameterStore& params,
                       const Kokkos::View<double*, MemSpace>& scratch) const;

  // After the optimizer's step: every rank's updated slice on every rank.
  void gather_parameters(const ParameterStore& params) const;

  // Overlapped gathering. gather_in_buckets takes the layer buckets of the
  // buffer (GradientAverager::buckets(): contiguous, whole layers, each
  // starting with its layer ready_after). start_gather then posts, after
  // the optimizer's step, one non-blocking allgather per bucket in buffer
  // order; wait_for_layer(i) (a Model::LayerHooks before_forward hook) waits for
  // every bucket that starts at layer i or before it and lets MPI progress
  // the others; settle() waits for all. Between start_gather and settle(),
  // nothing may read a parameter whose bucket was not waited for, and
  // nothing may write the parameters. Every rank calls them at the same
  // points (collective).
  void gather_in_buckets(const ParameterStore& params,
                         const std::vector<GradientAverager::Bucket>& buckets);
  void start_gather();
  void wait_for_layer(std::size_t layer);
  void settle();
  bool gathering() const { return in_flight_; }
  // Seconds spent waiting in wait_for_layer and settle, since the last reset.
  double gather_wait_seconds() const { return wait_seconds_; }
  void reset_gather_wait() { wait_seconds_ = 0; }

  // Collective. On rank 0, `whole` (an optimizer of the same type without a
  // shard; ignored elsewhere, may be null) receives every rank's state and
  // the step count; before the first step it is left unallocated, as the
  // sharded state is.
  void gather_state(Optimizer* whole, const ParameterStore& params) const;

  // Local: this rank's slice of `whole`'s state (an optimizer of the same
  // type without a shard, e.g. loaded from a checkpoint) and its step count.
  void take_state(const Optimizer& whole, const ParameterStore& params);

 private:
  const Communicator& comm_;
  Optimizer& optimizer_;
  std::vector<int> offsets_, counts_;  // MPI's element counts and displacements

  // Overlapped gathering: each bucket's range of the buffer, the layer
  // that first reads it, and every rank's part of it (displacements into
  // the whole buffer, and counts).
  struct GatherBucket {
    std::int64_t offset = 0, count = 0;
    std::size_t first_layer = 0;
    SliceParts parts;
  };
  void wait_bucket(std::size_t b);
  Vector<float> values_;
  Vector<float, HostSpace> staging_;  // host copy when MPI cannot read MemSpace
  std::vector<GatherBucket> buckets_;
  Requests requests_;       // one place per bucket
  std::size_t waited_ = 0;  // buckets complete, in buffer order
  bool bucketed_ = false;   // gather_in_buckets was called
  bool in_flight_ = false;
  double wait_seconds_ = 0;
};

}  // namespace tessera
