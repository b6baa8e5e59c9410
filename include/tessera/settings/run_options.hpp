// What a whole run does around training, defined once: where it writes, how
// often it evaluates and checkpoints (app/run.hpp runs it; the deck reader
// fills it). Plain C++.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

// When and where checkpoints are written; each frequency is independent and
// 0 turns it off.
struct CheckpointCadence {
  std::string directory;  // default "<output_dir>/checkpoints"
  int keep = 3;           // newest checkpoints kept
  int every_epochs = 1;
  std::int64_t every_steps = 0;
  float every_minutes = 0.0f;  // wall-clock minutes since the previous checkpoint

  bool any() const { return every_epochs > 0 || every_steps > 0 || every_minutes > 0; }
};

struct RunOptions {
  std::string name = "run";
  std::string output_dir;  // default "output/<name>", relative to the working directory
  int eval_every = 1;      // epochs between evaluations; 0 = only after the last
  // Early stopping: the run ends after this many evaluations in a row that
  // did not lower the evaluation loss below the best by more than min_delta
  // (0 = never).
  int early_stop_patience = 0;
  double early_stop_min_delta = 0;
  CheckpointCadence checkpoint;
};

}  // namespace tessera
