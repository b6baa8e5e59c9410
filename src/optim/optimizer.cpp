// The optimizer base: argument checks, the step count, lazy state allocation,
// one profiling region per step; and the factory the deck uses.
#include <tessera/core/profiling.hpp>
#include <tessera/optim/adam.hpp>
#include <tessera/optim/sgd.hpp>

#include <cmath>

namespace tessera {

void Optimizer::step(const ExecSpace& exec, ParameterStore& params, float lr) {
  ScopedRegion region(region_);
  TESSERA_REQUIRE(params.allocated(),
                  "tessera::" << name_ << "::step: the parameter store is not allocated");
  TESSERA_REQUIRE(std::isfinite(lr) && lr >= 0, "tessera::" << name_ << "::step: learning rate "
                                                            << lr << " must be finite and >= 0");
  allocate(params);
  if (sharded()) {
    const std::pair<std::int64_t, std::int64_t> range(shard_offset_, shard_offset_ + shard_count_);
    update(exec, Kokkos::subview(params.values(), range),
           Kokkos::subview(params.gradients(), range), lr, step_count_ + 1);
  } else {
    update(exec, params.values(), params.gradients(), lr, step_count_ + 1);
  }
  ++step_count_;
}

void Optimizer::set_shard(std::int64_t offset, std::int64_t count) {
  TESSERA_REQUIRE(store_count_ < 0, "tessera::" << name_
                                                << "::set_shard: the state is allocated already; "
                                                   "shard the optimizer before its first step");
  TESSERA_REQUIRE(offset >= 0 && count >= 0, "tessera::" << name_ << "::set_shard: offset "
                                                         << offset << " and count " << count
                                                         << " must be >= 0");
  shard_offset_ = offset;
  shard_count_ = count;
}

void Optimizer::set_step_count(std::int64_t steps) {
  TESSERA_REQUIRE(steps >= 0,
                  "tessera::" << name_ << "::set_step_count: " << steps << " must be >= 0");
  step_count_ = steps;
}

void Optimizer::allocate(const ParameterStore& params) {
  if (store_count_ == params.count()) return;
  TESSERA_REQUIRE(store_count_ < 0, "tessera::" << name_ << ": state serves " << store_count_
                                                << " parameters, the store has " << params.count()
                                                << "; one optimizer serves one model");
  TESSERA_REQUIRE(!sharded() || shard_offset_ + shard_count_ <= params.count(),
                  "tessera::" << name_ << ": the shard [" << shard_offset_ << ", "
                              << shard_offset_ + shard_count_ << ") lies outside the store's "
                              << params.count() << " parameters");
  allocate_state(sharded() ? shard_count_ : params.count());
  store_count_ = params.count();
}

namespace {
void require_unit_interval(const char* what, float value, bool open_top) {
  TESSERA_REQUIRE(value >= 0 && (open_top ? value < 1 : value <= 1),
                  "tessera::make_optimizer: " << what << " " << value << " must be in [0, 1"
                                              << (open_top ? ")" : "]"));
}
}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerParams& p) {
  require_unit_interval("weight_decay", p.weight_decay(), false);
  if (p.type == "sgd") {
    require_unit_interval("momentum", p.sgd.momentum, true);
    return std::make_unique<SGD>(p.sgd);
  }
  if (p.type == "adam" || p.type == "adamw") {
    require_unit_interval("beta1", p.adam.beta1, true);
    require_unit_interval("beta2", p.adam.beta2, true);
    TESSERA_REQUIRE(
        p.adam.eps > 0 && std::isfinite(p.adam.eps),
        "tessera::make_optimizer: eps " << p.adam.eps << " must be positive and finite");
    if (p.type == "adam") return std::make_unique<Adam>(p.adam);
    return std::make_unique<AdamW>(p.adam);
  }
  TESSERA_REQUIRE(
      false, "tessera::make_optimizer: unknown type '" << p.type << "'; allowed: sgd, adam, adamw");
  return nullptr;
}

}  // namespace tessera
