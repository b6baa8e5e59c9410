// Fuzz target: the HDF5 dataset reader. The input does not feed HDF5's own
// parser (a third-party library's); it describes the file: whether
// "images" and "labels" exist and as what (fuzz_hdf5_objects.hpp). The file
// is written through the HDF5 API and read back with load_hdf5_dataset and
// with the streaming reader (stream_hdf5_dataset, then every sample), which
// must give a consistent dataset or fail with tessera::Error.
#include <tessera/core/error.hpp>
#include <tessera/data/hdf5.hpp>
#include <tessera/data/stream.hpp>

#include <hdf5.h>

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "fuzz_hdf5_objects.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  tessera::fuzz::ensure_kokkos();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  static const std::string path = tessera::fuzz::scratch_path("data.h5");
  tessera::fuzz::Choices in(bytes, size);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) std::abort();
  tessera::fuzz::write_dataset(file, "images", in);
  tessera::fuzz::write_dataset(file, "labels", in);
  H5Fclose(file);
  try {
    const tessera::Dataset d = tessera::load_hdf5_dataset(path, "images", "labels");
    if (d.samples.extent(0) != d.labels.extent(0) || d.classes < 1 || d.classes > 256) std::abort();
  } catch (const tessera::Error&) {
  }
  try {
    const tessera::Dataset d = tessera::stream_hdf5_dataset(path, "images", "labels");
    if (d.size() < 1 || d.classes < 1 || d.classes > 256) std::abort();
    std::vector<std::int64_t> rows(static_cast<std::size_t>(d.size()));
    std::iota(rows.begin(), rows.end(), std::int64_t(0));
    std::vector<std::uint8_t> samples(rows.size() * static_cast<std::size_t>(d.features()));
    std::vector<int> labels(rows.size());
    d.file->read(rows.data(), d.size(), samples.data(), labels.data());
    for (const int label : labels)
      if (label < 0 || label >= d.classes) std::abort();
  } catch (const tessera::Error&) {
  }
  return 0;
}
