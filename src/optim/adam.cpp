// Adam and AdamW over the flat parameter buffer.
#include <tessera/optim/adam.hpp>

namespace tessera {

Adam::Adam(const std::string& name, const Params& params, kernels::WeightDecay decay_mode)
    : Optimizer(name), params_(params), decay_mode_(decay_mode) {}

std::vector<std::pair<std::string, Vector<float>>> Adam::state_buffers() const {
  if (!state_allocated()) return {};
  return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
}

void Adam::allocate_state(std::int64_t count) {
  exp_avg_ = Vector<float>("tessera::" + name() + "::exp_avg", count);
  exp_avg_sq_ = Vector<float>("tessera::" + name() + "::exp_avg_sq", count);
}

void Adam::update(const ExecSpace& exec, const Vector<float>& values,
                  const Vector<float>& gradients, float lr, std::int64_t step) {
  kernels::adam_step(exec, params_, decay_mode_, lr, step, values, gradients, exp_avg_,
                     exp_avg_sq_);
}

}  // namespace tessera
