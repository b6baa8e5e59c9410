// tessera-bench's own measurements of the device: the sgemm peak, the
// 16-bit products of kernels/mixed_gemm.hpp and the STREAM triad, each the
// median of timed repetitions after a warm-up; the peaks they make up scale
// the per-layer figures.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/random.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/mixed_gemm.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fma_peak.hpp"

namespace tessera::bench {

// --peaks-override KEY=VALUE: replaces a measured figure or a machine fact,
// so that a test can give the plausibility rule values it knows the verdict
// on.
inline const std::vector<std::string> peaks_override_keys{"fma_gflops", "sgemm_gflops", "clock_mhz",
                                                          "cores"};

inline std::string peaks_override_error(const std::string& text) {
  const auto eq = text.find('=');
  const std::string key = text.substr(0, eq);
  if (eq == std::string::npos || std::find(peaks_override_keys.begin(), peaks_override_keys.end(),
                                           key) == peaks_override_keys.end()) {
    std::string keys;
    for (const auto& k : peaks_override_keys) keys += (keys.empty() ? "" : ", ") + k;
    return "--peaks-override " + text + ": expected KEY=VALUE with KEY one of " + keys;
  }
  char* end = nullptr;
  const double value = std::strtod(text.c_str() + eq + 1, &end);
  if (end == text.c_str() + eq + 1 || *end != '\0' || !(value >= 0))
    return "--peaks-override " + text + ": the value is not a number >= 0";
  return "";
}

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Peaks the device reaches on its own: they scale the per-layer figures.

// 16-bit products (--mixed-gemm): one type and method of
// tessera::kernels::mixed_gemm on the sgemm peak's shape.
struct MixedGemmFigure {
  std::string type, method;
  double gflops = 0;
};

struct Peaks {
  FmaPeak fma;
  std::int64_t gemm_size = 0;
  double gemm_gflops = 0;
  std::int64_t triad_elements = 0;
  double triad_gbs = 0, triad_best_gbs = 0;  // median and best of the repetitions
  double triad_cache_gbs = 0;                // best of measure_cache_triad
  std::vector<MixedGemmFigure> mixed_gemm;
  FmaExpectation fma_expected;
  PeakVerdict verdict;
  std::map<std::string, double> overrides;  // --peaks-override, applied
};

// Seeded values in [-0.5, 0.5) for the operands of a timed product. (Not in
// measure_product: nvcc allows no device lambda in a function whose template
// arguments include a host lambda's type.)
template <class T>
void fill_operands(const tessera::ExecSpace& exec, const tessera::Matrix<T>& a,
                   const tessera::Matrix<T>& b) {
  const std::int64_t n = a.extent(1);
  Kokkos::parallel_for(
      "tessera::bench::fill", Kokkos::RangePolicy<tessera::ExecSpace>(exec, 0, a.size()),
      KOKKOS_LAMBDA(const std::int64_t i) {
        a(i / n, i % n) = T(tessera::counter_uniform(1, 0, i) - 0.5f);
        b(i / n, i % n) = T(tessera::counter_uniform(1, 1, i) - 0.5f);
      });
}

// Median GFLOP/s of C = A B by `product(a, b, c)`, with A and B n x n of T
// (seeded values in [-0.5, 0.5)) and C n x n of float.
template <class T, class Product>
double measure_product(const char* region_name, std::int64_t n, int repetitions,
                       const Product& product) {
  tessera::ScopedRegion region(region_name);
  const tessera::ExecSpace exec;
  tessera::Matrix<T> a("bench::A", n, n), b("bench::B", n, n);
  tessera::Matrix<float> c("bench::C", n, n);
  fill_operands(exec, a, b);
  std::vector<double> gflops;
  for (int r = -1; r < repetitions; ++r) {  // r = -1 warms up
    Kokkos::fence();
    const auto start = Clock::now();
    product(exec, a, b, c);
    Kokkos::fence();
    if (r >= 0)
      gflops.push_back(2.0 * double(n) * double(n) * double(n) / seconds_since(start) * 1e-9);
  }
  return median(gflops);
}

// The sgemm peak: float matrices through KokkosBlas::gemm.
inline double measure_sgemm(std::int64_t n, int repetitions) {
  return measure_product<float>("tessera::bench::sgemm", n, repetitions,
                                [](const auto& exec, const auto& a, const auto& b, const auto& c) {
                                  tessera::compat::gemm(exec, "N", "N", 1.0f, a, b, 0.0f, c);
                                });
}

// A and B of T (bf16 or fp16) through one method of
// tessera::kernels::mixed_gemm; the warm-up sizes its workspace.
template <class T>
double measure_mixed_gemm(std::int64_t n, int repetitions,
                          tessera::kernels::MixedGemmMethod method) {
  tessera::kernels::MixedGemmWorkspace<> workspace;
  return measure_product<T>("tessera::bench::mixed_gemm", n, repetitions,
                            [&](const auto& exec, const auto& a, const auto& b, const auto& c) {
                              tessera::kernels::mixed_gemm(exec, "N", "N", 1.0f, a, b, 0.0f, c,
                                                           workspace, method);
                            });
}

// Every method mixed_gemm has on this backend, for both 16-bit types.
inline std::vector<MixedGemmFigure> measure_mixed_gemms(std::int64_t n, int repetitions) {
  using tessera::kernels::MixedGemmMethod;
  std::vector<MixedGemmMethod> methods{MixedGemmMethod::widen_blas, MixedGemmMethod::tiled};
  if (tessera::kernels::automatic_mixed_gemm_method<tessera::ExecSpace>() ==
      MixedGemmMethod::vendor)
    methods.push_back(MixedGemmMethod::vendor);
  std::vector<MixedGemmFigure> figures;
  for (const MixedGemmMethod method : methods) {
    figures.push_back({"bf16", tessera::kernels::to_string(method),
                       measure_mixed_gemm<tessera::bf16>(n, repetitions, method)});
    figures.push_back({"fp16", tessera::kernels::to_string(method),
                       measure_mixed_gemm<tessera::fp16>(n, repetitions, method)});
  }
  return figures;
}

// Median GB/s of a[i] = b[i] + s c[i] (three arrays of floats, counted as
// STREAM does: two reads and one write per element).
inline double measure_triad(std::int64_t n, int repetitions, double& best) {
  tessera::ScopedRegion region("tessera::bench::triad");
  const tessera::ExecSpace exec;
  tessera::Vector<float> a("bench::a", n), b("bench::b", n), c("bench::c", n);
  Kokkos::parallel_for(
      "tessera::bench::fill", Kokkos::RangePolicy<tessera::ExecSpace>(exec, 0, n),
      KOKKOS_LAMBDA(const std::int64_t i) {
        b(i) = 1.0f;
        c(i) = 2.0f;
      });
  const float s = 3.0f;
  // Pointers, as the kernels it is a ceiling for read their buffers (a
  // build with Kokkos' bounds checks would check every View access).
  float* const pa = a.data();
  const float* const pb = b.data();
  const float* const pc = c.data();
  std::vector<double> gbs;
  for (int r = -1; r < repetitions; ++r) {
    Kokkos::fence();
    const auto start = Clock::now();
    Kokkos::parallel_for(
        "tessera::bench::triad", Kokkos::RangePolicy<tessera::ExecSpace>(exec, 0, n),
        KOKKOS_LAMBDA(const std::int64_t i) { pa[i] = pb[i] + s * pc[i]; });
    Kokkos::fence();
    if (r >= 0) gbs.push_back(3.0 * sizeof(float) * double(n) / seconds_since(start) * 1e-9);
  }
  best = *std::max_element(gbs.begin(), gbs.end());
  return median(gbs);
}

// One sweep of the cache triad, x = y + 0.5 z, on arrays that do not overlap.
inline void cache_triad_sweep(float* KOKKOS_RESTRICT x, const float* KOKKOS_RESTRICT y,
                              const float* KOKKOS_RESTRICT z, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = y[i] + 0.5f * z[i];
}

// GB/s of a triad on arrays that stay in each thread's first-level cache
// (three of 1,024 floats a thread, 12 KiB, well inside a 32 KiB cache
// beside the stack and the rest), each thread's fastest burst summed, the
// best repetition: the most bandwidth any kernel's data can have, the
// ceiling measured_platform() gives small kernels. The sweeps alternate
// x = y + s z and y = x + s z, so none can be skipped. Measured on the
// host only (a GPU's threads share caches).
inline double measure_cache_triad(int repetitions) {
  tessera::ScopedRegion region("tessera::bench::cache_triad");
  using Host = Kokkos::DefaultHostExecutionSpace;
  const Host exec;
  // 1,000 bursts of 100 sweeps a thread (about 5 ms), each timed by its
  // thread: the bound is each thread's fastest burst, summed, so that a
  // thread kept off its core by another process for part of the run still
  // counts at its own speed, and a machine whose speed drifts has many
  // chances to show its fastest.
  const std::int64_t threads = exec.concurrency(), n = 1024, bursts = 1000, sweeps = 100;
  // A thread's three arrays in one block, 64 bytes apart modulo 4 KiB (at
  // equal offsets the loads wait on the stores they seem to alias).
  const std::int64_t block = 3 * n + 48;
  Kokkos::View<float*, Kokkos::HostSpace> arrays("bench::cache_arrays", threads * block);
  Kokkos::View<double*, Kokkos::HostSpace> fastest("bench::cache_fastest_burst", threads);
  Kokkos::deep_copy(arrays, 1.0f);
  float* const base = arrays.data();
  const double burst_bytes = 3.0 * sizeof(float) * double(n * sweeps);
  double best = 0;
  for (int r = -1; r < repetitions; ++r) {
    impl::time_bursts("tessera::bench::cache_triad", bursts, fastest, [=](const std::int64_t t) {
      float* x = base + t * block;
      float* y = x + n + 16;
      const float* z = y + n + 16;
      for (std::int64_t s = 0; s < sweeps; ++s) {
        cache_triad_sweep(x, y, z, n);
        std::swap(x, y);
      }
    });
    if (r >= 0) best = std::max(best, impl::summed_burst_rate(burst_bytes, fastest));
  }
  return best;
}

}  // namespace tessera::bench
