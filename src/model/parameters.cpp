// Parameter layout and initialisation over one contiguous buffer.
#include <tessera/kernels/init.hpp>
#include <tessera/model/parameters.hpp>

#include <cmath>

namespace tessera {

namespace {
// Entries start on 64-byte boundaries so vector loads never straddle two.
constexpr std::int64_t alignment_elements = 16;
}  // namespace

std::size_t ParameterStore::add(const std::string& layer, const ParameterSpec& spec) {
  TESSERA_REQUIRE(values_.size() == 0, "tessera::ParameterStore::add: layer '"
                                           << layer << "' added parameter '" << spec.name
                                           << "' after allocate()");
  ParameterEntry entry{layer, spec, count_};
  count_ += (spec.shape.numel() + alignment_elements - 1) / alignment_elements * alignment_elements;
  entries_.push_back(entry);
  return entries_.size() - 1;
}

void ParameterStore::allocate() {
  values_ = Vector<float>("tessera::parameters", count_);
  if (with_gradients_) gradients_ = Vector<float>("tessera::gradients", count_);
}

Tensor<float> ParameterStore::slice(const Vector<float>& buffer, std::size_t index) const {
  TESSERA_REQUIRE(index < entries_.size(),
                  "tessera::ParameterStore: entry " << index << " of " << entries_.size());
  TESSERA_REQUIRE(buffer.size() > 0 || count_ == 0,
                  "tessera::ParameterStore: parameters used before allocate()");
  const auto& e = entries_[index];
  const std::int64_t n = e.spec.shape.numel();
  return Tensor<float>(Kokkos::subview(buffer, std::make_pair(e.offset, e.offset + n)),
                       e.spec.shape);
}

void ParameterStore::initialize(const ExecSpace& exec, std::uint64_t seed) {
  ScopedRegion region("tessera::ParameterStore::initialize");
  Kokkos::deep_copy(exec, values_, 0.0f);
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const auto& spec = entries_[i].spec;
    const double he = 2.0 / static_cast<double>(spec.fan_in);
    const double xavier = 2.0 / static_cast<double>(spec.fan_in + spec.fan_out);
    const auto v = value(i).flat();
    switch (spec.init) {
      case Init::zeros:
        break;
      case Init::ones:
        Kokkos::deep_copy(exec, v, 1.0f);
        break;
      // A uniform [-b, b) has variance b^2 / 3: b = sqrt(3 * variance).
      case Init::he_uniform:
        kernels::init_uniform(exec, v, float(std::sqrt(3 * he)), seed, i);
        break;
      case Init::he_normal:
        kernels::init_normal(exec, v, float(std::sqrt(he)), seed, i);
        break;
      case Init::xavier_uniform:
        kernels::init_uniform(exec, v, float(std::sqrt(3 * xavier)), seed, i);
        break;
      case Init::xavier_normal:
        kernels::init_normal(exec, v, float(std::sqrt(xavier)), seed, i);
        break;
    }
  }
  exec.fence();
}

void ParameterStore::zero_gradients(const ExecSpace& exec) {
  if (gradients_.size() > 0) Kokkos::deep_copy(exec, gradients_, 0.0f);
}

}  // namespace tessera
