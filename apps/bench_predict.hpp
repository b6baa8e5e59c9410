// tessera-bench --predict: a lower bound of the training step on a GPU from
// what the host run counted. Each layer's forward and backward pass is
// bounded by the slowest of its three costs on the platform: its bytes at
// the memory bandwidth, its FLOPs at the FP32 peak, and its kernel launches
// one after another at the launch latency (the layer's kernels as the
// region profiler counted them: every parallel_for, product and copy is a
// launch on a GPU). The step is the sum of the layers' bounds and the
// optimizer's sweep (its bytes). The same model fed the host's measured
// peaks (platform "measured") must never exceed the host's measured times:
// tests/app/bench_report.sh checks it.
#pragma once

#include <tessera/deck/deck.hpp>
#include <tessera/model/model.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::bench {

struct Platform {
  std::string key, name;
  double bytes_per_second = 0, flops_per_second = 0, launch_seconds = 0;
  std::string source;
};

// Published peaks; the launch latency is an assumption (--launch-latency-us
// replaces it, e.g. by a GPU run's measured time per launch).
inline const std::vector<Platform>& gpu_platforms() {
  static const std::vector<Platform> platforms{
      {"h100", "NVIDIA H100 SXM 80 GB HBM3", 3.35e12, 67e12, 4e-6,
       "3.35 TB/s HBM3, 67 TFLOP/s FP32 (NVIDIA's data sheet); 4 us a launch assumed"},
      {"mi250x", "AMD MI250X, one GCD", 1.6e12, 23.9e12, 6e-6,
       "1.6 TB/s HBM2e, 23.9 TFLOP/s FP32 vector (AMD's data sheet, per GCD); 6 us a launch "
       "assumed"}};
  return platforms;
}

inline std::optional<Platform> find_platform(const std::string& key) {
  for (const auto& p : gpu_platforms())
    if (p.key == key) return p;
  return std::nullopt;
}

// "h100,mi250x" -> the platforms, or an error naming the unknown key.
inline std::string predict_option_error(const std::string& text) {
  std::stringstream keys(text);
  std::string key;
  while (std::getline(keys, key, ','))
    if (!find_platform(key)) {
      std::string known;
      for (const auto& p : gpu_platforms()) known += (known.empty() ? "" : ", ") + p.key;
      return "--predict " + text + ": unknown platform '" + key + "' (known: " + known + ")";
    }
  return "";
}

inline std::vector<Platform> parse_predict_option(const std::string& text,
                                                  double launch_latency_us) {
  std::vector<Platform> out;
  std::stringstream keys(text);
  std::string key;
  while (std::getline(keys, key, ',')) {
    Platform p = *find_platform(key);
    if (launch_latency_us >= 0) {
      p.launch_seconds = launch_latency_us * 1e-6;
      p.source +=
          "; launch latency " + std::to_string(launch_latency_us) + " us (--launch-latency-us)";
    }
    out.push_back(p);
  }
  return out;
}

// The host's own peaks as a platform: triad bandwidth, FMA peak, no launch
// cost (a host launch is a function call).
inline Platform measured_platform(const nlohmann::json& peaks) {
  return {"measured",
          "this host's measured peaks",
          peaks["stream_triad"]["gbs"].get<double>() * 1e9,
          peaks["fma"]["gflops"].get<double>() * 1e9,
          0,
          "stream triad and FMA peak measured here"};
}

// The bound of one pass (a layer's "forward" or "backward" of the report).
inline nlohmann::json pass_bound(const nlohmann::json& pass, const Platform& p) {
  std::int64_t launches = 0;
  for (const auto& k : pass["kernels"]) launches += k["calls"].get<std::int64_t>();
  // The fewest FLOPs the pass can do: its direct form, or fewer where a
  // schedule (Winograd) executes fewer.
  const double flops =
      std::min(pass["model_flops"].get<double>(), pass["executed_flops"].get<double>());
  const double memory = pass["bytes"].get<double>() / p.bytes_per_second;
  const double compute = flops / p.flops_per_second;
  const double launch = double(launches) * p.launch_seconds;
  const double bound = std::max({memory, compute, launch});
  const char* by = bound == launch && launch > 0 ? "launches"
                   : bound == compute            ? "compute"
                                                 : "memory";
  return {{"seconds", bound}, {"bound_by", by}, {"launches", launches}};
}

