// Gradient averaging over data-parallel ranks in buckets. Parameters are laid
// out in layer order and backward runs the layers in reverse, so a bucket is
// a contiguous slice of the gradient buffer covering whole layers, filled
// from the last layer backwards; its non-blocking allreduce starts as soon as
// backward has produced all of its gradients, overlapping communication with
// the rest of backward.
#pragma once

#include <tessera/model/model.hpp>
#include <tessera/parallel/communicator.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

namespace tessera {

class GradientAverager {
 public:
  struct Bucket {
    std::int64_t offset = 0;  // into the gradient buffer, in elements
    std::int64_t count = 0;
    std::size_t ready_after = 0;  // the bucket is complete once this layer's backward ran
  };

  // bucket_bytes: the least a bucket holds (a bucket always ends on a layer
  // boundary); overlap = false starts every bucket after backward instead.
  GradientAverager(const Communicator& comm, Model& model, std::int64_t bucket_bytes,
                   bool overlap = true);
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  const std::vector<Bucket>& buckets() const { return buckets_; }

  // Before backward.
  void begin();
  // After layer i's backward (Model::backward's after_layer): starts the
  // buckets it completes and lets MPI progress the ones in flight.
  void layer_done(std::size_t layer);
  // After backward: starts the buckets still waiting and waits for all.
  // Every rank then holds the sum of every rank's gradients: with the loss
  // scaled by 1 / global batch, that is the gradient of the global mean.
  void finish();

  // Seconds, summed over steps: communication in flight while backward
  // still ran, and time backward's end spent waiting for it.
  double overlapped_seconds() const { return overlapped_; }
  double exposed_seconds() const { return exposed_; }
  // overlapped / (overlapped + exposed); 0 before any communication.
  double overlap_fraction() const;
  void reset_times() { overlapped_ = exposed_ = 0; }

 private:
  using Clock = std::chrono::steady_clock;
  void start(std::size_t bucket);

  const Communicator& comm_;
  Vector<float> gradients_;
  Vector<float, HostSpace> staging_;  // host copy when MPI cannot read MemSpace
  bool overlap_;
  std::vector<Bucket> buckets_;
  std::vector<MPI_Request> requests_;
  std::size_t next_ = 0;  // buckets start in order, the same on every rank
  Clock::time_point first_start_;
  double overlapped_ = 0, exposed_ = 0;
};

// This rank's share of a global batch of `global` samples split over `ranks`:
// the first global % ranks ranks take one sample more.
struct Shard {
  std::int64_t offset = 0;
  std::int64_t count = 0;
};
Shard shard_of(std::int64_t global, int rank, int ranks);

}  // namespace tessera
