// Model graph: name resolution, shape inference, workspace, forward and backward.
#include <tessera/core/profiling.hpp>
#include <tessera/kernels/tensor_ops.hpp>
#include <tessera/model/model.hpp>

#include <algorithm>
#include <map>

namespace tessera {

template <>
Model::Nodes<float>& Model::nodes<float>() {
  return f32_;
}
template <>
Model::Nodes<bf16>& Model::nodes<bf16>() {
  return bf16_;
}
template <>
Model::Nodes<fp16>& Model::nodes<fp16>() {
  return fp16_;
}

Model::Model(const Shape& sample_shape) : sample_shape_(sample_shape) {
  TESSERA_REQUIRE(
      sample_shape.rank() >= 1 && sample_shape.rank() < Shape::max_rank && sample_shape.numel() > 0,
      "tessera::Model: input shape " << sample_shape << " must have 1 to 3 positive dimensions");
}

Model& Model::add(std::unique_ptr<Layer> layer) {
  TESSERA_REQUIRE(!inferred_, "tessera::Model::add: layer '"
                                  << layer->name() << "' added after infer() or compile()");
  layers_.push_back(std::move(layer));
  return *this;
}

Model& Model::set_compute(FloatFormat format) {
  TESSERA_REQUIRE(!inferred_, "tessera::Model::set_compute: after infer() or compile()");
  compute_ = format;
  return *this;
}

Model& Model::set_execution_space(const ExecSpace& exec) {
  exec_ = exec;
  return *this;
}

Model& Model::set_buffer_plan(BufferPlan plan) {
  TESSERA_REQUIRE(!compiled_, "tessera::Model::set_buffer_plan: after compile()");
  plan_ = plan;
  return *this;
}

Model& Model::set_recompute(Recompute recompute) {
  TESSERA_REQUIRE(!compiled_, "tessera::Model::set_recompute: after compile()");
  recompute_ = std::move(recompute);
  return *this;
}

Model& Model::set_initializer(const std::string& layer, Init init) {
  TESSERA_REQUIRE(!inferred_, "tessera::Model::set_initializer: layer '"
                                  << layer << "' after infer() or compile()");
  TESSERA_REQUIRE(is_fan_based(init), "tessera::Model::set_initializer: layer '"
                                          << layer << "': '" << init_name(init)
                                          << "' is not a weight initializer");
  initializers_.emplace_back(layer, init);
  return *this;
}

void Model::compile(std::int64_t max_batch, std::uint64_t seed, LayerRange workspace) {
  compile_layers(max_batch, nullptr, seed, workspace);
}

void Model::compile(std::int64_t max_batch, const Model& weights, LayerRange workspace) {
  TESSERA_REQUIRE(weights.compiled_,
                  "tessera::Model::compile: the model to share weights with is not compiled");
  compile_layers(max_batch, &weights, 0, workspace);
}

namespace {
// The nodes layer i (node i + 1) reads: the nodes its input names name
// (node_of: the input and the layers declared before it), or the previous
// node when it names none.
std::vector<std::size_t> input_nodes(const Layer& layer, std::size_t i,
                                     const std::map<std::string, std::size_t>& node_of) {
  if (layer.input_names().empty()) return {i};
  std::vector<std::size_t> inputs;
  for (const auto& name : layer.input_names()) {
    const auto found = node_of.find(name);
    TESSERA_REQUIRE(found != node_of.end(),
                    "tessera::Model::compile: layer '"
                        << layer.name() << "' reads '" << name
                        << "', which is not 'input' or a layer declared before it");
    inputs.push_back(found->second);
  }
  return inputs;
}

// For each node, the last layer that reads it (node k's producer, layer
// k - 1, when none does). layer_inputs: each layer's input nodes (node 0 is
// the model input, node i + 1 layer i).
std::vector<std::size_t> last_consumers(const std::vector<std::vector<std::size_t>>& layer_inputs) {
  const std::size_t nodes = layer_inputs.size() + 1;
  std::vector<std::size_t> last_consumer(nodes, 0);
  for (std::size_t k = 1; k < nodes; ++k) last_consumer[k] = k - 1;
  for (std::size_t i = 0; i < layer_inputs.size(); ++i)
    for (auto node : layer_inputs[i]) last_consumer[node] = std::max(last_consumer[node], i);
  return last_consumer;
}

// For each layer, the nodes whose gradients backward zeroes just before
// it: node k's just before the first layer that adds to it, its last
// consumer (or, with none, before its own layer reads it as the output
// gradient), while those bytes are still in cache.
std::vector<std::vector<std::size_t>> gradient_zeroing(
    const std::vector<std::size_t>& last_consumer) {
  const std::size_t nodes = last_consumer.size();
  std::vector<std::vector<std::size_t>> zero_before(nodes - 1);
  for (std::size_t k = 1; k + 1 < nodes; ++k) zero_before[last_consumer[k]].push_back(k);
  return zero_before;
}

// Per layer, whether its backward writes its input gradients whole
// (StepContext::write_input_gradients): the layer can, and it is the first
// backward to reach every one of them (each is zeroed just before it, none
// read twice). Those gradients are then left out of zero_before.
std::vector<char> gradient_writers(const std::vector<std::unique_ptr<Layer>>& layers,
                                   const std::vector<std::vector<std::size_t>>& layer_inputs,
                                   std::vector<std::vector<std::size_t>>& zero_before) {
  std::vector<char> writes(layers.size(), 0);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i]->writes_input_gradients()) continue;
    const auto& inputs = layer_inputs[i];
    auto& zeroed = zero_before[i];
    const auto first_reached = [&](std::size_t k) {
      return std::count(inputs.begin(), inputs.end(), k) == 1 &&
             std::find(zeroed.begin(), zeroed.end(), k) != zeroed.end();
    };
    if (inputs.empty() || !std::all_of(inputs.begin(), inputs.end(), first_reached)) continue;
    writes[i] = 1;
    zeroed.erase(std::remove_if(zeroed.begin(), zeroed.end(),
                                [&](std::size_t k) {
                                  return std::find(inputs.begin(), inputs.end(), k) != inputs.end();
                                }),
                 zeroed.end());
  }
  return writes;
}
}  // namespace

