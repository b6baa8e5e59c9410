// Trains a small model that uses every layer type and prints, at full float
// precision, the loss, learning rate and gradient norm of every step, then
// every parameter and every state value. compare.sh runs it with different
// thread counts and compares the outputs; tests/mpi/compare.sh runs it under
// mpiexec on 1, 2 and 3 ranks (data parallel, BatchNorm synchronised, the
// same global batch), where rank 0 prints. `--sgd` trains with SGD and
// momentum instead of AdamW. `--gpt` trains a small GPT instead (token and
// position embedding, per-token LayerNorm, causal self-attention with
// dropout, a GELU MLP, residual adds, a head tied to the embedding) on
// random windows of a token stream. `--shard-optimizer` shards the optimizer
// state over the ranks (ZeRO-1) and prints each rank's optimizer state
// allocations as Kokkos Tools counted them, failing unless each rank holds
// its shard's state and the ranks together the whole.
#include <tessera/core/memory_events.hpp>
#include <tessera/core/runtime.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/attention.hpp>
#include <tessera/layers/conv.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/dropout.hpp>
#include <tessera/layers/embedding.hpp>
#include <tessera/layers/norm.hpp>
#include <tessera/layers/pool.hpp>
#include <tessera/layers/structural.hpp>
#include <tessera/optim/adam.hpp>
#include <tessera/optim/sgd.hpp>
#include <tessera/parallel/communicator.hpp>
#include <tessera/train/trainer.hpp>

#include <cstdio>
#include <set>

#include "../tessera_test.hpp"

namespace {

using namespace tessera;
using Names = std::vector<std::string>;

// Every parameter carries signal: a bias in front of BatchNorm would have a
// zero gradient in exact arithmetic, so its rounding noise, which depends on
// the summation order, would be all it learns (Adam scales such noise to
// full-size steps), and through the running mean it would reach the
// evaluation. conv1 therefore has no bias; conv2, with no BatchNorm after
// it, keeps its bias.
std::unique_ptr<Model> every_layer_model() {
  auto m = std::make_unique<Model>(Shape{1, 12, 12});
  Conv2D::Options conv1;
  conv1.out_channels = 6;
  conv1.kernel = 3;
  conv1.padding = 1;
  conv1.bias = false;
  m->add<Conv2D>("conv1", conv1)
      .add<BatchNorm>("bn1")
      .add<ReLU>("relu1")
      .add<MaxPool2D>("pool1", 2)
      .add<Conv2D>("conv2", 6, 3, 1, 1)
      .add<GELU>("gelu")
      .add<Add>("add", Names{"pool1", "gelu"})
      .add<AvgPool2D>("avg", 2)
      .add<Flatten>("flat")
      .add<GlobalAvgPool>("gap", Names{"add"})
      .add<Concat>("cat", Names{"flat", "gap"})
      .add<Dense>("fc1", 16)
      .add<LayerNorm>("ln")
      .add<Tanh>("tanh")
      .add<Dropout>("drop", 0.25f)
      .add<Dense>("fc2", 8)
      .add<LeakyReLU>("leaky", kernels::LeakyReluOp{0.1f})
      .add<Dense>("fc3", 8)
      .add<Sigmoid>("sigmoid")
      .add<Dense>("out", 3);
  return m;
}

constexpr std::int64_t gpt_vocabulary = 11, gpt_positions = 6, gpt_channels = 8;

std::unique_ptr<Model> gpt_model() {
  auto m = std::make_unique<Model>(Shape{gpt_positions});
  Embedding::Options embed;
  embed.vocabulary = gpt_vocabulary;
  embed.dim = gpt_channels;
  embed.positions = true;
  LayerNorm::Options ln;
  ln.last_axis = true;
  CausalSelfAttention::Options attn;
  attn.heads = 2;
  attn.dropout = 0.1f;
  // No projection biases: the key bias adds q . b to every score of a row,
  // which the softmax cancels, so its gradient is rounding noise alone (see
  // the note on BatchNorm above).
  attn.bias = false;
  const auto linear = [](std::int64_t units, const std::string& tie = "") {
    Dense::Options o;
    o.units = units;
    o.last_axis = true;
    o.tie = tie;
    o.bias = tie.empty();
    return o;
  };
  m->add<Embedding>("embed", embed)
      .add<LayerNorm>("ln1", ln)
      .add<CausalSelfAttention>("attn", attn)
      .add<Add>("res1", Names{"embed", "attn"})
      .add<LayerNorm>("ln2", ln)
      .add<Dense>("fc", linear(4 * gpt_channels))
      .add<GELU>("gelu")
      .add<Dense>("proj", linear(gpt_channels))
      .add<Add>("res2", Names{"res1", "proj"})
      .add<LayerNorm>("ln3", ln)
      .add<Dense>("head", linear(gpt_vocabulary, "embed"));
  return m;
}

// A stream where each token mostly follows from the two before it.
Dataset gpt_tokens() {
  std::vector<std::int32_t> tokens(6 * 70 + 1);
  tokens[0] = 1;
  tokens[1] = 2;
  for (std::size_t i = 2; i < tokens.size(); ++i)
    tokens[i] = counter_hash(17, 1, i) % 4 == 0
                    ? static_cast<std::int32_t>(counter_hash(17, 2, i) % gpt_vocabulary)
                    : (tokens[i - 1] + 2 * tokens[i - 2]) % gpt_vocabulary;
  return make_token_dataset(tokens, gpt_positions, true, "probe tokens");
}

void print_buffer(const char* what, const Vector<float>& buffer) {
  const auto host = test::to_host(buffer);
  for (std::size_t i = 0; i < host.size(); ++i) std::printf("%s[%zu] %.9e\n", what, i, host[i]);
}

}  // namespace

