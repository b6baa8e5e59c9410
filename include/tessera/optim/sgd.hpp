// Stochastic gradient descent (momentum, Nesterov, L2 weight decay) over a
// model's flat parameter buffer.
#pragma once

#include <tessera/kernels/sgd.hpp>
#include <tessera/optim/optimizer.hpp>

namespace tessera {

class SGD : public Optimizer {
 public:
  using Params = kernels::SgdParams;
  explicit SGD(const Params& params = {});

  const Params& params() const { return params_; }
  // {"velocity"}
  std::vector<std::pair<std::string, Vector<float>>> state_buffers() const override;

 private:
  void allocate_state(std::int64_t count) override;
  void update(const ExecSpace& exec, const Vector<float>& values, const Vector<float>& gradients,
              float lr, std::int64_t step) override;

  Params params_;
  Vector<float> velocity_;
};

}  // namespace tessera
