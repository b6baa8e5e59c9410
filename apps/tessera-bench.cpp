// tessera-bench: time the training step of the model a deck describes, layer
// by layer and kernel by kernel, against the device's own measured peaks
// (FMA throughput with a Kokkos kernel, sgemm through KokkosBlas and a
// stream triad), name the BLAS and the kernels it runs, and write a table
// and a JSON report (schema in docs/benchmarks.md). Rates come on two FLOP
// bases, always named: the model's (the direct form, the same on every
// backend) and the operations the kernels execute (Winograd's convolutions
// execute fewer), so that a fraction of a peak is not mistaken for
// hardware efficiency; peaks the CPU's facts make implausible are flagged.
#include <tessera/core/compat.hpp>
#include <tessera/core/host_paths.hpp>
#include <tessera/core/machine.hpp>
#include <tessera/core/memory_events.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/random.hpp>
#include <tessera/core/runtime.hpp>
#include <tessera/core/version.hpp>
#include <tessera/deck/build.hpp>
#include <tessera/kernels/mixed_gemm.hpp>
#include <tessera/model/kernels.hpp>
#include <tessera/train/trainer.hpp>

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "bench_data.hpp"
#include "bench_measure.hpp"
#include "bench_predict.hpp"
#include "bench_regions.hpp"
#include "bench_step.hpp"
#include "bench_table.hpp"
#include "cli.hpp"
#include "fma_peak.hpp"

