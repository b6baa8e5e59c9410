// IDX files (MNIST, Fashion-MNIST), raw or gzip-compressed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;  // unsigned bytes, row-major
};

// Reads an IDX file of unsigned bytes (type code 0x08); gzip is detected
// from the content. Errors name the file and what was found. With
// max_items > 0 below the first dimension, only the first max_items items
// (along the first dimension) are read and dims[0] says so: the rest of the
// file is neither read nor checked.
IdxArray read_idx(const std::string& path, std::int64_t max_items = 0);

// Writes a raw (uncompressed, or gzip when path ends in .gz) IDX file; for tests and tools.
void write_idx(const std::string& path, const IdxArray& array);

}  // namespace tessera
