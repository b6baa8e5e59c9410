// The floating-point limit of the device, measured with a Kokkos kernel:
// every thread runs independent chains of single-precision fused
// multiply-adds (acc = acc * a + b), enough chains to cover the FMA
// latency. On x86 hosts the chains use the widest vector FMA the CPU has,
// chosen at run time, so the figure is the CPU's physical limit and not
// that of the instructions Tessera's own kernels were compiled for (a
// generic x86-64 build has SSE2 and no FMA: half or less of it). GPUs run
// scalar fmaf chains in many threads.
//
// A measured peak can be wrong (another load on the machine, a throttled
// clock, vCPUs that share a core), and every fraction of it then reads
// high, so the peaks are also judged against what the CPU's vector width,
// FMA ports, clock and cores allow (judge_peaks, below).
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/types.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(KOKKOS_ENABLE_CUDA) && \
    !defined(KOKKOS_ENABLE_HIP) && !defined(KOKKOS_ENABLE_SYCL)
#define TESSERA_FMA_PEAK_X86 1
#include <immintrin.h>
#endif

namespace tessera::bench {

struct FmaPeak {
  double gflops = 0;
  // An upper bound of what the threads can reach together: on the host each
  // thread's fastest burst, summed (a thread that another process keeps off
  // its core for part of the run still times some bursts whole); on a device
  // the fastest repetition.
  double ceiling_gflops = 0;
  std::string isa;  // the instructions the chains used
  int threads = 0;
};

namespace impl {

// Runs burst(t) `bursts` times on each host thread t (one work item a
// thread), each call timed by its own thread, and writes each thread's
// fastest call into fastest(t); returns the seconds of the whole run. A
// thread that another process keeps off its core for part of the run still
// times some bursts whole, so the fastest bursts, summed over the threads,
// bound what the threads reach together.
template <class Burst>
double time_bursts(const char* name, std::int64_t bursts,
                   const Kokkos::View<double*, Kokkos::HostSpace>& fastest, const Burst& burst) {
  using Clock = std::chrono::steady_clock;
  using Host = Kokkos::DefaultHostExecutionSpace;
  Kokkos::fence();
  const auto start = Clock::now();
  Kokkos::parallel_for(
      name, Kokkos::RangePolicy<Host, Kokkos::Schedule<Kokkos::Static>>(0, fastest.extent(0)),
      [=](const std::int64_t t) {
        double best = 1e30;
        for (std::int64_t b = 0; b < bursts; ++b) {
          const auto burst_start = Clock::now();
          burst(t);
          best = std::min(best, std::chrono::duration<double>(Clock::now() - burst_start).count());
        }
        fastest(t) = best;
      });
  Kokkos::fence();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The threads' rates summed, each at its fastest burst of `per_burst`
// units of work (FLOPs, bytes): the ceiling of time_bursts, in giga-units
// a second.
inline double summed_burst_rate(double per_burst,
                                const Kokkos::View<double*, Kokkos::HostSpace>& fastest) {
  double rate = 0;
  for (std::size_t t = 0; t < fastest.extent(0); ++t) rate += per_burst / fastest(t) * 1e-9;
  return rate;
}

#ifdef TESSERA_FMA_PEAK_X86
// Each returns the sum of its accumulators (so the work cannot be dropped)
// after `steps` rounds over all chains; flops: 2 per lane per chain per round.
constexpr int chains_512 = 16, chains_256 = 12, chains_128 = 12;

__attribute__((target("avx512f"))) inline float fma_chains_avx512(std::int64_t steps) {
  __m512 acc[chains_512];
  for (int c = 0; c < chains_512; ++c) acc[c] = _mm512_set1_ps(1.0f + 0.01f * c);
  const __m512 a = _mm512_set1_ps(0.9999f), b = _mm512_set1_ps(0.0001f);
  for (std::int64_t s = 0; s < steps; ++s)
    for (int c = 0; c < chains_512; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  float sum = 0;
  for (int c = 0; c < chains_512; ++c) sum += _mm512_reduce_add_ps(acc[c]);
  return sum;
}

__attribute__((target("avx2,fma"))) inline float fma_chains_avx2(std::int64_t steps) {
  __m256 acc[chains_256];
  for (int c = 0; c < chains_256; ++c) acc[c] = _mm256_set1_ps(1.0f + 0.01f * c);
  const __m256 a = _mm256_set1_ps(0.9999f), b = _mm256_set1_ps(0.0001f);
  for (std::int64_t s = 0; s < steps; ++s)
    for (int c = 0; c < chains_256; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  alignas(32) float lanes[8];
  float sum = 0;
  for (int c = 0; c < chains_256; ++c) {
    _mm256_store_ps(lanes, acc[c]);
    for (float v : lanes) sum += v;
  }
  return sum;
}

// Without FMA: a multiply and an add, counted as two flops as the FMA is.
inline float fma_chains_sse(std::int64_t steps) {
  __m128 acc[chains_128];
  for (int c = 0; c < chains_128; ++c) acc[c] = _mm_set1_ps(1.0f + 0.01f * c);
  const __m128 a = _mm_set1_ps(0.9999f), b = _mm_set1_ps(0.0001f);
  for (std::int64_t s = 0; s < steps; ++s)
    for (int c = 0; c < chains_128; ++c) acc[c] = _mm_add_ps(_mm_mul_ps(acc[c], a), b);
  alignas(16) float lanes[4];
  float sum = 0;
  for (int c = 0; c < chains_128; ++c) {
    _mm_store_ps(lanes, acc[c]);
    for (float v : lanes) sum += v;
  }
  return sum;
}

// The widest chains the CPU runs: their function, floats per vector,
// chains and name.
struct HostChains {
  float (*run)(std::int64_t);
  int lanes, chains;
  const char* isa;
};
inline HostChains host_chains() {
  if (__builtin_cpu_supports("avx512f")) return {fma_chains_avx512, 16, chains_512, "AVX-512 FMA"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {fma_chains_avx2, 8, chains_256, "AVX2 FMA"};
  return {fma_chains_sse, 4, chains_128, "SSE (multiply + add)"};
}
#endif

}  // namespace impl

// Median over `repetitions` of the whole device's FMA rate in GFLOP/s.
inline FmaPeak measure_fma_peak(int repetitions) {
  using Clock = std::chrono::steady_clock;
  FmaPeak peak;
  std::vector<double> rates;
#ifdef TESSERA_FMA_PEAK_X86
  // Host threads, one work item each; the widest FMA the CPU runs.
  using Host = Kokkos::DefaultHostExecutionSpace;
  const int threads = Host().concurrency();
  const impl::HostChains host = impl::host_chains();
  const int lanes = host.lanes, chains = host.chains;
  float (*const run)(std::int64_t) = host.run;
  peak.isa = host.isa;
  // 64 bursts of 2^16 steps a thread (a third of a millisecond each).
  constexpr std::int64_t bursts = 64, burst_steps = std::int64_t(1) << 16;
  const double burst_flops = 2.0 * lanes * chains * double(burst_steps);
  Kokkos::View<float*, Kokkos::HostSpace> sink("bench::fma_sink", threads);
  Kokkos::View<double*, Kokkos::HostSpace> fastest("bench::fma_fastest_burst", threads);
  for (int r = -1; r < repetitions; ++r) {
    const double seconds =
        impl::time_bursts("tessera::bench::fma_peak", bursts, fastest,
                          [=](const std::int64_t t) { sink(t) += run(burst_steps); });
    if (r < 0) continue;
    rates.push_back(burst_flops * bursts * threads / seconds * 1e-9);
    peak.ceiling_gflops =
        std::max(peak.ceiling_gflops, impl::summed_burst_rate(burst_flops, fastest));
  }
  peak.threads = threads;
#else
  // Many device threads of eight scalar chains each.
  constexpr int chains = 8;
  const std::int64_t threads = std::int64_t(1) << 20, steps = 4096;
  Vector<float> sink("bench::fma_sink", threads);
  for (int r = -1; r < repetitions; ++r) {
    Kokkos::fence();
    const auto start = Clock::now();
    Kokkos::parallel_for(
        "tessera::bench::fma_peak", Kokkos::RangePolicy<ExecSpace>(0, threads),
        KOKKOS_LAMBDA(const std::int64_t t) {
          float acc[chains];
          for (int c = 0; c < chains; ++c) acc[c] = 1.0f + 0.01f * c + 1e-7f * (t % 7);
          for (std::int64_t s = 0; s < steps; ++s)
            for (int c = 0; c < chains; ++c) acc[c] = compat::fma(acc[c], 0.9999f, 0.0001f);
          float sum = 0;
          for (int c = 0; c < chains; ++c) sum += acc[c];
          sink(t) = sum;
        });
    Kokkos::fence();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (r >= 0) rates.push_back(2.0 * chains * double(steps) * double(threads) / seconds * 1e-9);
  }
  peak.isa = "scalar fmaf";
  peak.threads = static_cast<int>(ExecSpace().concurrency());
#endif
  std::sort(rates.begin(), rates.end());
  peak.gflops = rates.empty() ? 0 : rates[rates.size() / 2];
  peak.ceiling_gflops = std::max(peak.ceiling_gflops, rates.empty() ? 0 : rates.back());
  return peak;
}

// ---------------------------------------------------------------------------
// What the FMA peak should be: floats per vector x FMA instructions per
// cycle and core x clock x cores x 2 flops (an FMA is a multiply and an
// add). The facts come from the OS; the rule is a pure function of them,
// so that a test can give it any values (tessera-bench --peaks-override).

// Floats per vector of the chains measure_fma_peak runs (0: scalar chains
// on a device, which no CPU facts bound).
inline int fma_vector_floats() {
#ifdef TESSERA_FMA_PEAK_X86
  return impl::host_chains().lanes;
#else
  return 0;
#endif
}

// The host CPU as /proc/cpuinfo and sysfs state it.
struct CpuFacts {
  std::string vendor;      // vendor_id: GenuineIntel, AuthenticAMD, ...
  std::string model_name;  // model name
  double clock_mhz = 0;    // 0: stated nowhere
  std::string clock_source;
  int cores = 0;  // physical cores; 0: unknown
};

// The highest `cpu MHz` (on virtual machines the nominal clock, on bare
// metal the current one: the lower reading, so the expectation stays low),
// else the cpufreq maximum; and the physical cores (distinct physical id
// and core id), so that two hyperthreads of one core count once. Of the
// whole machine: with OMP_PROC_BIND the calling thread's affinity is one
// CPU.
inline CpuFacts read_cpu_facts() {
  CpuFacts facts;
  std::ifstream in("/proc/cpuinfo");
  std::string line, physical;
  int logical = 0;
  std::set<std::pair<std::string, std::string>> cores;
  const auto value = [&line]() {
    const auto colon = line.find(':');
    if (colon == std::string::npos) return std::string();
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  };
  while (std::getline(in, line)) {
    const std::string key = line.substr(0, line.find_first_of("\t:"));
    if (key == "processor") {
      ++logical;
      physical.clear();
    } else if (key == "vendor_id") {
      facts.vendor = value();
    } else if (key == "model name") {
      facts.model_name = value();
    } else if (key == "cpu MHz") {
      facts.clock_mhz = std::max(facts.clock_mhz, std::atof(value().c_str()));
    } else if (key == "physical id") {
      physical = value();
    } else if (key == "core id") {
      cores.insert({physical, value()});
    }
  }
  facts.cores = cores.empty() ? logical : static_cast<int>(cores.size());
  if (facts.clock_mhz > 0) {
    facts.clock_source = "/proc/cpuinfo cpu MHz";
  } else {
    const char* path = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq";
    std::ifstream max(path);
    double khz = 0;
    if (max >> khz && khz > 0) {
      facts.clock_mhz = khz / 1000;
      facts.clock_source = path;
    }
  }
  return facts;
}

// FMA instructions of `vector_floats` floats a core retires per cycle, and
// the row of this table that gives it: conservative (where parts of one
// kind differ, the lower count), so that a real machine is not flagged; a
// CPU that retires more only measures further above the threshold.
//   AVX-512, Intel Xeon: 2 (ports 0+1 fused and port 5, Skylake-SP onwards;
//     Xeon Bronze and Silver of Skylake-SP and Cascade Lake have 1)
//   AVX-512, other Intel: 1 (client cores: ports 0+1 fused only)
//   AVX-512, AMD: 1 (Zen 4 runs a 512-bit FMA as two 256-bit halves; Zen 5
//     with a full 512-bit path retires 2)
//   AVX2, Intel Xeon: 2 (Haswell onwards); other Intel: 1 (E-cores split a
//     256-bit FMA)
//   AVX2, AMD: 1 (Zen 1 split a 256-bit FMA; Zen 2 onwards retire 2)
//   anything else, SSE included (a multiply and an add): 1
struct FmaIssue {
  int per_cycle;
  std::string row;
};
inline FmaIssue fma_per_cycle(int vector_floats, const CpuFacts& cpu) {
  const std::string isa = vector_floats == 16  ? "AVX-512"
                          : vector_floats == 8 ? "AVX2"
                                               : std::to_string(vector_floats) + " floats";
  const bool intel = cpu.vendor == "GenuineIntel";
  const bool xeon = intel && cpu.model_name.find("Xeon") != std::string::npos;
  const std::string maker = xeon                           ? "Intel Xeon"
                            : intel                        ? "Intel, not Xeon"
                            : cpu.vendor == "AuthenticAMD" ? "AMD"
                            : cpu.vendor.empty()           ? "unknown vendor"
                                                           : cpu.vendor;
  const int per_cycle = (vector_floats == 16 || vector_floats == 8) && xeon ? 2 : 1;
  return {per_cycle, isa + ", " + maker};
}

// The FMA peak the CPU should reach with chains of `vector_floats` floats
// on `threads` threads (0: no expectation, with the reason in derivation).
struct FmaExpectation {
  int vector_floats = 0, fma_per_cycle = 0, cores = 0;
  double clock_mhz = 0;
  std::string clock_source;
  double gflops = 0;
  std::string derivation;
};

inline FmaExpectation expect_fma_peak(int vector_floats, int threads, const CpuFacts& cpu) {
  FmaExpectation e;
  e.vector_floats = vector_floats;
  const FmaIssue issue = fma_per_cycle(vector_floats, cpu);
  e.fma_per_cycle = issue.per_cycle;
  e.cores = cpu.cores > 0 && cpu.cores < threads ? cpu.cores : threads;
  e.clock_mhz = cpu.clock_mhz;
  e.clock_source = cpu.clock_source;
  std::ostringstream text;
  if (vector_floats <= 0) {
    text << "no expectation: the FMA chains do not run on host vector units";
  } else if (cpu.clock_mhz <= 0) {
    text << "no expectation: no clock in /proc/cpuinfo (cpu MHz) or sysfs (cpufreq)";
  } else {
    e.gflops = 2.0 * vector_floats * e.fma_per_cycle * cpu.clock_mhz * 1e-3 * e.cores;
    text << vector_floats << " floats x " << e.fma_per_cycle << " FMA/cycle (" << issue.row
         << ") x " << cpu.clock_mhz << " MHz (" << cpu.clock_source << ") x " << e.cores
         << (e.cores == 1 ? " core (" : " cores (") << threads << " threads, "
         << (cpu.cores > 0 ? std::to_string(cpu.cores) : std::string("unknown"))
         << " physical) x 2 flops = " << e.gflops << " GFLOP/s";
  }
  e.derivation = text.str();
  return e;
}

// Whether each peak is plausible (empty: not measured, or no rule), and a
// warning per implausible one: an FMA peak below half of the expectation
// (the half leaves room for clocks that drop under wide vectors), or an
// sgemm peak above the FMA peak, which bounds it.
struct PeakVerdict {
  std::optional<bool> fma_plausible, sgemm_plausible;
  std::vector<std::string> warnings;
};

inline PeakVerdict judge_peaks(double fma_gflops, double sgemm_gflops,
                               const FmaExpectation& expected) {
  PeakVerdict v;
  std::ostringstream text;
  text.setf(std::ios::fixed);
  text.precision(1);
  if (fma_gflops > 0 && expected.gflops > 0) {
    v.fma_plausible = fma_gflops >= 0.5 * expected.gflops;
    if (!*v.fma_plausible) {
      text << "the FMA peak, " << fma_gflops << " GFLOP/s, is below half of the " << expected.gflops
           << " GFLOP/s this CPU should reach (" << expected.derivation
           << "): the machine was busy, its clock was throttled or its vCPUs share cores; "
           << "fractions of the FMA peak read high";
      v.warnings.push_back(text.str());
      text.str("");
    }
  }
  if (fma_gflops > 0 && sgemm_gflops > 0) {
    v.sgemm_plausible = sgemm_gflops <= fma_gflops;
    if (!*v.sgemm_plausible) {
      text << "the sgemm peak, " << sgemm_gflops << " GFLOP/s, is above the FMA peak, "
           << fma_gflops << " GFLOP/s, which bounds it: the FMA peak was measured low (a busy "
           << "machine, a lower clock); fractions of the FMA peak read high";
      v.warnings.push_back(text.str());
    }
  }
  return v;
}

}  // namespace tessera::bench
