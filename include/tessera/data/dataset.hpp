// A labelled dataset resident in device memory: copied to the device once,
// then batches are gathered on the device (or, streamed, left in its file
// and read batch by batch: data/stream.hpp). Either fixed samples with one
// label each (classification), or a stream of token ids from which every
// sample is a window of T + 1 tokens: the first T are the input, the last
// T the labels (at each position, the token that follows).
#pragma once

#include <tessera/core/tensor.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

class SampleFile;  // data/stream.hpp

struct Dataset {
  Matrix<float> samples;  // [N, features], normalised; empty for a token stream
  Vector<int> labels;     // [N]; empty for a token stream
  Shape sample_shape;     // one sample, e.g. {784} or {1, 28, 28}; {T} for a token stream
  int classes = 0;        // labels (or token ids) run from 0 to classes - 1

  // A token stream: the ids, and how its windows are drawn. Sample i of
  // epoch e starts at counter_hash(seed, window stream, e * windows + i)
  // modulo (tokens - T) with random_windows (training: restarts and rank
  // counts draw the same windows), else at i * T (evaluation: consecutive
  // windows cover the stream once).
  Vector<std::int32_t> tokens;
  std::int64_t windows = 0;  // samples per epoch
  bool random_windows = false;

  // Classification samples left in their file (data.streaming): samples
  // [file_first, file_first + file_count) of `file`, read batch by batch
  // through a BatchStream (data/stream.hpp); `samples` and `labels` are empty.
  std::shared_ptr<const SampleFile> file;
  std::int64_t file_first = 0, file_count = 0;

  bool token_stream() const { return tokens.extent(0) > 0; }
  bool streamed() const { return file != nullptr; }
  std::int64_t size() const {
    if (token_stream()) return windows;
    return streamed() ? file_count : static_cast<std::int64_t>(labels.extent(0));
  }
  // Values per sample.
  std::int64_t features() const { return sample_shape.numel(); }
  // Labels per sample: 1, or T for a token stream.
  std::int64_t label_positions() const { return token_stream() ? sample_shape[0] : 1; }
  // Bytes of device memory its samples, labels and token ids take (a
  // slice's: of the slice; a streamed set's: none, see BatchStream).
  std::int64_t device_bytes() const {
    return static_cast<std::int64_t>(samples.span() * sizeof(float) + labels.span() * sizeof(int) +
                                     tokens.span() * sizeof(std::int32_t));
  }
};

// Where a training run's windows come from: its seed and the epoch.
struct WindowDraw {
  std::uint64_t seed = 0;
  int epoch = 0;
};

// Images (any IDX rank >= 2, first dim N) scaled to [0, 1], then
// (x - mean) / stddev. Labels must be < 256 and as many as images.
// max_samples > 0: the first max_samples of each file only (read_idx).
Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         float mean = 0.0f, float stddev = 1.0f, std::int64_t max_samples = 0);

// A dataset from unsigned bytes in IDX layout (images [N, ...] and labels
// [N]), normalised as load_idx_dataset does; the sources name the inputs in
// error messages. Shared by the IDX and HDF5 readers.
struct IdxArray;
Dataset make_byte_dataset(const IdxArray& images, const IdxArray& labels,
                          const std::string& images_source, const std::string& labels_source,
                          float mean, float stddev);

// A token stream from ids in host memory (data/tokens.hpp reads files);
// the ids must lie in [0, 2^24) (floats hold them exactly); `source` names
// them in errors.
Dataset make_token_dataset(const std::vector<std::int32_t>& tokens, std::int64_t block,
                           bool random_windows, const std::string& source);

// Samples [first, first + count) as a dataset sharing the same memory (a
// validation split held out of a training set). A token stream splits its
// tokens instead: the first (or last) `count` windows' worth of tokens,
// with consecutive windows when held out.
Dataset slice(const Dataset& data, std::int64_t first, std::int64_t count);

// Gathers samples and labels order(start .. start + batch) into the batch
// buffers; a token stream gathers windows (T labels per sample) drawn from `draw`.
void gather_batch(const ExecSpace& exec, const Dataset& data, const Vector<std::int64_t>& order,
                  std::int64_t start, const Tensor<float>& batch_samples,
                  const Vector<int>& batch_labels, const WindowDraw& draw = {});

}  // namespace tessera
