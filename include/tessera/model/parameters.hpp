// All trainable parameters of a model live in one contiguous buffer and all
// gradients in another, laid out from a table of (layer, name, shape). An
// allreduce, an optimizer sweep or a checkpoint touches one array each.
#pragma once

#include <tessera/core/tensor.hpp>
#include <tessera/layers/parameter_spec.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

struct ParameterEntry {
  std::string layer;
  ParameterSpec spec;
  std::int64_t offset = 0;  // in elements, into values() and gradients()
};

class ParameterStore {
 public:
  // with_gradients = false for non-trainable state.
  explicit ParameterStore(bool with_gradients = true) : with_gradients_(with_gradients) {}

  // Reserves a slot; returns its index. Only before allocate().
  std::size_t add(const std::string& layer, const ParameterSpec& spec);
  void allocate();
  bool allocated() const { return values_.size() > 0 || count_ == 0; }

  std::int64_t count() const { return count_; }
  const std::vector<ParameterEntry>& entries() const { return entries_; }
  const Vector<float>& values() const { return values_; }
  const Vector<float>& gradients() const { return gradients_; }

  Tensor<float> value(std::size_t index) const { return slice(values_, index); }
  Tensor<float> gradient(std::size_t index) const {
    TESSERA_REQUIRE(with_gradients_, "tessera::ParameterStore::gradient: entry "
                                         << index
                                         << " belongs to a store without gradients (state)");
    return slice(gradients_, index);
  }

  // Seeded initialisation of every entry according to its Init.
  void initialize(const ExecSpace& exec, std::uint64_t seed);
  void zero_gradients(const ExecSpace& exec);

 private:
  Tensor<float> slice(const Vector<float>& buffer, std::size_t index) const;

  std::vector<ParameterEntry> entries_;
  std::int64_t count_ = 0;
  bool with_gradients_ = true;
  Vector<float> values_;
  Vector<float> gradients_;
};

}  // namespace tessera