void Model::infer(std::int64_t max_batch) {
  ScopedRegion region("tessera::Model::infer");
  TESSERA_REQUIRE(!inferred_, "tessera::Model::infer: the shapes are inferred already (for batch "
                                  << max_batch_ << ")");
  TESSERA_REQUIRE(!layers_.empty(), "tessera::Model::compile: the model has no layers");
  TESSERA_REQUIRE(max_batch > 0,
                  "tessera::Model::compile: batch size must be positive, got " << max_batch);
  max_batch_ = max_batch;

  // Resolve names to nodes and infer shapes, in declaration order: a layer
  // may only read the input and layers declared before it, so the graph is
  // acyclic and declaration order is a valid execution order.
  std::map<std::string, std::size_t> node_of{{"input", 0}};
  sample_shapes_ = {sample_shape_};
  input_shapes_.assign(layers_.size(), {});
  param_slots_.assign(layers_.size(), {});
  state_slots_.assign(layers_.size(), {});
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& layer = *layers_[i];
    TESSERA_REQUIRE(node_of.count(layer.name()) == 0,
                    "tessera::Model::compile: layer name '"
                        << layer.name() << "' is used twice (or is the reserved name 'input')");
    const std::vector<std::size_t> inputs = input_nodes(layer, i, node_of);
    if (compute_ != FloatFormat::fp32) {
      try {
        layer.set_compute(compute_);
      } catch (const Error& e) {
        throw LayerError(i, e.what());
      }
      // Only the input is float in 16 bits.
      if (layer.reads_token_ids() && inputs != std::vector<std::size_t>{0})
        throw LayerError(i, "tessera::Model::compile: layer '" + layer.name() +
                                "' reads token ids, which in " + float_format_name(compute_) +
                                " come from the model input only; give it inputs = [\"input\"]");
    }
    const int arity = layer.arity();
    TESSERA_REQUIRE(
        arity < 0 ? inputs.size() >= 2 : inputs.size() == static_cast<std::size_t>(arity),
        "tessera::Model::compile: layer '"
            << layer.name() << "' (" << layer.type() << ") takes "
            << (arity < 0 ? std::string("two or more") : std::to_string(arity)) << " inputs, got "
            << inputs.size());
    for (auto node : inputs)
      input_shapes_[i].push_back(with_batch(sample_shapes_[node], max_batch));
    Shape out;
    try {
      out = layer.output_shape(input_shapes_[i]);
    } catch (const LayerError&) {
      throw;
    } catch (const Error& e) {
      throw LayerError(i, e.what());
    }
    TESSERA_REQUIRE(out.rank() >= 2 && out[0] == max_batch,
                    "tessera::Model::compile: layer '" << layer.name() << "' returned shape " << out
                                                       << " for batch " << max_batch);
    sample_shapes_.push_back(drop_batch(out));
    layer_inputs_.push_back(inputs);
    node_of[layer.name()] = i + 1;
    for (auto spec : layer.parameter_specs(input_shapes_[i])) {
      if (!spec.tied_layer.empty()) {
        param_slots_[i].push_back(tied_slot(i, spec));
        continue;
      }
      for (const auto& [target, init] : initializers_)
        if (target == layer.name() && is_fan_based(spec.init)) spec.init = init;
      param_slots_[i].push_back(parameters_.add(layer.name(), spec));
    }
    for (const auto& spec : layer.state_specs(input_shapes_[i]))
      state_slots_[i].push_back(state_.add(layer.name(), spec));
  }

  for (const auto& [target, init] : initializers_)
    TESSERA_REQUIRE(node_of.count(target) && target != "input",
                    "tessera::Model::compile: an initializer names layer '"
                        << target << "', which is not in the model");
  last_consumer_ = last_consumers(layer_inputs_);
  zero_before_ = gradient_zeroing(last_consumer_);
  inferred_ = true;
}

