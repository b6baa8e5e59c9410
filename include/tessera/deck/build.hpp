// Engine objects from a parsed deck.
#pragma once

#include <tessera/deck/deck.hpp>
#include <tessera/model/model.hpp>
#include <tessera/optim/optimizer.hpp>
#include <tessera/settings/schedule.hpp>
#include <tessera/train/trainer.hpp>

#include <memory>

namespace tessera {

// The (uncompiled) model the deck describes. The deck's other settings are
// the engine's own structs: deck.training for the Trainer, deck.optimizer for
// make_optimizer, deck.run for the Run.
std::unique_ptr<Model> build_model(const Deck& deck);
// The same, compiled for batches of up to max_batch samples and initialised
// from the deck's seed; a layer that rejects its input shape becomes a
// DeckError at its entry's file:line:column.
std::unique_ptr<Model> build_model(const Deck& deck, std::int64_t max_batch);
// The same with shapes inferred for max_batch (Model::infer) but nothing
// allocated or initialised yet: compile() it, for a pipeline stage's layers.
std::unique_ptr<Model> infer_model(const Deck& deck, std::int64_t max_batch);

}  // namespace tessera
