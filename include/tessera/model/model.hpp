// A model: a directed acyclic graph of layers, each reading the outputs of
// earlier layers by name ("input" is the model input; by default a layer
// reads the previous one, so a plain sequence needs no names). A workspace
// owns every activation and activation gradient for the largest batch, and
// parameter and state stores hold the weights. After compile(), forward and
// backward allocate no device memory; a smaller batch (the last of an epoch)
// uses the leading rows of the same buffers.
//
// A training step comes in pieces: zero_gradients(), then forward and
// backward for each micro-batch (parameter gradients add up), then the
// optimizer. forward and backward take a range of layers, so a stage of a
// pipeline, or a profiler, can run part of the model.
#pragma once

#include <tessera/layers/layer.hpp>
#include <tessera/model/memory.hpp>
#include <tessera/model/parameters.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

// Layers [first, last) in declaration order; the default is every layer.
struct LayerRange {
  std::size_t first = 0;
  std::size_t last = static_cast<std::size_t>(-1);  // clamped to the layer count
};

class Model {
 public:
  // sample_shape: one sample without the batch dimension, e.g. {784}.
  explicit Model(const Shape& sample_shape);

  Model& add(std::unique_ptr<Layer> layer);
  template <class L, class... Args>
  Model& add(Args&&... args) {
    return add(std::make_unique<L>(std::forward<Args>(args)...));
  }

  // The format of the activations and their gradients (every layer's
  // output and its gradient): fp32 (the default), or bf16 or fp16, which
  // every layer must compute in (Layer::computes_in). The model's input and
  // the last layer's output and its gradient, which the data and the loss
  // exchange with it, are float in every format: forward() rounds the input
  // to the format and returns the output widened to float, and backward()
  // rounds output_gradient(). So are the first input and the last output of
  // a workspace compiled for a range of layers (a pipeline stage's, which it
  // receives and sends): forward() of a range that starts the workspace
  // rounds its float input, and backward() widens its input gradient. A
  // range run in 16 bits ends where the workspace does. Parameters, their
  // gradients and the state stay float. Before infer() and compile().
  Model& set_compute(FloatFormat format);
  FloatFormat compute() const { return compute_; }

  // Starts the weights of `layer` (every parameter drawn from its fans, e.g.
  // Dense and Conv2D weights, not biases) from `init` instead of the
  // layer's default. Before compile().
  Model& set_initializer(const std::string& layer, Init init);

  // The execution space instance every kernel of this model runs on (its
  // initialisation, forward and backward: Model fills StepContext::exec,
  // and the zeroing of gradients), and the trainer's, the averager's and
  // the optimizer's for it: on a GPU a stream, so that a pipeline stage's
  // model runs on its own. The space's default instance unless set; set
  // before compile() for the initialisation to run on it, and before a
  // Trainer is made (its gradient averager takes it then).
  Model& set_execution_space(const ExecSpace& exec);
  const ExecSpace& execution_space() const { return exec_; }

  // How compile() places the layers' outputs and their gradients: each in
  // its own memory (BufferPlan::separate, the default), or sharing one
  // buffer by liveness (BufferPlan::shared: a value is alive from its
  // layer's forward to the last forward or backward that reads it, a
  // gradient from the backward of the last layer that reads its node to
  // that of the layer that writes it; the input, the output and a
  // workspace's boundaries keep their own), with all layers taking their
  // temporaries (Layer::temporary_elements) from one memory. Losses,
  // gradients and weights are the same bits either way. Under `shared`,
  // activation() and activation_gradient() of an inner node hold its value
  // only while it is alive, and zero_activation_gradients() is refused.
  // Before compile().
  Model& set_buffer_plan(BufferPlan plan);
  BufferPlan buffer_plan() const { return plan_; }
  // Which outputs a training step keeps from forward to backward; backward
  // computes the others again, segment by segment (see Recompute). Needs
  // BufferPlan::shared, which lets the recomputed values share memory.
  // Before compile().
  Model& set_recompute(Recompute recompute);
  const Recompute& recompute() const { return recompute_; }

