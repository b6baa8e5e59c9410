// The four gradient exchanges (train/exchange.hpp).
#include <tessera/optim/clip.hpp>
#include <tessera/train/exchange.hpp>

namespace tessera {

double GradientExchange::gradient_norm(const ExecSpace& exec, const ParameterStore& params,
                                       const Kokkos::View<double*, MemSpace>& scratch) const {
  return tessera::gradient_norm(exec, params, scratch);
}

namespace {

class NoExchange final : public GradientExchange {
 public:
  const char* name() const override { return "none"; }
};

// Data parallel: buckets summed while the last backward runs.
class BucketExchange : public GradientExchange {
 public:
  BucketExchange(const Communicator& comm, Model& model, const TrainOptions& options)
      : model_(model),
        averager_(comm, model, options.bucket_bytes, options.overlap, options.gradient_dtype) {
    Model::LayerHooks hooks;
    // Only the last micro-batch's backward completes the buckets.
    hooks.after_backward = [this](std::size_t layer) {
      if (armed_) averager_.layer_done(layer);
    };
    hooks_ = model.add_hooks(std::move(hooks));
  }
  ~BucketExchange() override { model_.remove_hooks(hooks_); }
  BucketExchange(const BucketExchange&) = delete;
  BucketExchange& operator=(const BucketExchange&) = delete;

  const char* name() const override { return "buckets"; }
  void begin_last_backward() override {
    averager_.begin();
    armed_ = true;
  }
  bool finish() override {
    armed_ = false;
    averager_.finish();
    return true;
  }
  double overlapped_seconds() const override { return averager_.overlapped_seconds(); }
  double overlap_fraction() const override { return averager_.overlap_fraction(); }
  void reset_times() override { averager_.reset_times(); }

 protected:
  Model& model_;
  GradientAverager averager_;

 private:
  std::size_t hooks_ = 0;
  bool armed_ = false;
};

// ZeRO-1: the buckets reduced to slices, the parameters gathered after the
// update, in buckets the next forward pass waits for when overlapped.
class ShardedExchange final : public BucketExchange {
 public:
  ShardedExchange(const Communicator& comm, Model& model, Optimizer& optimizer,
                  const TrainOptions& options)
      : BucketExchange(comm, model, options),
        sharding_(comm, optimizer, model.parameters()),
        overlap_(options.overlap_gather) {
    averager_.reduce_to_slices(sharding_.offsets(), sharding_.counts());
    if (!overlap_) return;
    sharding_.gather_in_buckets(model.parameters(), averager_.buckets());
    Model::LayerHooks hooks;
    hooks.before_forward = [this](std::size_t layer) { sharding_.wait_for_layer(layer); };
    gather_hooks_ = model.add_hooks(std::move(hooks));
  }
  ~ShardedExchange() override {
    if (overlap_) model_.remove_hooks(gather_hooks_);
  }

  const char* name() const override { return "ZeRO-1"; }
  double gradient_norm(const ExecSpace& exec, const ParameterStore& params,
                       const Kokkos::View<double*, MemSpace>& scratch) const override {
    return sharding_.gradient_norm(exec, params, scratch);
  }
  bool share_parameters(ParameterStore& params) override {
    if (overlap_)
      sharding_.start_gather();
    else
      sharding_.gather_parameters(params);
    return true;
  }
  void settle() override { sharding_.settle(); }
  OptimizerSharding* slices() const override { return &sharding_; }
  double parameter_wait_seconds() const override { return sharding_.gather_wait_seconds(); }
  void reset_times() override {
    BucketExchange::reset_times();
    sharding_.reset_gather_wait();
  }

 private:
  mutable OptimizerSharding sharding_;
  bool overlap_;
  std::size_t gather_hooks_ = 0;
};

// A pipeline stage: its ranks sum the stage's gradients after the step.
class StageExchange final : public GradientExchange {
 public:
  StageExchange(Model& model, Optimizer& optimizer, Pipeline& pipeline)
      : model_(model), pipeline_(pipeline) {
    std::vector<int> offsets, counts;
    pipeline.slices(model, model.parameters(), offsets, counts);
    slices_ = std::make_unique<OptimizerSharding>(pipeline.line(), optimizer, offsets, counts);
  }

  const char* name() const override { return "stage"; }
  bool finish() override {
    if (pipeline_.data().size() == 1) return false;
    // Zero outside the stage: the stage's slice is all there is to sum.
    pipeline_.data().sum(Vector<float>(model_.parameters().gradients().data() + slices_->offset(),
                                       slices_->count()));
    return true;
  }
  double gradient_norm(const ExecSpace& exec, const ParameterStore& params,
                       const Kokkos::View<double*, MemSpace>& scratch) const override {
    return pipeline_.gradient_norm(exec, params, scratch);
  }
  OptimizerSharding* slices() const override { return slices_.get(); }

 private:
  Model& model_;
  Pipeline& pipeline_;
  std::unique_ptr<OptimizerSharding> slices_;
};

}  // namespace

std::unique_ptr<GradientExchange> make_exchange(Model& model, Optimizer& optimizer,
                                                const TrainOptions& options,
                                                const Communicator* comm, Pipeline* pipeline) {
  if (pipeline) return std::make_unique<StageExchange>(model, optimizer, *pipeline);
  if (comm == nullptr || comm->size() == 1) return std::make_unique<NoExchange>();
  if (options.shard_optimizer)
    return std::make_unique<ShardedExchange>(*comm, model, optimizer, options);
  return std::make_unique<BucketExchange>(*comm, model, options);
}

}  // namespace tessera
