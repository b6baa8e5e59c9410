// The floating-point limit of the device, measured with a Kokkos kernel:
// every thread runs independent chains of single-precision fused
// multiply-adds (acc = acc * a + b), enough chains to cover the FMA
// latency. On x86 hosts the chains use the widest vector FMA the CPU has,
// chosen at run time, so the figure is the CPU's physical limit and not
// that of the instructions Tessera's own kernels were compiled for (a
// generic x86-64 build has SSE2 and no FMA: half or less of it). GPUs run
// scalar fmaf chains in many threads.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/types.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(KOKKOS_ENABLE_CUDA) && \
    !defined(KOKKOS_ENABLE_HIP) && !defined(KOKKOS_ENABLE_SYCL)
#define TESSERA_FMA_PEAK_X86 1
#include <immintrin.h>
#endif

namespace tessera::bench {

struct FmaPeak {
  double gflops = 0;
  std::string isa;  // the instructions the chains used
  int threads = 0;
};

namespace impl {

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
  const int threads = Host::concurrency();
  int lanes = 4, chains = impl::chains_128;
  float (*run)(std::int64_t) = impl::fma_chains_sse;
  peak.isa = "SSE (multiply + add)";
  if (__builtin_cpu_supports("avx512f")) {
    run = impl::fma_chains_avx512, lanes = 16, chains = impl::chains_512, peak.isa = "AVX-512 FMA";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    run = impl::fma_chains_avx2, lanes = 8, chains = impl::chains_256, peak.isa = "AVX2 FMA";
  }
  const std::int64_t steps = std::int64_t(1) << 22;
  Kokkos::View<float*, Kokkos::HostSpace> sink("bench::fma_sink", threads);
  for (int r = -1; r < repetitions; ++r) {
    Kokkos::fence();
    const auto start = Clock::now();
    Kokkos::parallel_for("tessera::bench::fma_peak", Kokkos::RangePolicy<Host>(0, threads),
                         [=](const int t) { sink(t) = run(steps); });
    Kokkos::fence();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (r >= 0) rates.push_back(2.0 * lanes * chains * double(steps) * threads / seconds * 1e-9);
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
  peak.threads = static_cast<int>(ExecSpace::concurrency());
#endif
  std::sort(rates.begin(), rates.end());
  peak.gflops = rates.empty() ? 0 : rates[rates.size() / 2];
  return peak;
}

}  // namespace tessera::bench
