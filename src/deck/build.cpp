// Engine objects from a parsed deck.
#include <tessera/deck/build.hpp>

namespace tessera {

std::unique_ptr<Model> build_model(const Deck& deck) {
  Shape input;
  switch (deck.input_shape.size()) {
    case 1:
      input = Shape{deck.input_shape[0]};
      break;
    case 2:
      input = Shape{deck.input_shape[0], deck.input_shape[1]};
      break;
    default:
      input = Shape{deck.input_shape[0], deck.input_shape[1], deck.input_shape[2]};
      break;
  }
  auto model = std::make_unique<Model>(input);
  model->set_compute(deck.training.compute);
  model->set_buffer_plan(deck.memory.buffers);
  model->set_recompute(deck.memory.recompute);
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

namespace {
// Runs `step` on the model, a layer's error becoming a DeckError at its entry.
template <class Step>
std::unique_ptr<Model> at_layer_entries(const Deck& deck, std::unique_ptr<Model> model, Step step) {
  try {
    step(*model);
  } catch (const LayerError& e) {
    throw DeckError(deck.layers.at(e.layer()).location + ": model.layers[" +
                    std::to_string(e.layer()) + "]: " + e.what());
  }
  return model;
}
}  // namespace

std::unique_ptr<Model> build_model(const Deck& deck, std::int64_t max_batch) {
  return at_layer_entries(deck, build_model(deck),
                          [&](Model& m) { m.compile(max_batch, deck.training.seed); });
}

std::unique_ptr<Model> infer_model(const Deck& deck, std::int64_t max_batch) {
  return at_layer_entries(deck, build_model(deck), [&](Model& m) { m.infer(max_batch); });
}

}  // namespace tessera
