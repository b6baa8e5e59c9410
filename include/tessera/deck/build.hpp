// Engine objects from a parsed deck.
#pragma once

#include <tessera/deck/deck.hpp>
#include <tessera/model/model.hpp>
#include <tessera/model/trainer.hpp>
#include <tessera/optim/sgd.hpp>

#include <memory>

namespace tessera {

// The (uncompiled) model the deck describes.
std::unique_ptr<Model> build_model(const Deck& deck);
TrainOptions train_options(const Deck& deck);
Sgd::Params sgd_params(const Deck& deck);

}  // namespace tessera
