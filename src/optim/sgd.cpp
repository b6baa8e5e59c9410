// SGD over the flat parameter buffer.
#include <tessera/optim/sgd.hpp>

namespace tessera {

SGD::SGD(const Params& params) : Optimizer("SGD"), params_(params) {}

std::vector<std::pair<std::string, Vector<float>>> SGD::state_buffers() const {
  if (!state_allocated()) return {};
  return {{"velocity", velocity_}};
}

void SGD::allocate_state(std::int64_t count) {
  velocity_ = Vector<float>("tessera::SGD::velocity", count);
}

void SGD::update(const ExecSpace& exec, const Vector<float>& values, const Vector<float>& gradients,
                 float lr, std::int64_t) {
  kernels::sgd_step(exec, params_, lr, values, gradients, velocity_);
}

}  // namespace tessera
