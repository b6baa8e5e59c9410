// tessera-bench's console table of a report: the peaks, per layer and pass
// the time, FLOP rates on both bases and bandwidth with the kernels under
// it, then the training step, the Dense layers and the memory-bound layers.
#pragma once

#include <nlohmann/json.hpp>

#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>

namespace tessera::bench {

using nlohmann::json;

// "38.1 GFLOP/s executed (61.2 % of the FMA peak), 95.4 GFLOP/s model FLOPs
// (direct form, 153.2 %)" from figures with add_flops()'s keys.
inline std::string both_bases(const json& figures, const std::string& peak_name,
                              const std::string& of_peak) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1) << figures["executed_gflops"].get<double>()
       << " GFLOP/s executed ("
       << 100 * figures["executed_flops_" + peak_name + "_fraction"].get<double>() << " % "
       << of_peak << "), " << figures["model_gflops"].get<double>()
       << " GFLOP/s model FLOPs (direct form, "
       << 100 * figures["model_flops_" + peak_name + "_fraction"].get<double>() << " %)";
  return text.str();
}

// "      tessera::kernels::im2col_device   1.234 ms x2, 50176 items, 0.40 MB,
// 0.00 MFLOP": a kernel of a pass (per step) under the pass's row.
inline std::string kernel_line(const json& k) {
  std::ostringstream text;
  text << "      " << std::left << std::setw(50) << k["name"].get<std::string>().substr(0, 49)
       << std::right << std::fixed << std::setprecision(3) << std::setw(10)
       << k["seconds"].get<double>() * 1e3 << " ms x" << k["launches"];
  if (k["work_items"].is_null())
    text << ", work not stated\n";
  else
    text << ", " << k["work_items"] << " items, " << std::setprecision(2)
         << k["bytes"].get<double>() * 1e-6 << " MB, " << k["flops"].get<double>() * 1e-6
         << " MFLOP\n";
  return text.str();
}

// The machine: the CPU and its vector ISA, the ISA Tessera's kernels were
// compiled for, the BLAS library with its kernels, and the BLAS's warning.
inline void print_machine(std::ostream& os, const json& report) {
  const auto& blas = report["blas"];
  os << "CPU: " << report["machine"]["cpu"].get<std::string>() << " ("
     << report["machine"]["cpu_isa"].get<std::string>() << "); Tessera's kernels compiled for "
     << report["machine"]["kernels_isa"].get<std::string>()
     << "\nBLAS: " << blas["library"].get<std::string>();
  if (!blas["core"].get<std::string>().empty())
    os << ", kernels " << blas["core"].get<std::string>() << " ("
       << blas["core_isa"].get<std::string>() << ")";
  os << "\n";
  if (!blas["warning"].get<std::string>().empty()) os << blas["warning"].get<std::string>() << "\n";
}

// The measured peaks, what the CPU's facts expect of the FMA peak, the
// overridden figures, the verdicts' warnings and the 16-bit products.
inline void print_peaks(std::ostream& os, const json& peaks) {
  const double fma = peaks["fma"]["gflops"].get<double>();
  const double sgemm = peaks["sgemm"]["gflops"].get<double>();
  os << std::fixed << std::setprecision(1) << "peaks: FMA " << fma << " GFLOP/s ("
     << peaks["fma"]["isa"].get<std::string>() << ", " << peaks["fma"]["threads"]
     << " threads), sgemm " << sgemm << " GFLOP/s (n = " << peaks["sgemm"]["size"];
  if (fma > 0) os << ", " << 100 * sgemm / fma << "% of FMA";
  os << "), stream triad " << peaks["stream_triad"]["gbs"].get<double>() << " GB/s\n";
  const auto& expected = peaks["fma"]["expected"];
  os << "FMA peak expected: " << expected["derivation"].get<std::string>() << "\n";
  if (!peaks["overrides"].empty()) {
    os << "peaks overridden (--peaks-override):";
    for (const auto& [key, value] : peaks["overrides"].items()) os << " " << key << "=" << value;
    os << "\n";
  }
  for (const auto& warning : peaks["warnings"])
    os << "warning: " << warning.get<std::string>() << "\n";
  if (peaks.contains("mixed_gemm")) {
    os << "16-bit products (n = " << peaks["sgemm"]["size"] << ", float accumulation):";
    for (const auto& f : peaks["mixed_gemm"]) {
      const double g = f["gflops"].get<double>();
      os << "\n  " << f["type"].get<std::string>() << " " << std::left << std::setw(11)
         << f["method"].get<std::string>() << std::right << std::setw(8) << g << " GFLOP/s";
      if (sgemm > 0)
        os << std::setprecision(2) << "  " << g / sgemm << "x sgemm" << std::setprecision(1);
    }
    os << "\n";
  }
}

