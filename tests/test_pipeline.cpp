// Pipeline stages without MPI traffic: the 1F1B order, where a model may be
// cut, balanced and named plans, and model replicas that share weights.
// (Stages on several ranks: tests/mpi/pipeline.sh.)
#include <tessera/core/memory_events.hpp>
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
                     "6 stages asked of a model that splits into 5 at most");
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

TEST(Pipeline, StageWorkspacesHoldTheirLayersAndChainToTheWholeModel) {
  // Every buffer a multiple of 16 bytes (Kokkos reports an allocation's
  // size rounded up to 8).
  const std::int64_t batch = 4;
  auto whole = residual_model();
  // Planned on the inferred shapes, nothing allocated yet.
  whole->infer(batch);
  EXPECT_EQ(pipeline_cut_points(*whole), (std::vector<std::size_t>{1, 4, 5, 6}));
  whole->compile(batch, 5);
  // fc1..add | fc3, relu2 | fc4.
  const std::vector<LayerRange> ranges{{0, 4}, {4, 6}, {6, 7}};
  // Activation and gradient values per sample: the input (6) and fc1..add
  // (8 each) without the input's gradient; add's output and fc3, relu2 (32
  // each); the input again (the last stage loads the labels with it), relu2
  // and fc4 (3) without the input's gradient.
  const std::vector<std::int64_t> expected{(6 + 2 * 32) * batch * 4, 2 * 72 * batch * 4,
                                           (6 + 2 * 35) * batch * 4};
  EXPECT_EQ(whole->activation_bytes(), (6 + 2 * 99) * batch * 4);
  std::vector<std::unique_ptr<Model>> stages;
  for (std::size_t s = 0; s < ranges.size(); ++s) {
    EXPECT_EQ(whole->activation_bytes(ranges[s]), expected[s]) << "stage " << s;
    stages.push_back(residual_model());
    MemoryEventCounter counter;
    stages.back()->compile(batch, *whole, ranges[s]);
    EXPECT_EQ(counter.bytes_allocated("tessera::activation"),
              static_cast<std::uint64_t>(expected[s]))
        << "stage " << s;
  }
  Model &first = *stages[0], &middle = *stages[1], &last = *stages[2];

  // The stages, each handing its output on and the gradient of its input
  // back, compute the whole model's output and gradients bit for bit.
  const auto x = test::random_values(batch * 6, 3), dy = test::random_values(batch * 3, 4);
  StepContext ctx;
  test::from_host(whole->input(batch).flat(), x);
  const auto y = test::to_host(whole->forward(batch, ctx).flat());
  test::from_host(whole->output_gradient(batch).flat(), dy);
  whole->zero_gradients();
  whole->backward(batch, ctx);
  const auto gradients = test::to_host(whole->parameters().gradients());
  whole->zero_gradients();

  test::from_host(first.input(batch).flat(), x);
  Kokkos::deep_copy(middle.activation(3, batch).flat(),
                    first.forward(batch, ctx, ranges[0]).flat());
  Kokkos::deep_copy(last.activation(5, batch).flat(), middle.forward(batch, ctx, ranges[1]).flat());
  EXPECT_EQ(test::to_host(last.forward(batch, ctx, ranges[2]).flat()), y);
  test::from_host(last.output_gradient(batch).flat(), dy);
  last.backward(batch, ctx, ranges[2]);
  middle.zero_activation_gradients();
  Kokkos::deep_copy(middle.activation_gradient(5, batch).flat(),
                    last.activation_gradient(5, batch).flat());
  middle.backward(batch, ctx, ranges[1]);
  first.zero_activation_gradients();
  Kokkos::deep_copy(first.activation_gradient(3, batch).flat(),
                    middle.activation_gradient(3, batch).flat());
  first.backward(batch, ctx, ranges[0]);
  EXPECT_EQ(test::to_host(whole->parameters().gradients()), gradients);

  // What lies outside a stage's workspace is refused, naming it.
  test::expect_error([&] { middle.input(batch); },
                     "tessera::Model::input: the input is outside the workspace, compiled for "
                     "layers [4, 6) of 7");
  test::expect_error([&] { middle.forward(batch, ctx); },
                     "tessera::Model::forward: layers [0, 7) lie outside the workspace, compiled "
                     "for layers [4, 6)");
  test::expect_error([&] { first.activation(5, batch); },
                     "layer 'relu2''s output is outside the workspace");
  test::expect_error([&] { first.output_gradient(batch); }, "tessera::Model::output_gradient");
  test::expect_error([&] { middle.backward(batch, ctx, ranges[2]); },
                     "layers [6, 7) lie outside the workspace");
  auto other = residual_model();
  other->infer(batch);
  test::expect_error([&] { other->compile(batch + 1, 5); },
                     "batch size 5 after infer() for 4; infer and compile for the same batch");
  test::expect_error([&] { other->add<ReLU>("late"); }, "added after infer() or compile()");
}

}  // namespace
