// Classification datasets in HDF5 files: an images dataset [N, ...] and a
// labels dataset [N], both of an integer type with values 0 to 255 (as IDX
// holds them), named in the deck. tessera-idx2hdf5 writes such files.
#pragma once

#include <tessera/data/dataset.hpp>
#include <tessera/data/idx.hpp>

#include <string>

namespace tessera {

// Reads one integer dataset as unsigned bytes; errors name the file and the
// dataset and say what was found.
IdxArray read_hdf5_bytes(const std::string& path, const std::string& dataset);

// Images and labels from one file, normalised as load_idx_dataset does.
Dataset load_hdf5_dataset(const std::string& path, const std::string& images_dataset,
                          const std::string& labels_dataset, float mean = 0.0f,
                          float stddev = 1.0f);

// Writes images and labels (unsigned 8-bit, gzip-compressed) to a new file,
// replacing it if it exists.
void write_hdf5_dataset(const std::string& path, const IdxArray& images, const IdxArray& labels,
                        const std::string& images_dataset = "images",
                        const std::string& labels_dataset = "labels");

}  // namespace tessera
