// How a model trains, defined once: the Trainer takes these structs and the
// deck reader fills them. Plain C++ (the deck reader includes it; GPU
// builds compile that reader with the host compiler).
#pragma once

#include <tessera/core/float_format.hpp>
#include <tessera/settings/schedule.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// The loss over the model's output (model/loss.hpp builds it).
struct LossOptions {
  std::string type = "cross_entropy";  // softmax cross-entropy against integer labels
  float label_smoothing = 0.0f;        // in [0, 1); training only
};
// Every loss type make_loss builds.
const std::vector<std::string>& loss_types();

// Loss scaling: the loss (and so every gradient) is multiplied by a power of
// two before backward and the gradients divided by it before clipping and
// the update, so small gradients survive formats of narrow range (fp16
// gradient averaging) and large ones overflow to a skipped step instead of
// corrupting the weights. Multiplying by a power of two is exact in float:
// without overflow the weights are bit for bit those of an unscaled run.
struct LossScaling {
  // Dynamic: a step whose gradients are not finite is skipped (no update)
  // and halves the scale; growth_interval finite steps in a row double it,
  // up to max_scale.
  bool dynamic = false;
  float initial = 65536.0f;  // power of two in [1, max_scale]
  std::int64_t growth_interval = 2000;
  static constexpr float max_scale = 16777216.0f;  // 2^24
  // A scale dynamic scaling can reach: a power of two from 1 to max_scale.
  static bool valid_scale(float scale) {
    int exponent = 0;
    return std::isfinite(scale) && scale >= 1 && scale <= max_scale &&
           std::frexp(scale, &exponent) == 0.5f;
  }
};

struct TrainOptions {
  // What each setting may be: the deck's keys and validate() read these.
  static constexpr Range epochs_range = Range::closed(1, 1000000);
  static constexpr Range batch_size_range = Range::closed(1, 1 << 20);
  static constexpr Range accumulation_steps_range = Range::closed(1, 1 << 20);
  static constexpr Range clip_norm_range = Range::closed(0, 1e6);

  int epochs = 1;
  // > 0: the run ends after this many optimizer steps, within an epoch or
  // before the last one.
  std::int64_t max_steps = 0;
  std::int64_t batch_size = 128;  // the global batch of one optimizer step, over all ranks
  // Each global batch runs as this many micro-batches whose gradients add
  // up before the one optimizer step (memory for large batches).
  std::int64_t accumulation_steps = 1;
  std::uint64_t seed = 0;        // initialisation, shuffling and dropout derive from it
  std::int64_t log_every = 100;  // steps between progress lines; 0 = none
  LrSchedule schedule;           // the learning rate of every step
  float clip_norm = 0.0f;        // > 0: clip gradients to this global norm
  LossOptions loss;
  // The format activations and their gradients are stored in
  // (Model::set_compute); the weights and the optimizer stay float.
  FloatFormat compute = FloatFormat::fp32;
  LossScaling loss_scaling;
  // Data parallelism (several ranks).
  std::int64_t bucket_bytes = 1 << 20;  // gradient averaging bucket
  bool overlap = true;                  // start buckets while backward runs
  bool sync_batchnorm = false;          // BatchNorm statistics over the global (micro-)batch
  // ZeRO-1: each rank keeps the optimizer state of, and updates, 1/N of the
  // parameters, then the parameters are gathered on every rank.
  bool shard_optimizer = false;
  // With shard_optimizer: gather the parameters bucket by bucket during the
  // next forward pass (false: one blocking gather after the update).
  bool overlap_gather = true;
  // Gradients are sent between ranks in this format (and summed in it).
  FloatFormat gradient_dtype = FloatFormat::fp32;

  // Throws Error naming the first setting out of its range (the schedule's
  // included), or accumulation_steps above batch_size.
  void validate() const;

  // The optimizer steps of the whole run at steps_per_epoch steps an
  // epoch: the epochs', or max_steps when that is fewer.
  std::int64_t total_steps(std::int64_t steps_per_epoch) const {
    const std::int64_t all = epochs * steps_per_epoch;
    return max_steps > 0 && max_steps < all ? max_steps : all;
  }

  // Samples one rank holds at most in one micro-batch: what the model is
  // compiled for.
  std::int64_t max_shard(int ranks) const {
    const std::int64_t micro = (batch_size + accumulation_steps - 1) / accumulation_steps;
    return (micro + ranks - 1) / ranks;
  }
};

}  // namespace tessera
