// The checks of a TrainOptions against the ranges it states.
#include <tessera/core/error.hpp>
#include <tessera/settings/train_options.hpp>

namespace tessera {

void TrainOptions::validate() const {
  constexpr const char* who = "tessera::TrainOptions";
  epochs_range.require(who, "epochs", epochs);
  batch_size_range.require(who, "batch_size", static_cast<double>(batch_size));
  accumulation_steps_range.require(who, "accumulation_steps",
                                   static_cast<double>(accumulation_steps));
  TESSERA_REQUIRE(accumulation_steps <= batch_size,
                  "tessera::TrainOptions: accumulation_steps "
                      << accumulation_steps << " must be at most batch_size " << batch_size);
  // NaN is in no range.
  clip_norm_range.require(who, "clip_norm", clip_norm);
  TESSERA_REQUIRE(max_steps >= 0 && log_every >= 0, "tessera::TrainOptions: max_steps "
                                                        << max_steps << " and log_every "
                                                        << log_every << " must be >= 0");
  schedule.validate();
}

}  // namespace tessera
