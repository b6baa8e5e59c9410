// Pieces the checkpoint writer, reader and directory share (host code over
// the HDF5 C API). Private to src/io.
#pragma once

#include <tessera/core/tensor.hpp>
#include <tessera/io/impl/hdf5.hpp>

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

// Variable-length UTF-8 strings, which h5py reads as str.
inline Hdf5Handle string_type() {
  Hdf5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

// Writes `path` through a temporary file beside it: write_file(temporary),
// fsync, rename, fsync the directory. The temporary name starts with '.', so
// no listing of checkpoints takes a half-written file for one. `pause`
// honours the test hook TESSERA_CHECKPOINT_PAUSE_SECONDS before the rename.
// Errors name `function`. (checkpoint_writer.cpp)
void publish_atomically(const std::string& path, const std::string& function,
                        const std::function<void(const std::string& temporary)>& write_file,
                        bool pause = false);

}  // namespace tessera::impl
