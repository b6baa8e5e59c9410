// tessera-bench's timing of the training step: the mean step and its
// phases over timed repetitions, then each layer's passes and their
// kernels over profiled repetitions, each repetition one epoch over a
// dataset of the steps' batches.
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/data/dataset.hpp>
#include <tessera/model/model.hpp>
#include <tessera/train/trainer.hpp>

#include <map>
#include <string>
#include <vector>

#include "bench_regions.hpp"

namespace tessera::bench {

// The mean step of each timed repetition, and of its phases (data,
// forward, backward, optimizer).
struct StepSamples {
  std::vector<double> seconds;
  std::vector<double> phase[4];
};

// Trains `repetitions` timed epochs of `steps` steps each, from epoch
// `epoch` on.
inline StepSamples time_steps(tessera::Trainer& trainer, const tessera::Dataset& data, int& epoch,
                              int repetitions, int steps) {
  StepSamples samples;
  for (int r = 0; r < repetitions; ++r) {
    const auto report = trainer.train_epoch(data, epoch++);
    samples.seconds.push_back(report.seconds / steps);
    const double phases[4] = {report.time.data, report.time.forward, report.time.backward,
                              report.time.optimizer};
    for (int p = 0; p < 4; ++p) samples.phase[p].push_back(phases[p] / steps);
  }
  return samples;
}

// Per pass (0 forward, 1 backward) and layer, over the profiled
// repetitions: the layer's mean seconds a step, and each of its kernels'
// seconds and work.
struct LayerSamples {
  std::vector<std::vector<double>> seconds[2];
  std::vector<std::map<std::string, std::vector<double>>> kernel_seconds[2];
  std::vector<std::map<std::string, KernelTime>> kernel_work[2];
};

// Per-layer runs, separate from the step timing (their fences cost time):
// `repetitions` profiled epochs of `steps` steps each, from epoch `epoch` on.
inline LayerSamples time_layers(tessera::Trainer& trainer, tessera::Model& model,
                                const tessera::Dataset& data, int& epoch, int repetitions,
                                int steps) {
  const std::size_t layers = model.layers().size();
  LayerSamples samples;
  for (int p = 0; p < 2; ++p) {
    samples.seconds[p].assign(layers, {});
    samples.kernel_seconds[p].assign(layers, {});
    samples.kernel_work[p].assign(layers, {});
  }
  for (int r = 0; r < repetitions; ++r) {
    RegionProfiler::instance().start(model);
    trainer.train_epoch(data, epoch++);
    const auto times = RegionProfiler::instance().stop();
    for (std::size_t i = 0; i < layers; ++i)
      for (int p = 0; p < 2; ++p) {
        TESSERA_REQUIRE(times[i].calls[p] == steps, "tessera-bench: layer '"
                                                        << model.layers()[i]->name() << "' ran its "
                                                        << (p ? "backward" : "forward") << " "
                                                        << times[i].calls[p] << " times in "
                                                        << steps << " steps, not once per step");
        samples.seconds[p][i].push_back(times[i].seconds[p] / steps);
        for (const auto& [name, k] : times[i].kernels[p]) {
          samples.kernel_seconds[p][i][name].push_back(k.seconds / steps);
          samples.kernel_work[p][i][name] = k;
        }
      }
  }
  return samples;
}

}  // namespace tessera::bench
