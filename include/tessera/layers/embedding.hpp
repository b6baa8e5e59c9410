// Embedding: token ids [N, T] (the model's input, one id a position) become
// vectors [N, T, dim] looked up in a learned table [vocabulary, dim], plus,
// with positions, a learned vector per position (a table [T, dim]): GPT's
// token and position embeddings in one layer. Ids are not differentiable:
// the layer passes no gradient to its input, and they stay float when the
// vectors are bf16 or fp16.
#pragma once

#include <tessera/kernels/embedding.hpp>
#include <tessera/layers/layer.hpp>

namespace tessera {

class Embedding final : public Layer {
 public:
  struct Options {
    std::int64_t vocabulary = 0;
    std::int64_t dim = 0;
    bool positions = false;  // add a learned vector per position
    // Both tables; the fans are (vocabulary, dim) and (positions, dim).
    Init init = Init::xavier_normal;
  };

  Embedding(std::string name, const Options& options, std::vector<std::string> inputs = {});

  const char* type() const override { return "Embedding"; }
  bool backward_reads_output() const override { return false; }
  const Options& options() const { return options_; }
  Shape output_shape(const Shapes& inputs) const override;
  std::vector<ParameterSpec> parameter_specs(const Shapes& inputs) const override;
  void bind_parameters(const Tensors& values, const Tensors& gradients) override;
  void allocate(const Shapes& inputs) override;
  std::int64_t buffer_bytes() const override;
  // One add per element with positions; a lookup is no arithmetic.
  std::int64_t flops_per_sample(const Shapes& inputs) const override;

  // In every format; the ids stay float, the vectors and their gradients
  // take the compute format.
  bool computes_in(FloatFormat /*format*/) const override { return true; }
  bool reads_token_ids() const override { return true; }

  void forward(const Tensors& x, const Tensor<float>& y, const StepContext& ctx) override;
  void backward(const Tensors& x, const Tensor<float>& y, const Tensor<float>& dy,
                const Tensors& dx, const StepContext& ctx) override;
  void forward_ids16(const Tensors& ids, const Tensor<bf16>& y, const StepContext& ctx) override;
  void forward_ids16(const Tensors& ids, const Tensor<fp16>& y, const StepContext& ctx) override;
  void backward_ids16(const Tensors& ids, const Tensor<bf16>& dy, const StepContext& ctx) override;
  void backward_ids16(const Tensors& ids, const Tensor<fp16>& dy, const StepContext& ctx) override;

 private:
  template <class T>
  void lookup(const ExecSpace& exec, const Tensor<float>& ids, const Tensor<T>& y);
  template <class T>
  void scatter(const ExecSpace& exec, const Tensor<float>& ids, const Tensor<T>& dy);

  Options options_;
  Tensor<float> table_, position_table_, table_grad_, position_table_grad_;
  kernels::TokenBuckets buckets_;
};

}  // namespace tessera
