// Counter-based random numbers: a value depends only on (seed, stream,
// index), never on thread count, backend or launch order. Used for
// initialisation, shuffling and (later) dropout.
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

KOKKOS_INLINE_FUNCTION std::uint64_t counter_hash(std::uint64_t seed, std::uint64_t stream,
                                                  std::uint64_t index) {
  return mix64(mix64(seed ^ mix64(stream)) + index);
}

// Uniform in [0, 1) from the top 24 bits: exact in float.
KOKKOS_INLINE_FUNCTION float counter_uniform(std::uint64_t seed, std::uint64_t stream,
                                             std::uint64_t index) {
  return static_cast<float>(counter_hash(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace tessera
