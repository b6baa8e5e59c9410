// A model: layers applied in sequence, with a workspace that owns every
// activation and activation gradient for the largest batch, and a parameter
// store. After compile(), forward and backward allocate nothing; a smaller
// batch (the last of an epoch) uses the leading rows of the same buffers.
#pragma once

#include <tessera/layers/layer.hpp>
#include <tessera/model/parameters.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

class Model {
 public:
  // sample_shape: one sample without the batch dimension, e.g. {784}.
  explicit Model(const Shape& sample_shape);

  Model& add(std::unique_ptr<Layer> layer);
  template <class L, class... Args>
  Model& add(Args&&... args) {
    return add(std::make_unique<L>(std::forward<Args>(args)...));
  }

  // Shape inference, parameter layout and workspace allocation for batches
  // of up to max_batch samples; parameters are initialised from seed.
  void compile(std::int64_t max_batch, std::uint64_t seed);
  bool compiled() const { return compiled_; }

  // The model's input buffer for `batch` samples: fill it, then forward().
  Tensor<float> input(std::int64_t batch) const;
  // Runs every layer; returns the output for `batch` samples.
  Tensor<float> forward(std::int64_t batch, bool training);
  // Gradient of the loss with respect to the output, to fill before backward().
  Tensor<float> output_gradient(std::int64_t batch) const;
  // Zeroes parameter gradients, then back-propagates output_gradient().
  void backward(std::int64_t batch);

  ParameterStore& parameters() { return parameters_; }
  const ParameterStore& parameters() const { return parameters_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // Per-sample output shape of layer i (after compile).
  Shape layer_output_shape(std::size_t i) const;
  Shape output_shape() const;
  std::int64_t flops_per_sample() const;
  std::int64_t max_batch() const { return max_batch_; }

  // A table of layers, output shapes and parameter counts.
  std::string summary() const;

 private:
  Shape batch_shape(const Shape& sample, std::int64_t batch) const;

  Shape sample_shape_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Shape> sample_shapes_;  // [0] input, [i + 1] output of layer i
  std::vector<Tensor<float>> activations_;
  std::vector<Tensor<float>> activation_grads_;
  ParameterStore parameters_;
  std::int64_t max_batch_ = 0;
  bool compiled_ = false;
};

}  // namespace tessera
