// A sharded optimizer's parameters gathered during the next forward pass
// (OptimizerSharding::start_gather, wait_for_layer, settle); gtest_ranks.sh
// runs it under mpiexec on 2 and 3 ranks. Each round, every rank writes the
// round's values into its own slice and marks the rest of its buffer as
// stale; the ranks other than 0 start their gather late, so on rank 0 a
// layer that did not wait for its bucket would read stale values.
#include <tessera/optim/sgd.hpp>
#include <tessera/parallel/gradient_averager.hpp>
#include <tessera/parallel/optimizer_sharding.hpp>

#include <chrono>
#include <thread>

#include "../tessera_test.hpp"
#include "dense_stack.hpp"

namespace {

using namespace tessera;

float fresh(int round, std::int64_t i) { return static_cast<float>(round * 100000 + i); }

// The dense stack's parameters sharded over the ranks, gathered in its
// gradient buckets (one per layer).
struct Sharded {
  Communicator comm;
  std::unique_ptr<Model> model = test::dense_stack();
  GradientAverager averager{comm, *model, 256};
  SGD sgd;
  OptimizerSharding sharding{comm, sgd, model->parameters()};

  const ParameterStore& params() const { return model->parameters(); }
  // This rank's slice holds the round's values, the rest a stale value.
  void write_own_slice(int round) const {
    std::vector<float> mine(static_cast<std::size_t>(params().count()),
                            -1.0f - static_cast<float>(comm.rank()));
    for (std::int64_t i = sharding.offset(); i < sharding.offset() + sharding.count(); ++i)
      mine[i] = fresh(round, i);
    test::from_host(params().values(), mine);
  }
  // How many of the first `end` parameters do not hold the round's values
  // (the first few reported).
  int stale(int round, std::int64_t end, const std::string& where) const {
    const auto values = test::to_host(params().values());
    int wrong = 0;
    for (std::int64_t i = 0; i < end; ++i)
      if (values[i] != fresh(round, i) && ++wrong <= 3)
        ADD_FAILURE() << "rank " << comm.rank() << ", round " << round << ", " << where
                      << ": parameter " << i << " is " << values[i] << ", not " << fresh(round, i);
    return wrong;
  }
};

TEST(ParameterGather, EveryLayerFindsItsParametersGatheredWhenAnotherRankStartsLate) {
  Sharded s;
  ASSERT_GE(s.comm.size(), 2) << "run under mpiexec with at least 2 ranks";
  ASSERT_EQ(s.averager.buckets().size(), 5u) << "one bucket per layer";
  s.sharding.gather_in_buckets(s.params(), s.averager.buckets());
  // Where the parameters of layers 0..i end: the bucket of layer i ends there.
  std::vector<std::int64_t> ready_end(s.model->layers().size(), 0);
  for (const auto& b : s.averager.buckets()) ready_end.at(b.ready_after) = b.offset + b.count;
  ASSERT_EQ(ready_end.back(), s.params().count());
  for (int round = 1; round <= 3; ++round) {
    s.write_own_slice(round);
    if (s.comm.rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    s.sharding.start_gather();
    EXPECT_TRUE(s.sharding.gathering());
    for (std::size_t layer = 0; layer < s.model->layers().size(); ++layer) {
      s.sharding.wait_for_layer(layer);
      // Only this prefix is promised; the rest may still be in flight.
      EXPECT_EQ(s.stale(round, ready_end[layer], "before layer " + std::to_string(layer)), 0);
    }
    EXPECT_FALSE(s.sharding.gathering()) << "the last layer's wait completes the gather";
    s.sharding.settle();  // nothing left: a no-op
    EXPECT_EQ(s.stale(round, s.params().count(), "after settle()"), 0);
  }
}

TEST(ParameterGather, SettleCompletesAGatherNoLayerWaitedFor) {
  Sharded s;
  ASSERT_GE(s.comm.size(), 2) << "run under mpiexec with at least 2 ranks";
  s.sharding.gather_in_buckets(s.params(), s.averager.buckets());
  s.write_own_slice(7);
  s.sharding.start_gather();
  test::expect_error([&] { s.sharding.start_gather(); }, "still in flight");
  if (s.comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  s.sharding.settle();
  EXPECT_FALSE(s.sharding.gathering());
  EXPECT_EQ(s.stale(7, s.params().count(), "after settle()"), 0);
}

TEST(ParameterGather, BucketsMustTileTheBufferAndComeFirst) {
  Sharded s;
  test::expect_error([&] { s.sharding.start_gather(); }, "call gather_in_buckets first");
  auto buckets = s.averager.buckets();
  buckets.pop_back();  // the first layer's
  test::expect_error([&] { s.sharding.gather_in_buckets(s.params(), buckets); },
                     "does not follow the buckets before it");
  buckets = s.averager.buckets();
  buckets.erase(buckets.begin());  // the last layer's
  test::expect_error([&] { s.sharding.gather_in_buckets(s.params(), buckets); },
                     "the buckets cover");
}

}  // namespace
