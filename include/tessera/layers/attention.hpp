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

class CausalSelfAttention final : public GenericLayer<CausalSelfAttention> {
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
  bool backward_reads_output() const override { return false; }
  bool writes_input_gradients() const override { return true; }
  const Options& options() const { return options_; }
  Shape output_shape(const Shapes& inputs) const override;
  std::vector<ParameterSpec> parameter_specs(const Shapes& inputs) const override;
  void bind_parameters(const Tensors& values, const Tensors& gradients) override;
  void allocate(const Shapes& inputs) override;
  std::int64_t buffer_bytes() const override;
  std::int64_t temporary_elements(const Shapes& inputs) const override;
  std::int64_t recomputed_elements(const Shapes& inputs) const override;
  std::int64_t flops_per_sample(const Shapes& inputs) const override;
  LayerCost cost(const Shapes& inputs, bool input_gradient) const override;

  // In bf16 and fp16 the input, output and their gradients are 16-bit; the
  // projections take the weights rounded to the format, and the attention
  // between them (queries, keys, values, probabilities, heads) is float.
  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);

 private:
  using Rows = UnmanagedMatrix<float>;
  kernels::AttentionLayout layout(const Shape& input) const;
  kernels::AttentionDropout dropout(const Shape& input, const StepContext& ctx) const;
  // The first `rows` rows of a buffer [max_batch T, columns]; with
  // `columns`, the start of its storage as a matrix [rows, columns].
  static Rows leading_rows(const Matrix<float>& m, std::int64_t rows, std::int64_t columns = 0);
  // The float pass on rows of token vectors, with the given weights (the
  // parameters, or their rounded copies).
  void forward_rows(const Rows& x, const Tensor<float>& qkv_weight,
                    const Tensor<float>& proj_weight, const Rows& y, const Shape& in,
                    const StepContext& ctx);
  // Backward to dqkv_ (the output projection and the attention), then
  // through the QKV projection to dx (accumulated, or with write_dx
  // written; skipped when empty).
  void backward_attention(const Rows& dy, const Tensor<float>& proj_weight, const Shape& in,
                          const StepContext& ctx);
  void backward_qkv(const ExecSpace& exec, const Rows& x, const Tensor<float>& qkv_weight,
                    const Rows& dx, bool write_dx);

  Options options_;
  std::uint64_t stream_;
  Tensor<float> qkv_weight_, qkv_bias_, proj_weight_, proj_bias_;
  Tensor<float> qkv_weight_grad_, qkv_bias_grad_, proj_weight_grad_, proj_bias_grad_;
  Tensor<float> qkv_weight_rounded_, proj_weight_rounded_;  // in 16 bits
  Matrix<float> qkv_, heads_, dqkv_, dheads_;
  kernels::AttentionScores stats_, scratch_;
  std::int64_t max_batch_ = 0;
};

extern template class GenericLayer<CausalSelfAttention>;

}  // namespace tessera
