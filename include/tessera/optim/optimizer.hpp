// The optimizer interface: one update of a model's flat parameter buffer from
// its gradient buffer per step, at a learning rate the caller chooses (a
// schedule), plus the state a checkpoint needs to resume: the step count and
// named buffers laid out exactly like ParameterStore::values().
#pragma once

#include <tessera/model/parameters.hpp>
#include <tessera/settings/optimizer_params.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter in params from its gradient, on exec.
  void step(const ExecSpace& exec, ParameterStore& params, float lr);

  // "SGD", "Adam", "AdamW".
  const std::string& name() const { return name_; }

  // Updates taken so far; Adam's bias corrections depend on it.
  std::int64_t step_count() const { return step_count_; }
  void set_step_count(std::int64_t steps);

  // Zero state sized for params (for its shard); the first step() does this
  // otherwise. Call it before writing saved state into state_buffers().
  void allocate(const ParameterStore& params);

  // Optimizer sharding (ZeRO-1): from now on this optimizer keeps state for,
  // and updates, only the elements [offset, offset + count) of the
  // parameter layout; the other elements are left as they are. Set before
  // the state is allocated.
  void set_shard(std::int64_t offset, std::int64_t count);
  bool sharded() const { return shard_count_ >= 0; }
  std::int64_t shard_offset() const { return shard_offset_; }
  // Whether the state is allocated (by allocate() or the first step); a
  // shard may hold none of the parameters and still be allocated.
  bool state_allocated() const { return store_count_ >= 0; }

  // Named state buffers in the parameter layout, each with params.count()
  // elements (with a shard: the shard's elements); views share storage, so
  // writing into them restores state. Empty before allocate() or the first
  // step().
  virtual std::vector<std::pair<std::string, Vector<float>>> state_buffers() const = 0;

 protected:
  explicit Optimizer(std::string name) : name_(std::move(name)) {}

 private:
  virtual void allocate_state(std::int64_t count) = 0;
  // One update of `values` (the parameters, or the shard's slice of them)
  // from `gradients` (the same slice). step: 1-based index of this update.
  virtual void update(const ExecSpace& exec, const Vector<float>& values,
                      const Vector<float>& gradients, float lr, std::int64_t step) = 0;

  std::string name_;
  std::string region_ = "tessera::" + name_ + "::step";
  std::int64_t step_count_ = 0;
  std::int64_t store_count_ = -1;                     // parameters of the store the state serves
  std::int64_t shard_offset_ = 0, shard_count_ = -1;  // count -1: no shard
};

// The optimizer params.type names, with its hyperparameters checked.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerParams& params);

}  // namespace tessera
