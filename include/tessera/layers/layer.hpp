// The interface every layer implements: shape inference, the parameters it
// needs, and a forward/backward pair over tensors owned by the model's
// workspace. Backward accumulates parameter gradients and overwrites dx.
#pragma once

#include <tessera/core/tensor.hpp>
#include <tessera/model/parameters.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  virtual const char* type() const = 0;

  // Output shape for an input shape (both include the batch as dim 0);
  // throws tessera::Error naming the layer and both shapes when they do not fit.
  virtual Shape output_shape(const Shape& input) const = 0;
  virtual std::vector<ParameterSpec> parameter_specs(const Shape& /*input*/) const { return {}; }
  // Receives tensors for the specs above, in order, once the store is allocated.
  virtual void bind_parameters(const std::vector<Tensor<float>>& /*values*/,
                               const std::vector<Tensor<float>>& /*gradients*/) {}
  virtual std::int64_t flops_per_sample(const Shape& /*input*/) const { return 0; }

  virtual void forward(const Tensor<float>& x, const Tensor<float>& y, bool training) = 0;
  // dx is empty for the first layer, whose input gradient nobody needs.
  virtual void backward(const Tensor<float>& x, const Tensor<float>& y, const Tensor<float>& dy,
                        const Tensor<float>& dx) = 0;

 private:
  std::string name_;
};

}  // namespace tessera
