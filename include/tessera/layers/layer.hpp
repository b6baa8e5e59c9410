// The interface every layer implements: shape inference, the parameters and
// state it needs, and a forward/backward pair over tensors owned by the
// model's workspace.
//
// Conventions (see docs/adding-a-layer.md):
// - Shapes include the batch as dim 0; images are NCHW.
// - backward() ACCUMULATES into dx[i] and into parameter gradients; the model
//   zeroes both before each backward pass, so an output consumed by several
//   layers (residual connections) receives the sum of their gradients.
//   dx[i] is empty (numel() == 0) when input i needs no gradient. A layer
//   that writes_input_gradients() writes every dx[i] whole instead when
//   StepContext::write_input_gradients is set (the model sets it where the
//   layer's backward is the first to reach all of its inputs' gradients,
//   and then does not zero them).
// - Scratch that depends on the batch size is allocated in allocate(), once,
//   for the largest batch; forward/backward allocate no device memory.
// - Inputs, output and their gradients are float, or with set_compute() bf16
//   or fp16 for a layer that computes_in() it: such a layer derives from
//   GenericLayer and writes its forward and backward once, as templates over
//   the element type, summing in float (accumulator_t). Parameters and their
//   gradients stay float (the master weights). A layer that reads token ids
//   keeps them float (reads_token_ids).
#pragma once

#include <tessera/core/batch_sync.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/tensor.hpp>
#include <tessera/kernels/mixed_gemm.hpp>
#include <tessera/kernels/tensor_ops.hpp>
#include <tessera/layers/parameter_spec.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

// Per-call information a layer may need.
struct StepContext {
  bool training = true;
  std::uint64_t seed = 0;  // the run's seed: dropout draws from (seed, layer, step, element)
  std::int64_t step = 0;   // optimizer steps taken so far
  // Data parallelism: this rank's first sample's place in the global batch
  // (per-sample random numbers follow the sample, not the rank).
  std::int64_t sample_offset = 0;
  // Set when statistics are synchronised across ranks: the sum mechanism and
  // the samples of this step on all ranks together.
  const BatchSync* sync = nullptr;
  std::int64_t global_batch = 0;
  // Float scratch the layers of a model share when they compute in 16 bits
  // (set by Model; a layer run on its own uses its own).
  kernels::MixedGemmWorkspace<>* scratch = nullptr;
  // The execution space instance every kernel of the call runs on: the
  // model's (Model::set_execution_space; Model sets it, as it sets
  // scratch). Layers never make one of their own.
  ExecSpace exec;
  // backward() writes each non-empty dx[i] whole, 0 + what it would add
  // there (the bits of adding into a zeroed dx), instead of adding to it;
  // set only for a layer that writes_input_gradients().
  bool write_input_gradients = false;
  // A forward pass run again just before backward (Model's recomputation):
  // the outputs must be those of the first pass bit for bit, and nothing is
  // counted twice (BatchNorm normalises with the statistics it kept, and
  // neither recomputes them nor updates its running ones).
  bool recomputing = false;
};

template <class T>
using TensorsOf = std::vector<Tensor<T>>;
using Tensors = TensorsOf<float>;
using Shapes = std::vector<Shape>;

// The work of one pass over a batch, for benchmarks: floating-point
// operations, and the compulsory memory traffic in bytes (every tensor the
// pass reads or writes, touched once), which gives an effective bandwidth.
// flops are the model's, its direct form (a convolution's every tap), the
// same on every backend; `executed` holds the operations the kernels run
// where they do other work (Winograd's fewer products and its transforms,
// the direct schedule's planar form's whole vectors and tiles), and is
// unset where the two agree.
struct PassCost {
  double flops = 0;
  double bytes = 0;
  std::optional<double> executed;
  double executed_flops() const { return executed.value_or(flops); }
};

struct LayerCost {
  PassCost forward, backward;
};

// The kernels a layer's forward and backward may run for given inputs
// (Layer::kernel_options): implementations that give the same values up to
// rounding, each its own bits, and run on this build's execution space.
struct KernelOptions {
  std::string family;              // the deck key that chooses among them: kernels.<family>
  std::vector<std::string> names;  // the options; fewer than two: no choice
  std::string fixed;               // the option a rule of the shapes alone takes
  std::string key;                 // what their speeds depend on besides the machine
};
// A model's choices: (layer name, option) for each layer with options.
using KernelTable = std::vector<std::pair<std::string, std::string>>;

