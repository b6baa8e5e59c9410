// Engine objects from a parsed deck.
#include <tessera/deck/build.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>

namespace tessera {

std::unique_ptr<Model> build_model(const Deck& deck) {
  Shape input;
  switch (deck.input_shape.size()) {
    case 1: input = Shape{deck.input_shape[0]}; break;
    case 2: input = Shape{deck.input_shape[0], deck.input_shape[1]}; break;
    default: input = Shape{deck.input_shape[0], deck.input_shape[1], deck.input_shape[2]}; break;
  }
  auto model = std::make_unique<Model>(input);
  for (const auto& layer : deck.layers) {
    if (layer.type == "dense") model->add<Dense>(layer.name, layer.units);
    else model->add<ReLU>(layer.name);
  }
  return model;
}

TrainOptions train_options(const Deck& deck) {
  TrainOptions options;
  options.epochs = deck.training.epochs;
  options.batch_size = deck.training.batch_size;
  options.log_every = deck.training.log_every;
  options.seed = deck.seed;
  return options;
}

Sgd::Params sgd_params(const Deck& deck) {
  Sgd::Params params;
  params.lr = deck.optimizer.lr;
  params.momentum = deck.optimizer.momentum;
  params.weight_decay = deck.optimizer.weight_decay;
  params.nesterov = deck.optimizer.nesterov;
  return params;
}

}  // namespace tessera
