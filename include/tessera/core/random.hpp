// Counter-based random numbers: a value depends only on (seed, stream,
// index), never on thread count, backend or launch order. Used for
// initialisation, shuffling and dropout.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>

namespace tessera {

// 64-bit FNV-1a of a byte string (host): stable names for random streams,
// and fingerprints of buffers that must agree between ranks.
inline std::uint64_t fnv1a64(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001b3ULL;
  return hash;
}

// SplitMix64 finaliser: a bijective 64-bit mix with good avalanche.
KOKKOS_INLINE_FUNCTION std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The part of counter_hash that depends on the seed and stream alone.
KOKKOS_INLINE_FUNCTION std::uint64_t stream_key(std::uint64_t seed, std::uint64_t stream) {
  return mix64(seed ^ mix64(stream));
}

KOKKOS_INLINE_FUNCTION std::uint64_t counter_hash(std::uint64_t seed, std::uint64_t stream,
                                                  std::uint64_t index) {
  return mix64(stream_key(seed, stream) + index);
}

// Uniform in [0, 1) from the top 24 bits: exact in float.
KOKKOS_INLINE_FUNCTION float counter_uniform(std::uint64_t seed, std::uint64_t stream,
                                             std::uint64_t index) {
  return static_cast<float>(counter_hash(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

// counter_uniform(seed, stream, first + i) >= rate in integers, for loops
// that draw many: the top 24 bits u of the hash against the smallest u
// with u / 2^24 >= rate (rate * 2^24 is exact in double, as u / 2^24 is
// in float), the same answer for every index and rate in [0, 1]. The
// stream's key is taken once, and no integer becomes a float, so host
// compilers vectorise the loop (dropout's mask).
struct UniformAtLeast {
  std::uint64_t base = 0;       // stream_key(seed, stream) + first
  std::uint64_t threshold = 0;  // ceil(rate * 2^24)

  KOKKOS_INLINE_FUNCTION UniformAtLeast(std::uint64_t seed, std::uint64_t stream,
                                        std::uint64_t first, float rate)
      : base(stream_key(seed, stream) + first) {
    const double scaled = static_cast<double>(rate) * 16777216.0;
    threshold = static_cast<std::uint64_t>(scaled);
    if (static_cast<double>(threshold) < scaled) ++threshold;
  }
  KOKKOS_INLINE_FUNCTION bool operator()(std::uint64_t i) const {
    return (mix64(base + i) >> 40) >= threshold;
  }
};

}  // namespace tessera
