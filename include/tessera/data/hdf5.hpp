// Classification datasets in HDF5 files: an images dataset [N, ...] and a
// labels dataset [N], both of an integer type with values 0 to 255 (as IDX
// holds them), named in the deck. tessera-idx2hdf5 writes such files.
#pragma once

#include <tessera/data/dataset.hpp>
#include <tessera/data/idx.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// Reads one integer dataset as unsigned bytes; errors name the file and the
// dataset and say what was found.
IdxArray read_hdf5_bytes(const std::string& path, const std::string& dataset);

// The extent of an integer dataset (1 to 4 dimensions) without reading it.
std::vector<std::int64_t> hdf5_dataset_extent(const std::string& path, const std::string& dataset);

// Images and labels from one file, normalised as load_idx_dataset does.
Dataset load_hdf5_dataset(const std::string& path, const std::string& images_dataset,
                          const std::string& labels_dataset, float mean = 0.0f,
                          float stddev = 1.0f);

// How write_hdf5_dataset stores the arrays: gzip-compressed chunks of
// whole samples (smallest file), or contiguous and uncompressed (what a
// streaming reader, data.streaming = true, reads sample by sample).
enum class Hdf5Layout { compressed, contiguous };

// Writes images and labels (unsigned 8-bit) to a new file, replacing it if
// it exists.
void write_hdf5_dataset(const std::string& path, const IdxArray& images, const IdxArray& labels,
                        const std::string& images_dataset = "images",
                        const std::string& labels_dataset = "labels",
                        Hdf5Layout layout = Hdf5Layout::compressed);

}  // namespace tessera
