// Dense layer: y = x W^T + b over the flattened features of each sample;
// without a bias (Options::bias = false), y = x W^T. With last_axis, the
// same product acts on the last axis alone, at every position before it
// (PyTorch's nn.Linear): [N, T, C] -> [N, T, units], one token at a time.
// With tie, the weight is another layer's (an LM head that reads its
// token embedding's table, [vocabulary, channels]).
#pragma once

#include <tessera/layers/layer.hpp>

namespace tessera {

class Dense final : public GenericLayer<Dense> {
 public:
  struct Options {
    std::int64_t units = 0;
    // A bias in front of a normalisation is cancelled by it: leave it out there.
    bool bias = true;
    Init init = Init::he_uniform;  // the weights; the bias starts at zero
    bool last_axis = false;        // act on the last axis, not on every feature of a sample
    std::string tie = {};          // non-empty: use this earlier layer's `weight`
  };

  Dense(std::string name, const Options& options, std::vector<std::string> inputs = {});
  Dense(std::string name, std::int64_t units, std::vector<std::string> inputs = {})
      : Dense(std::move(name), Options{units}, std::move(inputs)) {}

  const char* type() const override { return "Dense"; }
  bool backward_reads_output() const override { return false; }
  bool writes_input_gradients() const override { return true; }
  std::int64_t units() const { return options_.units; }
  bool has_bias() const { return options_.bias; }
  const Options& options() const { return options_; }
  Shape output_shape(const Shapes& inputs) const override;
  std::vector<ParameterSpec> parameter_specs(const Shapes& inputs) const override;
  void bind_parameters(const Tensors& values, const Tensors& gradients) override;
  std::int64_t flops_per_sample(const Shapes& inputs) const override;
  LayerCost cost(const Shapes& inputs, bool input_gradient) const override;

  void allocate(const Shapes& inputs) override;
  std::int64_t buffer_bytes() const override;

  // In 16 bits the products take a copy of the weights rounded to the
  // format, made by forward and used again by backward.
  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);

 private:
  // Features the product takes per row, and rows per sample.
  std::int64_t in_features(const Shape& input) const;
  std::int64_t rows_per_sample(const Shape& input) const;
  template <class T>
  UnmanagedMatrix<T> rows(const Tensor<T>& t) const;
  template <class T>
  Tensor<T>& rounded_weight();

  Options options_;
  Tensor<float> weight_, bias_, weight_grad_, bias_grad_;
  Tensor<bf16> weight_bf16_;
  Tensor<fp16> weight_fp16_;
};

extern template class GenericLayer<Dense>;

}  // namespace tessera
