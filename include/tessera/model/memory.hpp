// Where a model's activation gradients live (each in its own memory, or
// sharing one pool by liveness) and the bytes a model holds for a step.
#pragma once

#include <tessera/core/enum_names.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// separate: every layer output (activation) has its own memory for the
// run, their gradients one buffer, and every layer its own temporaries.
// shared: values and gradients never alive at the same time in a training
// step share one buffer (place_buffers over the forward and backward
// passes: a value lives until the last pass that reads it, a gradient from
// its first writer in backward to its producer's backward), and all layers
// share one memory for their temporaries. The computed values are the same
// bits either way.
enum class BufferPlan { separate, shared };
inline constexpr EnumNames<BufferPlan, 2> buffer_plans{
    "buffer plan", {{BufferPlan::separate, "separate"}, {BufferPlan::shared, "shared"}}};

// Recomputation: which layer outputs a training step keeps from forward
// to backward. none: every output a backward reads. blocks: the outputs two
// or more layers read (where a residual connection branches: each block's
// input). layers: the outputs of the named layers. Between two kept outputs
// lies a segment, whose other outputs backward recomputes (its layers'
// forward again, BatchNorm with the statistics of the first pass) just
// before the segment's backward: gradients are the same bits. The model's
// input and output, a workspace's boundaries, and any output a layer of a
// later segment reads are always kept.
enum class RecomputeMode { none, blocks, layers };
inline constexpr EnumNames<RecomputeMode, 3> recompute_modes{"recompute setting",
                                                             {{RecomputeMode::none, "none"},
                                                              {RecomputeMode::blocks, "blocks"},
                                                              {RecomputeMode::layers, "layers"}}};
struct Recompute {
  RecomputeMode mode = RecomputeMode::none;
  std::vector<std::string> layers;  // with RecomputeMode::layers: whose outputs are kept
};

// The steps from `first` to `last` inclusive during which a buffer is alive.
struct LiveSpan {
  std::int64_t first = 0, last = 0;
};
// A buffer of `elements` alive during its spans (for a value computed again
// before backward, two).
struct LiveBuffer {
  std::int64_t elements = 0;
  std::vector<LiveSpan> spans;
};

// Offsets of `buffers` in one pool such that two buffers alive at a common
// step never overlap: placed one by one, each at the lowest offset, a
// multiple of `align` elements, that is free for its steps, in the one of
// a few orders (the largest first, the earliest alive first, ...) that
// gives the smallest pool. The same buffers always give the same offsets.
// `pool` receives the pool's size in elements. A buffer of no elements
// gets offset 0.
std::vector<std::int64_t> place_buffers(const std::vector<LiveBuffer>& buffers, std::int64_t align,
                                        std::int64_t& pool);

// Bytes a model's workspace holds for a training step, under either plan.
struct ActivationMemory {
  BufferPlan plan = BufferPlan::separate;         // the model's
  RecomputeMode recompute = RecomputeMode::none;  // the model's
  // The layers' outputs (and the input) and their gradients in every format
  // held, each in its own memory; the same placed by liveness (with the
  // model's recomputation), and placed by liveness with recompute "blocks".
  std::int64_t values = 0, gradients = 0, nodes_shared = 0, nodes_blocks = 0;
  std::int64_t layer_buffers = 0;  // the layers' own (Layer::buffer_bytes), after compile()
  // What the layers keep for backward and forward rewrites whole
  // (Layer::recomputed_elements): each layer's own; with the layers run
  // again under the model's recomputation (and under "blocks") in one
  // memory, which they hold only from that run to their backward.
  std::int64_t kept_separate = 0, kept_shared = 0, kept_blocks = 0;
  // The layers' temporaries (Layer::temporary_elements): each layer's own,
  // or one memory the size of the largest.
  std::int64_t temporaries_separate = 0, temporaries_shared = 0;
  std::int64_t nodes(BufferPlan p) const {
    return p == BufferPlan::shared ? nodes_shared : values + gradients;
  }
  std::int64_t temporaries(BufferPlan p) const {
    return p == BufferPlan::shared ? temporaries_shared : temporaries_separate;
  }
  std::int64_t kept(BufferPlan p) const {
    return p == BufferPlan::shared ? kept_shared : kept_separate;
  }
  std::int64_t total(BufferPlan p) const {
    return nodes(p) + layer_buffers + kept(p) + temporaries(p);
  }
  std::int64_t total() const { return total(plan); }
  // Under the shared plan with recompute = "blocks".
  std::int64_t total_blocks() const {
    return nodes_blocks + layer_buffers + kept_blocks + temporaries_shared;
  }
};

}  // namespace tessera
