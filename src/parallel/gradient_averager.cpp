// Bucketed, overlapped gradient averaging and batch sharding.
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/parallel/gradient_averager.hpp>
#include <tessera/parallel/impl/sum16.hpp>

#include <algorithm>
#include <limits>
#include <map>

namespace tessera {

Shard shard_of(std::int64_t global, int rank, int ranks) {
  TESSERA_REQUIRE(
      ranks >= 1 && rank >= 0 && rank < ranks && global >= 0,
      "tessera::shard_of: rank " << rank << " of " << ranks << ", global batch " << global);
  const std::int64_t base = global / ranks, extra = global % ranks;
  return Shard{rank * base + std::min<std::int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

SliceParts slice_parts(std::int64_t offset, std::int64_t count, const std::vector<int>& offsets,
                       const std::vector<int>& counts) {
  SliceParts parts;
  for (std::size_t r = 0; r < offsets.size(); ++r) {
    const std::int64_t lo = std::max<std::int64_t>(offset, offsets[r]);
    const std::int64_t hi =
        std::min<std::int64_t>(offset + count, std::int64_t{offsets[r]} + counts[r]);
    parts.offsets.push_back(static_cast<int>(lo));
    parts.counts.push_back(static_cast<int>(std::max<std::int64_t>(0, hi - lo)));
  }
  return parts;
}

namespace {
constexpr bool memspace_is_host = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;

// Free functions: CUDA forbids device lambdas inside private member functions.
template <class T>
void narrow_range(const ExecSpace& exec, const Vector<float>& from, const Vector<std::uint16_t>& to,
                  std::int64_t begin, std::int64_t end) {
  kernels::impl::parallel_for(
      "tessera::GradientAverager::narrow", Kokkos::RangePolicy<ExecSpace>(exec, begin, end),
      kernels::Work{
          kernels::bytes_of<float>(end - begin) + kernels::bytes_of<std::uint16_t>(end - begin), 0},
      KOKKOS_LAMBDA(const std::int64_t i) { to(i) = T(from(i)).bits; });
}

template <class T>
void widen_range(const ExecSpace& exec, const Vector<std::uint16_t>& from, const Vector<float>& to,
                 std::int64_t begin, std::int64_t end) {
  kernels::impl::parallel_for(
      "tessera::GradientAverager::widen", Kokkos::RangePolicy<ExecSpace>(exec, begin, end),
      kernels::Work{
          kernels::bytes_of<std::uint16_t>(end - begin) + kernels::bytes_of<float>(end - begin), 0},
      KOKKOS_LAMBDA(const std::int64_t i) { to(i) = static_cast<float>(T::from_bits(from(i))); });
}

// Codes [begin, end) of `format` (bf16 or fp16) widened into floats.
template <class ToView>
void widen_codes(const ExecSpace& exec, FloatFormat format, const Vector<std::uint16_t>& from,
                 const ToView& to, std::int64_t begin, std::int64_t end) {
  if (format == FloatFormat::bf16)
    widen_range<bf16>(exec, from, to, begin, end);
  else
    widen_range<fp16>(exec, from, to, begin, end);
}
}  // namespace

GradientAverager::GradientAverager(const Communicator& comm, Model& model,
                                   std::int64_t bucket_bytes, bool overlap, FloatFormat format)
    : comm_(comm),
      exec_(model.execution_space()),
      gradients_(model.parameters().gradients()),
      overlap_(overlap),
      format_(format) {
  TESSERA_REQUIRE(model.compiled(), "tessera::GradientAverager: compile() the model first");
  TESSERA_REQUIRE(
      format == FloatFormat::fp32 || format == FloatFormat::bf16 || format == FloatFormat::fp16,
      "tessera::GradientAverager: unknown gradient format "
          << static_cast<int>(format) << "; use FloatFormat::fp32, bf16 or fp16");
  TESSERA_REQUIRE(bucket_bytes > 0, "tessera::GradientAverager: bucket size "
                                        << bucket_bytes << " bytes must be positive");
  // Each layer's slice of the buffer: parameters were added layer by layer.
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < model.layers().size(); ++i) index[model.layers()[i]->name()] = i;
  std::vector<std::int64_t> lo(model.layers().size(), std::numeric_limits<std::int64_t>::max());
  std::vector<std::int64_t> hi(model.layers().size(), 0);
  // An entry's slot (with its alignment padding) ends where the next begins.
  const auto& entries = model.parameters().entries();
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const std::size_t i = index.at(entries[k].layer);
    lo[i] = std::min(lo[i], entries[k].offset);
    hi[i] = std::max(hi[i],
                     k + 1 < entries.size() ? entries[k + 1].offset : model.parameters().count());
  }
  const std::int64_t bucket_elements =
      std::max<std::int64_t>(1, bucket_bytes / static_cast<std::int64_t>(sizeof(float)));
  Bucket open;
  std::int64_t end = 0;  // of the open bucket
  bool any = false;
  for (std::size_t i = model.layers().size(); i-- > 0;) {
    if (hi[i] == 0) continue;  // no parameters
    TESSERA_REQUIRE(!any || hi[i] == open.offset,
                    "tessera::GradientAverager: the parameters of layer '"
                        << model.layers()[i]->name()
                        << "' are not stored just before those of the layers after it");
    if (!any) end = hi[i];
    open.offset = lo[i];
    open.count = end - lo[i];
    open.ready_after = i;
    any = true;
    if (open.count >= bucket_elements) {
      buckets_.push_back(open);
      any = false;
    }
  }
  if (any) buckets_.push_back(open);
  requests_ = Requests(buckets_.size());
  if (format_ != FloatFormat::fp32) {
    codes_ = Vector<std::uint16_t>("tessera::GradientAverager::codes", gradients_.size());
    if (!memspace_is_host)
      codes_staging_ = Vector<std::uint16_t, HostSpace>("tessera::GradientAverager::codes_staging",
                                                        gradients_.size());
    sum16_ = impl::sum16_op(format_);
  } else if (!comm.direct()) {
    staging_ = Vector<float, HostSpace>("tessera::GradientAverager::staging", gradients_.size());
  }
}

void GradientAverager::reduce_to_slices(const std::vector<int>& offsets,
                                        const std::vector<int>& counts) {
  const int ranks = comm_.size(), me = comm_.rank();
  TESSERA_REQUIRE(
      static_cast<int>(offsets.size()) == ranks && static_cast<int>(counts.size()) == ranks,
      "tessera::GradientAverager::reduce_to_slices: " << offsets.size() << " offsets and "
                                                      << counts.size() << " counts for " << ranks
                                                      << " ranks");
  std::int64_t end = 0;
  for (int r = 0; r < ranks; ++r) {
    TESSERA_REQUIRE(offsets[r] == end && counts[r] >= 0,
                    "tessera::GradientAverager::reduce_to_slices: slice "
                        << r << " [" << offsets[r] << ", " << offsets[r] + counts[r]
                        << ") does not follow the slices before it, which end at " << end);
    end += counts[r];
  }
  TESSERA_REQUIRE(end == static_cast<std::int64_t>(gradients_.size()),
                  "tessera::GradientAverager::reduce_to_slices: the slices cover "
                      << end << " of " << gradients_.size() << " gradients");
  bucket_counts_.clear();
  for (const Bucket& bucket : buckets_)
    bucket_counts_.push_back(slice_parts(bucket.offset, bucket.count, offsets, counts).counts);
  slice_offset_ = offsets[me];
  slice_count_ = counts[me];
  if (format_ == FloatFormat::fp32) {
    if (comm_.direct())
      received_ = Vector<float>("tessera::GradientAverager::received", slice_count_);
    else
      received_host_ =
          Vector<float, HostSpace>("tessera::GradientAverager::received_host", slice_count_);
  } else {
    received16_ = Vector<std::uint16_t>("tessera::GradientAverager::received16", slice_count_);
    if (!memspace_is_host)
      received16_host_ = Vector<std::uint16_t, HostSpace>(
          "tessera::GradientAverager::received16_host", slice_count_);
  }
}

std::int64_t GradientAverager::receive_at(std::size_t b) const {
  const Bucket& bucket = buckets_[b];
  const std::int64_t at = std::max<std::int64_t>(bucket.offset, slice_offset_) - slice_offset_;
  return std::min(at, slice_count_);
}

void GradientAverager::collect_slice() {
  const auto slice = Kokkos::subview(gradients_, std::pair<std::int64_t, std::int64_t>(
                                                     slice_offset_, slice_offset_ + slice_count_));
  if (format_ == FloatFormat::fp32) {
    if (comm_.direct())
      Kokkos::deep_copy(exec_, slice, received_);
    else
      Kokkos::deep_copy(exec_, slice, received_host_);
  } else {
    if (!memspace_is_host) Kokkos::deep_copy(exec_, received16_, received16_host_);
    widen_codes(exec_, format_, received16_, slice, 0, slice_count_);
  }
  exec_.fence();
}

double GradientAverager::overlap_fraction() const {
  const double total = overlapped_ + exposed_;
  return total > 0 ? overlapped_ / total : 0.0;
}

void GradientAverager::begin() { next_ = 0; }

void GradientAverager::start(std::size_t b) {
  const Bucket& bucket = buckets_[b];
  const std::pair<std::int64_t, std::int64_t> range(bucket.offset, bucket.offset + bucket.count);
  // The bucket's gradients must be complete before MPI reads them.
  exec_.fence();
  if (format_ != FloatFormat::fp32) {
    start16(b);
    return;
  }
  float* data = gradients_.data() + bucket.offset;
  if (!comm_.direct()) {
    Kokkos::deep_copy(exec_, Kokkos::subview(staging_, range), Kokkos::subview(gradients_, range));
    exec_.fence();
    data = staging_.data() + bucket.offset;
  }
  post(b, data, (comm_.direct() ? received_.data() : received_host_.data()) + receive_at(b),
       MPI_SUM);
}

// Bucket b's sum of `data` over the ranks: reduce-scattered into `into`
// when the optimizer is sharded, else all-reduced in place.
template <class T>
void GradientAverager::post(std::size_t b, T* data, T* into, MPI_Op op) {
  if (b == 0) first_start_ = Clock::now();
  if (scatters()) {
    requests_.set(b, comm_.start_sum_scatter(data, into, bucket_counts_[b], op));
    return;
  }
  requests_.set(b, comm_.start_sum(data, static_cast<int>(buckets_[b].count), op));
}

void GradientAverager::start16(std::size_t b) {
  const Bucket& bucket = buckets_[b];
  const std::int64_t begin = bucket.offset, end = bucket.offset + bucket.count;
  if (format_ == FloatFormat::bf16)
    narrow_range<bf16>(exec_, gradients_, codes_, begin, end);
  else
    narrow_range<fp16>(exec_, gradients_, codes_, begin, end);
  std::uint16_t* data = codes_.data() + begin;
  if (!memspace_is_host) {
    const std::pair<std::int64_t, std::int64_t> range(begin, end);
    Kokkos::deep_copy(exec_, Kokkos::subview(codes_staging_, range),
                      Kokkos::subview(codes_, range));
    data = codes_staging_.data() + begin;
  }
  // The codes must be complete before MPI reads them.
  exec_.fence();
  post(b, data, (memspace_is_host ? received16_.data() : received16_host_.data()) + receive_at(b),
       sum16_);
}

void GradientAverager::widen16() {
  // The buckets tile one contiguous range: the first ends it, the last starts it.
  const std::int64_t begin = buckets_.back().offset,
                     end = buckets_.front().offset + buckets_.front().count;
  if (!memspace_is_host) {
    const std::pair<std::int64_t, std::int64_t> range(begin, end);
    Kokkos::deep_copy(exec_, Kokkos::subview(codes_, range),
                      Kokkos::subview(codes_staging_, range));
  }
  widen_codes(exec_, format_, codes_, gradients_, begin, end);
  exec_.fence();
}

void GradientAverager::layer_done(std::size_t layer) {
  if (comm_.size() == 1 || !overlap_) return;
  while (next_ < buckets_.size() && buckets_[next_].ready_after == layer) start(next_++);
  // Open MPI progresses non-blocking collectives inside MPI calls.
  if (next_ > 0) requests_.test_all(0, next_);
}

void GradientAverager::finish() {
  if (comm_.size() == 1 || buckets_.empty()) return;
  ScopedRegion region("tessera::GradientAverager::finish");
  const auto backward_end = Clock::now();
  while (next_ < buckets_.size()) start(next_++);
  requests_.wait_all();
  if (scatters())
    collect_slice();
  else if (format_ != FloatFormat::fp32)
    widen16();
  else if (!comm_.direct())
    Kokkos::deep_copy(exec_, gradients_, staging_);
  const auto done = Clock::now();
  overlapped_ += std::chrono::duration<double>(
                     std::max(first_start_, std::min(backward_end, done)) - first_start_)
                     .count();
  exposed_ += std::chrono::duration<double>(done - std::max(backward_end, first_start_)).count();
}

}  // namespace tessera
