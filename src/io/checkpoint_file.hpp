// Pieces the checkpoint writer, reader and directory share (host code over
// the HDF5 C API). Private to src/io.
#pragma once

#include <tessera/core/tensor.hpp>
#include <tessera/io/impl/hdf5.hpp>
#include <tessera/io/impl/publish.hpp>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace tessera::impl {

inline std::vector<std::int64_t> dims_of(const Shape& shape) {
  std::vector<std::int64_t> dims;
  for (int i = 0; i < shape.rank(); ++i) dims.push_back(shape[i]);
  return dims;
}

inline std::string system_error() { return std::strerror(errno); }

}  // namespace tessera::impl
