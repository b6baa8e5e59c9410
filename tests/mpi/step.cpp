// Trainer's public step: a loop of one's own over begin_epoch, batch, step
// and end_epoch gives the same bits as train_epoch, with each gradient
// exchange (buckets, ZeRO-1 with and without the overlapped gather, none)
// and with micro-batches; gtest_ranks.sh runs it on 2 and 3 ranks.
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/optim/adam.hpp>
#include <tessera/train/trainer.hpp>

#include "../tessera_test.hpp"

namespace {

using namespace tessera;

struct Mode {
  const char* name;
  const char* exchange;
  bool shard, overlap_gather;
  std::int64_t micro_batches;
};

// What a run leaves: every step's loss and gradient norm, the epochs' train
// loss, the final parameters.
struct Trace {
  std::vector<double> losses;
  std::vector<float> norms;
  std::vector<double> epoch_losses;
  std::vector<float> parameters;
};

constexpr int epochs = 2;

Trace train(const Communicator& comm, const Mode& mode, bool own_loop) {
  TrainOptions options;
  options.batch_size = 20;  // 96 samples: four batches of 20, then 16
  options.accumulation_steps = mode.micro_batches;
  options.epochs = epochs;
  options.seed = 11;
  options.schedule.base_lr = 0.02f;
  options.shard_optimizer = mode.shard;
  options.overlap_gather = mode.overlap_gather;
  options.bucket_bytes = 256;  // several buckets
  Model model(Shape{2});
  model.add<Dense>("fc1", 16).add<ReLU>("relu").add<Dense>("fc2", 2);
  model.compile(options.max_shard(comm.size()), options.seed);
  Adam adam;
  Trainer trainer(model, adam, options, &comm);
  EXPECT_STREQ(trainer.exchange().name(), mode.exchange);
  EXPECT_STREQ(trainer.schedule().name(), "micro-batches");
  Trace trace;
  trainer.on_step([&](const StepReport& r) {
    trace.losses.push_back(r.loss);
    trace.norms.push_back(r.grad_norm);
  });
  const Dataset data = test::xor_dataset(96, 3);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    if (!own_loop) {
      trace.epoch_losses.push_back(trainer.train_epoch(data, epoch).train.loss);
      continue;
    }
    const EpochPlan plan = trainer.begin_epoch(data, epoch);
    EXPECT_EQ(plan.first, 0);
    EXPECT_EQ(plan.last, 5);
    for (std::int64_t s = plan.first; s < plan.last; ++s) {
      const Batch b = trainer.batch(s);
      EXPECT_EQ(b.size, s + 1 < plan.last ? 20 : 16);
      const StepReport r = trainer.step(b);
      EXPECT_EQ(r.step_in_epoch, s);
      EXPECT_EQ(r.batch, b.size);
    }
    trace.epoch_losses.push_back(trainer.end_epoch().train.loss);
  }
  trainer.settle_parameters();
  trace.parameters = test::to_host(model.parameters().values());
  return trace;
}

class Step : public ::testing::TestWithParam<Mode> {};

TEST_P(Step, AnOwnLoopOverStepIsTrainEpoch) {
  const Communicator comm;
  ASSERT_GE(comm.size(), 2) << "run under mpiexec with at least 2 ranks";
  const Trace epoch = train(comm, GetParam(), false), own = train(comm, GetParam(), true);
  ASSERT_EQ(own.losses.size(), 10u);
  EXPECT_EQ(own.losses, epoch.losses);
  EXPECT_EQ(own.norms, epoch.norms);
  EXPECT_EQ(own.epoch_losses, epoch.epoch_losses);
  EXPECT_EQ(own.parameters, epoch.parameters);
  // The loop trained: the loss moved.
  EXPECT_NE(own.losses.front(), own.losses.back());
}

INSTANTIATE_TEST_SUITE_P(
    Exchanges, Step,
    ::testing::Values(Mode{"buckets", "buckets", false, false, 1},
                      Mode{"micro_batches", "buckets", false, false, 2},
                      Mode{"zero1", "ZeRO-1", true, false, 1},
                      Mode{"zero1_overlapped_gather", "ZeRO-1", true, true, 2}),
    [](const ::testing::TestParamInfo<Mode>& info) { return std::string(info.param.name); });

// One rank alone exchanges nothing; the same loop runs.
TEST(Step, OneRankExchangesNothing) {
  const Communicator self(MPI_COMM_SELF);
  const Mode alone{"none", "none", false, false, 1};
  const Trace epoch = train(self, alone, false), own = train(self, alone, true);
  EXPECT_EQ(own.losses, epoch.losses);
  EXPECT_EQ(own.parameters, epoch.parameters);
}

// Misuse is refused with what to do instead.
TEST(Step, StepsComeFromTheEpochBegun) {
  const Communicator comm;
  TrainOptions options;
  options.batch_size = 20;
  Model model(Shape{2});
  model.add<Dense>("fc", 2);
  model.compile(options.max_shard(comm.size()), 1);
  Adam adam;
  Trainer trainer(model, adam, options, &comm);
  test::expect_error([&] { trainer.step(Batch{0, 0, 20}); }, "begin_epoch() first");
  const Dataset data = test::xor_dataset(96, 3);
  const EpochPlan plan = trainer.begin_epoch(data, 0);
  test::expect_error(
      [&] {
        trainer.step(Batch{1, 0, 20});
      },
      "batch [0, 20) is not step 2 of the epoch; take it from batch()");
  test::expect_error([&] { trainer.batch(plan.steps); }, "step 6 of an epoch of 5 steps");
  test::expect_error([&] { trainer.begin_epoch(data, 0, 5); }, "cannot start at step 6");
}

}  // namespace
