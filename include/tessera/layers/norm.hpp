// Normalisation layers: BatchNorm (per feature of [N, F], per channel of
// [N, C, H, W]) and LayerNorm (per sample over all its elements), both with
// a learned affine transform, over the shared group-normalisation kernels.
#pragma once

#include <tessera/kernels/norm.hpp>
#include <tessera/layers/layer.hpp>

namespace tessera {

namespace impl {
// What BatchNorm and LayerNorm share: gamma/beta and their gradients, the
// per-group mean and inverse std saved for backward, and the statistics
// buffer, with the forward and backward passes over them.
class GroupNormalizer {
 public:
  explicit GroupNormalizer(kernels::Affine affine) : affine_(affine) {}

  void bind(const Tensors& values, const Tensors& gradients);
  // Scratch for layouts up to `largest` (the largest batch).
  void allocate(const kernels::GroupLayout& largest, const std::string& label);
  std::int64_t buffer_bytes() const { return bytes_held(mean_, invstd_, sums_, partials_); }

  // Each runs its kernels on `exec`. local_moments, batch_sums, normalize
  // and backward take x, y and their gradients in float, bf16 or fp16 (defined next to the layers
  // that call them, in norm.cpp).
  //
  // mean/invstd of x's own groups in one pass over x; with running
  // statistics (not empty), also their update with `momentum`.
  template <class T>
  void local_moments(const ExecSpace& exec, const kernels::GroupLayout& layout, const Tensor<T>& x,
                     float eps, float momentum = 0, const Tensor<float>& running_mean = {},
                     const Tensor<float>& running_var = {});
  // Per-group sum and sum of squares of x (2 * groups values): a
  // synchronised BatchNorm sums them over the ranks before batch_moments().
  template <class T>
  Vector<double> batch_sums(const ExecSpace& exec, const kernels::GroupLayout& layout,
                            const Tensor<T>& x);
  // mean/invstd from the sums over `count` elements per group.
  void batch_moments(const ExecSpace& exec, std::int64_t groups, std::int64_t count, float eps);
  // mean/invstd from running statistics.
  void running_moments(const ExecSpace& exec, const Tensor<float>& running_mean,
                       const Tensor<float>& running_var, float eps);
  template <class T>
  void normalize(const ExecSpace& exec, const kernels::GroupLayout& layout, const Tensor<T>& x,
                 const Tensor<T>& y);
  // Accumulates into dx (when not empty; written whole instead without
  // add_to_dx), dgamma and dbeta. batch_statistics: whether forward used
  // the batch's own statistics (which then depend on x), taken over
  // `count` elements per group; `sync` (optional) sums the gradient
  // statistics over the ranks as forward summed the moments.
  template <class T>
  void backward(const ExecSpace& exec, const kernels::GroupLayout& layout, const Tensor<T>& x,
                const Tensor<T>& dy, const Tensor<T>& dx, bool batch_statistics, std::int64_t count,
                const BatchSync* sync = nullptr, bool add_to_dx = true);

 private:
  Vector<float> mean(std::int64_t groups) const;
  Vector<float> invstd(std::int64_t groups) const;
  Vector<double> sums(std::int64_t groups) const;

  kernels::Affine affine_;
  Tensor<float> gamma_, beta_, gamma_grad_, beta_grad_;
  Vector<float> mean_, invstd_;
  Vector<double> sums_, partials_;
};
}  // namespace impl

// Batch normalisation with PyTorch semantics: training normalises with the
// batch mean and biased variance and updates running statistics
// (running = (1 - momentum) * running + momentum * batch, unbiased variance);
// inference normalises with the running statistics. Under data parallelism
// the batch is this rank's shard, unless StepContext::sync sums the
// statistics over every rank (synchronised BatchNorm).
class BatchNorm final : public GenericLayer<BatchNorm> {
 public:
  struct Options {
    float momentum = 0.1f;  // weight of the batch in the running statistics
    float eps = 1e-5f;
  };

  BatchNorm(std::string name, const Options& options, std::vector<std::string> inputs = {});
  explicit BatchNorm(std::string name, float momentum = 0.1f, float eps = 1e-5f,
                     std::vector<std::string> inputs = {})
      : BatchNorm(std::move(name), Options{momentum, eps}, std::move(inputs)) {}

  const char* type() const override { return "BatchNorm"; }
  bool backward_reads_output() const override { return false; }
  bool writes_input_gradients() const override { return true; }
  float momentum() const { return momentum_; }
  float eps() const { return eps_; }
  Shape output_shape(const Shapes& inputs) const override;
  std::vector<ParameterSpec> parameter_specs(const Shapes& inputs) const override;
  void bind_parameters(const Tensors& values, const Tensors& gradients) override;
  std::vector<ParameterSpec> state_specs(const Shapes& inputs) const override;
  void bind_state(const Tensors& state) override;
  void allocate(const Shapes& inputs) override;
  std::int64_t buffer_bytes() const override { return normalizer_.buffer_bytes(); }
  std::int64_t flops_per_sample(const Shapes& inputs) const override;

  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);

 private:
  kernels::GroupLayout layout(const Shape& input) const;
  // Elements per channel the statistics span: this rank's, or all ranks'
  // when synchronised.
  std::int64_t statistics_count(const kernels::GroupLayout& l, const StepContext& ctx) const;

  float momentum_, eps_;
  impl::GroupNormalizer normalizer_{kernels::Affine::per_group};
  Tensor<float> running_mean_, running_var_;
};

// Layer normalisation over every non-batch element of a sample, with
// elementwise gamma and beta of the per-sample shape (PyTorch's LayerNorm
// with normalized_shape = input.shape[1:]); with last_axis, over the last
// axis of every position alone, gamma and beta of its length
// (normalized_shape = input.shape[-1:], each token of [N, T, C] by itself).
class LayerNorm final : public GenericLayer<LayerNorm> {
 public:
  struct Options {
    float eps = 1e-5f;
    bool last_axis = false;
  };

  LayerNorm(std::string name, const Options& options, std::vector<std::string> inputs = {});
  explicit LayerNorm(std::string name, float eps = 1e-5f, std::vector<std::string> inputs = {})
      : LayerNorm(std::move(name), Options{eps, false}, std::move(inputs)) {}

  const char* type() const override { return "LayerNorm"; }
  bool backward_reads_output() const override { return false; }
  bool writes_input_gradients() const override { return true; }
  float eps() const { return eps_; }
  Shape output_shape(const Shapes& inputs) const override;
  std::vector<ParameterSpec> parameter_specs(const Shapes& inputs) const override;
  void bind_parameters(const Tensors& values, const Tensors& gradients) override;
  void allocate(const Shapes& inputs) override;
  std::int64_t buffer_bytes() const override { return normalizer_.buffer_bytes(); }
  std::int64_t flops_per_sample(const Shapes& inputs) const override;

  template <class T>
  void forward_as(const TensorsOf<T>& x, const Tensor<T>& y, const StepContext& ctx);
  template <class T>
  void backward_as(const TensorsOf<T>& x, const Tensor<T>& y, const Tensor<T>& dy,
                   const TensorsOf<T>& dx, const StepContext& ctx);

 private:
  kernels::GroupLayout layout(const Shape& input) const;

  float eps_;
  bool last_axis_;
  impl::GroupNormalizer normalizer_{kernels::Affine::per_position};
};

extern template class GenericLayer<BatchNorm>;
extern template class GenericLayer<LayerNorm>;

}  // namespace tessera
