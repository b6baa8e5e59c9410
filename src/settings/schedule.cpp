// Learning-rate schedules, computed in double from the step alone.
#include <tessera/core/error.hpp>
#include <tessera/settings/schedule.hpp>

#include <algorithm>
#include <cmath>

namespace tessera {

namespace {
constexpr double pi = 3.14159265358979323846;
}  // namespace

void LrSchedule::validate() const {
  constexpr const char* who = "tessera::LrSchedule";
  base_lr_range.require(who, "base_lr", base_lr);
  step_size_range.require(who, "step_size", static_cast<double>(step_size));
  gamma_range.require(who, "gamma", gamma);
  TESSERA_REQUIRE(type != ScheduleType::multistep || !milestones.empty(),
                  "tessera::LrSchedule: a multistep schedule needs at least one milestone");
  for (std::size_t i = 0; i < milestones.size(); ++i)
    TESSERA_REQUIRE(milestones[i] >= 1 && (i == 0 || milestones[i] > milestones[i - 1]),
                    "tessera::LrSchedule: milestones must be increasing epochs >= 1; milestone "
                        << i << " is " << milestones[i]);
  TESSERA_REQUIRE(
      min_lr >= 0 && min_lr <= base_lr,
      "tessera::LrSchedule: min_lr " << min_lr << " must be in [0, base_lr = " << base_lr << "]");
  TESSERA_REQUIRE(warmup_steps >= 0,
                  "tessera::LrSchedule: warmup_steps " << warmup_steps << " must be >= 0");
  warmup_start_factor_range.require(who, "warmup_start_factor", warmup_start_factor);
}

float LrSchedule::lr(std::int64_t step, std::int64_t steps_per_epoch,
                     std::int64_t total_steps) const {
  TESSERA_REQUIRE(step >= 0 && steps_per_epoch >= 1 && total_steps >= 1,
                  "tessera::LrSchedule::lr: step "
                      << step << ", steps_per_epoch " << steps_per_epoch << ", total_steps "
                      << total_steps
                      << "; expected step >= 0 and at least one step per epoch and per run");
  const std::int64_t epoch = step / steps_per_epoch;
  const double base = base_lr;
  double rate = base;
  switch (type) {
    case ScheduleType::constant:
      break;
    case ScheduleType::step:
      rate = base * std::pow(static_cast<double>(gamma), static_cast<double>(epoch / step_size));
      break;
    case ScheduleType::multistep: {
      const auto passed =
          std::upper_bound(milestones.begin(), milestones.end(), epoch) - milestones.begin();
      rate = base * std::pow(static_cast<double>(gamma), static_cast<double>(passed));
      break;
    }
    case ScheduleType::exponential:
      rate = base * std::pow(static_cast<double>(gamma), static_cast<double>(epoch));
      break;
    case ScheduleType::cosine: {
      const double progress =
          static_cast<double>(std::min(step, total_steps)) / static_cast<double>(total_steps);
      rate = min_lr + (base - min_lr) * 0.5 * (1.0 + std::cos(pi * progress));
      break;
    }
  }
  if (step < warmup_steps) {
    const double f = warmup_start_factor;
    rate *= f + (1.0 - f) * static_cast<double>(step) / static_cast<double>(warmup_steps);
  }
  return static_cast<float>(rate);
}

}  // namespace tessera
