// Adam (L2 weight decay through the gradient) and AdamW (decoupled weight
// decay) over a model's flat parameter buffer, with PyTorch's semantics.
#pragma once

#include <tessera/kernels/adam.hpp>
#include <tessera/optim/optimizer.hpp>

namespace tessera {

class Adam : public Optimizer {
 public:
  using Params = kernels::AdamParams;
  explicit Adam(const Params& params = {}) : Adam("Adam", params, kernels::WeightDecay::l2) {}

  const Params& params() const { return params_; }
  // {"exp_avg", "exp_avg_sq"}: first and second moment estimates.
  std::vector<std::pair<std::string, Vector<float>>> state_buffers() const override;

 protected:
  Adam(const std::string& name, const Params& params, kernels::WeightDecay decay_mode);

 private:
  void allocate_state(std::int64_t count) override;
  void update(const ExecSpace& exec, const Vector<float>& values, const Vector<float>& gradients,
              float lr, std::int64_t step) override;

  Params params_;
  kernels::WeightDecay decay_mode_;
  Vector<float> exp_avg_;
  Vector<float> exp_avg_sq_;
};

class AdamW : public Adam {
 public:
  explicit AdamW(const Params& params = {})
      : Adam("AdamW", params, kernels::WeightDecay::decoupled) {}
};

}  // namespace tessera
