// Synthetic classification data of any size, written to HDF5 slab by slab
// (never whole in memory), for testing streaming reads and scale: each
// class has a random template image, each sample is its class's template
// plus uniform noise, so a linear model learns it. The same seed writes the
// same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tessera {

struct SyntheticSpec {
  std::int64_t samples = 0;
  std::vector<std::int64_t> sample_dims;  // one sample: 1 to 3 extents, e.g. {1, 64, 64}
  int classes = 10;                       // 2 to 256
  std::uint64_t seed = 0;
  int noise = 96;  // the noise spans [0, noise) on the 0-255 scale (1 to 255)
};

// Writes images [samples, sample_dims...] and labels [samples] as unsigned
// 8-bit datasets stored contiguously (what data.streaming reads) to a new
// file at `path`, replacing it; `progress(bytes written, bytes in all)`
// is called after each slab. Errors name the file.
void write_synthetic_hdf5(const std::string& path, const SyntheticSpec& spec,
                          const std::string& images_dataset = "images",
                          const std::string& labels_dataset = "labels",
                          const std::function<void(std::int64_t, std::int64_t)>& progress = {});

}  // namespace tessera
