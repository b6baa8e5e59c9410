// Sequential model: shape inference, workspace, forward and backward.
#include <tessera/core/profiling.hpp>
#include <tessera/model/model.hpp>

#include <iomanip>
#include <sstream>

namespace tessera {

Model::Model(const Shape& sample_shape) : sample_shape_(sample_shape) {
  TESSERA_REQUIRE(sample_shape.rank() >= 1 && sample_shape.rank() < Shape::max_rank &&
                      sample_shape.numel() > 0,
                  "tessera::Model: input shape " << sample_shape
                                                 << " must have 1 to 3 positive dimensions");
}

Model& Model::add(std::unique_ptr<Layer> layer) {
  TESSERA_REQUIRE(!compiled_, "tessera::Model::add: layer '" << layer->name()
                                                             << "' added after compile()");
  layers_.push_back(std::move(layer));
  return *this;
}

Shape Model::batch_shape(const Shape& sample, std::int64_t batch) const {
  switch (sample.rank()) {
    case 1: return Shape{batch, sample[0]};
    case 2: return Shape{batch, sample[0], sample[1]};
    default: return Shape{batch, sample[0], sample[1], sample[2]};
  }
}

namespace {
Shape drop_batch(const Shape& s) {
  switch (s.rank()) {
    case 2: return Shape{s[1]};
    case 3: return Shape{s[1], s[2]};
    default: return Shape{s[1], s[2], s[3]};
  }
}
}  // namespace

void Model::compile(std::int64_t max_batch, std::uint64_t seed) {
  ScopedRegion region("tessera::Model::compile");
  TESSERA_REQUIRE(!compiled_, "tessera::Model::compile: called twice");
  TESSERA_REQUIRE(!layers_.empty(), "tessera::Model::compile: the model has no layers");
  TESSERA_REQUIRE(max_batch > 0, "tessera::Model::compile: batch size must be positive, got "
                                     << max_batch);
  max_batch_ = max_batch;
  sample_shapes_ = {sample_shape_};
  std::vector<std::vector<std::size_t>> param_slots(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const Shape in = batch_shape(sample_shapes_.back(), max_batch);
    const Shape out = layers_[i]->output_shape(in);
    sample_shapes_.push_back(drop_batch(out));
    for (const auto& spec : layers_[i]->parameter_specs(in))
      param_slots[i].push_back(parameters_.add(layers_[i]->name(), spec));
  }
  parameters_.allocate();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::vector<Tensor<float>> values, grads;
    for (auto slot : param_slots[i]) {
      values.push_back(parameters_.value(slot));
      grads.push_back(parameters_.gradient(slot));
    }
    layers_[i]->bind_parameters(values, grads);
  }
  parameters_.initialize(seed);

  for (std::size_t i = 0; i < sample_shapes_.size(); ++i) {
    const Shape s = batch_shape(sample_shapes_[i], max_batch);
    activations_.emplace_back("tessera::activation[" + std::to_string(i) + "]", s);
    // The input's gradient is never needed.
    activation_grads_.push_back(i == 0 ? Tensor<float>()
                                       : Tensor<float>("tessera::activation_grad[" +
                                                           std::to_string(i) + "]",
                                                       s));
  }
  compiled_ = true;
}

Tensor<float> Model::input(std::int64_t batch) const {
  TESSERA_REQUIRE(compiled_, "tessera::Model::input: compile() the model first");
  return activations_.front().leading(batch);
}

Tensor<float> Model::output_gradient(std::int64_t batch) const {
  TESSERA_REQUIRE(compiled_, "tessera::Model::output_gradient: compile() the model first");
  return activation_grads_.back().leading(batch);
}

Tensor<float> Model::forward(std::int64_t batch, bool training) {
  ScopedRegion region("tessera::Model::forward");
  TESSERA_REQUIRE(compiled_, "tessera::Model::forward: compile() the model first");
  for (std::size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->forward(activations_[i].leading(batch), activations_[i + 1].leading(batch), training);
  return activations_.back().leading(batch);
}

void Model::backward(std::int64_t batch) {
  ScopedRegion region("tessera::Model::backward");
  TESSERA_REQUIRE(compiled_, "tessera::Model::backward: compile() the model first");
  parameters_.zero_gradients();
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const Tensor<float> dx = i == 0 ? Tensor<float>() : activation_grads_[i].leading(batch);
    layers_[i]->backward(activations_[i].leading(batch), activations_[i + 1].leading(batch),
                         activation_grads_[i + 1].leading(batch), dx);
  }
}

Shape Model::layer_output_shape(std::size_t i) const { return sample_shapes_.at(i + 1); }
Shape Model::output_shape() const { return sample_shapes_.back(); }

std::int64_t Model::flops_per_sample() const {
  std::int64_t flops = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    flops += layers_[i]->flops_per_sample(batch_shape(sample_shapes_[i], 1));
  return flops;
}

std::string Model::summary() const {
  std::ostringstream os;
  os << std::left << std::setw(16) << "layer" << std::setw(10) << "type" << std::setw(18)
     << "output" << std::right << std::setw(12) << "parameters" << "\n";
  os << std::left << std::setw(16) << "input" << std::setw(10) << "" << std::setw(18)
     << to_string(sample_shape_) << "\n";
  std::int64_t total = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::int64_t count = 0;
    for (const auto& e : parameters_.entries())
      if (e.layer == layers_[i]->name()) count += e.spec.shape.numel();
    total += count;
    os << std::left << std::setw(16) << layers_[i]->name() << std::setw(10) << layers_[i]->type()
       << std::setw(18) << to_string(sample_shapes_[i + 1]) << std::right << std::setw(12) << count << "\n";
  }
  os << "total parameters: " << total << ", forward FLOPs per sample: " << flops_per_sample()
     << "\n";
  return os.str();
}

}  // namespace tessera
