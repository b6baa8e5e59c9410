// HDF5 objects drawn from fuzz input, for the structure-aware targets: a
// dataset or an attribute of one of several element types (integers of
// every width and byte order, floats, strings), a null, scalar or simple
// dataspace of up to five dimensions (at most 4096 elements), contiguous or
// chunked and compressed, with values that are mostly plausible and
// sometimes anything. Written through the HDF5 API, so the readers under
// test meet valid HDF5 holding unexpected content.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"

namespace tessera::fuzz {

struct ElementType {
  hid_t file, memory;
  bool integer;
};

struct DrawnSpace {
  hid_t space;
  int rank;  // -1: null, 0: scalar
  std::vector<hsize_t> dims;
  hsize_t total;
};

inline DrawnSpace draw_space(Choices& in, int max_rank) {
  DrawnSpace s;
  s.rank = static_cast<int>(in.in(-1, max_rank));
  s.total = 1;
  for (int d = 0; d < s.rank; ++d) {
    s.dims.push_back(static_cast<hsize_t>(in.in(0, 40)));
    if (s.total * s.dims.back() > 4096) s.dims.back() = 1;
    s.total *= s.dims.back();
  }
  if (s.rank <= 0) s.total = s.rank == 0 ? 1 : 0;
  s.space = s.rank < 0    ? H5Screate(H5S_NULL)
            : s.rank == 0 ? H5Screate(H5S_SCALAR)
                          : H5Screate_simple(s.rank, s.dims.data(), nullptr);
  return s;
}

inline ElementType draw_type(Choices& in) {
  const ElementType types[] = {{H5T_STD_U8LE, H5T_NATIVE_INT64, true},
                               {H5T_STD_I8LE, H5T_NATIVE_INT64, true},
                               {H5T_STD_U16BE, H5T_NATIVE_INT64, true},
                               {H5T_STD_I32LE, H5T_NATIVE_INT64, true},
                               {H5T_STD_I64LE, H5T_NATIVE_INT64, true},
                               {H5T_STD_U64LE, H5T_NATIVE_INT64, true},
                               {H5T_IEEE_F32LE, H5T_NATIVE_DOUBLE, false},
                               {H5T_IEEE_F64BE, H5T_NATIVE_DOUBLE, false},
                               {H5T_C_S1, H5T_C_S1, false}};
  return types[in.in(0, 8)];
}

// Values for `total` elements of `type` in its memory type; strings are
// fixed-length, 4 bytes each.
inline std::vector<unsigned char> draw_values(Choices& in, const ElementType& type, hsize_t total) {
  std::vector<unsigned char> out;
  if (type.file == H5T_C_S1) {
    out.resize(total * 4);
    for (auto& c : out) c = in.byte();
  } else if (type.integer) {
    std::vector<std::int64_t> values(total);
    for (auto& v : values) v = in.byte() & 0x80 ? in.i64() : in.in(0, 255);
    out.assign(reinterpret_cast<unsigned char*>(values.data()),
               reinterpret_cast<unsigned char*>(values.data() + total));
  } else {
    std::vector<double> values(total);
    for (auto& v : values) v = in.number();
    out.assign(reinterpret_cast<unsigned char*>(values.data()),
               reinterpret_cast<unsigned char*>(values.data() + total));
  }
  return out;
}

// A fixed-length string type for strings, else the type itself; close with
// close_type.
inline hid_t file_type_of(const ElementType& type) {
  if (type.file != H5T_C_S1) return type.file;
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, 4);
  return t;
}
inline void close_type(const ElementType& type, hid_t t) {
  if (t != type.file) H5Tclose(t);
}

// A dataset `name` in `parent`, or a group there instead, or nothing.
inline void write_dataset(hid_t parent, const char* name, Choices& in) {
  const int kind = static_cast<int>(in.in(0, 5));
  if (kind == 0) return;
  if (kind == 1) {
    H5Gclose(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    return;
  }
  const ElementType type = draw_type(in);
  const DrawnSpace s = draw_space(in, 5);
  const hid_t props = H5Pcreate(H5P_DATASET_CREATE);
  if (s.rank > 0 && s.total > 0 && (in.byte() & 1)) {
    std::vector<hsize_t> chunk(s.dims);
    for (auto& c : chunk) c = std::max<hsize_t>(1, std::min<hsize_t>(c, 1 + in.in(0, 8)));
    H5Pset_chunk(props, s.rank, chunk.data());
    H5Pset_deflate(props, 1);
  }
  const hid_t file_type = file_type_of(type);
  const hid_t data = H5Dcreate2(parent, name, file_type, s.space, H5P_DEFAULT, props, H5P_DEFAULT);
  if (data >= 0) {
    if (s.total > 0) {
      const auto values = draw_values(in, type, s.total);
      H5Dwrite(data, type.file == H5T_C_S1 ? file_type : type.memory, H5S_ALL, H5S_ALL, H5P_DEFAULT,
               values.data());
    }
    H5Dclose(data);
  }
  close_type(type, file_type);
  H5Pclose(props);
  H5Sclose(s.space);
}

// An attribute `name` of `object`, of any type and of up to two dimensions.
inline void write_attribute(hid_t object, const char* name, Choices& in) {
  const ElementType type = draw_type(in);
  const DrawnSpace s = draw_space(in, 2);
  const hid_t file_type = file_type_of(type);
  const hid_t attribute = H5Acreate2(object, name, file_type, s.space, H5P_DEFAULT, H5P_DEFAULT);
  if (attribute >= 0) {
    if (s.total > 0) {
      const auto values = draw_values(in, type, s.total);
      H5Awrite(attribute, type.file == H5T_C_S1 ? file_type : type.memory, values.data());
    }
    H5Aclose(attribute);
  }
  close_type(type, file_type);
  H5Sclose(s.space);
}

}  // namespace tessera::fuzz
