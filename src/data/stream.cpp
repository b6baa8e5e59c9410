// Streaming samples from an HDF5 file: the file located once with the HDF5
// library, then samples read with pread() on a background thread.
#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/data/hdf5.hpp>
#include <tessera/data/impl/bytes.hpp>
#include <tessera/data/impl/hdf5_layout.hpp>
#include <tessera/data/stream.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tessera {

SampleFile::SampleFile(const std::string& path, const std::string& images_dataset,
                       const std::string& labels_dataset, float mean, float stddev)
    : source_(path + ":" + images_dataset), mean_(mean), stddev_(stddev) {
  TESSERA_REQUIRE(stddev > 0,
                  "tessera::SampleFile: normalisation stddev must be positive, got " << stddev);
  const impl::ContiguousBytes images = impl::locate_contiguous_bytes(path, images_dataset);
  TESSERA_REQUIRE(images.dims.size() >= 2 && images.dims.size() <= 4,
                  source_ << ": images need 2 to 4 dimensions (N, then one sample), found "
                          << images.dims.size());
  const std::int64_t n = images.dims[0];
  TESSERA_REQUIRE(n > 0, source_ << " holds no samples (its first dimension is 0)");
  features_ = static_cast<std::int64_t>(images.bytes) / n;
  TESSERA_REQUIRE(features_ > 0, source_ << " holds samples of size 0 (a sample dimension is 0)");
  sample_shape_ = impl::sample_shape_of(images.dims);
  offset_ = images.offset;

  const IdxArray labels = read_hdf5_bytes(path, labels_dataset);
  TESSERA_REQUIRE(labels.dims.size() == 1, path << ":" << labels_dataset
                                                << ": labels need 1 dimension, found "
                                                << labels.dims.size());
  TESSERA_REQUIRE(labels.dims[0] == n, source_ << " has " << n << " images but " << path << ":"
                                               << labels_dataset << " has " << labels.dims[0]
                                               << " labels");
  labels_.assign(labels.data.begin(), labels.data.end());
  classes_ = 1 + *std::max_element(labels_.begin(), labels_.end());

  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TESSERA_REQUIRE(fd_ >= 0,
                  "tessera::SampleFile: cannot open " << path << ": " << std::strerror(errno));
  struct stat status {};
  const bool sized = ::fstat(fd_, &status) == 0;
  const std::uint64_t end = offset_ + images.bytes;
  if (!sized || static_cast<std::uint64_t>(status.st_size) < end) {
    ::close(fd_);
    fd_ = -1;
    TESSERA_REQUIRE(false, source_ << ": the samples end at byte " << end << " but the file has "
                                   << (sized ? static_cast<std::int64_t>(status.st_size) : -1)
                                   << " bytes (the file is truncated)");
  }
}

SampleFile::~SampleFile() {
  if (fd_ >= 0) ::close(fd_);
}

void SampleFile::read(const std::int64_t* rows, std::int64_t count, std::uint8_t* bytes,
                      int* labels) const {
  const std::int64_t n = size();
  const auto row_bytes = static_cast<std::size_t>(features_);
  for (std::int64_t i = 0; i < count;) {
    TESSERA_REQUIRE(rows[i] >= 0 && rows[i] < n, "tessera::SampleFile::read: sample "
                                                     << rows[i] << " of " << source_
                                                     << ", which holds " << n);
    // A run of consecutive rows is one read.
    std::int64_t run = 1;
    while (i + run < count && rows[i + run] == rows[i] + run) ++run;
    std::uint8_t* to = bytes + static_cast<std::size_t>(i) * row_bytes;
    std::size_t left = static_cast<std::size_t>(run) * row_bytes;
    auto at = static_cast<off_t>(offset_ + static_cast<std::uint64_t>(rows[i]) * row_bytes);
    while (left > 0) {
      const ssize_t got = ::pread(fd_, to, left, at);
      if (got < 0 && errno == EINTR) continue;
      TESSERA_REQUIRE(
          got > 0, "tessera::SampleFile::read: "
                       << source_ << ": reading samples " << rows[i] << " to " << rows[i] + run - 1
                       << " failed: " << (got < 0 ? std::strerror(errno) : "the file ended early"));
      to += got;
      left -= static_cast<std::size_t>(got);
      at += got;
    }
    for (std::int64_t r = 0; r < run; ++r) labels[i + r] = labels_[rows[i + r]];
    i += run;
  }
}

Dataset stream_hdf5_dataset(const std::string& path, const std::string& images_dataset,
                            const std::string& labels_dataset, float mean, float stddev) {
  ScopedRegion region("tessera::stream_hdf5_dataset");
  auto file =
      std::make_shared<const SampleFile>(path, images_dataset, labels_dataset, mean, stddev);
  Dataset data;
  data.sample_shape = file->sample_shape();
  data.classes = file->classes();
  data.file_first = 0;
  data.file_count = file->size();
  data.file = std::move(file);
  return data;
}

