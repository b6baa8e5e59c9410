// Engine objects from a parsed deck.
#include <tessera/deck/build.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/conv.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/dropout.hpp>
#include <tessera/layers/norm.hpp>
#include <tessera/layers/pool.hpp>
#include <tessera/layers/structural.hpp>

namespace tessera {

namespace {
std::unique_ptr<Layer> make_layer(const LayerDeck& l) {
  const Extent2 kernel(l.kernel[0], l.kernel[1]), stride(l.stride[0], l.stride[1]),
      padding(l.padding[0], l.padding[1]);
  const auto& in = l.inputs;
  const std::string& t = l.type;
  if (t == "dense") return std::make_unique<Dense>(l.name, Dense::Options{l.units, l.bias}, in);
  if (t == "conv2d")
    return std::make_unique<Conv2D>(
        l.name, Conv2D::Options{l.out_channels, kernel, stride, padding, l.bias}, in);
  if (t == "maxpool2d") return std::make_unique<MaxPool2D>(l.name, kernel, stride, padding, in);
  if (t == "avgpool2d") return std::make_unique<AvgPool2D>(l.name, kernel, stride, padding, in);
  if (t == "globalavgpool") return std::make_unique<GlobalAvgPool>(l.name, in);
  if (t == "batchnorm") return std::make_unique<BatchNorm>(l.name, l.momentum, l.eps, in);
  if (t == "layernorm") return std::make_unique<LayerNorm>(l.name, l.eps, in);
  if (t == "dropout") return std::make_unique<Dropout>(l.name, l.rate, in);
  if (t == "relu") return std::make_unique<ReLU>(l.name, kernels::ReluOp{}, in);
  if (t == "leakyrelu") return std::make_unique<LeakyReLU>(l.name, kernels::LeakyReluOp{l.slope}, in);
  if (t == "gelu") return std::make_unique<GELU>(l.name, kernels::GeluOp{}, in);
  if (t == "tanh") return std::make_unique<Tanh>(l.name, kernels::TanhOp{}, in);
  if (t == "sigmoid") return std::make_unique<Sigmoid>(l.name, kernels::SigmoidOp{}, in);
  if (t == "flatten") return std::make_unique<Flatten>(l.name, in);
  if (t == "add") return std::make_unique<Add>(l.name, in);
  if (t == "concat") return std::make_unique<Concat>(l.name, in);
  TESSERA_REQUIRE(false, "tessera::build_model: layer '" << l.name << "' has unknown type '" << t
                                                         << "' (load_deck validates types)");
}
}  // namespace

std::unique_ptr<Model> build_model(const Deck& deck) {
  Shape input;
  switch (deck.input_shape.size()) {
    case 1: input = Shape{deck.input_shape[0]}; break;
    case 2: input = Shape{deck.input_shape[0], deck.input_shape[1]}; break;
    default: input = Shape{deck.input_shape[0], deck.input_shape[1], deck.input_shape[2]}; break;
  }
  auto model = std::make_unique<Model>(input);
  for (std::size_t i = 0; i < deck.layers.size(); ++i) {
    const LayerDeck& layer = deck.layers[i];
    try {
      model->add(make_layer(layer));
    } catch (const Error& e) {
      throw LayerError(i, e.what());  // an option the layer rejects
    }
    if (!layer.init.empty()) model->set_initializer(layer.name, init_from_name(layer.init));
  }
  return model;
}

TrainOptions train_options(const Deck& deck) {
  TrainOptions options;
  options.epochs = deck.training.epochs;
  options.batch_size = deck.training.batch_size;
  options.log_every = deck.training.log_every;
  options.seed = deck.seed;
  options.schedule = lr_schedule(deck);
  options.clip_norm = deck.training.clip_norm;
  options.label_smoothing = deck.loss.label_smoothing;
  options.bucket_bytes = static_cast<std::int64_t>(deck.parallel.bucket_mb * 1024.0 * 1024.0);
  options.overlap = deck.parallel.overlap;
  options.sync_batchnorm = deck.parallel.batchnorm == "sync";
  return options;
}

OptimizerParams optimizer_params(const Deck& deck) {
  OptimizerParams params;
  params.type = deck.optimizer.type;
  params.weight_decay = deck.optimizer.weight_decay;
  params.momentum = deck.optimizer.momentum;
  params.nesterov = deck.optimizer.nesterov;
  params.beta1 = deck.optimizer.beta1;
  params.beta2 = deck.optimizer.beta2;
  params.eps = deck.optimizer.eps;
  return params;
}

LrSchedule lr_schedule(const Deck& deck) {
  LrSchedule schedule;
  schedule.type = schedule_type(deck.schedule.type);
  schedule.base_lr = deck.optimizer.lr;
  schedule.step_size = deck.schedule.step_size;
  schedule.gamma = deck.schedule.gamma;
  schedule.milestones = deck.schedule.milestones;
  schedule.min_lr = deck.schedule.min_lr;
  schedule.warmup_steps = deck.schedule.warmup_steps;
  schedule.warmup_start_factor = deck.schedule.warmup_start_factor;
  return schedule;
}

}  // namespace tessera
