// Where an HDF5 dataset of bytes lies in its file, for readers that read
// samples with plain positioned reads (from any thread, without the HDF5
// library, which Debian builds without thread safety).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::impl {

struct ContiguousBytes {
  std::vector<std::int64_t> dims;  // the dataset's extent
  std::uint64_t offset = 0;        // of its first byte in the file
  std::uint64_t bytes = 0;         // the product of dims
};

// An unsigned 8-bit dataset stored contiguously, uncompressed and inside
// the file; errors name the file and the dataset and say how to write one.
ContiguousBytes locate_contiguous_bytes(const std::string& path, const std::string& dataset);

}  // namespace tessera::impl
