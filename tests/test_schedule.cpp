// Learning-rate schedules at chosen steps against hand-computed values, with
// 10 steps per epoch and 100 steps in the run throughout.
#include <tessera/core/error.hpp>
#include <tessera/settings/schedule.hpp>

#include <cmath>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

constexpr std::int64_t per_epoch = 10, total = 100;

LrSchedule schedule(ScheduleType type) {
  LrSchedule s;
  s.type = type;
  s.base_lr = 0.1f;
  return s;
}

float at(const LrSchedule& s, std::int64_t step) { return s.lr(step, per_epoch, total); }

TEST(Schedule, Constant) {
  const auto s = schedule(ScheduleType::constant);
  EXPECT_FLOAT_EQ(at(s, 0), 0.1f);
  EXPECT_FLOAT_EQ(at(s, 99), 0.1f);
  EXPECT_FLOAT_EQ(at(s, 1000), 0.1f);
}

TEST(Schedule, StepDecaysEveryStepSizeEpochs) {
  auto s = schedule(ScheduleType::step);
  s.step_size = 2;
  s.gamma = 0.5f;
  EXPECT_FLOAT_EQ(at(s, 0), 0.1f);       // epoch 0
  EXPECT_FLOAT_EQ(at(s, 19), 0.1f);      // epoch 1: 1 / 2 = 0 decays
  EXPECT_FLOAT_EQ(at(s, 20), 0.05f);     // epoch 2: one decay, 0.1 * 0.5
  EXPECT_FLOAT_EQ(at(s, 45), 0.025f);    // epoch 4: two, 0.1 * 0.25
  EXPECT_FLOAT_EQ(at(s, 99), 0.00625f);  // epoch 9: four, 0.1 * 0.0625
}

TEST(Schedule, MultistepDecaysAtEachMilestone) {
  auto s = schedule(ScheduleType::multistep);
  s.milestones = {2, 5};
  EXPECT_FLOAT_EQ(at(s, 19), 0.1f);    // epoch 1: no milestone passed
  EXPECT_FLOAT_EQ(at(s, 20), 0.01f);   // epoch 2: 0.1 * 0.1
  EXPECT_FLOAT_EQ(at(s, 49), 0.01f);   // epoch 4
  EXPECT_FLOAT_EQ(at(s, 50), 0.001f);  // epoch 5: 0.1 * 0.1^2
  EXPECT_FLOAT_EQ(at(s, 99), 0.001f);
}

TEST(Schedule, ExponentialDecaysEveryEpoch) {
  auto s = schedule(ScheduleType::exponential);
  s.gamma = 0.9f;
  EXPECT_FLOAT_EQ(at(s, 9), 0.1f);      // epoch 0
  EXPECT_FLOAT_EQ(at(s, 10), 0.09f);    // epoch 1
  EXPECT_FLOAT_EQ(at(s, 35), 0.0729f);  // epoch 3: 0.1 * 0.9^3
}

TEST(Schedule, CosineRunsFromBaseToMinOverTheRunPerStep) {
  auto s = schedule(ScheduleType::cosine);
  s.min_lr = 0.001f;
  // lr = 0.001 + 0.099 * (1 + cos(pi * step / 100)) / 2
  EXPECT_FLOAT_EQ(at(s, 0), 0.1f);
  EXPECT_NEAR(at(s, 25), 0.0855018, 1e-7);   // 0.001 + 0.099 * (1 + 0.7071068) / 2
  EXPECT_NEAR(at(s, 26), 0.0843851, 1e-7);   // per step, not per epoch: cos(0.26 pi) = 0.6845471
  EXPECT_FLOAT_EQ(at(s, 50), 0.0505f);       // 0.001 + 0.099 / 2
  EXPECT_NEAR(at(s, 99), 0.00102443, 1e-8);  // 0.001 + 0.099 * (1 - 0.9995066) / 2
  EXPECT_FLOAT_EQ(at(s, 100), 0.001f);
  EXPECT_FLOAT_EQ(at(s, 150), 0.001f);  // past the end it stays at min_lr
}

