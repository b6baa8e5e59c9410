// The data tessera-bench trains on: synthetic samples of a deck's shapes,
// so that no data files are needed and speed does not depend on the values.
#pragma once

#include <tessera/core/random.hpp>
#include <tessera/core/types.hpp>
#include <tessera/data/dataset.hpp>

#include <cstdint>
#include <vector>

namespace tessera::bench {

// Deterministic inputs in [-1, 1) and labels in [0, classes): speed does not
// depend on the pixel values, and no data files are needed.
inline tessera::Dataset synthetic_dataset(const tessera::Shape& sample, std::int64_t samples,
                                          int classes, std::uint64_t seed) {
  tessera::Dataset data;
  const std::int64_t features = sample.numel();
  data.samples = tessera::Matrix<float>("bench::samples", samples, features);
  data.labels = tessera::Vector<int>("bench::labels", samples);
  data.sample_shape = sample;
  data.classes = classes;
  const auto x = data.samples;
  const auto y = data.labels;
  Kokkos::parallel_for(
      "tessera::bench::synthetic_dataset", Kokkos::RangePolicy<tessera::ExecSpace>(0, samples),
      KOKKOS_LAMBDA(const std::int64_t i) {
        for (std::int64_t f = 0; f < features; ++f)
          x(i, f) = 2.0f * tessera::counter_uniform(seed, 7, i * features + f) - 1.0f;
        y(i) = static_cast<int>(tessera::counter_hash(seed, 8, i) % classes);
      });
  return data;
}

// A language model's data: `samples` consecutive windows of `block` + 1
// random token ids below `vocabulary`.
inline tessera::Dataset synthetic_tokens(std::int64_t block, std::int64_t samples,
                                         std::int64_t vocabulary, std::uint64_t seed) {
  std::vector<std::int32_t> tokens(samples * block + 1);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<std::int32_t>(tessera::counter_hash(seed, 9, i) % vocabulary);
  return tessera::make_token_dataset(tokens, block, false, "synthetic tokens");
}

}  // namespace tessera::bench
