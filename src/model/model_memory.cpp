// Where a model's values, gradients and layer buffers live: the
// recomputation segments and the steps of a training step, the liveness of
// every buffer, their places in the shared memory, and the bytes reported.
#include <tessera/model/model.hpp>

#include <algorithm>

namespace tessera {

std::vector<std::size_t> Model::segments(LayerRange layers, const Recompute& recompute) const {
  const std::size_t n_layers = layers_.size();
  if (layers.last > n_layers) layers.last = n_layers;
  std::vector<std::size_t> start(n_layers);
  for (std::size_t i = 0; i < n_layers; ++i) start[i] = i;
  if (recompute.mode == RecomputeMode::none) return start;
  // The kept outputs (node k: layer k - 1's): the model's input and output,
  // the workspace's boundaries, and those the setting names.
  std::vector<bool> kept(n_layers + 1, false);
  kept[0] = kept[n_layers] = kept[layers.first] = kept[layers.last] = true;
  if (recompute.mode == RecomputeMode::blocks) {
    std::vector<int> readers(n_layers + 1, 0);
    for (const auto& inputs : layer_inputs_) {
      std::vector<std::size_t> distinct = inputs;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      for (auto node : distinct) ++readers[node];
    }
    for (std::size_t k = 0; k <= n_layers; ++k) kept[k] = kept[k] || readers[k] >= 2;
  } else {
    for (const auto& name : recompute.layers) {
      std::size_t k = 0;
      while (k < n_layers && layers_[k]->name() != name) ++k;
      TESSERA_REQUIRE(k < n_layers, "tessera::Model: recompute keeps the output of layer '"
                                        << name << "', which is not in the model");
      kept[k + 1] = true;
    }
  }
  // A segment starts at every kept node; an output a layer of a later
  // segment reads is kept too (a segment's recomputation reads only kept
  // outputs and its own).
  for (bool changed = true; changed;) {
    for (std::size_t i = 0; i < n_layers; ++i) start[i] = i == 0 || kept[i] ? i : start[i - 1];
    changed = false;
    for (std::size_t i = 0; i < n_layers; ++i)
      for (auto node : layer_inputs_[i])
        if (!kept[node] && node <= start[i]) kept[node] = changed = true;
  }
  return start;
}

std::vector<bool> Model::kept_nodes(const std::vector<bool>& held, bool boundary_only,
                                    LayerRange layers) const {
  const std::size_t last = sample_shapes_.size() - 1;
  std::vector<bool> keep(held.size());
  for (std::size_t k = 0; k <= last; ++k)
    keep[k] =
        held[k] && (!boundary_only || k == 0 || k == last || k == layers.first || k == layers.last);
  return keep;
}

Model::Timeline Model::timeline(LayerRange layers, const Recompute& recompute) const {
  // The layers' forward passes, then for each recomputation segment from
  // the last, its layers' forward again (all but its last: their outputs
  // are the segment's inner values) and their backward passes in reverse.
  // Without recomputation layer i's backward is step 2 L - 1 - i.
  const std::size_t n_layers = layers_.size();
  const std::vector<std::size_t> start = segments(layers, recompute);
  Timeline t;
  t.again.assign(n_layers, -1);
  t.back.assign(n_layers, 0);
  t.steps = static_cast<std::int64_t>(n_layers);
  for (std::size_t i = n_layers; i-- > 0;) {
    if (i + 1 == n_layers || start[i + 1] == i + 1)
      for (std::size_t j = start[i]; j < i; ++j) t.again[j] = t.steps++;
    t.back[i] = t.steps++;
  }
  return t;
}

std::vector<std::int64_t> Model::recomputed_layout(LayerRange layers, const Recompute& recompute,
                                                   std::int64_t& pool) const {
  if (layers.last > layers_.size()) layers.last = layers_.size();
  const Timeline t = timeline(layers, recompute);
  // A layer run again holds them from that run to its backward; what its
  // first forward wrote is never read.
  std::vector<LiveBuffer> live(layers_.size());
  for (std::size_t i = layers.first; i < layers.last; ++i)
    if (t.again[i] >= 0) {
      const auto at = static_cast<std::int64_t>(i);
      live[i] = LiveBuffer{layers_[i]->recomputed_elements(input_shapes_[i]),
                           {{at, at}, {t.again[i], t.back[i]}}};
    }
  std::vector<std::int64_t> offsets = place_buffers(live, 16, pool);
  for (std::size_t i = 0; i < offsets.size(); ++i)
    if (live[i].elements == 0) offsets[i] = -1;
  return offsets;
}

std::vector<std::size_t> Model::gradient_places(const std::vector<bool>& keep,
                                                LayerRange layers) const {
  const std::size_t last = sample_shapes_.size() - 1;
  std::vector<int> readers(last + 1, 0);
  for (const auto& inputs : layer_inputs_)
    for (auto node : inputs) ++readers[node];
  const auto boundary = [&](std::size_t k) {
    return k == 0 || k == last || k == layers.first || k == layers.last;
  };
  std::vector<std::size_t> place(last + 1);
  for (std::size_t k = 0; k <= last; ++k) place[k] = k;
  // From the last layer, so that its output's place is known.
  for (std::size_t i = layers.last; i-- > layers.first;) {
    const std::size_t out = i + 1;
    if (boundary(out) || !keep[out] || !layers_[i]->backward_in_place()) continue;
    for (auto k : layer_inputs_[i])
      if (!boundary(k) && keep[k] && readers[k] == 1 &&
          sample_shapes_[k].numel() == sample_shapes_[out].numel()) {
        place[k] = place[out];
        break;
      }
  }
  return place;
}

std::vector<LiveBuffer> Model::node_lives(const std::vector<bool>& keep, LayerRange layers,
                                          const Recompute& recompute,
                                          const std::vector<std::size_t>& place) const {
  const std::size_t last = sample_shapes_.size() - 1;
  const auto elements = [&](std::size_t k) {
    return keep[k] ? max_batch_ * sample_shapes_[k].numel() : std::int64_t{0};
  };
  const std::size_t n_layers = layers_.size();
  const Timeline t = timeline(layers, recompute);
  const std::vector<std::int64_t>&again = t.again, &back = t.back;
  const std::int64_t steps = t.steps;
  // A value lives from its layer's forward to the last forward that reads
  // it, or the last backward that does (its layer's, when that reads its
  // output; a consumer's, when that reads its inputs); a value computed
  // again lives a second time from then to its last reader in the
  // segment's backward. Node k's gradient lives from its last consumer's
  // backward (it is zeroed just before) to its producer's (layer k - 1
  // reads it). The model's input and output and the workspace's boundaries
  // live throughout: the data, the loss and the pipeline's messages use
  // them outside the passes.
  std::vector<LiveBuffer> live(2 * last);  // node k's value at 2 k, its gradient at 2 k + 1
  for (std::size_t k = 0; k < last; ++k) {
    if (!keep[k]) continue;
    const bool boundary = k == 0 || k == layers.first || k == layers.last;
    if (boundary) {
      live[2 * k] = LiveBuffer{elements(k), {{0, steps}}};
    } else {
      const std::size_t producer = k - 1;
      const bool recomputed = again[producer] >= 0;
      // Last reader in the first pass, and after the value is computed again.
      std::int64_t first_pass = static_cast<std::int64_t>(producer), second_pass = -1;
      const auto read_in_backward = [&](std::int64_t when) {
        if (recomputed)
          second_pass = std::max(second_pass, when);
        else
          first_pass = std::max(first_pass, when);
      };
      if (layers_[producer]->backward_reads_output()) read_in_backward(back[producer]);
      for (std::size_t i = k; i < n_layers; ++i)
        for (auto node : layer_inputs_[i])
          if (node == k) {
            first_pass = std::max(first_pass, static_cast<std::int64_t>(i));
            if (again[i] >= 0) read_in_backward(again[i]);
            if (layers_[i]->backward_reads_inputs()) read_in_backward(back[i]);
          }
      live[2 * k] = LiveBuffer{elements(k), {{static_cast<std::int64_t>(producer), first_pass}}};
      if (recomputed)
        live[2 * k].spans.push_back(
            LiveSpan{again[producer], std::max(again[producer], second_pass)});
    }
    if (k > 0)
      live[2 * k + 1] = boundary
                            ? LiveBuffer{elements(k), {{0, steps}}}
                            : LiveBuffer{elements(k), {{back[last_consumer_[k]], back[k - 1]}}};
  }
  // A gradient in its layer's output gradient's place extends that life
  // (to the producer's backward of the first in a chain of such layers).
  for (std::size_t k = last; k-- > 1;)
    if (place[k] != k) {
      std::int64_t& end = live[2 * place[k] + 1].spans.back().last;
      end = std::max(end, live[2 * k + 1].spans.back().last);
      live[2 * k + 1] = LiveBuffer{};
    }
  return live;
}

Model::NodeLayout Model::node_layout(const std::vector<bool>& keep, BufferPlan plan,
                                     LayerRange layers, std::int64_t align,
                                     const Recompute& recompute) const {
  const std::size_t last = sample_shapes_.size() - 1;
  const auto elements = [&](std::size_t k) {
    return keep[k] ? max_batch_ * sample_shapes_[k].numel() : std::int64_t{0};
  };
  NodeLayout g;
  g.value.assign(last + 1, -1);
  g.grad.assign(last + 1, -1);
  if (plan == BufferPlan::separate) {
    for (std::size_t k = 1; k <= last; ++k)
      if (keep[k]) {
        g.grad[k] = g.elements;
        g.elements += elements(k);
      }
    return g;
  }
  const std::vector<std::size_t> place = gradient_places(keep, layers);
  const std::vector<LiveBuffer> live = node_lives(keep, layers, recompute, place);
  std::int64_t pool = 0;
  const std::vector<std::int64_t> offsets = place_buffers(live, align, pool);
  for (std::size_t k = 0; k < last; ++k) {
    if (!keep[k]) continue;
    g.value[k] = offsets[2 * k];
    if (k > 0) g.grad[k] = offsets[2 * place[k] + 1];
  }
  // The model's output, its value and then its gradient (the buffer's
  // last), after all of them.
  g.elements = (pool + align - 1) / align * align;
  if (keep[last]) {
    g.value[last] = g.elements;
    g.elements += (elements(last) + align - 1) / align * align;
    g.grad[last] = g.elements;
    g.elements += elements(last);
  }
  return g;
}

void Model::share_layer_memory(LayerRange workspace) {
  std::int64_t largest = 0;
  for (std::size_t i = workspace.first; i < workspace.last; ++i)
    largest = std::max(largest, layers_[i]->temporary_elements(input_shapes_[i]));
  temporaries_ = Vector<float>(
      Kokkos::view_alloc("tessera::layer_temporaries", Kokkos::WithoutInitializing), largest);
  for (std::size_t i = workspace.first; i < workspace.last; ++i)
    if (layers_[i]->temporary_elements(input_shapes_[i]) > 0)
      layers_[i]->share_temporaries(temporaries_);
  std::int64_t pool = 0;
  const std::vector<std::int64_t> offsets = recomputed_layout(workspace, recompute_, pool);
  recomputed_ = Vector<float>(
      Kokkos::view_alloc("tessera::recomputed_buffers", Kokkos::WithoutInitializing), pool);
  for (std::size_t i = workspace.first; i < workspace.last; ++i)
    if (offsets[i] >= 0)
      layers_[i]->share_recomputed(Kokkos::subview(
          recomputed_,
          std::pair<std::int64_t, std::int64_t>(
              offsets[i], offsets[i] + layers_[i]->recomputed_elements(input_shapes_[i]))));
}

std::vector<bool> Model::held_nodes(LayerRange layers) const {
  std::vector<bool> held(sample_shapes_.size(), false);
  held[0] = layers.first == 0 || layers.last == layers_.size();
  for (std::size_t i = layers.first; i < layers.last; ++i) {
    held[i + 1] = true;
    for (auto node : layer_inputs_[i]) held[node] = true;
  }
  return held;
}

bool Model::needs_16bit_input(LayerRange layers) const {
  for (std::size_t i = layers.first; i < layers.last && i < layers_.size(); ++i)
    if (!layers_[i]->reads_token_ids())
      for (auto node : layer_inputs_[i])
        if (node == 0) return true;
  return false;
}

std::int64_t Model::activation_bytes(LayerRange layers) const {
  TESSERA_REQUIRE(inferred_, "tessera::Model::activation_bytes: infer() or compile() first");
  const ActivationMemory m = activation_memory(layers);
  return m.values + m.gradients;
}

ActivationMemory Model::activation_memory(LayerRange layers) const {
  TESSERA_REQUIRE(inferred_, "tessera::Model::activation_memory: infer() or compile() first");
  if (layers.last > layers_.size()) layers.last = layers_.size();
  const std::vector<bool> held = held_nodes(layers);
  ActivationMemory m;
  m.plan = plan_;
  m.recompute = recompute_.mode;
  // One format's nodes `keep`: their values and gradients each in its own
  // memory, and (unless `planned` is false) placed by liveness.
  const auto add = [&](const std::vector<bool>& keep, std::int64_t bytes, bool planned) {
    std::int64_t values = 0;
    for (std::size_t k = 0; k < keep.size(); ++k)
      if (keep[k]) values += max_batch_ * sample_shapes_[k].numel() * bytes;
    const std::int64_t align = 64 / bytes;
    const auto bytes_of = [&](BufferPlan plan, const Recompute& recompute) {
      return node_layout(keep, plan, layers, align, recompute).elements * bytes;
    };
    const std::int64_t gradients = bytes_of(BufferPlan::separate, recompute_);
    m.values += values;
    m.gradients += gradients;
    m.nodes_shared += planned ? bytes_of(BufferPlan::shared, recompute_) : values + gradients;
    m.nodes_blocks += planned ? bytes_of(BufferPlan::shared, Recompute{RecomputeMode::blocks, {}})
                              : values + gradients;
  };
  if (compute_ == FloatFormat::fp32) {
    add(held, 4, true);
  } else {
    // The float input and output (the model's and the range's) beside
    // their 16-bit copies; the input's 16-bit copy only for layers that
    // read it in 16 bits.
    add(kept_nodes(held, true, layers), 4, false);
    std::vector<bool> held16 = held;
    held16[0] = held[0] && needs_16bit_input(layers);
    add(held16, float_format_bytes(compute_), true);
  }
  // What layers keep and forward rewrites whole: each layer's own, or in
  // one memory for the layers run again.
  const auto kept = [&](const Recompute& recompute) {
    std::int64_t pool = 0;
    const std::vector<std::int64_t> offsets = recomputed_layout(layers, recompute, pool);
    std::int64_t bytes = pool * 4;
    for (std::size_t i = layers.first; i < layers.last; ++i)
      if (offsets[i] < 0) bytes += layers_[i]->recomputed_elements(input_shapes_[i]) * 4;
    return bytes;
  };
  m.kept_separate = kept(Recompute{});
  m.kept_shared = plan_ == BufferPlan::shared ? kept(recompute_) : m.kept_separate;
  m.kept_blocks = kept(Recompute{RecomputeMode::blocks, {}});
  for (std::size_t i = layers.first; i < layers.last; ++i) {
    const std::int64_t bytes = layers_[i]->temporary_elements(input_shapes_[i]) * 4;
    m.temporaries_separate += bytes;
    m.temporaries_shared = std::max(m.temporaries_shared, bytes);
    if (compiled_ && i >= workspace_.first && i < workspace_.last)
      m.layer_buffers += layers_[i]->buffer_bytes();
  }
  return m;
}

}  // namespace tessera
