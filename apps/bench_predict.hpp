// tessera-bench --predict: a lower bound of the training step on a GPU from
// what the host run counted. Each kernel of a layer's forward and backward
// pass is bounded by the slowest of its three costs on the platform: its
// bytes at the memory bandwidth, its FLOPs at the FP32 peak, and its
// launches at the launch latency (the kernels as the region profiler
// counted them, with the work their launches state: every parallel_for,
// product and copy is a launch on a GPU). A pass is the sum of its kernels,
// the step the sum of the passes and the optimizer's sweep (its bytes).
// The same model fed the host's measured peaks (platform "measured") must
// never exceed the host's measured time of any kernel:
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

// The host's own peaks as a platform: the triad's bandwidth in the first-
// level cache (a kernel whose data fits there reaches no more), the FMA
// ceiling (each thread's fastest burst summed; the median or the CPU's
// theoretical peak where higher), no launch cost (a host launch is a
// function call). Both are upper bounds even where another process shares
// the cores for part of the run.
inline Platform measured_platform(const nlohmann::json& peaks) {
  const auto& triad = peaks["stream_triad"];
  const auto& fma = peaks["fma"];
  const double theoretical =
      fma["expected_gflops"].is_null() ? 0.0 : fma["expected_gflops"].get<double>();
  return {
      "measured",
      "this host's measured peaks",
      std::max({triad["gbs"].get<double>(), triad["best_gbs"].get<double>(),
                triad["cache_gbs"].get<double>()}) *
          1e9,
      std::max({fma["gflops"].get<double>(), fma["ceiling_gflops"].get<double>(), theoretical}) *
          1e9,
      0,
      "stream triad in the first-level cache and FMA ceiling (each thread's fastest burst, "
      "or the CPU's theoretical peak where higher) measured here"};
}

// The bound of one kernel of a pass: its bytes at the bandwidth, its FLOPs
// at the peak or its launches at the latency, whichever is slowest.
inline nlohmann::json kernel_bound(const nlohmann::json& kernel, const Platform& p) {
  const double memory = kernel["bytes"].get<double>() / p.bytes_per_second;
  const double compute = kernel["flops"].get<double>() / p.flops_per_second;
  const double launch = kernel["launches"].get<double>() * p.launch_seconds;
  const double bound = std::max({memory, compute, launch});
  const char* by = bound == launch && launch > 0 ? "launches"
                   : bound == compute            ? "compute"
                                                 : "memory";
  return {{"name", kernel["name"]}, {"seconds", bound}, {"bound_by", by}};
}

// The bound of one pass (a layer's "forward" or "backward" of the report):
// the sum of its kernels' bounds, the kernels running one after another.
inline nlohmann::json pass_bound(const nlohmann::json& pass, const Platform& p) {
  std::int64_t launches = 0;
  double seconds = 0;
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& k : pass["kernels"]) {
    launches += k["launches"].get<std::int64_t>();
    kernels.push_back(kernel_bound(k, p));
    seconds += kernels.back()["seconds"].get<double>();
  }
  return {{"seconds", seconds}, {"launches", launches}, {"kernels", kernels}};
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
      for (const auto& k : bound["kernels"])
        if (k["seconds"].get<double>() > worst) {
          worst = k["seconds"].get<double>();
          bounding = layer["name"].get<std::string>() + " " + pass + " " +
                     k["name"].get<std::string>() + " (" + k["bound_by"].get<std::string>() + ")";
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
          {"bounding_kernel", bounding},
          {"bounding_seconds", worst},
          {"layers", layers}};
}

// The goals of a GPU's kernels, checked on the report's counts: every
// kernel that moves more than 1 MB a launch exposes at least 2^16 work
// items (an H100 holds about 270k resident threads), or its launch says
// why it cannot; at most 4 launches per layer per pass. report["parallelism"]
// lists the kernels and passes that miss them; a pass says how many of its
// launches are products (a BLAS call each, which no Tessera kernel can
// join).
constexpr double narrow_bytes = 1 << 20;
constexpr std::int64_t wide_items = 1 << 16, launches_per_pass = 4;

inline nlohmann::json parallelism(const nlohmann::json& report) {
  nlohmann::json narrow = nlohmann::json::array(), busy = nlohmann::json::array();
  for (const auto& layer : report["layers"])
    for (const char* pass : {"forward", "backward"}) {
      const std::string where = layer["name"].get<std::string>() + " " + pass;
      std::int64_t launches = 0, products = 0;
      for (const auto& k : layer[pass]["kernels"]) {
        const auto count = k["launches"].get<std::int64_t>();
        launches += count;
        if (k["name"].get<std::string>().rfind("KokkosBlas::", 0) == 0) products += count;
        const double bytes = count > 0 ? k["bytes"].get<double>() / double(count) : 0;
        if (!k["work_items"].is_null() && bytes > narrow_bytes &&
            k["work_items"].get<std::int64_t>() < wide_items)
          narrow.push_back({{"pass", where},
                            {"kernel", k["name"]},
                            {"work_items", k["work_items"]},
                            {"bytes_per_launch", bytes},
                            {"why", k.value("narrow", "")}});
      }
      if (launches > launches_per_pass)
        busy.push_back({{"pass", where}, {"launches", launches}, {"products", products}});
    }
  return {{"narrow_kernels", narrow}, {"passes_over_four_launches", busy}};
}

// "exposed parallelism: ..." lines for report["parallelism"].
inline void print_parallelism(std::ostream& os, const nlohmann::json& report) {
  const auto& p = report["parallelism"];
  os << "exposed parallelism: " << p["narrow_kernels"].size()
     << " kernels move more than 1 MB a launch through fewer than 65,536 work items; "
     << p["passes_over_four_launches"].size() << " layer passes launch more than 4 kernels\n";
  for (const auto& k : p["narrow_kernels"]) {
    const std::string why = k["why"].get<std::string>();
    os << "  " << k["pass"].get<std::string>() << " " << k["kernel"].get<std::string>() << ": "
       << k["work_items"] << " work items, " << std::fixed << std::setprecision(1)
       << k["bytes_per_launch"].get<double>() / double(1 << 20) << " MB a launch; "
       << (why.empty() ? "no reason given" : why) << "\n";
  }
  for (const auto& b : p["passes_over_four_launches"])
    os << "  " << b["pass"].get<std::string>() << ": " << b["launches"] << " launches, "
       << b["products"] << " of them products (a BLAS call each)\n";
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
// largest kernel: b1_attn backward tessera::kernels::... (memory), 0.456 ms" for each
// platform of the report.
inline void print_predictions(std::ostream& os, const nlohmann::json& report) {
  if (!report.contains("predicted")) return;
  for (const auto& [key, p] : report["predicted"].items()) {
    os << "predicted step on " << p["platform"].get<std::string>() << ": " << std::fixed
       << std::setprecision(3) << p["step_seconds"].get<double>() * 1e3 << " ms ("
       << std::setprecision(0) << p["samples_per_second"].get<double>() << " samples/s), "
       << p["launches_per_step"]
       << " launches; the largest kernel: " << p["bounding_kernel"].get<std::string>() << ", "
       << std::setprecision(3) << p["bounding_seconds"].get<double>() * 1e3 << " ms\n";
  }
}

}  // namespace tessera::bench