int main(int argc, char** argv) {
  Runtime runtime(argc, argv);
  {
    const Communicator comm;
    const bool root = comm.rank() == 0;
    const std::int64_t n = 100;  // batches of 32: the last one is partial
    std::vector<int> labels(n);
    for (std::int64_t i = 0; i < n; ++i) labels[i] = static_cast<int>(i % 3);
    const std::set<std::string> flags(argv + 1, argv + argc);
    // --gpt: 70 windows of 6 + 1 tokens, batches of 32: the last one is partial.
    const bool gpt = flags.count("--gpt") > 0;
    const Dataset data =
        gpt ? gpt_tokens()
            : test::make_dataset(Shape{1, 12, 12}, 3, test::random_values(n * 144, 17), labels);
    // --sgd: SGD with momentum instead of AdamW. Adam divides each gradient
    // by its own magnitude, so it is the harder test of agreement: a
    // parameter with no signal would turn rounding noise into full steps.
    const bool sgd = flags.count("--sgd") > 0;
    auto model = gpt ? gpt_model() : every_layer_model();
    TrainOptions options;
    options.batch_size = 32;
    options.epochs = 3;
    options.seed = 11;
    options.clip_norm = 1.0f;
    options.schedule.base_lr = sgd ? 0.1f : 0.01f;
    options.schedule.type = ScheduleType::cosine;
    options.schedule.warmup_steps = 3;
    options.sync_batchnorm = true;
    // Small buckets: several averaging rounds overlap backward.
    options.bucket_bytes = 2048;
    options.shard_optimizer = flags.count("--shard-optimizer") > 0;
    // --blocking-gather: the sharded parameters gathered after each step
    // instead of during the next forward pass.
    options.overlap_gather = flags.count("--blocking-gather") == 0;
    model->compile(options.max_shard(comm.size()), options.seed);
    AdamW adamw;
    SGD momentum(kernels::SgdParams{0.9f});
    Optimizer& optimizer = sgd ? static_cast<Optimizer&>(momentum) : adamw;
    Trainer trainer(*model, optimizer, options, &comm);
    trainer.on_step([root](const StepReport& r) {
      if (root)
        std::printf("step[%lld] loss %.9e lr %.9e grad_norm %.9e\n", static_cast<long long>(r.step),
                    r.loss, r.lr, r.grad_norm);
    });
    // What Kokkos allocates for a view of no elements (a rank's shard may
    // hold none of a small model's parameters).
    std::uint64_t empty_view_bytes = 0;
    {
      const MemoryEventCounter empty;
      const Vector<float> none("tessera::probe::empty", 0);
      empty_view_bytes = empty.bytes_allocated();
    }
    // The optimizer allocates its state in its first step.
    MemoryEventCounter allocations;
    for (int epoch = 0; epoch < options.epochs; ++epoch) trainer.train_epoch(data, epoch);
    const std::uint64_t state_bytes =
        allocations.bytes_allocated("tessera::" + optimizer.name() + "::");
    if (options.shard_optimizer && comm.size() > 1) {
      const auto per_rank = comm.gather(state_bytes);
      const std::uint64_t buffers = optimizer.state_buffers().size();
      const std::uint64_t whole = buffers * sizeof(float) * model->parameters().count();
      std::uint64_t total = 0;  // of the slices' values
      bool each_its_shard = true;
      for (int r = 0; r < comm.size(); ++r) {
        total += buffers * sizeof(float) * trainer.sharding()->counts()[r];
        const std::uint64_t count = static_cast<std::uint64_t>(trainer.sharding()->counts()[r]);
        each_its_shard =
            each_its_shard &&
            per_rank[r] == buffers * (count > 0 ? sizeof(float) * count : empty_view_bytes);
      }
      if (root) {
        std::printf("optimizer state allocated per rank (bytes):");
        for (int r = 0; r < comm.size(); ++r)
          std::printf(" %llu", static_cast<unsigned long long>(per_rank[r]));
        std::printf("; without sharding %llu on every rank\n",
                    static_cast<unsigned long long>(whole));
      }
      if (!each_its_shard || total != whole) {
        if (root) std::printf("FAIL: the ranks do not hold one shard of the state each\n");
        return 1;
      }
    }
    const Evaluation eval = trainer.evaluate(data);
    if (root) {
      std::printf("eval loss %.9e accuracy %.9e\n", eval.loss, eval.accuracy);
      print_buffer("param", model->parameters().values());
      print_buffer("state", model->state().values());
    }
  }
  return 0;
}
