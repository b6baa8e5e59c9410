// Causal multi-head self-attention over token vectors [N, T, C] (GPT's
// attention block without its residual and normalisation): one fused
// projection to queries, keys and values (weights [3 C, C]), scaled dot
// products, a causal mask (position t sees positions 0 to t), a numerically
// stable softmax, dropout on the attention weights, and an output
// projection (weights [C, C]). Position t's output depends on no input
// after t.
#pragma once

#include <tessera/kernels/attention.hpp>
#include <tessera/layers/layer.hpp>

namespace tessera {

class CausalSelfAttention final : public Layer {
 public:
  struct Options {
    std::int64_t heads = 0;  // C must be a multiple
    float dropout = 0.0f;    // on the attention weights, in training
    bool bias = true;        // of both projections
    Init init = Init::xavier_uniform;
  };

  CausalSelfAttention(std::string name, const Options& options,
                      std::vector<std::string> inputs = {});

  const char* type() const override { return "CausalSelfAttention"; }
  const Options& options() const { return options_; }
  Shape output_shape(const Shapes& inputs) const override;
  std::vector<ParameterSpec> parameter_specs(const Shapes& inputs) const override;
  void bind_parameters(const Tensors& values, const Tensors& gradients) override;
  void allocate(const Shapes& inputs) override;
  std::int64_t flops_per_sample(const Shapes& inputs) const override;
  LayerCost cost(const Shapes& inputs, bool input_gradient) const override;

  void forward(const Tensors& x, const Tensor<float>& y, const StepContext& ctx) override;
  void backward(const Tensors& x, const Tensor<float>& y, const Tensor<float>& dy,
                const Tensors& dx, const StepContext& ctx) override;

 private:
  kernels::AttentionLayout layout(const Shape& input) const;
  kernels::AttentionDropout dropout(const Shape& input, const StepContext& ctx) const;
  // The first `samples` samples of a [max_batch * rows, columns] buffer.
  static UnmanagedMatrix<float> leading_rows(const Matrix<float>& m, std::int64_t rows);

  Options options_;
  std::uint64_t stream_;
  Tensor<float> qkv_weight_, qkv_bias_, proj_weight_, proj_bias_;
  Tensor<float> qkv_weight_grad_, qkv_bias_grad_, proj_weight_grad_, proj_bias_grad_;
  Matrix<float> qkv_, heads_, dqkv_, dheads_;
  kernels::AttentionScores probs_, scratch_;
  std::int64_t max_batch_ = 0;
};

}  // namespace tessera