  // Shape inference and the parameter layout for batches of up to max_batch
  // samples, allocating nothing: shapes, costs and summary() are available
  // after it, so a pipeline can plan its stages before compiling. compile()
  // infers when this has not been called.
  void infer(std::int64_t max_batch);
  bool inferred() const { return inferred_; }
  // Allocation of the parameters and the workspace; parameters are
  // initialised from seed. The workspace holds what the layers of
  // `workspace` need (their inputs, outputs, output gradients and scratch)
  // and the model's input buffer when the range starts at the first layer or
  // ends with the last (whose loss reads the labels loaded with the input):
  // a pipeline stage allocates its own layers' share. forward() and
  // backward() run layers inside it only.
  void compile(std::int64_t max_batch, std::uint64_t seed, LayerRange workspace = {});
  // Compiles a replica of `weights` (a compiled model of the same layers):
  // its own workspace, with the parameters, their gradients and the state
  // of `weights`, shared, not copied. A pipeline stage keeps one replica per
  // micro-batch in flight; their backward passes add to the same gradients.
  void compile(std::int64_t max_batch, const Model& weights, LayerRange workspace = {});
  bool compiled() const { return compiled_; }
  // The layers the workspace serves (every layer unless compiled for a range).
  LayerRange workspace() const { return workspace_; }
  // Bytes of the activations and activation gradients a workspace for
  // `layers` holds (the layers' own scratch not included), after infer():
  // in a 16-bit format, the float input and output (the model's and the
  // range's) and their 16-bit copies included.
  std::int64_t activation_bytes(LayerRange layers = {}) const;
  // The same bytes in parts, the gradients as either buffer plan places
  // them, and the layers' own buffers (after compile(); 0 before, and for
  // layers outside the workspace).
  ActivationMemory activation_memory(LayerRange layers = {}) const;

  // The model's input buffer for `batch` samples: fill it, then forward().
  Tensor<float> input(std::int64_t batch) const;
  // Runs the layers of `range` in order; returns the output of its last
  // layer for `batch` samples.
  Tensor<float> forward(std::int64_t batch, const StepContext& ctx, LayerRange range = {});
  // Gradient of the loss with respect to the output, to fill before backward().
  Tensor<float> output_gradient(std::int64_t batch) const;
  // Zeroes the parameter gradients: once per optimizer step, before the
  // backward passes whose gradients it sums.
  void zero_gradients();
  // Back-propagates through the layers of `range` in reverse order, adding
  // to the parameter gradients. Every activation gradient but
  // output_gradient() is zeroed in the pass just before the first layer
  // that adds to it (its last consumer), so a pass may be split into ranges
  // run from the last layer down: a range continues the pass with the
  // gradients the layers above left. A pipeline stage that receives the
  // gradient of its output from elsewhere writes it into
  // activation_gradient() first.
  void backward(std::int64_t batch, const StepContext& ctx, LayerRange range = {});

  // Calls around every layer of every forward and backward pass, with the
  // layer's index: before its forward is launched (a parameter gather in
  // flight waits there), once it has been launched, and the same for its
  // backward (a gradient exchange starts the buckets the layer completed).
  // Launched is not finished: a hook that reads the layer's results or
  // times it fences the execution space first. Empty members are skipped.
  // With recomputation a segment's forward passes run again between its
  // last layer's before_backward and after_backward, without hooks of
  // their own.
  struct LayerHooks {
    std::function<void(std::size_t)> before_forward, after_forward;
    std::function<void(std::size_t)> before_backward, after_backward;
  };
  // Adds hooks that run after those added before; returns the handle that
  // removes them. The hooks' owner removes them before it goes.
  std::size_t add_hooks(LayerHooks hooks);
  void remove_hooks(std::size_t handle);
  // Zeroes every activation gradient but output_gradient() at once; a
  // backward pass needs no call to it. Not under BufferPlan::shared.
  void zero_activation_gradients();
  // Output and output gradient of layer i (node i + 1), for `batch` samples;
  // in a 16-bit format only the float ones (the last layer's, and the
  // workspace's first input and last output) are available.
  Tensor<float> activation(std::size_t layer, std::int64_t batch) const;
  Tensor<float> activation_gradient(std::size_t layer, std::int64_t batch) const;

