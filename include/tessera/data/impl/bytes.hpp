// Byte samples as the IDX and HDF5 readers hold them, shared by the
// in-memory loaders and the streaming reader so both give the same floats
// bit for bit.
#pragma once

#include <tessera/core/tensor.hpp>

#include <cstdint>
#include <vector>

namespace tessera::impl {

// The shape of one sample of an array [N, ...] of 2 to 4 dimensions:
// {features}, {1, H, W} or {C, H, W}.
Shape sample_shape_of(const std::vector<std::int64_t>& dims);

// The affine map from a byte to a normalised float: x * scale - shift,
// with x scaled to [0, 1] before (x - mean) / stddev.
struct ByteNormalisation {
  float scale = 1.0f / 255.0f;
  float shift = 0.0f;
  ByteNormalisation(float mean, float stddev)
      : scale(1.0f / (255.0f * stddev)), shift(mean / stddev) {}
};

// out(i) = bytes(i) * scale - shift, on the device: the one place where
// both the in-memory and the streaming readers normalise, so that they
// agree bit for bit on every backend. Asynchronous on `exec`.
void normalise_bytes(const ExecSpace& exec, const Vector<const std::uint8_t>& bytes,
                     const ByteNormalisation& norm, const UnmanagedVector<float>& out);

}  // namespace tessera::impl