class Layer {
 public:
  // inputs: names of the layers (or "input") this layer reads; empty means
  // the previous layer's output.
  explicit Layer(std::string name, std::vector<std::string> inputs = {})
      : name_(std::move(name)), input_names_(std::move(inputs)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  virtual const char* type() const = 0;
  // Inputs this layer takes: a fixed count, or -1 for two or more.
  virtual int arity() const { return 1; }

  // Output shape for the input shapes; throws tessera::Error naming the
  // layer and the shapes when they do not fit.
  virtual Shape output_shape(const Shapes& inputs) const = 0;
  virtual std::vector<ParameterSpec> parameter_specs(const Shapes& /*inputs*/) const { return {}; }
  // Receives tensors for parameter_specs(), in order, once the store is allocated.
  virtual void bind_parameters(const Tensors& /*values*/, const Tensors& /*gradients*/) {}
  // Non-trainable state saved in checkpoints (e.g. BatchNorm running statistics).
  virtual std::vector<ParameterSpec> state_specs(const Shapes& /*inputs*/) const { return {}; }
  virtual void bind_state(const Tensors& /*state*/) {}
  // Scratch for batches up to inputs[0][0] samples.
  virtual void allocate(const Shapes& /*inputs*/) {}
  // Bytes of the buffers allocate() made that hold something between calls
  // (what forward keeps for backward, weights rounded to the compute
  // format), neither the temporaries nor what recomputed_elements() counts;
  // 0 before allocate().
  virtual std::int64_t buffer_bytes() const { return 0; }
  // Whether backward reads the values of its inputs, and of its output
  // (their shapes it may always read): a model may reuse the memory of a
  // value no backward reads once the forward passes are done with it.
  virtual bool backward_reads_inputs() const { return true; }
  virtual bool backward_reads_output() const { return true; }
  // Whether backward may find one input's gradient (of as many elements as
  // the output) in the memory of its output gradient: element i of every
  // input gradient is computed from element i of dy alone, and that input's
  // is written after dy's element is read wherever else it is needed.
  // Given one memory for both, backward writes 0 + what it would add there
  // (the bits of adding into a zeroed dx), and a model that places them so
  // (BufferPlan::shared) does not zero that gradient first.
  virtual bool backward_in_place() const { return false; }
  // Whether backward honours StepContext::write_input_gradients: it then
  // sets every element of each non-empty dx[i], whatever dx held, so a
  // model that reaches those gradients first with this layer need not
  // zero them (one pass over their memory less).
  virtual bool writes_input_gradients() const { return false; }
  // Float elements of the temporaries forward and backward use within one
  // call (nothing in them is read in a later call), for the inputs
  // allocate() is given: a model may give all its layers the same memory
  // for them (share_temporaries) instead of each its own.
  virtual std::int64_t temporary_elements(const Shapes& /*inputs*/) const { return 0; }
  // Memory of at least temporary_elements() floats from which allocate()
  // takes the temporaries; without it allocate() makes the layer's own. Its
  // users run in order on one execution space instance. Before allocate().
  void share_temporaries(const Vector<float>& memory) { shared_temporaries_ = memory; }
  // Float elements of what forward keeps for backward and writes whole on
  // every call (attention's projections and probabilities), for the inputs
  // allocate() is given: a model that runs this layer's forward again just
  // before its backward (recomputation) needs them only from then on, and
  // may give it memory that other layers use at other times
  // (share_recomputed).
  virtual std::int64_t recomputed_elements(const Shapes& /*inputs*/) const { return 0; }
  // Memory of at least recomputed_elements() floats for them; before
  // allocate().
  void share_recomputed(const Vector<float>& memory) { shared_recomputed_ = memory; }
  virtual std::int64_t flops_per_sample(const Shapes& /*inputs*/) const { return 0; }
  // Work of forward and backward for inputs that include the batch;
  // input_gradient: backward also computes dx. The default counts
  // flops_per_sample() per sample forward and twice that backward (an
  // estimate for elementwise layers), and traffic as inputs, output,
  // parameters and state forward; inputs, output, its gradient, parameters,
  // gradients (read and written) and dx (read and written) backward.
  virtual LayerCost cost(const Shapes& inputs, bool input_gradient) const {
    double input_elements = 0, parameters = 0;
    for (const auto& s : inputs) input_elements += static_cast<double>(s.numel());
    for (const auto& spec : parameter_specs(inputs))
      parameters += static_cast<double>(spec.shape.numel());
    double state = 0;
    for (const auto& spec : state_specs(inputs)) state += static_cast<double>(spec.shape.numel());
    const double output = static_cast<double>(output_shape(inputs).numel());
    const double batch = inputs.empty() ? 0.0 : static_cast<double>(inputs[0][0]);
    const double bytes = sizeof(float);
    LayerCost c;
    c.forward.flops = batch * static_cast<double>(flops_per_sample(inputs));
    c.forward.bytes = bytes * (input_elements + output + parameters + state);
    c.backward.flops = 2 * c.forward.flops;
    c.backward.bytes = bytes * (input_elements + 2 * output + 3 * parameters + state +
                                (input_gradient ? 2 * input_elements : 0.0));
    return c;
  }
  // cost() for a layer without parameters whose backward reads only its
  // output gradient, and `saved_bytes` its forward wrote for it (max
  // pooling's argmax), to add to the input gradient: the default's flops;
  // traffic forward inputs + output + saved, backward (which does nothing
  // without an input gradient) output gradient + saved + input gradients
  // (read and written).
  LayerCost gradient_routing_cost(const Shapes& inputs, bool input_gradient,
                                  double saved_bytes) const {
    LayerCost c = Layer::cost(inputs, input_gradient);
    double input_elements = 0;
    for (const auto& s : inputs) input_elements += static_cast<double>(s.numel());
    const double output = static_cast<double>(output_shape(inputs).numel());
    const double bytes = sizeof(float);
    c.forward.bytes = bytes * (input_elements + output) + saved_bytes;
    c.backward.bytes = input_gradient ? bytes * (output + 2 * input_elements) + saved_bytes : 0.0;
    return c;
  }

  // Kernel options for these inputs (input_gradient: backward computes
  // dx); none for most layers. A run chooses one per layer (docs/decks.md,
  // [kernels]) with set_kernel_option, before or after allocate(); until then a
  // layer runs its `fixed` option.
  virtual KernelOptions kernel_options(const Shapes& /*inputs*/, bool /*input_gradient*/) const {
    return {};
  }
  // Seconds a forward and a backward pass take under each of
  // kernel_options().names, in order: the best of `repetitions`, on values
  // and memory of the measurement's own (it allocates).
  virtual std::vector<double> time_kernel_options(const ExecSpace& /*exec*/,
                                                  const Shapes& /*inputs*/, bool /*input_gradient*/,
                                                  int /*repetitions*/) const {
    return {};
  }
  // The option set_kernel_option chose, or after allocate() the one forward and
  // backward run; "" for a layer without options.
  virtual std::string kernel_option() const { return {}; }
  // Runs option `name` from now on; throws naming the layer and the options
  // when it names none of this layer's.
  virtual void set_kernel_option(const std::string& name) {
    TESSERA_REQUIRE(false, where() << " has no kernel options; '" << name << "' names none");
  }

  // The formats the inputs, output and their gradients may have: float for
  // every layer, bf16 and fp16 for a GenericLayer.
  virtual bool computes_in(FloatFormat format) const { return format == FloatFormat::fp32; }
  // The format forward and backward take, before allocate(); float unless set.
  void set_compute(FloatFormat format) {
    TESSERA_REQUIRE(computes_in(format), where() << " computes in fp32 only, not in "
                                                 << float_format_name(format)
                                                 << "; use [precision] compute = \"fp32\"");
    compute_ = format;
  }
  FloatFormat compute() const { return compute_; }

  virtual void forward(const Tensors& x, const Tensor<float>& y, const StepContext& ctx) = 0;
  virtual void backward(const Tensors& x, const Tensor<float>& y, const Tensor<float>& dy,
                        const Tensors& dx, const StepContext& ctx) = 0;
  // The same in 16 bits (set_compute(bf16 or fp16) first).
  virtual void forward16(const TensorsOf<bf16>& /*x*/, const Tensor<bf16>& /*y*/,
                         const StepContext& /*ctx*/) {
    refuse(FloatFormat::bf16);
  }
  virtual void forward16(const TensorsOf<fp16>& /*x*/, const Tensor<fp16>& /*y*/,
                         const StepContext& /*ctx*/) {
    refuse(FloatFormat::fp16);
  }
  virtual void backward16(const TensorsOf<bf16>& /*x*/, const Tensor<bf16>& /*y*/,
                          const Tensor<bf16>& /*dy*/, const TensorsOf<bf16>& /*dx*/,
                          const StepContext& /*ctx*/) {
    refuse(FloatFormat::bf16);
  }
  virtual void backward16(const TensorsOf<fp16>& /*x*/, const Tensor<fp16>& /*y*/,
                          const Tensor<fp16>& /*dy*/, const TensorsOf<fp16>& /*dx*/,
                          const StepContext& /*ctx*/) {
    refuse(FloatFormat::fp16);
  }

  // A layer that reads token ids (the model's input) takes them as float in
  // every format: bf16 holds integers exactly only up to 256. In 16 bits the
  // model passes it the float ids with an output and its gradient in the
  // compute format; ids have no gradient.
  virtual bool reads_token_ids() const { return false; }
  virtual void forward_ids16(const Tensors& /*ids*/, const Tensor<bf16>& /*y*/,
                             const StepContext& /*ctx*/) {
    refuse(FloatFormat::bf16);
  }
  virtual void forward_ids16(const Tensors& /*ids*/, const Tensor<fp16>& /*y*/,
                             const StepContext& /*ctx*/) {
    refuse(FloatFormat::fp16);
  }
  virtual void backward_ids16(const Tensors& /*ids*/, const Tensor<bf16>& /*dy*/,
                              const StepContext& /*ctx*/) {
    refuse(FloatFormat::bf16);
  }
  virtual void backward_ids16(const Tensors& /*ids*/, const Tensor<fp16>& /*dy*/,
                              const StepContext& /*ctx*/) {
    refuse(FloatFormat::fp16);
  }

 protected:
  // "tessera::<type> '<name>'" for messages.
  std::string where() const { return std::string("tessera::") + type() + " '" + name_ + "'"; }
  // Forward or backward in `format` after set_compute(compute()).
  void check_compute(FloatFormat format) const {
    TESSERA_REQUIRE(format == compute_, where() << ": called with " << float_format_name(format)
                                                << " tensors after set_compute("
                                                << float_format_name(compute_) << ")");
  }

  // The memory of what forward rewrites whole for backward, and of the
  // temporaries, for `inputs`, for allocate(): the shared memory, or the
  // layer's own, allocated here.
  float* recomputed(const Shapes& inputs) {
    return own_or_shared(shared_recomputed_, own_recomputed_, "kept", recomputed_elements(inputs));
  }
  float* temporaries(const Shapes& inputs) {
    return own_or_shared(shared_temporaries_, own_temporaries_, "temporaries",
                         temporary_elements(inputs));
  }

 private:
  float* own_or_shared(const Vector<float>& shared, Vector<float>& own, const char* what,
                       std::int64_t elements) {
    if (shared.size() == 0) {
      own = Vector<float>(Kokkos::view_alloc(where() + "::" + what, Kokkos::WithoutInitializing),
                          elements);
      return own.data();
    }
    TESSERA_REQUIRE(static_cast<std::int64_t>(shared.size()) >= elements,
                    where() << ": shared " << what << " of " << shared.size() << " floats for "
                            << elements << "; share at least that many");
    return shared.data();
  }
  void refuse(FloatFormat format) const {
    TESSERA_REQUIRE(false, where() << " computes in fp32 only, not in " << float_format_name(format)
                                   << "; use [precision] compute = \"fp32\"");
  }

  std::string name_;
  std::vector<std::string> input_names_;
  FloatFormat compute_ = FloatFormat::fp32;
  Vector<float> shared_temporaries_, own_temporaries_, shared_recomputed_, own_recomputed_;
};

// A layer written once for every element type: Derived defines
//   template <class T> void forward_as(const TensorsOf<T>& x, const Tensor<T>& y,
//                                      const StepContext& ctx);
//   template <class T> void backward_as(const TensorsOf<T>& x, const Tensor<T>& y,
//                                       const Tensor<T>& dy, const TensorsOf<T>& dx,
//                                       const StepContext& ctx);
// for T = float, bf16 and fp16, and this class routes every virtual to them.
// Base: Layer, or a class between (derived from Layer) that several layers
// share, such as the windowed pools' shape logic.
template <class Derived, class Base = Layer>
class GenericLayer : public Base {
 public:
  using Base::Base;
  bool computes_in(FloatFormat /*format*/) const override { return true; }