std::int64_t BatchStream::buffer_bytes(std::int64_t features, std::int64_t batch, int depth) {
  return static_cast<std::int64_t>(depth) * batch * (features + 4) + batch * features;
}

BatchStream::BatchStream(const Dataset& data, std::vector<std::int64_t> rows,
                         std::vector<std::int64_t> counts, int depth)
    : file_(data.file), rows_(std::move(rows)), counts_(std::move(counts)) {
  TESSERA_REQUIRE(data.streamed(), "tessera::BatchStream: the dataset is not streamed (its "
                                       << data.size() << " samples are in memory already)");
  TESSERA_REQUIRE(depth >= 1, "tessera::BatchStream: depth " << depth << " must be at least 1");
  std::int64_t total = 0, largest = 0;
  for (const std::int64_t c : counts_) {
    TESSERA_REQUIRE(c >= 0, "tessera::BatchStream: a batch of " << c << " samples");
    firsts_.push_back(total);
    total += c;
    largest = std::max(largest, c);
  }
  TESSERA_REQUIRE(total == static_cast<std::int64_t>(rows_.size()),
                  "tessera::BatchStream: the batches hold " << total << " samples, the plan lists "
                                                            << rows_.size() << " rows");
  // Indices into the dataset become rows of the file.
  for (auto& r : rows_) {
    TESSERA_REQUIRE(r >= 0 && r < data.file_count,
                    "tessera::BatchStream: sample " << r << " of a dataset of " << data.file_count);
    r += data.file_first;
  }
  const int slots =
      static_cast<int>(std::min<std::size_t>(depth, std::max<std::size_t>(counts_.size(), 1)));
  for (int s = 0; s < slots; ++s) {
    samples_.emplace_back(
        Kokkos::view_alloc("tessera::BatchStream::samples", Kokkos::WithoutInitializing), largest,
        file_->features());
    labels_.emplace_back(
        Kokkos::view_alloc("tessera::BatchStream::labels", Kokkos::WithoutInitializing), largest);
  }
  staged_ = Vector<std::uint8_t>(
      Kokkos::view_alloc("tessera::BatchStream::staged", Kokkos::WithoutInitializing),
      largest * file_->features());
  reader_ = std::thread([this] { read_ahead(); });
}

BatchStream::~BatchStream() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  reader_.join();
}

// The reader thread: batch k goes to slot k % slots once batch k - slots
// has been handed out. It touches only raw host memory and the file.
void BatchStream::read_ahead() {
  const std::size_t slots = samples_.size();
  try {
    for (std::size_t k = 0; k < counts_.size(); ++k) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || k < taken_ + slots; });
        if (stop_) return;
      }
      file_->read(rows_.data() + firsts_[k], counts_[k], samples_[k % slots].data(),
                  labels_[k % slots].data());
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        read_ = k + 1;
      }
      changed_.notify_all();
    }
  } catch (...) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    changed_.notify_all();
  }
}

void BatchStream::next(const ExecSpace& exec, const Tensor<float>& batch_samples,
                       const Vector<int>& batch_labels) {
  ScopedRegion region("tessera::BatchStream::next");
  const std::size_t k = taken_;
  TESSERA_REQUIRE(k < counts_.size(), "tessera::BatchStream::next: all " << counts_.size()
                                                                         << " planned batches "
                                                                            "were handed out");
  const std::int64_t count = counts_[k];
  const auto dst = batch_samples.matrix();
  TESSERA_REQUIRE(static_cast<std::int64_t>(dst.extent(0)) == count &&
                      static_cast<std::int64_t>(dst.extent(1)) == file_->features() &&
                      static_cast<std::int64_t>(batch_labels.extent(0)) >= count,
                  "tessera::BatchStream::next: batch "
                      << k + 1 << " holds " << count << " samples of " << file_->features()
                      << " values; the buffers given are " << batch_samples.shape() << " and ["
                      << batch_labels.extent(0) << "]");
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return read_ > k || error_; });
    if (read_ <= k) std::rethrow_exception(error_);
  }
  const std::size_t slot = k % samples_.size();
  const std::pair<std::int64_t, std::int64_t> rows(0, count), values(0, count * file_->features());
  const auto staged = Kokkos::subview(staged_, values);
  Kokkos::deep_copy(
      exec, staged,
      Kokkos::View<const std::uint8_t*, compat::PinnedHostSpace,
                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>(samples_[slot].data(), values.second));
  impl::normalise_bytes(exec, staged, impl::ByteNormalisation(file_->mean(), file_->stddev()),
                        UnmanagedVector<float>(dst.data(), values.second));
  Kokkos::deep_copy(exec, Kokkos::subview(batch_labels, rows),
                    Kokkos::subview(labels_[slot], rows));
  // The slot is free for the reader once the copies are done.
  exec.fence();
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    taken_ = k + 1;
  }
  changed_.notify_all();
}

}  // namespace tessera
