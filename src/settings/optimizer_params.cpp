// The optimizers' defaults by type (settings/optimizer_params.hpp).
#include <tessera/settings/optimizer_params.hpp>

namespace tessera {

OptimizerParams OptimizerParams::for_type(const std::string& type) {
  OptimizerParams p;
  p.type = type;
  if (type == "adamw") p.adam.weight_decay = 0.01f;
  return p;
}

float OptimizerParams::default_lr(const std::string& type) {
  return type == "sgd" ? 0.01f : 0.001f;
}

}  // namespace tessera
