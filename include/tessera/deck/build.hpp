// Engine objects from a parsed deck.
#pragma once

#include <tessera/deck/deck.hpp>
#include <tessera/model/model.hpp>
#include <tessera/model/trainer.hpp>
#include <tessera/optim/optimizer.hpp>
#include <tessera/optim/schedule.hpp>

#include <memory>

namespace tessera {

// The (uncompiled) model the deck describes.
std::unique_ptr<Model> build_model(const Deck& deck);
// Epochs, batches, seed, the learning-rate schedule and clipping.
TrainOptions train_options(const Deck& deck);
OptimizerParams optimizer_params(const Deck& deck);
// [schedule] with [optimizer] lr as its base rate.
LrSchedule lr_schedule(const Deck& deck);

}  // namespace tessera
