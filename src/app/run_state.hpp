// What tessera::Run's source files share: the run's outputs (metrics file
// and history, checkpoint directory and clock), the collective verdict of a
// stage, and bytes as the MiB its lines print. Internal to src/app.
#pragma once

#include <tessera/app/run.hpp>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

namespace tessera {

struct Run::Outputs {
  std::string metrics_path;
  std::ofstream metrics;  // rank 0 only
  std::string history;    // the metrics so far: checkpoints carry them
  std::unique_ptr<CheckpointDirectory> checkpoints;
  std::int64_t last_checkpoint = 0;
  std::chrono::steady_clock::time_point last_checkpoint_time = std::chrono::steady_clock::now();
};

namespace impl {

// Runs one stage on every rank and agrees on the outcome: a failure on any
// rank becomes the same CollectiveError on all of them.
inline void agree(const Communicator& comm, const std::function<void()>& stage) {
  std::string failure;
  try {
    stage();
  } catch (const std::exception& e) {
    failure = e.what();
    if (failure.empty()) failure = "unknown error";
  }
  comm.agree(failure);
}

// Bytes in MiB, for the run's description and memory lines.
inline double mib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace impl
}  // namespace tessera