namespace {

using nlohmann::json;

constexpr int schema_version = 3;

using namespace tessera::bench;

json shape_json(const tessera::Shape& s) {
  json a = json::array();
  for (int i = 0; i < s.rank(); ++i) a.push_back(s[i]);
  return a;
}

// ---------------------------------------------------------------------------
// The machine, for the report.

std::string cpu_model() {
  const std::string model = tessera::bench::read_cpu_facts().model_name;
  return model.empty() ? "unknown" : model;
}

std::string hostname() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// `flops` over `seconds` in GFLOP/s, and as a fraction of `peak` (0 when
// either is not measured).
double rate(double flops, double seconds) { return seconds > 0 ? flops / seconds * 1e-9 : 0; }
double fraction(double gflops, double peak) { return peak > 0 ? gflops / peak : 0; }

// The model's and the executed FLOPs of `cost` in `seconds`, each with its
// rate and that rate's fraction of the peak named `peak_name`.
void add_flops(json& figures, const tessera::PassCost& cost, double seconds, double peak,
               const std::string& peak_name) {
  const double model = rate(cost.flops, seconds), executed = rate(cost.executed_flops(), seconds);
  figures["model_flops"] = cost.flops;
  figures["executed_flops"] = cost.executed_flops();
  figures["model_gflops"] = model;
  figures["executed_gflops"] = executed;
  figures["model_flops_" + peak_name + "_fraction"] = fraction(model, peak);
  figures["executed_flops_" + peak_name + "_fraction"] = fraction(executed, peak);
}

// One kernel of a pass, per step: launches, the fewest work items of one
// launch (null where a launch came without its work: a library's own
// kernel), bytes and FLOPs, and why it exposes few work items where its
// launch says so.
json kernel_json(const std::string& name, double seconds, const KernelTime& k, int steps) {
  json kernel = {{"name", name},
                 {"seconds", seconds},
                 {"launches", k.calls / steps},
                 {"work_items", k.described == k.calls ? json(k.min_items) : json(nullptr)},
                 {"bytes", k.bytes / steps},
                 {"flops", k.flops / steps}};
  if (!k.narrow.empty()) kernel["narrow"] = k.narrow;
  return kernel;
}

json pass_json(const tessera::PassCost& cost, double seconds, const Peaks& peaks) {
  const double gbs = seconds > 0 ? cost.bytes / seconds * 1e-9 : 0;
  json pass = {{"seconds", seconds}, {"bytes", cost.bytes}, {"gbs", gbs}};
  add_flops(pass, cost, seconds, peaks.gemm_gflops, "sgemm");
  pass["bandwidth_fraction"] = fraction(gbs, peaks.triad_gbs);
  return pass;
}

struct Options {
  std::string deck_path, json_path, platform;
  std::vector<std::string> overrides, peaks_overrides;
  std::int64_t batch = 0;
  int steps = 20, repetitions = 5, peak_repetitions = 5;
  std::int64_t gemm_size = 0, triad_elements = std::int64_t(1) << 25;
  bool skip_peaks = false, mixed_gemm = false;
  std::string predict;            // "h100,mi250x"
  double launch_latency_us = -1;  // < 0: each platform's assumed latency
};

// The hardware a report was measured on, for tessera-compare's
// performance-portability table: the CPU and thread count on the host (one
// OpenMP thread and Serial share a platform: the same single core), the
// backend otherwise; --platform names it better (e.g. "NVIDIA A100").
std::string default_platform() {
  const bool host = std::is_same<tessera::MemSpace, Kokkos::HostSpace>::value;
  if (!host) return std::string(tessera::ExecSpace::name()) + " device";
  return cpu_model() + " x" + std::to_string(tessera::ExecSpace().concurrency());
}

// What was run, where, and with exactly which build; written even when the
// measurement fails, so that a failed platform shows up in the comparison.
json report_identity(const Options& opt, const tessera::Deck& deck, std::int64_t batch) {
  const tessera::BlasInfo blas = tessera::blas_info();
  json report;
  report["schema"] = "tessera-bench";
  report["schema_version"] = schema_version;
  report["tessera_version"] = tessera::version();
  report["build"] = tessera::build_description();
  report["build_info"] = {
      {"tessera_version", tessera::version()},
      {"kokkos",
       {{"version", tessera::kokkos_version()},
        {"backends", tessera::kokkos_backends()},
        {"execution_space", tessera::execution_space_name()}}},
      {"kernel_paths", tessera::kernel_paths_name()},
      {"kokkos_kernels", {{"version", TESSERA_KOKKOS_KERNELS_VERSION}}},
      {"blas", {{"library", blas.library}, {"core", blas.core}, {"threading", blas.threading}}},
      {"compiler", TESSERA_CXX_COMPILER},
      {"build_type", TESSERA_BUILD_TYPE},
      {"spack_spec", *TESSERA_BUILD_SPEC ? json(TESSERA_BUILD_SPEC) : json(nullptr)}};
  report["machine"] = {{"hostname", hostname()},
                       {"cpu", cpu_model()},
                       {"cores", std::thread::hardware_concurrency()},
                       {"cpu_isa", tessera::isa_name(tessera::widest_isa(tessera::cpu_flags()))},
                       {"kernels_isa", tessera::isa_name(tessera::compiled_isa())}};
  report["blas"] = {
      {"library", blas.library},
      {"core", blas.core},
      {"core_isa", blas.openblas ? tessera::isa_name(tessera::openblas_core_isa(blas.core)) : ""},
      {"warning", tessera::blas_vector_warning()}};
  report["platform"] = opt.platform.empty() ? default_platform() : opt.platform;
  report["backend"] = tessera::ExecSpace::name();
  report["threads"] = tessera::ExecSpace().concurrency();
  report["kokkos_version"] = tessera::kokkos_version();
  report["compiler"] = TESSERA_CXX_COMPILER;
  report["deck"] = deck.path;
  report["run_name"] = deck.run.name;
  report["overrides"] = deck.overrides;
  report["batch_size"] = batch;
  return report;
}

// The report's "peaks": the measured figures, what the CPU's facts expect
// and the verdicts.
json peaks_json(const Peaks& peaks, const Options& opt) {
  const auto& expected = peaks.fma_expected;
  const auto maybe = [](const std::optional<bool>& b) { return b ? json(*b) : json(nullptr); };
  json out = {{"fma",
               {{"gflops", peaks.fma.gflops},
                {"ceiling_gflops", peaks.fma.ceiling_gflops},
                {"isa", peaks.fma.isa},
                {"threads", peaks.fma.threads},
                {"expected_gflops", expected.gflops > 0 ? json(expected.gflops) : json(nullptr)},
                {"expected",
                 {{"vector_floats", expected.vector_floats},
                  {"fma_per_cycle", expected.fma_per_cycle},
                  {"clock_mhz", expected.clock_mhz},
                  {"clock_source", expected.clock_source},
                  {"cores", expected.cores},
                  {"derivation", expected.derivation}}},
                {"plausible", maybe(peaks.verdict.fma_plausible)}}},
              {"sgemm",
               {{"size", peaks.gemm_size},
                {"gflops", peaks.gemm_gflops},
                {"plausible", maybe(peaks.verdict.sgemm_plausible)}}},
              {"stream_triad",
               {{"elements", peaks.triad_elements},
                {"gbs", peaks.triad_gbs},
                {"best_gbs", peaks.triad_best_gbs},
                {"cache_gbs", peaks.triad_cache_gbs},
                {"plausible", nullptr}}},
              {"warnings", peaks.verdict.warnings},
              {"overrides", peaks.overrides},
              {"repetitions", opt.skip_peaks ? 0 : opt.peak_repetitions}};
  if (opt.mixed_gemm) {
    json figures = json::array();
    for (const auto& f : peaks.mixed_gemm)
      figures.push_back({{"type", f.type}, {"method", f.method}, {"gflops", f.gflops}});
    out["mixed_gemm"] = figures;
  }
  return out;
}

// --peaks-override KEY=VALUE: replaces a measured figure in `peaks` or a
// fact of `cpu`, and records the value in `peaks`.
void apply_peaks_overrides(const std::vector<std::string>& overrides, Peaks& peaks,
                           tessera::bench::CpuFacts& cpu) {
  for (const auto& text : overrides) {
    const auto eq = text.find('=');
    const double value = std::strtod(text.c_str() + eq + 1, nullptr);
    const std::string key = text.substr(0, eq);
    peaks.overrides[key] = value;
    if (key == "fma_gflops") peaks.fma.gflops = value;
    if (key == "sgemm_gflops") peaks.gemm_gflops = value;
    if (key == "clock_mhz") {
      cpu.clock_mhz = value;
      cpu.clock_source = "--peaks-override";
    }
    if (key == "cores") cpu.cores = static_cast<int>(value);
  }
}

// The device's peaks (none with --skip-peaks), the 16-bit products (with
// --mixed-gemm), the overrides, what the CPU's facts expect of the FMA
// peak, and the verdicts on the peaks.
Peaks measure_peaks(const Options& opt) {
  Peaks peaks;
  const bool host = std::is_same<tessera::MemSpace, Kokkos::HostSpace>::value;
  peaks.gemm_size = opt.gemm_size > 0 ? opt.gemm_size : (host ? 2048 : 8192);
  peaks.triad_elements = opt.triad_elements;
  if (!opt.skip_peaks) {
    peaks.fma = tessera::bench::measure_fma_peak(opt.peak_repetitions);
    peaks.gemm_gflops = measure_sgemm(peaks.gemm_size, opt.peak_repetitions);
    peaks.triad_gbs =
        measure_triad(peaks.triad_elements, opt.peak_repetitions, peaks.triad_best_gbs);
    if (host) peaks.triad_cache_gbs = measure_cache_triad(opt.peak_repetitions);
  }
  if (opt.mixed_gemm) peaks.mixed_gemm = measure_mixed_gemms(peaks.gemm_size, opt.peak_repetitions);
  tessera::bench::CpuFacts cpu = tessera::bench::read_cpu_facts();
  apply_peaks_overrides(opt.peaks_overrides, peaks, cpu);
  peaks.fma_expected = tessera::bench::expect_fma_peak(
      tessera::bench::fma_vector_floats(), Kokkos::DefaultHostExecutionSpace().concurrency(), cpu);
  peaks.verdict =
      tessera::bench::judge_peaks(peaks.fma.gflops, peaks.gemm_gflops, peaks.fma_expected);
  return peaks;
}

// Sums over the layers of their steps (forward and backward).
struct LayerTotals {
  double seconds = 0;
  tessera::PassCost step_work, dense_work;  // flops and executed flops summed
  int dense_layers = 0;
  double dense_seconds = 0;
  // Layers without matrix products: bound by memory traffic.
  int memory_layers = 0;
  double memory_bytes = 0, memory_seconds = 0;
};

// Adds the model and executed FLOPs of `cost` to `sum`.
void add_work(tessera::PassCost& sum, const tessera::PassCost& cost) {
  sum.executed = sum.executed_flops() + cost.executed_flops();
  sum.flops += cost.flops;
}

// Adds a layer's step, of `cost` in `seconds`, to the totals of its kind.
void add_to_totals(LayerTotals& totals, const std::string& type, const tessera::PassCost& cost,
                   double seconds) {
  totals.seconds += seconds;
  add_work(totals.step_work, cost);
  if (type == "Dense") {
    ++totals.dense_layers;
    add_work(totals.dense_work, cost);
    totals.dense_seconds += seconds;
  } else if (type != "Conv2D") {
    ++totals.memory_layers;
    totals.memory_bytes += cost.bytes;
    totals.memory_seconds += seconds;
  }
}

// The cost of layer `i` of `model` at `batch`, from the shapes of its inputs.
tessera::LayerCost layer_cost(const tessera::Model& model, std::size_t i, std::int64_t batch) {
  tessera::Shapes inputs;
  bool input_gradient = false;
  for (auto node : model.layer_inputs(i)) {
    inputs.push_back(node == 0 ? model.input(batch).shape()
                               : tessera::with_batch(model.layer_output_shape(node - 1), batch));
    input_gradient = input_gradient || node != 0;
  }
  return model.layers()[i]->cost(inputs, input_gradient);
}

// A pass of a layer: pass_json() of its median time `seconds`, and its
// kernels (their median times and their work), slowest first.
json layer_pass_json(const tessera::PassCost& cost, double seconds,
                     const std::map<std::string, std::vector<double>>& kernel_seconds,
                     const std::map<std::string, KernelTime>& kernel_work, const Peaks& peaks,
                     int steps) {
  json pass = pass_json(cost, seconds, peaks);
  json kernels = json::array();
  for (const auto& [name, samples] : kernel_seconds)
    kernels.push_back(kernel_json(name, median(samples), kernel_work.at(name), steps));
  std::sort(kernels.begin(), kernels.end(), [](const json& a, const json& b) {
    return a["seconds"].get<double>() > b["seconds"].get<double>();
  });
  pass["kernels"] = kernels;
  return pass;
}

// The report's row of layer `i`: its forward and backward passes and its
// step (both together), which it adds to `totals`.
json layer_json(const tessera::Model& model, std::size_t i, std::int64_t batch,
                const LayerSamples& samples, const Peaks& peaks, int steps, LayerTotals& totals) {
  const auto& layer = *model.layers()[i];
  const tessera::LayerCost cost = layer_cost(model, i, batch);
  json row = {
      {"index", i},
      {"name", layer.name()},
      {"type", layer.type()},
      {"output_shape", shape_json(tessera::with_batch(model.layer_output_shape(i), batch))}};
  double both = 0;
  for (int p = 0; p < 2; ++p) {
    const double seconds = median(samples.seconds[p][i]);
    both += seconds;
    row[p ? "backward" : "forward"] =
        layer_pass_json(p ? cost.backward : cost.forward, seconds, samples.kernel_seconds[p][i],
                        samples.kernel_work[p][i], peaks, steps);
  }
  const tessera::PassCost step_cost{cost.forward.flops + cost.backward.flops,
                                    cost.forward.bytes + cost.backward.bytes,
                                    cost.forward.executed_flops() + cost.backward.executed_flops()};
  row["step"] = pass_json(step_cost, both, peaks);
  add_to_totals(totals, layer.type(), step_cost, both);
  return row;
}

// The report's "step", "dense" and "memory_bound": the step's median time
// and phases, and the totals over the layers, with their rates.
void add_totals(json& report, const StepSamples& step_samples, const LayerTotals& totals,
                const Peaks& peaks, std::int64_t batch) {
  const double step = median(step_samples.seconds);
  report["step"] = {{"seconds", step},
                    {"samples_per_second", step > 0 ? double(batch) / step : 0},
                    {"layers_seconds", totals.seconds},
                    {"phases",
                     {{"data", median(step_samples.phase[0])},
                      {"forward", median(step_samples.phase[1])},
                      {"backward", median(step_samples.phase[2])},
                      {"optimizer", median(step_samples.phase[3])}}}};
  add_flops(report["step"], totals.step_work, step, peaks.fma.gflops, "fma");
  report["dense"] = {{"layers", totals.dense_layers}, {"seconds", totals.dense_seconds}};
  add_flops(report["dense"], totals.dense_work, totals.dense_seconds, peaks.gemm_gflops, "sgemm");
  const double memory_gbs =
      totals.memory_seconds > 0 ? totals.memory_bytes / totals.memory_seconds * 1e-9 : 0;
  report["memory_bound"] = {
      {"layers", totals.memory_layers},
      {"seconds", totals.memory_seconds},
      {"gbs", memory_gbs},
      {"bandwidth_fraction", peaks.triad_gbs > 0 ? memory_gbs / peaks.triad_gbs : 0}};
}

// The measurement proper, adding to `report` (its identity already there).
void measure(const Options& opt, const tessera::Deck& deck, std::int64_t batch,
             const tessera::TrainOptions& options, const std::unique_ptr<tessera::Model>& model,
             const tessera::Shape& sample, const tessera::Shape& out, json& report) {
  std::cout << tessera::build_description() << "\n" << model->summary();
  // The layers' kernels as tessera-train chooses them for the deck.
  const tessera::KernelChoice kernels =
      tessera::choose_kernels(*model, deck.kernels, model->execution_space());
  model->set_kernels(kernels.table);
  if (!kernels.table.empty())
    std::cout << tessera::kernel_description(deck.kernels, kernels) << "\n";
  json chosen = json::object();
  for (const auto& [layer, option] : kernels.table) chosen[layer] = option;
  report["kernels"] = {{"conv2d", deck.kernels.conv2d}, {"layers", chosen},
                       {"measured", kernels.measured},  {"cached", kernels.cached},
                       {"seconds", kernels.seconds},    {"cache", kernels.cache_file}};
  std::cout << std::flush;
  const Peaks peaks = measure_peaks(opt);

  // One dataset of `steps` batches: a repetition is one epoch over it.
  const bool tokens = deck.data_format == "tokens";
  const auto data = tokens
                        ? synthetic_tokens(sample[0], batch * opt.steps, out[1], deck.training.seed)
                        : synthetic_dataset(sample, batch * opt.steps, static_cast<int>(out[0]),
                                            deck.training.seed);
  const auto optimizer = tessera::make_optimizer(deck.optimizer);
  tessera::Trainer trainer(*model, *optimizer, options);
  int epoch = 0;
  trainer.train_epoch(data, epoch++);  // warm-up: first touches, BLAS buffers
  const StepSamples step_samples = time_steps(trainer, data, epoch, opt.repetitions, opt.steps);
  const LayerSamples layer_samples =
      time_layers(trainer, *model, data, epoch, opt.repetitions, opt.steps);

  report["status"] = "ok";
  report["timing"] = {{"warmup_steps", opt.steps},
                      {"steps", opt.steps},
                      {"repetitions", opt.repetitions},
                      {"statistic", "median over repetitions of the mean step"}};
  report["peaks"] = peaks_json(peaks, opt);
  json rows = json::array();
  LayerTotals totals;
  for (std::size_t i = 0; i < model->layers().size(); ++i)
    rows.push_back(layer_json(*model, i, batch, layer_samples, peaks, opt.steps, totals));
  report["layers"] = rows;
  add_totals(report, step_samples, totals, peaks, batch);
}

// The activation memory of the model as compiled for the batch
// (Model::activation_memory) under its settings, under each buffer plan and
// with recompute = "blocks", and what Kokkos Tools saw allocated besides
// the parameters, their gradients and the state (`allocated`), in bytes.
json memory_json(const tessera::Model& model, std::int64_t allocated) {
  using tessera::BufferPlan;
  const tessera::ActivationMemory m = model.activation_memory();
  const auto plan = [&](BufferPlan p) {
    return json{{"nodes", m.nodes(p)},
                {"kept", m.kept(p)},
                {"temporaries", m.temporaries(p)},
                {"total", m.total(p)}};
  };
  return {{"buffers", tessera::buffer_plans.name(m.plan)},
          {"recompute", tessera::recompute_modes.name(m.recompute)},
          {"activations", m.total()},
          {"measured", allocated - model.parameters().count() * 8 - model.state().count() * 4},
          {"layer_buffers", m.layer_buffers},
          {"separate", plan(BufferPlan::separate)},
          {"shared", plan(BufferPlan::shared)},
          {"shared_blocks", m.total_blocks()}};
}

void print_memory(std::ostream& os, const json& memory) {
  const auto mib = [](const json& bytes) { return bytes.get<double>() / (1 << 20); };
  os << std::fixed << std::setprecision(1) << "activation memory: " << mib(memory["activations"])
     << " MiB (memory.buffers = \"" << memory["buffers"].get<std::string>()
     << "\", training.recompute = \"" << memory["recompute"].get<std::string>()
     << "\"; Kokkos Tools saw " << mib(memory["measured"]) << " MiB allocated); separate "
     << mib(memory["separate"]["total"]) << " MiB, shared " << mib(memory["shared"]["total"])
     << " MiB, shared with recompute = \"blocks\" " << mib(memory["shared_blocks"]) << " MiB\n"
     << std::defaultfloat;
}

int run(const Options& opt) {
  const tessera::Deck deck = tessera::load_deck(opt.deck_path, opt.overrides);
  const std::int64_t batch = opt.batch > 0 ? opt.batch : deck.training.batch_size;
  // One micro-batch a step: the benchmark times the whole batch at once.
  tessera::TrainOptions options = deck.training;
  options.batch_size = batch;
  options.accumulation_steps = 1;
  options.epochs = 2 * opt.repetitions + 1;
  options.log_every = 0;
  // What Kokkos Tools sees the model allocate in its memory space when it
  // compiles, beside the plan it reports.
  std::unique_ptr<tessera::Model> model;
  std::int64_t compiled_bytes = 0;
  {
    tessera::MemoryEventCounter counter;
    model = tessera::build_model(deck, batch);
    compiled_bytes =
        static_cast<std::int64_t>(counter.bytes_allocated_in(tessera::MemSpace::name()));
  }
  const tessera::Shape sample = tessera::drop_batch(model->input(batch).shape());
  const tessera::Shape out = model->output_shape();

  // Opened first, so an unwritable path fails before minutes of measuring.
  const std::filesystem::path path(opt.json_path.empty() ? deck.run.output_dir + "/bench.json"
                                                         : opt.json_path);
  std::error_code made;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), made);
  std::ofstream file;
  if (!made) file.open(path);
  if (made || !file) {
    std::cerr << "tessera-bench: cannot write " << path.string() << ": "
              << (made ? made.message() : std::string("cannot open the file"))
              << " (choose another --json path)\n";
    return 2;
  }
  // A classifier's output is [classes]; a language model's [T, vocabulary].
  const bool tokens = deck.data_format == "tokens";
  TESSERA_REQUIRE((tokens ? out.rank() == 2 && out[0] == sample[0] : out.rank() == 1) &&
                      out[out.rank() - 1] >= 2,
                  "tessera-bench: the model's output "
                      << out << " is not "
                      << (tokens ? "[T, vocabulary] scores for token windows [T]"
                                 : "a vector of class scores"));

  json report = report_identity(opt, deck, batch);
  try {
    measure(opt, deck, batch, options, model, sample, out, report);
    tessera::bench::add_predictions(opt.predict, opt.launch_latency_us, !opt.skip_peaks, deck,
                                    *model, report);
    report["parallelism"] = tessera::bench::parallelism(report);
    report["memory"] = memory_json(*model, compiled_bytes);
    std::cout << "\n";
    print_table(std::cout, report);
    print_memory(std::cout, report["memory"]);
    tessera::bench::print_parallelism(std::cout, report);
    tessera::bench::print_predictions(std::cout, report);
    if (!(file << report.dump(2) << "\n")) {
      std::cerr << "tessera-bench: cannot write " << path.string() << "\n";
      return 2;
    }
    std::cout << "report: " << path.string() << "\n";
    return 0;
  } catch (const std::exception& e) {
    report["status"] = "failed";
    report["error"] = e.what();
    file << report.dump(2) << "\n";
    std::cerr << "tessera-bench: " << path.string() << " records the failure\n";
    throw;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tessera-bench: time a deck's training step, layer by layer, against measured peaks"};
  Options opt;
  app.add_option("deck", opt.deck_path, "input deck (TOML); see docs/decks.md")->required();
  app.add_option("--set", opt.overrides, "override a deck value (as tessera-train --set)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--batch", opt.batch, "batch size (default: training.batch_size)")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 20));
  app.add_option("--steps", opt.steps, "training steps per repetition (default 20)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--repetitions", opt.repetitions,
                 "timed repetitions; the median is reported (default 5)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--json", opt.json_path, "report file (default: <run.output_dir>/bench.json)");
  app.add_option("--gemm-size", opt.gemm_size,
                 "n of the n x n x n sgemm peak (default 2048 on the host, 8192 on a GPU)")
      ->check(CLI::Range(std::int64_t(16), std::int64_t(65536)));
  app.add_option("--triad-elements", opt.triad_elements,
                 "floats per array of the stream triad peak (default 2^25)")
      ->check(CLI::Range(std::int64_t(1024), std::int64_t(1) << 32));
  app.add_option("--peak-repetitions", opt.peak_repetitions, "repetitions of each peak (default 5)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--skip-peaks", opt.skip_peaks, "do not measure the peaks (fractions become 0)");
  // Hidden (no group): for tests of the plausibility rule.
  app.add_option("--peaks-override", opt.peaks_overrides,
                 "KEY=VALUE replacing a measured peak or a machine fact before the peaks are "
                 "judged (fma_gflops, sgemm_gflops, clock_mhz, cores)")
      ->check(CLI::Validator(peaks_override_error, "KEY=VALUE", "peaks override"))
      ->take_all()
      ->allow_extra_args(false)
      ->group("");
  app.add_flag(
      "--mixed-gemm", opt.mixed_gemm,
      "also time the 16-bit products (bf16, fp16; every method) on the sgemm peak's shape");
  app.add_option("--predict", opt.predict,
                 "lower bounds of the step on GPUs (h100, mi250x; comma-separated) from the "
                 "bytes, FLOPs and kernel launches counted here, in the report's predicted.*")
      ->check(CLI::Validator(tessera::bench::predict_option_error, "PLATFORMS", "platforms"));
  app.add_option("--launch-latency-us", opt.launch_latency_us,
                 "the launch latency --predict assumes, in microseconds (default: 4 on the "
                 "H100, 6 on the MI250X)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--platform", opt.platform,
                 "name of the hardware for tessera-compare, e.g. \"NVIDIA A100\" (default: the "
                 "CPU model and thread count, or the GPU backend)");
  if (const auto status = tessera::app::parse_command_line(app, argc, argv, "tessera-bench"))
    return *status;
  tessera::Runtime runtime(argc, argv);
  try {
    return run(opt);
  } catch (const tessera::DeckError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tessera-bench: error: " << e.what() << "\n";
    return 1;
  }
}
