// Classification samples left in their HDF5 file and read while training
// runs (data.streaming = true), for datasets larger than memory: each rank
// reads only the samples of its own share of each batch, on a background
// thread a few batches ahead, as bytes into host buffers (pinned on GPUs)
// that are copied to the device and normalised there batch by batch. A
// streamed dataset trains bit for bit as the same file loaded whole.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/tensor.hpp>
#include <tessera/data/dataset.hpp>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera {

// An open file of samples: an unsigned 8-bit images dataset [N, ...] stored
// contiguously (tessera-idx2hdf5 --contiguous, tessera-synthetic) and a
// labels dataset [N]. The labels are read whole (4 bytes a sample); the
// images stay in the file and are read with positioned reads, safe from any
// thread.
class SampleFile {
 public:
  SampleFile(const std::string& path, const std::string& images_dataset,
             const std::string& labels_dataset, float mean, float stddev);
  ~SampleFile();
  SampleFile(const SampleFile&) = delete;
  SampleFile& operator=(const SampleFile&) = delete;

  std::int64_t size() const { return static_cast<std::int64_t>(labels_.size()); }
  const Shape& sample_shape() const { return sample_shape_; }
  std::int64_t features() const { return features_; }
  int classes() const { return classes_; }
  // "file:images", as errors name it.
  const std::string& source() const { return source_; }
  // The normalisation (x / 255 - mean) / stddev that batches get.
  float mean() const { return mean_; }
  float stddev() const { return stddev_; }

  // Samples `rows` (indices into the file, any order) as bytes
  // [count, features] and their labels. Runs of consecutive rows are read
  // at once.
  void read(const std::int64_t* rows, std::int64_t count, std::uint8_t* bytes, int* labels) const;

 private:
  std::string source_;
  int fd_ = -1;
  std::uint64_t offset_ = 0;
  std::int64_t features_ = 0;
  Shape sample_shape_;
  std::vector<int> labels_;
  int classes_ = 0;
  float mean_ = 0, stddev_ = 1;  // the normalisation, as load_hdf5_dataset applies it
};

// A dataset whose samples stay in `path` (its labels and shape are read).
Dataset stream_hdf5_dataset(const std::string& path, const std::string& images_dataset,
                            const std::string& labels_dataset, float mean = 0.0f,
                            float stddev = 1.0f);

// Hands out planned batches of a streamed dataset in order: a background
// thread reads them `depth` batches ahead into host buffers, next() copies
// the oldest to the device. The plan is every batch's rows (indices into
// the dataset, as a shuffled order holds them) one batch after the other.
class BatchStream {
 public:
  // Batches read ahead unless the constructor is told otherwise.
  static constexpr int default_depth = 3;
  // Memory the buffers take: depth batches of `batch` samples on the host
  // and one batch of bytes on the device.
  static std::int64_t buffer_bytes(std::int64_t features, std::int64_t batch,
                                   int depth = default_depth);

  BatchStream(const Dataset& data, std::vector<std::int64_t> rows, std::vector<std::int64_t> counts,
              int depth = default_depth);
  // Stops the reader (between two batches) and waits for it.
  ~BatchStream();
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;

  // Copies the next planned batch into batch_samples [count, features] and
  // the first count labels; rethrows the reader's error (which names the
  // file) when that batch could not be read.
  void next(const ExecSpace& exec, const Tensor<float>& batch_samples,
            const Vector<int>& batch_labels);

 private:
  using HostBuffer = Kokkos::View<std::uint8_t**, Kokkos::LayoutRight, compat::PinnedHostSpace>;
  using HostLabels = Kokkos::View<int*, compat::PinnedHostSpace>;
  void read_ahead();

  std::shared_ptr<const SampleFile> file_;
  std::vector<std::int64_t> rows_, counts_, firsts_;
  std::vector<HostBuffer> samples_;
  std::vector<HostLabels> labels_;
  Vector<std::uint8_t> staged_;  // the batch being normalised, on the device
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t read_ = 0, taken_ = 0;  // batches read, batches handed out
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread reader_;
};

}  // namespace tessera