// predicted.<platform> of a report whose layers and step are filled in;
// parameter_bytes_per_step: the optimizer's traffic.
inline nlohmann::json predict_step(const nlohmann::json& report, const Platform& p,
                                   double parameter_bytes_per_step) {
  nlohmann::json layers = nlohmann::json::array();
  double step = 0, worst = -1;
  std::int64_t launches = 0;
  std::string bounding;
  for (const auto& layer : report["layers"]) {
    nlohmann::json row = {{"name", layer["name"]}};
    for (const char* pass : {"forward", "backward"}) {
      const auto bound = pass_bound(layer[pass], p);
      const double seconds = bound["seconds"].get<double>();
      step += seconds;
      launches += bound["launches"].get<std::int64_t>();
      if (seconds > worst) {
        worst = seconds;
        bounding = layer["name"].get<std::string>() + " " + pass;
      }
      row[pass] = bound;
    }
    layers.push_back(row);
  }
  const double optimizer = parameter_bytes_per_step / p.bytes_per_second;
  step += optimizer;
  return {{"platform", p.name},
          {"source", p.source},
          {"bytes_per_second", p.bytes_per_second},
          {"flops_per_second", p.flops_per_second},
          {"launch_seconds", p.launch_seconds},
          {"step_seconds", step},
          {"samples_per_second", step > 0 ? report["batch_size"].get<double>() / step : 0},
          {"launches_per_step", launches},
          {"optimizer_seconds", optimizer},
          {"bounding_pass", bounding},
          {"bounding_seconds", worst},
          {"layers", layers}};
}

// The optimizer's memory traffic a step: per parameter, what its update
// reads and writes (value, gradient, moments) and the gradient's zeroing.
inline double optimizer_bytes(const tessera::Deck& deck, const tessera::Model& model) {
  const auto& o = deck.optimizer;
  const double floats = o.type == "sgd" ? (o.sgd.momentum > 0 ? 6 : 4) : 8;
  return floats * sizeof(float) * double(model.parameters().count());
}

// predicted.<platform> for the --predict platforms (the launch latency
// replaced where launch_latency_us >= 0), and for the host's measured peaks.
inline void add_predictions(const std::string& predict, double launch_latency_us,
                            bool measured_peaks, const tessera::Deck& deck,
                            const tessera::Model& model, nlohmann::json& report) {
  const double bytes = optimizer_bytes(deck, model);
  std::vector<Platform> platforms = parse_predict_option(predict, launch_latency_us);
  if (measured_peaks) platforms.push_back(measured_platform(report["peaks"]));
  for (const auto& p : platforms) report["predicted"][p.key] = predict_step(report, p, bytes);
}

// "predicted step on NVIDIA H100 ...: 1.234 ms (2,345 samples/s), 209 launches; the
// largest pass: b1_attn backward, 0.456 ms" for each platform of the report.
inline void print_predictions(std::ostream& os, const nlohmann::json& report) {
  if (!report.contains("predicted")) return;
  for (const auto& [key, p] : report["predicted"].items()) {
    os << "predicted step on " << p["platform"].get<std::string>() << ": " << std::fixed
       << std::setprecision(3) << p["step_seconds"].get<double>() * 1e3 << " ms ("
       << std::setprecision(0) << p["samples_per_second"].get<double>() << " samples/s), "
       << p["launches_per_step"]
       << " launches; the largest pass: " << p["bounding_pass"].get<std::string>() << ", "
       << std::setprecision(3) << p["bounding_seconds"].get<double>() * 1e3 << " ms\n";
  }
}

}  // namespace tessera::bench
