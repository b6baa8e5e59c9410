// Engine objects from a parsed deck.
#include <tessera/deck/build.hpp>

namespace tessera {

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
      model->add(layer.layer_type->build(layer.name, layer.options, layer.inputs));
    } catch (const Error& e) {
      throw LayerError(i, e.what());  // an option the layer rejects
    }
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
