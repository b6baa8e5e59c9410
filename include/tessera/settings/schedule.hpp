// Learning-rate schedules: a pure function of the step, so a restarted run
// recomputes the rate from the step count alone. docs/decks.md gives the
// formulas.
#pragma once

#include <tessera/core/enum_names.hpp>
#include <tessera/settings/range.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

enum class ScheduleType { constant, step, multistep, exponential, cosine };
inline constexpr EnumNames<ScheduleType, 5> schedule_types{
    "schedule",
    {{ScheduleType::constant, "constant"},
     {ScheduleType::step, "step"},
     {ScheduleType::multistep, "multistep"},
     {ScheduleType::exponential, "exponential"},
     {ScheduleType::cosine, "cosine"}}};

// "constant", "step", "multistep", "exponential", "cosine"; throws
// tessera::Error naming the allowed values.
inline ScheduleType schedule_type(const std::string& name) {
  return schedule_types.value(name, "tessera::schedule_type");
}
inline const char* schedule_name(ScheduleType type) { return schedule_types.name(type); }

struct LrSchedule {
  ScheduleType type = ScheduleType::constant;
  float base_lr = 0.01f;
  std::int64_t step_size = 1;            // step: epochs between decays
  float gamma = 0.1f;                    // step, multistep, exponential: decay factor
  std::vector<std::int64_t> milestones;  // multistep: increasing epochs at which to decay
  float min_lr = 0.0f;                   // cosine: the rate the run ends at
  // Linear warmup, multiplying whichever schedule by a factor that rises from
  // warmup_start_factor at step 0 to 1 at step warmup_steps.
  std::int64_t warmup_steps = 0;
  float warmup_start_factor = 0.0f;

  // The values each setting may take (min_lr: 0 to base_lr).
  static constexpr Range base_lr_range = Range::closed(0, 100);
  static constexpr Range step_size_range = Range::closed(1, 1000000);
  static constexpr Range gamma_range = Range::open_closed(0, 1);
  static constexpr Range warmup_start_factor_range = Range::closed(0, 1);

  // Throws tessera::Error on a value outside its range.
  void validate() const;

  // The rate for the update with 0-based index step, in a run of total_steps
  // updates with steps_per_epoch updates per epoch.
  float lr(std::int64_t step, std::int64_t steps_per_epoch, std::int64_t total_steps) const;
};

}  // namespace tessera
