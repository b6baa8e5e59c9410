// What a model is, for people and benchmarks: each layer's input shapes and
// work, and the summary table tessera-train prints.
#include <tessera/model/model.hpp>

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <sstream>

namespace tessera {

Shapes Model::layer_input_shapes(std::size_t i, std::int64_t batch) const {
  Shapes inputs;
  for (auto node : layer_inputs_.at(i)) inputs.push_back(with_batch(sample_shapes_[node], batch));
  return inputs;
}

std::int64_t Model::flops_per_sample() const {
  std::int64_t flops = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    flops += layers_[i]->flops_per_sample(layer_input_shapes(i, 1));
  return flops;
}

LayerCost Model::layer_cost(std::size_t i) const {
  TESSERA_REQUIRE(inferred_ && i < layers_.size(),
                  "tessera::Model::layer_cost: layer " << i << " of " << layers_.size());
  return layers_[i]->cost(layer_input_shapes(i, 1), true);
}

std::string Model::summary() const {
  std::ostringstream os;
  // The type column fits the longest type name ("CausalSelfAttention").
  std::size_t type_width = 12;
  for (const auto& layer : layers_) type_width = std::max(type_width, std::strlen(layer->type()));
  const int tw = static_cast<int>(type_width) + 2;
  os << std::left << std::setw(16) << "layer" << std::setw(tw) << "type" << std::setw(18)
     << "output" << std::right << std::setw(12) << "parameters"
     << "  inputs\n";
  os << std::left << std::setw(16) << "input" << std::setw(tw) << "" << std::setw(18)
     << to_string(sample_shape_) << "\n";
  std::int64_t total = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::int64_t count = 0;
    for (const auto& e : parameters_.entries())
      if (e.layer == layers_[i]->name()) count += e.spec.shape.numel();
    total += count;
    std::string inputs;
    for (auto node : layer_inputs_[i])
      inputs += (inputs.empty() ? "" : ", ") +
                (node == 0 ? std::string("input") : layers_[node - 1]->name());
    os << std::left << std::setw(16) << layers_[i]->name() << std::setw(tw) << layers_[i]->type()
       << std::setw(18) << to_string(sample_shapes_[i + 1]) << std::right << std::setw(12) << count
       << "  " << inputs << "\n";
  }
  os << "total parameters: " << total << ", forward FLOPs per sample: " << flops_per_sample()
     << "\n";
  return os.str();
}

}  // namespace tessera