TEST(Schedule, WarmupCombinedWithStep) {
  auto s = schedule(ScheduleType::step);
  s.step_size = 2;
  s.gamma = 0.5f;
  s.warmup_steps = 25;
  s.warmup_start_factor = 0.2f;
  // factor = 0.2 + 0.8 * step / 25 multiplies the step schedule before step 25.
  EXPECT_FLOAT_EQ(at(s, 0), 0.02f);     // 0.1 * 0.2
  EXPECT_FLOAT_EQ(at(s, 10), 0.052f);   // 0.1 * (0.2 + 0.32)
  EXPECT_FLOAT_EQ(at(s, 20), 0.042f);   // decayed by then: 0.05 * (0.2 + 0.64)
  EXPECT_FLOAT_EQ(at(s, 24), 0.0484f);  // 0.05 * (0.2 + 0.768)
  EXPECT_FLOAT_EQ(at(s, 25), 0.05f);    // warmup over
}

TEST(Schedule, WarmupCombinedWithCosine) {
  auto s = schedule(ScheduleType::cosine);
  s.min_lr = 0.001f;
  s.warmup_steps = 10;
  // From zero: factor = step / 10.
  EXPECT_FLOAT_EQ(at(s, 0), 0.0f);
  // cosine(5) = 0.001 + 0.099 * (1 + cos(0.05 pi)) / 2 = 0.001 + 0.099 * 0.9938442 = 0.0993906
  EXPECT_NEAR(at(s, 5), 0.0496953, 1e-7);  // half of it
  // cosine(10) = 0.001 + 0.099 * (1 + cos(0.1 pi)) / 2 = 0.001 + 0.099 * 0.9755283 = 0.0975773
  EXPECT_NEAR(at(s, 10), 0.0975773, 1e-7);
  EXPECT_FLOAT_EQ(at(s, 50), 0.0505f);
}

TEST(Schedule, IsAPureFunctionOfTheStep) {
  auto s = schedule(ScheduleType::cosine);
  s.warmup_steps = 7;
  const float first = at(s, 42);
  for (std::int64_t step = 0; step < 100; ++step) at(s, step);
  EXPECT_EQ(at(s, 42), first);
}

TEST(Schedule, NamesRoundTrip) {
  for (const auto type : {ScheduleType::constant, ScheduleType::step, ScheduleType::multistep,
                          ScheduleType::exponential, ScheduleType::cosine})
    EXPECT_EQ(schedule_type(schedule_name(type)), type);
  try {
    schedule_type("linear");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("tessera::schedule_type: unknown schedule 'linear'; allowed: "
                                   "constant, step, multistep, exponential, cosine"),
        std::string::npos)
        << e.what();
  }
}

void expect_invalid(const LrSchedule& s, const std::string& fragment) {
  try {
    s.validate();
    FAIL() << "expected an Error with " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Schedule, ValidationNamesTheField) {
  auto s = schedule(ScheduleType::multistep);
  expect_invalid(s, "tessera::LrSchedule: a multistep schedule needs at least one milestone");
  s.milestones = {3, 3};
  expect_invalid(s, "milestones must be increasing epochs >= 1; milestone 1 is 3");
  s = schedule(ScheduleType::step);
  s.gamma = 0.0f;
  expect_invalid(s, "tessera::LrSchedule: gamma 0 must be in (0, 1]");
  s.gamma = 0.5f;
  s.step_size = 0;
  expect_invalid(s, "tessera::LrSchedule: step_size 0 must be in [1, 1000000]");
  s = schedule(ScheduleType::cosine);
  s.min_lr = 0.2f;
  expect_invalid(s, "tessera::LrSchedule: min_lr 0.2 must be in [0, base_lr = 0.1]");
  s.min_lr = 0.0f;
  s.warmup_start_factor = 1.5f;
  expect_invalid(s, "tessera::LrSchedule: warmup_start_factor 1.5 must be in [0, 1]");
  s.warmup_start_factor = 0.0f;
  EXPECT_NO_THROW(s.validate());
  EXPECT_THROW(s.lr(0, 0, 100), Error);
  EXPECT_THROW(s.lr(-1, 10, 100), Error);
  EXPECT_THROW(s.lr(0, 10, 0), Error);
}

}  // namespace
