// Progress output for tessera-train: a bar redrawn in place, or plain lines
// (every training.log_every steps, from the Run) that a log file keeps
// readable. --progress picks one; `auto` draws the bar only for an
// interactive terminal: rank 0's stdout is a terminal, no launcher started
// the process (mpiexec gives every rank a pty whose output lands in the
// job's log) and TERM names a terminal that can redraw a line.
#pragma once

#include <tessera/train/trainer.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli.hpp"

namespace tessera::app {

inline const char* progress_modes_help =
    "progress display: 'bar' (redrawn in place), 'lines' (a plain line every "
    "training.log_every steps, for log files) or 'auto' (the bar on an interactive terminal, "
    "lines under mpiexec or srun, when stdout is not a terminal or TERM is unset or dumb)";

// Whether `mode` ("auto", "bar" or "lines") draws the bar in this process.
inline bool progress_bar(const std::string& mode) {
  if (mode != "auto") return mode == "bar";
  const char* term = std::getenv("TERM");
  return ::isatty(STDOUT_FILENO) == 1 && !under_launcher() && term != nullptr && *term &&
         std::string(term) != "dumb";
}

class Progress {
 public:
  Progress(bool enabled, bool bar, std::int64_t steps_per_epoch, int epochs)
      : enabled_(enabled), bar_(bar), steps_(steps_per_epoch), epochs_(epochs) {}

  // Whether the bar is drawn (else the Run's plain lines are printed).
  bool terminal() const { return enabled_ && bar_; }

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
    std::printf("\r\033[Kepoch %d/%d %s %lld/%lld  loss %.4f  lr %.3g  %.0f samples/s  ETA %.1f s",
                r.epoch + 1, epochs_, bar(in_epoch, steps_).c_str(),
                static_cast<long long>(in_epoch), static_cast<long long>(steps_),
                loss_sum_ / batches_, r.lr, rate,
                rate > 0 ? (samples_total - samples_done) / rate : 0.0);
    std::fflush(stdout);
  }

  // An evaluation's progress: the bar, or one line as it starts.
  void evaluating(const std::string& set, std::int64_t done, std::int64_t total) {
    if (!enabled_) return;
    const bool first = set != evaluated_set_ || done <= last_evaluated_;
    evaluated_set_ = set;
    last_evaluated_ = done;
    if (!terminal()) {
      if (first) {
        std::printf("evaluating on %lld %s samples\n", static_cast<long long>(total), set.c_str());
        std::fflush(stdout);
      }
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!first && done != total && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::printf("\r\033[Kevaluating on %s samples %s %lld/%lld", set.c_str(),
                bar(done, total).c_str(), static_cast<long long>(done),
                static_cast<long long>(total));
    std::fflush(stdout);
  }

  // Ends the bar's line before the per-epoch summary.
  void end_epoch() {
    if (terminal()) std::printf("\r\033[K");
    last_evaluated_ = 0;
  }

 private:
  static std::string bar(std::int64_t done, std::int64_t total) {
    const int width = 30;
    const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
    return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
  }

  bool enabled_, bar_;
  std::int64_t steps_;
  int epochs_;
  int epoch_ = -1;
  double loss_sum_ = 0;
  std::int64_t batches_ = 0;
  std::string evaluated_set_;
  std::int64_t last_evaluated_ = 0;
  std::chrono::steady_clock::time_point epoch_start_, last_draw_;
};

}  // namespace tessera::app
