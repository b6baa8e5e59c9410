// SGD over the flat parameter buffer.
#include <tessera/optim/sgd.hpp>

namespace tessera {

void Sgd::step(ParameterStore& store) {
  ScopedRegion region("tessera::Sgd::step");
  if (velocity_.size() != store.values().size())
    velocity_ = Vector<float>("tessera::Sgd::velocity", store.values().size());
  kernels::sgd_step(ExecSpace(), params_, store.values(), store.gradients(), velocity_);
}

}  // namespace tessera