void Model::compile_layers(std::int64_t max_batch, const Model* weights, std::uint64_t seed,
                           LayerRange workspace) {
  ScopedRegion region("tessera::Model::compile");
  TESSERA_REQUIRE(!compiled_, "tessera::Model::compile: called twice");
  if (!inferred_) infer(max_batch);
  TESSERA_REQUIRE(max_batch == max_batch_, "tessera::Model::compile: batch size "
                                               << max_batch << " after infer() for " << max_batch_
                                               << "; infer and compile for the same batch");
  const std::size_t n_layers = layers_.size();
  if (workspace.last > n_layers) workspace.last = n_layers;
  TESSERA_REQUIRE(workspace.first < workspace.last,
                  "tessera::Model::compile: workspace for layers ["
                      << workspace.first << ", " << workspace.last << ") of a model of " << n_layers
                      << " layers is empty");
  workspace_ = workspace;

  if (weights != nullptr) {
    // A replica: the same table of weights, then the other model's buffers.
    const auto same = [](const ParameterStore& a, const ParameterStore& b) {
      if (a.count() != b.count() || a.entries().size() != b.entries().size()) return false;
      for (std::size_t k = 0; k < a.entries().size(); ++k) {
        const ParameterEntry &x = a.entries()[k], &y = b.entries()[k];
        if (x.layer != y.layer || x.spec.name != y.spec.name || x.spec.shape != y.spec.shape ||
            x.offset != y.offset)
          return false;
      }
      return true;
    };
    TESSERA_REQUIRE(same(parameters_, weights->parameters_) && same(state_, weights->state_),
                    "tessera::Model::compile: a replica must have the layers and parameters of "
                    "the model it shares weights with; build both from the same description");
    parameters_ = weights->parameters_;
    state_ = weights->state_;
  } else {
    parameters_.allocate();
    state_.allocate();
  }
  const auto resident = [&](std::size_t i) { return i >= workspace.first && i < workspace.last; };
  TESSERA_REQUIRE(recompute_.mode == RecomputeMode::none || plan_ == BufferPlan::shared,
                  "tessera::Model::compile: recomputation ("
                      << recompute_modes.name(recompute_.mode)
                      << ") frees memory only when the values share it; "
                         "set_buffer_plan(BufferPlan::shared)");
  segment_start_ = segments(workspace, recompute_);
  if (plan_ == BufferPlan::shared) {
    share_layer_memory(workspace);
    // A gradient in its reader's output gradient's place (gradient_places)
    // is written, not added to, by that reader's backward: not zeroed.
    const std::vector<std::size_t> place = gradient_places(held_nodes(workspace), workspace);
    for (auto& nodes : zero_before_)
      nodes.erase(
          std::remove_if(nodes.begin(), nodes.end(), [&](std::size_t k) { return place[k] != k; }),
          nodes.end());
  }
  writes_gradients_ = gradient_writers(layers_, layer_inputs_, zero_before_);
  for (std::size_t i = 0; i < n_layers; ++i) {
    Tensors values, grads, state;
    for (auto slot : param_slots_[i]) {
      values.push_back(parameters_.value(slot));
      grads.push_back(parameters_.gradient(slot));
    }
    for (auto slot : state_slots_[i]) state.push_back(state_.value(slot));
    layers_[i]->bind_parameters(values, grads);
    layers_[i]->bind_state(state);
    if (resident(i)) layers_[i]->allocate(input_shapes_[i]);
  }
  if (weights == nullptr) {
    parameters_.initialize(exec_, seed);
    state_.initialize(exec_, seed);
  }

  const std::vector<bool> held = held_nodes(workspace);
  allocate_nodes<float>(held, compute_ != FloatFormat::fp32);
  std::vector<bool> held16 = held;
  held16[0] = held[0] && needs_16bit_input(workspace);
  if (compute_ == FloatFormat::bf16) allocate_nodes<bf16>(held16, false);
  if (compute_ == FloatFormat::fp16) allocate_nodes<fp16>(held16, false);
  compiled_ = true;
}

