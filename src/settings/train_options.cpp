// The checks of a TrainOptions against the ranges it states.
#include <tessera/core/error.hpp>
#include <tessera/settings/train_options.hpp>

namespace tessera {

void TrainOptions::validate() const {
  const auto require = [](const char* what, double value, const Range& range) {
    TESSERA_REQUIRE(range.contains(value), "tessera::TrainOptions: " << what << " " << value
                                                                     << " must be in "
                                                                     << range.interval());
  };
  require("epochs", epochs, epochs_range);
  require("batch_size", static_cast<double>(batch_size), batch_size_range);
  require("accumulation_steps", static_cast<double>(accumulation_steps), accumulation_steps_range);
  TESSERA_REQUIRE(accumulation_steps <= batch_size,
                  "tessera::TrainOptions: accumulation_steps "
                      << accumulation_steps << " must be at most batch_size " << batch_size);
  // NaN is in no range.
  require("clip_norm", clip_norm, clip_norm_range);
  TESSERA_REQUIRE(max_steps >= 0 && log_every >= 0, "tessera::TrainOptions: max_steps "
                                                        << max_steps << " and log_every "
                                                        << log_every << " must be >= 0");
  schedule.validate();
}

}  // namespace tessera