  void forward(const Tensors& x, const Tensor<float>& y, const StepContext& ctx) override;
  void backward(const Tensors& x, const Tensor<float>& y, const Tensor<float>& dy,
                const Tensors& dx, const StepContext& ctx) override;
  void forward16(const TensorsOf<bf16>& x, const Tensor<bf16>& y, const StepContext& ctx) override;
  void forward16(const TensorsOf<fp16>& x, const Tensor<fp16>& y, const StepContext& ctx) override;
  void backward16(const TensorsOf<bf16>& x, const Tensor<bf16>& y, const Tensor<bf16>& dy,
                  const TensorsOf<bf16>& dx, const StepContext& ctx) override;
  void backward16(const TensorsOf<fp16>& x, const Tensor<fp16>& y, const Tensor<fp16>& dy,
                  const TensorsOf<fp16>& dx, const StepContext& ctx) override;

 protected:
  // The model's shared float scratch, or this layer's own when it runs
  // outside a model.
  kernels::MixedGemmWorkspace<>& scratch(const StepContext& ctx) {
    return ctx.scratch != nullptr ? *ctx.scratch : own_scratch_;
  }
  // copy = weights rounded to T's format, stored as U (T itself, or float
  // for a float product): what a 16-bit forward's products take. allocate()
  // after set_compute() sizes the copy.
  template <class T, class U>
  void round_weights(const ExecSpace& exec, const Tensor<float>& weights,
                     const Tensor<U>& copy) const {
    TESSERA_REQUIRE(copy.numel() == weights.numel(),
                    this->where() << ": allocate() after set_compute("
                                  << float_format_name(this->compute()) << ") before forward");
    kernels::round_through<T>(exec, weights.flat(), copy.flat());
  }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  kernels::MixedGemmWorkspace<> own_scratch_;
};

// Out of the class and not inline: a layer's source file instantiates them
// (template class GenericLayer<L>) next to its forward_as and backward_as,
// and its header declares that instantiation extern.
template <class Derived, class Base>
void GenericLayer<Derived, Base>::forward(const Tensors& x, const Tensor<float>& y,
                                          const StepContext& ctx) {
  this->check_compute(FloatFormat::fp32);
  self().forward_as(x, y, ctx);
}
template <class Derived, class Base>
void GenericLayer<Derived, Base>::backward(const Tensors& x, const Tensor<float>& y,
                                           const Tensor<float>& dy, const Tensors& dx,
                                           const StepContext& ctx) {
  this->check_compute(FloatFormat::fp32);
  self().backward_as(x, y, dy, dx, ctx);
}
template <class Derived, class Base>
void GenericLayer<Derived, Base>::forward16(const TensorsOf<bf16>& x, const Tensor<bf16>& y,
                                            const StepContext& ctx) {
  this->check_compute(FloatFormat::bf16);
  self().forward_as(x, y, ctx);
}
template <class Derived, class Base>
void GenericLayer<Derived, Base>::forward16(const TensorsOf<fp16>& x, const Tensor<fp16>& y,
                                            const StepContext& ctx) {
  this->check_compute(FloatFormat::fp16);
  self().forward_as(x, y, ctx);
}
template <class Derived, class Base>
void GenericLayer<Derived, Base>::backward16(const TensorsOf<bf16>& x, const Tensor<bf16>& y,
                                             const Tensor<bf16>& dy, const TensorsOf<bf16>& dx,
                                             const StepContext& ctx) {
  this->check_compute(FloatFormat::bf16);
  self().backward_as(x, y, dy, dx, ctx);
}
template <class Derived, class Base>
void GenericLayer<Derived, Base>::backward16(const TensorsOf<fp16>& x, const Tensor<fp16>& y,
                                             const Tensor<fp16>& dy, const TensorsOf<fp16>& dx,
                                             const StepContext& ctx) {
  this->check_compute(FloatFormat::fp16);
  self().backward_as(x, y, dy, dx, ctx);
}

}  // namespace tessera
