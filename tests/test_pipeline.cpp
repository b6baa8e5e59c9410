// Pipeline stages without MPI traffic: the 1F1B order, where a model may be
// cut, balanced and named plans, and model replicas that share weights.
// (Stages on several ranks: tests/mpi/pipeline.sh.)
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/structural.hpp>
#include <tessera/parallel/pipeline.hpp>

#include <algorithm>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

TEST(Pipeline, OneForwardOneBackwardOrder) {
  for (int stages : {1, 2, 3, 4})
    for (std::int64_t micro : {1, 2, 3, 5, 8})
      for (int s = 0; s < stages; ++s) {
        const auto ops = pipeline_schedule(s, stages, micro, true);
        ASSERT_EQ(static_cast<std::int64_t>(ops.size()), 2 * micro);
        std::int64_t forwards = 0, backwards = 0, most = 0;
        for (const PipelineOp& op : ops) {
          // Forwards and backwards each in micro-batch order; a backward
          // only after its forward.
          if (op.forward) {
            EXPECT_EQ(op.micro, forwards++);
          } else {
            EXPECT_EQ(op.micro, backwards++);
            EXPECT_LT(op.micro, forwards);
          }
          most = std::max(most, forwards - backwards);
        }
        EXPECT_EQ(most, pipeline_in_flight(s, stages, micro))
            << "stage " << s << " of " << stages << ", " << micro << " micro-batches";
      }
  // The last stage alternates; the first runs S - 1 forwards ahead.
  const auto last = pipeline_schedule(2, 3, 3, true);
  for (std::size_t i = 0; i < last.size(); ++i) EXPECT_EQ(last[i].forward, i % 2 == 0);
  const auto first = pipeline_schedule(0, 3, 4, true);
  EXPECT_TRUE(first[0].forward && first[1].forward && first[2].forward && !first[3].forward);
  // Evaluation: the forwards only.
  const auto eval = pipeline_schedule(1, 3, 4, false);
  ASSERT_EQ(eval.size(), 4u);
  for (std::size_t i = 0; i < eval.size(); ++i)
    EXPECT_TRUE(eval[i].forward && eval[i].micro == static_cast<std::int64_t>(i));
}

// fc1 -> fc2 -> relu -> add(fc1, relu) -> fc3 -> relu2 -> fc4
std::unique_ptr<Model> residual_model() {
  auto model = std::make_unique<Model>(Shape{6});
  model->add<Dense>("fc1", 8).add<Dense>("fc2", 8).add<ReLU>("relu");
  model->add<Add>("add", std::vector<std::string>{"fc1", "relu"});
  model->add<Dense>("fc3", 32).add<ReLU>("relu2").add<Dense>("fc4", 3);
  return model;
}

TEST(Pipeline, StagesStartOnlyWhereOneActivationCrosses) {
  auto model = residual_model();
  model->compile(4, 1);
  // Not at relu or add: add still reads fc1's output.
  EXPECT_EQ(pipeline_cut_points(*model), (std::vector<std::size_t>{1, 4, 5, 6}));
  const PipelinePlan named = pipeline_at(*model, {"fc2", "relu2"});
  EXPECT_EQ(named.first, (std::vector<std::size_t>{0, 1, 5}));
  EXPECT_EQ(named.stage(1).first, 1u);
  EXPECT_EQ(named.stage(1).last, 5u);
  test::expect_error([&] { pipeline_at(*model, {"relu"}); },
                     "tessera::pipeline_at: a stage cannot start at layer 'relu'");
  test::expect_error([&] { pipeline_at(*model, {"relu"}); },
                     "stages may start at fc2, fc3, relu2, fc4");
  test::expect_error(
      [&] {
        pipeline_at(*model, {"fc3", "fc2"});
      },
      "stage boundaries must follow the layer order; 'fc2' comes before 'fc3'");
  test::expect_error([&] { pipeline_at(*model, {"nope"}); }, "no layer is named 'nope'");
  test::expect_error([&] { balanced_pipeline(*model, 6); },
                     "6 stages asked of a model that can be cut in 5 places at most");
}

