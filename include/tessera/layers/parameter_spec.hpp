// What a layer declares about each of its parameters and state tensors:
// name, shape, and how it starts. The model lays them out in its stores
// (model/parameters.hpp); layers only describe them.
#pragma once

#include <tessera/core/enum_names.hpp>
#include <tessera/core/tensor.hpp>

#include <cstdint>
#include <string>

namespace tessera {

// How a parameter starts. The fan-based kinds draw from counter-based
// random numbers: He (Kaiming, for ReLU) uses fan_in, Xavier (Glorot) uses
// fan_in + fan_out; uniform bounds and normal deviations match PyTorch's
// kaiming_*_(a = 0) and xavier_*_.
enum class Init { zeros, ones, he_uniform, he_normal, xavier_uniform, xavier_normal };
inline constexpr EnumNames<Init, 6> init_names{"initializer",
                                               {{Init::zeros, "zeros"},
                                                {Init::ones, "ones"},
                                                {Init::he_uniform, "he_uniform"},
                                                {Init::he_normal, "he_normal"},
                                                {Init::xavier_uniform, "xavier_uniform"},
                                                {Init::xavier_normal, "xavier_normal"}}};

// "he_uniform" <-> Init::he_uniform, ...; throws tessera::Error listing the names.
inline Init init_from_name(const std::string& name) {
  return init_names.value(name, "tessera::init_from_name");
}
inline const char* init_name(Init init) { return init_names.name(init); }
// Whether an Init draws random numbers scaled by the fans (weights, not biases).
inline bool is_fan_based(Init init) { return init != Init::zeros && init != Init::ones; }

struct ParameterSpec {
  std::string name;  // e.g. "weight"
  Shape shape;
  Init init = Init::zeros;
  std::int64_t fan_in = 0;
  std::int64_t fan_out = 0;
  // Non-empty: this parameter is the parameter of the same name of the
  // layer so named, declared earlier, shared rather than copied (one value,
  // one gradient that both layers add to; an LM head tied to its token
  // embedding). The shapes must agree. Initialised, so that the specs of
  // other layers may leave it out without a missing-initialiser warning.
  std::string tied_layer = {};
};

}  // namespace tessera
