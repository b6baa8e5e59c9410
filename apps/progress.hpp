// Progress output for tessera-train: a bar redrawn in place when stdout is
// a terminal (plain lines every N steps otherwise come from the Run).
#pragma once

#include <tessera/train/trainer.hpp>

#include <chrono>
#include <cstdio>
#include <string>

namespace tessera::app {

class Progress {
 public:
  Progress(bool enabled, bool terminal, std::int64_t steps_per_epoch, int epochs)
      : enabled_(enabled), terminal_(terminal), steps_(steps_per_epoch), epochs_(epochs) {}

  bool terminal() const { return enabled_ && terminal_; }

  void step(const StepReport& r, std::int64_t samples_done, std::int64_t samples_total) {
    if (!terminal()) return;
    const auto now = std::chrono::steady_clock::now();
    if (r.epoch != epoch_) {
      epoch_ = r.epoch;
      epoch_start_ = now;
      loss_sum_ = 0;
      batches_ = 0;
    }
    loss_sum_ += r.loss;
    ++batches_;
    const std::int64_t in_epoch = r.step_in_epoch + 1;
    // Redraw at most ten times a second, and always at the end of an epoch.
    if (in_epoch != steps_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const double seconds = std::chrono::duration<double>(now - epoch_start_).count();
    const double rate = seconds > 0 ? samples_done / seconds : 0;
    const int width = 30, filled = static_cast<int>(width * in_epoch / steps_);
    std::printf(
        "\r\033[Kepoch %d/%d [%s%s] %lld/%lld  loss %.4f  lr %.3g  %.0f samples/s  ETA %.1f s",
        r.epoch + 1, epochs_, std::string(filled, '#').c_str(),
        std::string(width - filled, '.').c_str(), static_cast<long long>(in_epoch),
        static_cast<long long>(steps_), loss_sum_ / batches_, r.lr, rate,
        rate > 0 ? (samples_total - samples_done) / rate : 0.0);
    std::fflush(stdout);
  }

  // Ends the bar's line before the per-epoch summary.
  void end_epoch() {
    if (terminal()) std::printf("\r\033[K");
  }

 private:
  bool enabled_, terminal_;
  std::int64_t steps_;
  int epochs_;
  int epoch_ = -1;
  double loss_sum_ = 0;
  std::int64_t batches_ = 0;
  std::chrono::steady_clock::time_point epoch_start_, last_draw_;
};

}  // namespace tessera::app