template <class T>
void Model::allocate_nodes(const std::vector<bool>& held, bool boundary_only) {
  Nodes<T>& n = nodes<T>();
  const std::size_t last = sample_shapes_.size() - 1;
  // boundary_only: the float input and output of a model computing in 16
  // bits, and of its workspace (a pipeline stage's, which it exchanges).
  const std::vector<bool> keep = kept_nodes(held, boundary_only, workspace_);
  const BufferPlan plan = boundary_only ? BufferPlan::separate : plan_;
  const NodeLayout layout = node_layout(
      keep, plan, workspace_, std::int64_t{64} / static_cast<std::int64_t>(sizeof(T)), recompute_);
  const std::string format = float_format_name(format_of<T>());
  n.buffer = Vector<T>(
      (plan == BufferPlan::shared ? "tessera::activations(" : "tessera::activation_grads(") +
          format + ")",
      layout.elements);
  const auto slice = [&](std::int64_t offset, const Shape& s) {
    return Tensor<T>(Kokkos::subview(n.buffer, std::pair<std::int64_t, std::int64_t>(
                                                   offset, offset + s.numel())),
                     s);
  };
  for (std::size_t k = 0; k <= last; ++k) {
    if (!keep[k]) {
      n.values.emplace_back();
      n.grads.emplace_back();
      continue;
    }
    const Shape s = with_batch(sample_shapes_[k], max_batch_);
    if (layout.value[k] >= 0)
      n.values.push_back(slice(layout.value[k], s));
    else
      n.values.emplace_back("tessera::activation[" + std::to_string(k) + "](" + format + ")", s);
    // nobody needs the input's gradient
    n.grads.push_back(k == 0 ? Tensor<T>() : slice(layout.grad[k], s));
  }
}

