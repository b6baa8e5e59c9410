// A labelled classification dataset resident in device memory: copied to
// the device once, then batches are gathered on the device.
#pragma once

#include <tessera/core/tensor.hpp>

#include <cstdint>
#include <string>

namespace tessera {

struct Dataset {
  Matrix<float> samples;  // [N, features], normalised
  Vector<int> labels;     // [N]
  Shape sample_shape;     // one sample, e.g. {784} or {1, 28, 28}
  int classes = 0;
  std::int64_t size() const { return static_cast<std::int64_t>(labels.extent(0)); }
};

// Images (any IDX rank >= 2, first dim N) scaled to [0, 1], then
// (x - mean) / stddev. Labels must be < 256 and as many as images.
Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         float mean = 0.0f, float stddev = 1.0f);

// A dataset from unsigned bytes in IDX layout (images [N, ...] and labels
// [N]), normalised as load_idx_dataset does; the sources name the inputs in
// error messages. Shared by the IDX and HDF5 readers.
struct IdxArray;
Dataset make_byte_dataset(const IdxArray& images, const IdxArray& labels,
                          const std::string& images_source, const std::string& labels_source,
                          float mean, float stddev);

// Samples [first, first + count) as a dataset sharing the same memory (a
// validation split held out of a training set).
Dataset slice(const Dataset& data, std::int64_t first, std::int64_t count);

// Gathers samples and labels order(start .. start + batch) into the batch buffers.
void gather_batch(const ExecSpace& exec, const Dataset& data, const Vector<std::int64_t>& order,
                  std::int64_t start, const Tensor<float>& batch_samples,
                  const Vector<int>& batch_labels);

}  // namespace tessera
