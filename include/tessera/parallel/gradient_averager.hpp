// Gradient averaging over data-parallel ranks in buckets. Parameters are laid
// out in layer order and backward runs the layers in reverse, so a bucket is
// a contiguous slice of the gradient buffer covering whole layers, filled
// from the last layer backwards; its non-blocking allreduce starts as soon as
// backward has produced all of its gradients, overlapping communication with
// the rest of backward.
//
// With a 16-bit format (bf16 or fp16) a bucket travels as 16-bit codes:
// a kernel rounds its float gradients to the format, MPI sums the codes
// with a reduction of Tessera's that adds pairs in float and rounds each
// partial sum to the format (parallel/impl/sum16.hpp), and the sums are
// widened back into the float buffer: half the bytes, rounded once per
// input and once per partial sum. That reduction runs on the host, so on a
// device the codes pass through host memory even with GPU-aware MPI.
//
// With optimizer sharding each bucket is reduce-scattered instead: every
// rank receives the sums of its own slice of the buffer only, half the
// bytes of an allreduce.
#pragma once

#include <tessera/model/model.hpp>
#include <tessera/parallel/communicator.hpp>
#include <tessera/settings/train_options.hpp>

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

  // bucket_bytes: the least a bucket holds, counted in float gradients (a
  // bucket always ends on a layer boundary); overlap = false starts every
  // bucket after backward instead; format: what gradients are sent and
  // summed in (fp32 sends the float buffer as it is).
  GradientAverager(const Communicator& comm, Model& model, std::int64_t bucket_bytes,
                   bool overlap = true, FloatFormat format = FloatFormat::fp32);
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  const std::vector<Bucket>& buckets() const { return buckets_; }
  FloatFormat format() const { return format_; }

  // Before backward.
  void begin();
  // After layer i's backward (a Model::LayerHooks after_backward hook): starts the
  // buckets it completes and lets MPI progress the ones in flight.
  void layer_done(std::size_t layer);
  // After backward: starts the buckets still waiting and waits for all.
  // Every rank then holds the sum of every rank's gradients (of its slice,
  // with reduce_to_slices): with the loss scaled by 1 / global batch, that
  // is the gradient of the global mean.
  void finish();

  // Optimizer sharding: from now on buckets are reduce-scattered, and after
  // finish() rank r holds the summed gradients of its slice [offsets[r],
  // offsets[r] + counts[r]) only; the rest of its buffer keeps its own
  // gradients. The slices tile the buffer in rank order.
  void reduce_to_slices(const std::vector<int>& offsets, const std::vector<int>& counts);
  bool scatters() const { return !bucket_counts_.empty(); }

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
  void start16(std::size_t bucket);  // narrows the bucket to format_ and starts it
  template <class T>                 // float or std::uint16_t (16-bit codes)
  void post(std::size_t bucket, T* data, T* into, MPI_Op op);
  void widen16();        // the summed codes back into the gradients
  void collect_slice();  // reduce-scatter: the received sums into the slice
  // Reduce-scatter: where bucket b's sums for this rank go in the receive buffer.
  std::int64_t receive_at(std::size_t b) const;

  const Communicator& comm_;
  ExecSpace exec_;  // the model's instance: the copies and conversions run on it
  Vector<float> gradients_;
  Vector<float, HostSpace> staging_;  // host copy when MPI cannot read MemSpace
  bool overlap_;
  FloatFormat format_;
  // 16-bit formats: the gradients' codes, and their host copy when MemSpace
  // is not host memory (the reduction reads them on the host).
  Vector<std::uint16_t> codes_;
  Vector<std::uint16_t, HostSpace> codes_staging_;
  MPI_Op sum16_ = MPI_OP_NULL;
  // Reduce-scatter: each bucket's element count per rank, this rank's slice,
  // and the sums it receives (in MemSpace when MPI reads it, else on the
  // host; 16-bit codes always reach the host first).
  std::vector<std::vector<int>> bucket_counts_;
  std::int64_t slice_offset_ = 0, slice_count_ = 0;
  Vector<float> received_;
  Vector<float, HostSpace> received_host_;
  Vector<std::uint16_t> received16_;
  Vector<std::uint16_t, HostSpace> received16_host_;
  std::vector<Bucket> buckets_;
  Requests requests_;     // one place per bucket
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

// The part of [offset, offset + count) inside each rank's slice
// [offsets[r], offsets[r] + counts[r]): where it starts and how many
// elements it holds (0 when they do not meet). MPI's displacements and
// counts for a bucket of a buffer sharded in slices.
struct SliceParts {
  std::vector<int> offsets, counts;
};
SliceParts slice_parts(std::int64_t offset, std::int64_t count, const std::vector<int>& offsets,
                       const std::vector<int>& counts);

}  // namespace tessera