std::size_t Model::tied_slot(std::size_t layer, const ParameterSpec& spec) const {
  const std::string& owner = spec.tied_layer;
  const std::string what = "tessera::Model::compile: layer '" + layers_[layer]->name() +
                           "' ties its " + spec.name + " to layer '" + owner + "'";
  const auto& entries = parameters_.entries();
  for (std::size_t k = 0; k < entries.size(); ++k) {
    if (entries[k].layer != owner || entries[k].spec.name != spec.name) continue;
    if (entries[k].spec.shape != spec.shape)
      throw LayerError(layer, what + ", whose " + spec.name + " is " +
                                  to_string(entries[k].spec.shape) + ", not " +
                                  to_string(spec.shape));
    return k;
  }
  throw LayerError(layer, what + ", which is not a layer declared before it with a parameter '" +
                              spec.name + "'");
}

const Tensor<float>& Model::node(const std::vector<Tensor<float>>& nodes, std::size_t n,
                                 const char* fn) const {
  TESSERA_REQUIRE(compiled_, fn << ": compile() the model first");
  TESSERA_REQUIRE(
      nodes[n].numel() > 0,
      fn << ": "
         << (n == 0 ? std::string("the input") : "layer '" + layers_[n - 1]->name() + "''s output")
         << " is outside the workspace, compiled for layers [" << workspace_.first << ", "
         << workspace_.last << ") of " << layers_.size()
         << "; compile the model for a range that uses it");
  return nodes[n];
}

Tensor<float> Model::input(std::int64_t batch) const {
  return node(f32_.values, 0, "tessera::Model::input").leading(batch);
}

Tensor<float> Model::output_gradient(std::int64_t batch) const {
  return node(f32_.grads, layers_.size(), "tessera::Model::output_gradient").leading(batch);
}

template <class T>
TensorsOf<T> Model::gather(const std::vector<Tensor<T>>& nodes, std::size_t layer,
                           std::int64_t batch) const {
  TensorsOf<T> out;
  out.reserve(layer_inputs_[layer].size());
  for (auto node : layer_inputs_[layer])
    out.push_back(nodes[node].numel() == 0 ? Tensor<T>() : nodes[node].leading(batch));
  return out;
}

template <class T>
Tensors Model::token_ids(std::size_t layer, std::int64_t batch) const {
  if (std::is_same<T, float>::value || !layers_[layer]->reads_token_ids()) return {};
  return gather(f32_.values, layer, batch);
}

LayerRange Model::clamp(LayerRange range, const char* fn, const char* sixteen_bit) const {
  TESSERA_REQUIRE(compiled_, fn << ": compile() the model first");
  if (range.last > layers_.size()) range.last = layers_.size();
  TESSERA_REQUIRE(range.first < range.last, fn << ": layer range [" << range.first << ", "
                                               << range.last << ") of a model of " << layers_.size()
                                               << " layers is empty");
  TESSERA_REQUIRE(range.first >= workspace_.first && range.last <= workspace_.last,
                  fn << ": layers [" << range.first << ", " << range.last
                     << ") lie outside the workspace, compiled for layers [" << workspace_.first
                     << ", " << workspace_.last << ")");
  TESSERA_REQUIRE(compute_ == FloatFormat::fp32 || range.last == workspace_.last,
                  fn << ": layers [" << range.first << ", " << range.last
                     << ") end before the workspace's last layer (" << workspace_.last << "); in "
                     << float_format_name(compute_) << " " << sixteen_bit);
  return range;
}

namespace {
// A layer's forward and backward in the element type T.
// ids: the float input, for a layer that reads token ids in 16 bits.
template <class T>
void layer_forward(Layer& layer, const TensorsOf<T>& x, const Tensors& ids, const Tensor<T>& y,
                   const StepContext& ctx) {
  if constexpr (std::is_same<T, float>::value)
    layer.forward(x, y, ctx);
  else if (layer.reads_token_ids())
    layer.forward_ids16(ids, y, ctx);
  else
    layer.forward16(x, y, ctx);
}
template <class T>
void layer_backward(Layer& layer, const TensorsOf<T>& x, const Tensors& ids, const Tensor<T>& y,
                    const Tensor<T>& dy, const TensorsOf<T>& dx, const StepContext& ctx) {
  if constexpr (std::is_same<T, float>::value)
    layer.backward(x, y, dy, dx, ctx);
  else if (layer.reads_token_ids())
    layer.backward_ids16(ids, dy, ctx);
  else
    layer.backward16(x, y, dy, dx, ctx);
}
}  // namespace

