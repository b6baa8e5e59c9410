// Optimizer hyperparameters, defined once: the kernels, the optimizers, the
// deck reader and checkpoints all use these structs. Plain C++ (the deck
// reader includes it; GPU builds compile that reader with the host compiler).
#pragma once

#include <tessera/settings/range.hpp>

#include <string>

namespace tessera {

// SGD: g = grad + weight_decay * p; v = momentum * v + g;
// p -= lr * (nesterov ? g + momentum * v : v).
struct SgdParams {
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;

  static constexpr Range momentum_range = Range::closed(0, 0.999999);
};

// Adam (weight decay through the gradient) and AdamW (decoupled).
struct AdamParams {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;

  static constexpr Range beta_range = Range::closed(0, 0.999999);  // beta1 and beta2
  static constexpr Range eps_range = Range::open_closed(0, 1);
};

// The optimizer a run uses; each type reads its own member.
struct OptimizerParams {
  std::string type = "sgd";  // "sgd" | "adam" | "adamw"
  SgdParams sgd;
  AdamParams adam;

  // The defaults of `type`: AdamW decays weights by 0.01 (PyTorch's default).
  static OptimizerParams for_type(const std::string& type);
  // The learning rate when a run names none: 0.01 for SGD, 0.001 for Adam and AdamW.
  static float default_lr(const std::string& type);
  // The weight decay of the type in use.
  float weight_decay() const { return type == "sgd" ? sgd.weight_decay : adam.weight_decay; }

  static constexpr Range weight_decay_range = Range::closed(0, 1);  // every type's
};

}  // namespace tessera