// A row of the layer table: a layer's pass `p` (figures of pass_json()),
// its time, both FLOP rates with their fractions of the sgemm peak, and its
// bandwidth with its fraction of the stream triad's.
inline void print_layer_row(std::ostream& os, const std::string& name, const std::string& type,
                            const std::string& pass, const json& p) {
  os << std::left << std::setw(12) << name.substr(0, 11) << std::setw(12) << type.substr(0, 11)
     << std::setw(6) << pass << std::right << std::setprecision(3) << std::setw(10)
     << p["seconds"].get<double>() * 1e3 << std::setprecision(1) << std::setw(10)
     << p["executed_gflops"].get<double>() << std::setw(8)
     << 100 * p["executed_flops_sgemm_fraction"].get<double>() << std::setw(10)
     << p["model_gflops"].get<double>() << std::setw(8)
     << 100 * p["model_flops_sgemm_fraction"].get<double>() << std::setw(9)
     << p["gbs"].get<double>() << std::setw(8) << 100 * p["bandwidth_fraction"].get<double>()
     << "\n";
}

// The layer table: its legend and heading, then per layer a row for the
// forward pass, the backward pass and both, each pass's kernels under it.
inline void print_layers(std::ostream& os, const json& report) {
  os << "\nexec: GFLOP/s executed (the kernels' operations: Winograd's products and "
        "transforms where it runs, the direct planar form's whole vectors); model: GFLOP/s of "
        "the model's FLOPs (direct form); %sgemm of each; GB/s of the compulsory traffic, %triad "
        "of it\n";
  os << std::left << std::setw(12) << "layer" << std::setw(12) << "type" << std::setw(6) << "pass"
     << std::right << std::setw(10) << "ms" << std::setw(10) << "exec" << std::setw(8) << "%sgemm"
     << std::setw(10) << "model" << std::setw(8) << "%sgemm" << std::setw(9) << "GB/s"
     << std::setw(8) << "%triad"
     << "\n";
  for (const auto& layer : report["layers"]) {
    for (const char* pass : {"forward", "backward", "step"}) {
      const std::string label = pass == std::string("forward")    ? "fwd"
                                : pass == std::string("backward") ? "bwd"
                                                                  : "both";
      print_layer_row(os, layer["name"].get<std::string>(), layer["type"].get<std::string>(), label,
                      layer[pass]);
      if (pass == std::string("step")) continue;
      for (const auto& k : layer[pass]["kernels"]) os << kernel_line(k);
    }
  }
}

// The training step's time and rates, then those of the Dense layers and
// of the memory-bound layers, where the model has them.
inline void print_totals(std::ostream& os, const json& report) {
  const auto& step = report["step"];
  os << "\ntraining step: " << std::setprecision(3) << step["seconds"].get<double>() * 1e3
     << " ms (median), " << std::setprecision(0) << step["samples_per_second"].get<double>()
     << " samples/s at batch " << report["batch_size"] << "; layers forward + backward "
     << std::setprecision(3) << step["layers_seconds"].get<double>() * 1e3 << " ms\n"
     << "training step: " << both_bases(step, "fma", "of the FMA peak") << "\n";
  const auto& dense = report["dense"];
  if (dense["layers"].get<int>() > 0)
    os << "dense layers, training step: " << both_bases(dense, "sgemm", "of the sgemm peak")
       << "\n";
  const auto& memory = report["memory_bound"];
  if (memory["layers"].get<int>() > 0)
    os << "other layers (no matrix products), training step: " << std::setprecision(3)
       << memory["seconds"].get<double>() * 1e3 << " ms, " << std::setprecision(1)
       << memory["gbs"].get<double>()
       << " GB/s = " << 100 * memory["bandwidth_fraction"].get<double>()
       << "% of the stream triad\n";
}

// The console table of a report (the stream's format carries from each
// part to the next, as the parts expect).
inline void print_table(std::ostream& os, const json& report) {
  print_machine(os, report);
  print_peaks(os, report["peaks"]);
  print_layers(os, report);
  print_totals(os, report);
}

}  // namespace tessera::bench