template <class T>
void Model::run_forward(std::int64_t batch, const StepContext& ctx, LayerRange range) {
  Nodes<T>& n = nodes<T>();
  const ExecSpace& exec = ctx.exec;
  constexpr bool narrow = !std::is_same<T, float>::value;
  // The workspace's float input (the model's, or a stage's received
  // activations) rounded to T.
  const std::size_t first = range.first;
  if (narrow && first == workspace_.first && n.values[first].numel() > 0)
    kernels::copy_into(exec, f32_.values[first].leading(batch).flat(),
                       n.values[first].leading(batch).flat(), false);
  for (std::size_t i = range.first; i < range.last; ++i) {
    call_hooks(&LayerHooks::before_forward, i);
    layer_forward(*layers_[i], gather(n.values, i, batch), token_ids<T>(i, batch),
                  n.values[i + 1].leading(batch), ctx);
    call_hooks(&LayerHooks::after_forward, i);
  }
  if (narrow)
    kernels::copy_into(exec, n.values[range.last].leading(batch).flat(),
                       f32_.values[range.last].leading(batch).flat(), false);
}

Tensor<float> Model::forward(std::int64_t batch, const StepContext& ctx, LayerRange range) {
  ScopedRegion region("tessera::Model::forward");
  range = clamp(range, "tessera::Model::forward",
                "only a range ending with the last layer returns a float output");
  StepContext c = ctx;
  c.exec = exec_;
  c.scratch = &scratch_;
  with_format(compute_, [&](auto t) { run_forward<decltype(t)>(batch, c, range); });
  return f32_.values[range.last].leading(batch);
}

void Model::zero_gradients() { parameters_.zero_gradients(exec_); }

void Model::zero_activation_gradients() {
  TESSERA_REQUIRE(compiled_,
                  "tessera::Model::zero_activation_gradients: compile() the model first");
  TESSERA_REQUIRE(plan_ == BufferPlan::separate,
                  "tessera::Model::zero_activation_gradients: under BufferPlan::shared the "
                  "gradients share memory with the values; backward zeroes each gradient "
                  "before its first writer (set_buffer_plan(BufferPlan::separate) to keep them "
                  "apart)");
  // Every activation gradient but the output's, which the loss fills.
  with_format(compute_, [&](auto t) {
    using T = decltype(t);
    const Nodes<T>& n = nodes<T>();
    const std::int64_t output_elements = n.grads.back().numel();
    Kokkos::deep_copy(exec_,
                      Kokkos::subview(n.buffer, std::pair<std::int64_t, std::int64_t>(
                                                    0, n.buffer.extent(0) - output_elements)),
                      T(0.0f));
  });
}

Tensor<float> Model::activation(std::size_t layer, std::int64_t batch) const {
  TESSERA_REQUIRE(layer < layers_.size(),
                  "tessera::Model::activation: layer " << layer << " of " << layers_.size());
  TESSERA_REQUIRE(compute_ == FloatFormat::fp32 || !compiled_ || f32_.values[layer + 1].numel() > 0,
                  "tessera::Model::activation: layer '"
                      << layers_[layer]->name() << "''s output is stored in "
                      << float_format_name(compute_)
                      << "; only the last layer's and the workspace's boundaries are float");
  return node(f32_.values, layer + 1, "tessera::Model::activation").leading(batch);
}