  ParameterStore& parameters() { return parameters_; }
  const ParameterStore& parameters() const { return parameters_; }
  // Non-trainable state (running statistics); no gradients.
  ParameterStore& state() { return state_; }
  const ParameterStore& state() const { return state_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // Per-sample input shape, as constructed.
  const Shape& input_shape() const { return sample_shape_; }
  // Per-sample output shape of layer i (after infer).
  Shape layer_output_shape(std::size_t i) const;
  // Node indices (0 = input, i + 1 = layer i) that layer i reads.
  const std::vector<std::size_t>& layer_inputs(std::size_t i) const { return layer_inputs_.at(i); }
  Shape output_shape() const;
  std::int64_t flops_per_sample() const;
  // The shapes of layer i's inputs for `batch` samples.
  Shapes layer_input_shapes(std::size_t i, std::int64_t batch) const;
  // Layer i's work per sample (forward and backward, input gradient included).
  LayerCost layer_cost(std::size_t i) const;
  std::int64_t max_batch() const { return max_batch_; }
  // Whether layer i's backward computes an input gradient: it reads
  // another layer's output, not the model input.
  bool computes_input_gradient(std::size_t i) const;

  // Kernels (Layer::kernel_options). Each layer with options at
  // max_batch() (one or more) and its options, by layer index; after infer
  // or compile.
  std::vector<std::pair<std::size_t, KernelOptions>> kernel_options() const;
  // Those with a choice: two or more options.
  std::vector<std::pair<std::size_t, KernelOptions>> kernel_choices() const;
  // (name, option) of each layer with a choice, in layer order: the option
  // it runs (Layer::kernel_option).
  KernelTable kernels() const;
  // Each layer the table names runs its option; throws naming the layer,
  // the option and the layer's options where one is not among them, or
  // names a layer without a choice. After infer or compile.
  void set_kernels(const KernelTable& table);

  // A table of layers, output shapes and parameter counts.
  std::string summary() const;

 private:
  void compile_layers(std::int64_t max_batch, const Model* weights, std::uint64_t seed,
                      LayerRange workspace);
  // The activations and their gradients of one format: node n's are empty
  // where the workspace does not hold it (and, in a 16-bit format, the
  // float nodes hold only the input and the output, the model's and the
  // workspace's).
  template <class T>
  struct Nodes {
    std::vector<Tensor<T>> values;
    std::vector<Tensor<T>> grads;  // slices of `buffer`; [0] empty
    // The gradients (under BufferPlan::shared the values too), the model
    // output's gradient last.
    Vector<T> buffer;
  };
  // Where each node's value and gradient lie in a format's buffer (-1: not
  // in it; a kept value then has memory of its own) and the buffer's
  // elements, for the nodes `keep` of a workspace for `layers`; align: in
  // elements, for `shared`.
  struct NodeLayout {
    std::vector<std::int64_t> value, grad;
    std::int64_t elements = 0;
  };
  NodeLayout node_layout(const std::vector<bool>& keep, BufferPlan plan, LayerRange layers,
                         std::int64_t align, const Recompute& recompute) const;
  // The liveness of the nodes `keep`: node k's value at 2 k, its gradient
  // at 2 k + 1 (the model output's left out; a gradient in another's place,
  // gradient_places' `place`, empty and that one's life extended).
  std::vector<LiveBuffer> node_lives(const std::vector<bool>& keep, LayerRange layers,
                                     const Recompute& recompute,
                                     const std::vector<std::size_t>& place) const;
  // For each node, the node whose gradient memory its gradient takes under
  // BufferPlan::shared: its own, or (Layer::backward_in_place) that of the
  // output gradient of the layer reading it, where that layer alone reads
  // it, it is that layer's first such input, and neither node is a
  // boundary of the model or of the workspace for `layers`.
  std::vector<std::size_t> gradient_places(const std::vector<bool>& keep, LayerRange layers) const;
  // The nodes a format keeps: `held`, and in a 16-bit model's float nodes
  // (boundary_only) only the model's and the workspace's input and output.
  std::vector<bool> kept_nodes(const std::vector<bool>& held, bool boundary_only,
                               LayerRange layers) const;
  // For each layer, the first layer of its recomputation segment in a
  // workspace for `layers` (the layer itself without recomputation).
  std::vector<std::size_t> segments(LayerRange layers, const Recompute& recompute) const;
  // The steps of a training step: layer i's forward is step i, its
  // forward run again again[i] (-1: none), its backward back[i].
  struct Timeline {
    std::vector<std::int64_t> again, back;
    std::int64_t steps = 0;
  };
  Timeline timeline(LayerRange layers, const Recompute& recompute) const;
  // Offsets, in one float memory of `pool` elements, of what the layers
  // run again keep for backward (Layer::recomputed_elements); -1 for the
  // other layers, which keep theirs in their own memory.
  std::vector<std::int64_t> recomputed_layout(LayerRange layers, const Recompute& recompute,
                                              std::int64_t& pool) const;
  // Under BufferPlan::shared: the layers' temporaries in one memory, and
  // what the layers run again keep for backward in another (before they
  // allocate).
  void share_layer_memory(LayerRange workspace);
  template <class T>
  Nodes<T>& nodes();
  template <class T>
  void allocate_nodes(const std::vector<bool>& held, bool boundary_only);
  template <class T>
  TensorsOf<T> gather(const std::vector<Tensor<T>>& nodes, std::size_t layer,
                      std::int64_t batch) const;
  // The float input for layer `layer` when it reads token ids in T = bf16
  // or fp16, else nothing.
  template <class T>
  Tensors token_ids(std::size_t layer, std::int64_t batch) const;
  // Whether a layer of `layers` reads the input in the compute format (not
  // as token ids), so that a 16-bit workspace holds a copy of it.
  bool needs_16bit_input(LayerRange layers) const;
  template <class T>
  void run_forward(std::int64_t batch, const StepContext& ctx, LayerRange range);
  template <class T>
  void run_backward(std::int64_t batch, const StepContext& ctx, LayerRange range);
  // Runs member `which` of every hook set for `layer`.
  void call_hooks(std::function<void(std::size_t)> LayerHooks::*which, std::size_t layer) const;
  // `range` clamped to the layers; it must lie inside the workspace, and in
  // a 16-bit format end where the workspace does (`sixteen_bit` says why).
  LayerRange clamp(LayerRange range, const char* fn, const char* sixteen_bit) const;
  // Nodes a workspace for `layers` holds: the outputs of its layers and what
  // they read, and the input when a batch is loaded into this model.
  std::vector<bool> held_nodes(LayerRange layers) const;
  // Node n's activation: refused when the workspace does not hold it.
  const Tensor<float>& node(const std::vector<Tensor<float>>& nodes, std::size_t n,
                            const char* fn) const;
  // The slot of the parameter `spec` shares (ParameterSpec::tied_layer).
  std::size_t tied_slot(std::size_t layer, const ParameterSpec& spec) const;

  Shape sample_shape_;
  std::vector<std::unique_ptr<Layer>> layers_;
  // Node 0 is the input, node i + 1 the output of layer i.
  std::vector<Shape> sample_shapes_;
  std::vector<std::vector<std::size_t>> layer_inputs_;  // node indices per layer
  // Per layer: the nodes whose gradient backward zeroes just before it
  // (after compile() under BufferPlan::shared, not those whose gradient
  // takes its output gradient's place: gradient_places).
  std::vector<std::vector<std::size_t>> zero_before_;
  // Per layer: whether its backward writes its input gradients whole
  // (StepContext::write_input_gradients), which zero_before_ then leaves out.
  std::vector<char> writes_gradients_;
  // Per node: the last layer that reads it (node k's producer, k - 1, when
  // none does); node 0's is unused.
  std::vector<std::size_t> last_consumer_;
  std::vector<Shapes> input_shapes_;  // per layer, for max_batch
  std::vector<std::vector<std::size_t>> param_slots_, state_slots_;
  FloatFormat compute_ = FloatFormat::fp32;
  Nodes<float> f32_;
  Nodes<bf16> bf16_;
  Nodes<fp16> fp16_;
  // Float scratch the layers share in 16-bit formats.
  kernels::MixedGemmWorkspace<> scratch_;
  // The layers' temporaries under BufferPlan::shared (empty otherwise), and
  // under recomputation what the layers run again keep for backward.
  Vector<float> temporaries_, recomputed_;
  ParameterStore parameters_;
  ParameterStore state_{false};
  ExecSpace exec_;  // set_execution_space()
  BufferPlan plan_ = BufferPlan::separate;
  Recompute recompute_;
  std::vector<std::size_t> segment_start_;  // segments(workspace_), after compile()
  std::vector<std::pair<std::string, Init>> initializers_;
  std::int64_t max_batch_ = 0;
  LayerRange workspace_;
  std::vector<std::pair<std::size_t, LayerHooks>> hooks_;  // with their handles
  std::size_t next_hooks_ = 0;
  bool inferred_ = false;
  bool compiled_ = false;
};

}  // namespace tessera
