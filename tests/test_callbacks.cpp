// Callbacks (train/callbacks.hpp): the list runs in order and tells those
// after a stopping callback that the epoch is the last; early stopping
// counts evaluations without improvement.
#include <tessera/train/callbacks.hpp>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

EpochSummary evaluated_epoch(int epoch, double loss) {
  EpochSummary s;
  s.report.epoch = epoch;
  s.evaluated = true;
  s.evaluation.loss = loss;
  return s;
}

TEST(Callbacks, TheListRunsInOrderAndAStopMakesTheEpochTheLast) {
  std::vector<std::string> calls;
  CallbackList list;
  list.add(
      "first", true, [&](const StepReport&) { calls.push_back("first step"); },
      [&](EpochSummary& e) { calls.push_back("first " + std::to_string(e.last)); });
  list.add("stopper", false, {}, [&](EpochSummary& e) {
    e.stop = e.report.epoch == 1;
    e.stop_reason = "enough";
  });
  list.add("after", false, {},
           [&](EpochSummary& e) { calls.push_back("after " + std::to_string(e.last)); });
  EXPECT_EQ(list.describe(), "first (collective), stopper, after");
  list.on_step(StepReport{});
  EpochSummary e;
  list.on_epoch(e);
  e.report.epoch = 1;
  list.on_epoch(e);
  EXPECT_EQ(calls,
            (std::vector<std::string>{"first step", "first 0", "after 0", "first 0", "after 1"}));
  EXPECT_TRUE(e.stop && e.last);
}

TEST(Callbacks, EarlyStoppingCountsEvaluationsWithoutImprovement) {
  EarlyStopping stop(2, 0.0);
  const double losses[] = {1.0, 0.9, 0.95, 0.8, 0.85, 0.8};
  std::vector<bool> stopped;
  for (int epoch = 0; epoch < 6; ++epoch) {
    EpochSummary s = evaluated_epoch(epoch, losses[epoch]);
    stop.on_epoch(s);
    stopped.push_back(s.stop);
  }
  // 0.8 at epoch 4 is the best; 0.85 and 0.8 (not lower) use up the patience.
  EXPECT_EQ(stopped, (std::vector<bool>{false, false, false, false, false, true}));
  EXPECT_NE(stop.reason().find("the best, 0.8 after epoch 4, by more than 0 in the 2 evaluation(s) "
                               "since (training.early_stop_patience = 2)"),
            std::string::npos)
      << stop.reason();
  // Epochs without an evaluation do not count.
  EarlyStopping quiet(1, 0.0);
  EpochSummary s = evaluated_epoch(0, 1.0);
  quiet.on_epoch(s);
  s = evaluated_epoch(1, 2.0);
  s.evaluated = false;
  quiet.on_epoch(s);
  EXPECT_FALSE(s.stop);
  EXPECT_FALSE(quiet.exhausted());
}

TEST(Callbacks, EarlyStoppingMinDeltaAndReplay) {
  // A fall of 0.05 is not more than min_delta 0.1.
  EarlyStopping stop(1, 0.1);
  stop.observe(1.0, 0);
  stop.observe(0.95, 1);
  EXPECT_TRUE(stop.exhausted());
  // Observing the same evaluations again (a restart) gives the same state.
  EarlyStopping replayed(1, 0.1);
  replayed.observe(1.0, 0);
  replayed.observe(0.95, 1);
  EXPECT_EQ(replayed.reason(), stop.reason());
  // A fall of more than min_delta resets the count.
  EarlyStopping fresh(2, 0.1);
  fresh.observe(1.0, 0);
  fresh.observe(0.95, 1);
  fresh.observe(0.8, 2);
  EXPECT_FALSE(fresh.exhausted());
  test::expect_error([] { EarlyStopping(0, 0.0); }, "patience 0 must be >= 1");
  test::expect_error([] { EarlyStopping(1, -1.0); }, "finite and >= 0");
}

}  // namespace