TEST(Pipeline, BalancedPlansMinimiseTheLargestStage) {
  auto model = residual_model();
  model->compile(4, 1);
  const std::size_t n = model->layers().size();
  std::vector<double> cost(n);
  for (std::size_t i = 0; i < n; ++i) cost[i] = pipeline_layer_cost(*model, i);
  const auto largest = [&](const std::vector<std::size_t>& first) {
    double worst = 0;
    for (std::size_t s = 0; s < first.size(); ++s) {
      const std::size_t end = s + 1 < first.size() ? first[s + 1] : n;
      double sum = 0;
      for (std::size_t i = first[s]; i < end; ++i) sum += cost[i];
      worst = std::max(worst, sum);
    }
    return worst;
  };
  const auto cuts = pipeline_cut_points(*model);
  for (int stages = 1; stages <= 3; ++stages) {
    const PipelinePlan plan = balanced_pipeline(*model, stages);
    ASSERT_EQ(plan.stages(), stages);
    for (int s = 1; s < stages; ++s)
      EXPECT_NE(std::find(cuts.begin(), cuts.end(), plan.first[s]), cuts.end());
    // Every choice of boundaries among the cut points is at least as large.
    double best = 1e300;
    if (stages == 1) best = largest({0});
    for (std::size_t a = 0; a < cuts.size(); ++a) {
      if (stages == 2) best = std::min(best, largest({0, cuts[a]}));
      for (std::size_t b = a + 1; stages == 3 && b < cuts.size(); ++b)
        best = std::min(best, largest({0, cuts[a], cuts[b]}));
    }
    EXPECT_EQ(largest(plan.first), best) << stages << " stages";
  }
  // fc3 (6 x 32 after 8) and fc4 dominate: two stages split before fc4 or relu2.
  const std::string text = describe_pipeline(*model, balanced_pipeline(*model, 2));
  EXPECT_NE(text.find("stage 1: fc1.."), std::string::npos) << text;
  EXPECT_NE(text.find("% of the cost), stage 2: "), std::string::npos) << text;
}

TEST(Pipeline, ReplicasShareWeightsGradientsAndState) {
  const std::int64_t batch = 3;
  auto model = residual_model(), replica = residual_model();
  model->compile(batch, 5);
  replica->compile(batch, *model);
  EXPECT_EQ(replica->parameters().values().data(), model->parameters().values().data());
  EXPECT_EQ(replica->parameters().gradients().data(), model->parameters().gradients().data());
  EXPECT_NE(replica->input(batch).data(), model->input(batch).data());
  // The same inputs give the same outputs; both backward passes add to the
  // one gradient buffer: twice one pass.
  const auto x = test::random_values(batch * 6, 3), dy = test::random_values(batch * 3, 4);
  StepContext ctx;
  for (Model* m : {model.get(), replica.get()}) {
    test::from_host(m->input(batch).flat(), x);
    m->forward(batch, ctx);
    test::from_host(m->output_gradient(batch).flat(), dy);
  }
  EXPECT_EQ(test::to_host(model->activation(6, batch).flat()),
            test::to_host(replica->activation(6, batch).flat()));
  model->zero_gradients();
  model->backward(batch, ctx);
  const auto once = test::to_host(model->parameters().gradients());
  replica->backward(batch, ctx);
  const auto twice = test::to_host(model->parameters().gradients());
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_EQ(twice[i], 2 * once[i]) << i;
  // A replica of another model is refused.
  auto other = std::make_unique<Model>(Shape{6});
  other->add<Dense>("fc1", 9);
  test::expect_error([&] { other->compile(batch, *model); },
                     "a replica must have the layers and parameters of the model it shares "
                     "weights with");
}

}  // namespace