Tensor<float> Model::activation_gradient(std::size_t layer, std::int64_t batch) const {
  TESSERA_REQUIRE(layer < layers_.size(), "tessera::Model::activation_gradient: layer "
                                              << layer << " of " << layers_.size());
  TESSERA_REQUIRE(compute_ == FloatFormat::fp32 || !compiled_ || f32_.grads[layer + 1].numel() > 0,
                  "tessera::Model::activation_gradient: layer '"
                      << layers_[layer]->name() << "''s output gradient is stored in "
                      << float_format_name(compute_)
                      << "; only the last layer's and the workspace's boundaries are float");
  return node(f32_.grads, layer + 1, "tessera::Model::activation_gradient").leading(batch);
}

template <class T>
void Model::run_backward(std::int64_t batch, const StepContext& ctx, LayerRange range) {
  Nodes<T>& n = nodes<T>();
  constexpr bool narrow = !std::is_same<T, float>::value;
  const ExecSpace& exec = ctx.exec;
  // The float output gradient (the loss's, or a later stage's) rounded to T.
  if (narrow)
    kernels::copy_into(exec, f32_.grads[range.last].leading(batch).flat(),
                       n.grads[range.last].leading(batch).flat(), false);
  StepContext layer_ctx = ctx;  // ctx, with each layer's write_input_gradients
  for (std::size_t i = range.last; i-- > range.first;) {
    call_hooks(&LayerHooks::before_backward, i);
    // A segment's inner values again, before its last layer's backward
    // (and before any gradient the shared plan places in their memory is
    // zeroed).
    const std::size_t start = segment_start_[i];
    if (start < i && (i + 1 == layers_.size() || segment_start_[i + 1] == i + 1)) {
      StepContext again = ctx;
      again.recomputing = true;
      for (std::size_t j = start; j < i; ++j)
        layer_forward(*layers_[j], gather(n.values, j, batch), token_ids<T>(j, batch),
                      n.values[j + 1].leading(batch), again);
    }
    for (auto k : zero_before_[i])
      if (n.grads[k].numel() > 0)
        Kokkos::deep_copy(exec, n.grads[k].leading(batch).flat(), T(0.0f));
    layer_ctx.write_input_gradients = writes_gradients_[i] != 0;
    layer_backward(*layers_[i], gather(n.values, i, batch), token_ids<T>(i, batch),
                   n.values[i + 1].leading(batch), n.grads[i + 1].leading(batch),
                   gather(n.grads, i, batch), layer_ctx);
    call_hooks(&LayerHooks::after_backward, i);
  }
  // A stage's input gradient, widened for the stage before it.
  if (narrow && range.first == workspace_.first && range.first > 0)
    kernels::copy_into(exec, n.grads[range.first].leading(batch).flat(),
                       f32_.grads[range.first].leading(batch).flat(), false);
}

void Model::backward(std::int64_t batch, const StepContext& ctx, LayerRange range) {
  ScopedRegion region("tessera::Model::backward");
  range = clamp(range, "tessera::Model::backward",
                "a backward pass starts from the float output gradient");
  StepContext c = ctx;
  c.exec = exec_;
  c.scratch = &scratch_;
  with_format(compute_, [&](auto t) { run_backward<decltype(t)>(batch, c, range); });
}

std::size_t Model::add_hooks(LayerHooks hooks) {
  hooks_.emplace_back(next_hooks_, std::move(hooks));
  return next_hooks_++;
}

void Model::remove_hooks(std::size_t handle) {
  const auto it =
      std::find_if(hooks_.begin(), hooks_.end(), [&](const auto& h) { return h.first == handle; });
  TESSERA_REQUIRE(it != hooks_.end(), "tessera::Model::remove_hooks: no hooks with handle "
                                          << handle << " (removed already?)");
  hooks_.erase(it);
}

void Model::call_hooks(std::function<void(std::size_t)> LayerHooks::*which,
                       std::size_t layer) const {
  for (const auto& h : hooks_)
    if (h.second.*which) (h.second.*which)(layer);
}

Shape Model::layer_output_shape(std::size_t i) const { return sample_shapes_.at(i + 1); }
Shape Model::output_shape() const { return sample_shapes_.back(); }

}  // namespace tessera
