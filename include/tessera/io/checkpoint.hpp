// Checkpoints: one HDF5 file holds everything a run needs to resume (deck,
// topology, parameters, running statistics, optimizer state, the counters the
// random streams derive from, the data cursor, metrics). docs/checkpoint.md
// documents the layout for h5py and h5dump readers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

class Model;
class Optimizer;

// The file's format attribute and the only version this build reads.
inline constexpr const char* checkpoint_format = "tessera-checkpoint";
inline constexpr int checkpoint_format_version = 1;

// Where training stands.
struct TrainingCursor {
  int epoch = 0;           // 0-based epoch in progress
  std::int64_t batch = 0;  // optimizer steps of that epoch already taken (0 = at its start)
  std::int64_t step = 0;   // optimizer steps taken in the whole run
};

// Everything in a checkpoint besides the tensors.
struct CheckpointInfo {
  std::string tessera_version;  // filled by write_checkpoint
  std::string deck_path, deck_text;
  std::vector<std::string> deck_overrides;
  std::uint64_t seed = 0;  // initialisation, shuffling and dropout all derive from it
  TrainingCursor cursor;
  int world_size = 1;
  std::int64_t global_batch = 0;
  float lr = 0;          // learning rate of the last step taken
  std::string schedule;  // schedule description (type and its parameters)
  std::string metrics;   // the run's metrics history so far: JSON lines
  // Dynamic loss scaling's state, for runs with it: the scale of the next
  // step and the finite steps since it last changed.
  bool has_loss_scale = false;
  float loss_scale = 1;
  std::int64_t loss_scale_good_steps = 0;
  // (layer, kernel option) of each layer that records one
  // (Layer::kernel_option; a KernelTable), in layer order; empty in a
  // checkpoint written before they were recorded.
  std::vector<std::pair<std::string, std::string>> kernels;
};

// "[16, 2]": a shape as messages and tessera-inspect print it.
std::string shape_text(const std::vector<std::int64_t>& dims);

// Where the run stands, as tessera-inspect prints it: "epochs done: 4 of 4
// (finished)" at an epoch boundary, "epochs done: 2 of 10; in epoch 3, 17 of
// its 235 batches done" within an epoch. The counts of epochs and batches come
// from the schedule's "epochs=" and "steps_per_epoch=" entries, left out
// where it has none.
std::string checkpoint_progress(const CheckpointInfo& info);

// One tensor as stored: /<group>/<layer>/<name>, row-major float32.
struct CheckpointTensor {
  std::string layer, name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
  double norm() const;  // L2
};

struct CheckpointLayer {
  std::string name, type;
  std::vector<std::string> inputs;         // layer names, or "input"
  std::vector<std::int64_t> output_shape;  // per sample
  std::vector<std::string> parameters, state;
  std::string kernel;  // its kernel option; "" where none is recorded
};

struct CheckpointOptimizerBuffer {
  std::string name;                       // e.g. "exp_avg"
  std::vector<CheckpointTensor> tensors;  // split like the parameters
};

// A whole checkpoint in host memory, read without a model.
struct CheckpointContents {
  std::string path;
  CheckpointInfo info;
  std::vector<std::int64_t> input_shape;
  std::vector<CheckpointLayer> layers;
  std::vector<CheckpointTensor> parameters, state;  // in layer order
  std::string optimizer;
  std::int64_t optimizer_steps = 0;
  std::vector<CheckpointOptimizerBuffer> optimizer_buffers;  // empty before the first step
};

// Writes the model's parameters and state, the optimizer's state buffers
// (split per parameter), name and step count, the topology and `info`.
// Atomic: a temporary file in the same directory is written, flushed,
// fsynced and renamed over `path`, then the directory is fsynced, so `path`
// is either the old file or the complete new one.
void write_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer,
                      const CheckpointInfo& info);

// The format name and version, then everything but the tensors.
CheckpointInfo read_checkpoint_info(const std::string& path);

// Everything, checked for consistency (every listed dataset present, shapes
// and sizes matching); for tools that have no model, e.g. tessera-inspect.
CheckpointContents read_checkpoint(const std::string& path);

// Checks the checkpoint against the compiled model (layer names and types,
// every parameter and state dataset with its shape) and the optimizer (its
// name), then loads parameters, state and optimizer state. Nothing is
// changed when a check fails. Errors are tessera::Error naming the file and
// the problem.
CheckpointInfo load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer);

// A checkpoint path from what a user typed: a file, a directory (the
// checkpoint its `latest` names) or a `latest` file itself.
std::string resolve_checkpoint(const std::string& what);

// A directory of checkpoints named step-<8 or more digits>.h5 after the
// optimizer steps taken, with a `latest` file naming the newest; `latest` is
// replaced atomically, and only the newest `keep` checkpoints are kept.
class CheckpointDirectory {
 public:
  CheckpointDirectory(std::string directory, int keep);

  const std::string& directory() const { return directory_; }
  int keep() const { return keep_; }

  // Writes step-<info.cursor.step>.h5, points `latest` at it, then removes
  // the oldest checkpoints beyond `keep`. Creates the directory if needed.
  // Returns the path written.
  std::string commit(const Model& model, const Optimizer& optimizer, const CheckpointInfo& info);

  // "latest" (or "") -> the newest checkpoint here; a name of a file in this
  // directory, or any other path (file or directory), as resolve_checkpoint.
  std::string resolve(const std::string& what = "latest") const;

  // Whether `latest` exists here (a run to resume).
  bool has_latest() const;

  // The checkpoint files here, oldest first.
  std::vector<std::string> checkpoints() const;

  static std::string file_name(std::int64_t step);

 private:
  std::string directory_;
  int keep_;
};

}  // namespace tessera
