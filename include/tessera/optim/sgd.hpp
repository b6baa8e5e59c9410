// Stochastic gradient descent over a model's flat parameter buffer.
#pragma once

#include <tessera/kernels/sgd.hpp>
#include <tessera/model/parameters.hpp>

namespace tessera {

class Sgd {
 public:
  using Params = kernels::SgdParams;
  explicit Sgd(const Params& params) : params_(params) {}

  // One update of every parameter in store from its gradient.
  void step(ParameterStore& store);
  const Params& params() const { return params_; }

 private:
  Params params_;
  Vector<float> velocity_;
};

}  // namespace tessera
