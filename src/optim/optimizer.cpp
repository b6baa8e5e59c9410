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

std::unique_ptr<Optimizer> make_optimizer(const OptimizerParams& p) {
  constexpr const char* who = "tessera::make_optimizer";
  OptimizerParams::weight_decay_range.require(who, "weight_decay", p.weight_decay());
  if (p.type == "sgd") {
    SgdParams::momentum_range.require(who, "momentum", p.sgd.momentum);
    return std::make_unique<SGD>(p.sgd);
  }
  if (p.type == "adam" || p.type == "adamw") {
    AdamParams::beta_range.require(who, "beta1", p.adam.beta1);
    AdamParams::beta_range.require(who, "beta2", p.adam.beta2);
    AdamParams::eps_range.require(who, "eps", p.adam.eps);
    if (p.type == "adam") return std::make_unique<Adam>(p.adam);
    return std::make_unique<AdamW>(p.adam);
  }
  TESSERA_REQUIRE(
      false, "tessera::make_optimizer: unknown type '" << p.type << "'; allowed: sgd, adam, adamw");
  return nullptr;
}

}  // namespace tessera
