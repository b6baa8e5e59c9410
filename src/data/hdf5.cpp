// HDF5 dataset reader and writer over the HDF5 C API, with HDF5's own error
// printing turned off so failures come out as one tessera::Error.
#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/data/hdf5.hpp>
#include <tessera/data/impl/hdf5_layout.hpp>
#include <tessera/io/impl/hdf5.hpp>

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace tessera {

namespace {
using Handle = impl::Hdf5Handle;

void silence_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// An integer dataset of 1 to 4 dimensions, open, with its extent.
struct OpenDataset {
  Handle file{-1, H5Fclose};
  Handle data{-1, H5Dclose};
  std::vector<hsize_t> dims;
};

OpenDataset open_integer_dataset(const std::string& function, const std::string& path,
                                 const std::string& dataset) {
  silence_hdf5();
  TESSERA_REQUIRE(H5Fis_hdf5(path.c_str()) > 0,
                  function << ": " << path << " is not an HDF5 file (or cannot be read)");
  OpenDataset open;
  open.file = Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  TESSERA_REQUIRE(open.file.ok(), function << ": cannot open " << path);
  TESSERA_REQUIRE(H5Lexists(open.file.get(), dataset.c_str(), H5P_DEFAULT) > 0,
                  function << ": " << path << " has no dataset '" << dataset
                           << "' (list them with h5ls " << path << ")");
  open.data = Handle(H5Dopen2(open.file.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
  TESSERA_REQUIRE(open.data.ok(),
                  function << ": " << path << ": '" << dataset << "' is not a dataset");
  const Handle type(H5Dget_type(open.data.get()), H5Tclose);
  TESSERA_REQUIRE(H5Tget_class(type.get()) == H5T_INTEGER,
                  function << ": " << path << ": dataset '" << dataset
                           << "' must hold integers 0 to 255 (as IDX files do)");
  const Handle space(H5Dget_space(open.data.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  TESSERA_REQUIRE(rank >= 1 && rank <= 4, function << ": " << path << ": dataset '" << dataset
                                                   << "' has " << rank
                                                   << " dimensions; expected 1 to 4");
  open.dims.resize(rank);
  H5Sget_simple_extent_dims(space.get(), open.dims.data(), nullptr);
  std::size_t total = 1;
  for (auto d : open.dims) {
    TESSERA_REQUIRE(
        d == 0 || total <= (std::size_t(1) << 62) / d,
        function << ": " << path << ": dataset '" << dataset << "' has more than 2^62 elements");
    total *= static_cast<std::size_t>(d);
  }
  return open;
}

std::vector<std::int64_t> extent_of(const OpenDataset& open) {
  return std::vector<std::int64_t>(open.dims.begin(), open.dims.end());
}
}  // namespace

std::vector<std::int64_t> hdf5_dataset_extent(const std::string& path, const std::string& dataset) {
  return extent_of(open_integer_dataset("tessera::hdf5_dataset_extent", path, dataset));
}

namespace impl {

ContiguousBytes locate_contiguous_bytes(const std::string& path, const std::string& dataset) {
  const std::string function = "tessera::locate_contiguous_bytes";
  const OpenDataset open = open_integer_dataset(function, path, dataset);
  const std::string convert =
      "; streaming reads samples of unsigned 8-bit integers stored contiguously and "
      "uncompressed (write them with tessera-idx2hdf5 --contiguous or tessera-synthetic)";
  const Handle type(H5Dget_type(open.data.get()), H5Tclose);
  TESSERA_REQUIRE(H5Tget_size(type.get()) == 1 && H5Tget_sign(type.get()) == H5T_SGN_NONE,
                  function << ": " << path << ": dataset '" << dataset << "' holds "
                           << H5Tget_size(type.get()) << "-byte "
                           << (H5Tget_sign(type.get()) == H5T_SGN_NONE ? "unsigned" : "signed")
                           << " integers" << convert);
  const Handle create(H5Dget_create_plist(open.data.get()), H5Pclose);
  TESSERA_REQUIRE(
      H5Pget_layout(create.get()) == H5D_CONTIGUOUS && H5Pget_external_count(create.get()) == 0,
      function << ": " << path << ": dataset '" << dataset
               << "' is stored in chunks (or in external files)" << convert);
  ContiguousBytes found;
  found.dims = extent_of(open);
  const haddr_t offset = H5Dget_offset(open.data.get());
  std::size_t total = 1;
  for (auto d : open.dims) total *= static_cast<std::size_t>(d);
  TESSERA_REQUIRE(
      total == 0 || offset != HADDR_UNDEF,
      function << ": " << path << ": dataset '" << dataset << "' has no data written" << convert);
  found.offset = static_cast<std::uint64_t>(offset);
  found.bytes = static_cast<std::uint64_t>(total);
  return found;
}

}  // namespace impl

IdxArray read_hdf5_bytes(const std::string& path, const std::string& dataset) {
  const OpenDataset open = open_integer_dataset("tessera::read_hdf5_bytes", path, dataset);
  const auto& dims = open.dims;
  const Handle& data = open.data;
  const int rank = static_cast<int>(dims.size());
  std::size_t total = 1;
  for (auto d : dims) total *= static_cast<std::size_t>(d);
  IdxArray array;
  array.dims = extent_of(open);
  // The extent is only a declaration: a chunked dataset of 2^40 elements
  // fits in a few bytes of file. Refuse what this machine cannot hold as
  // float samples.
  const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                        static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  const double needed = 4.0 * static_cast<double>(total);
  TESSERA_REQUIRE(memory <= 0 || needed <= memory,
                  "tessera::read_hdf5_bytes: "
                      << path << ": dataset '" << dataset << "' holds " << total << " elements ("
                      << needed / (1 << 30) << " GiB as float samples), more than this "
                      << "machine's " << memory / (1 << 30) << " GiB of memory");
  array.data.resize(total);
  if (total == 0) return array;
  // Read as int, a slab of whole rows (about 4 MiB) at a time, so values
  // outside 0..255 are caught rather than clipped.
  const std::size_t row = total / dims[0];
  const hsize_t rows = std::max<hsize_t>(1, (hsize_t(1) << 20) / std::max<std::size_t>(row, 1));
  std::vector<int> values(std::min<std::size_t>(total, rows * row));
  for (hsize_t first = 0; first < dims[0]; first += rows) {
    std::vector<hsize_t> start(dims.size(), 0), count(dims);
    start[0] = first;
    count[0] = std::min<hsize_t>(rows, dims[0] - first);
    const Handle file_space(H5Dget_space(data.get()), H5Sclose);
    const Handle memory_space(H5Screate_simple(rank, count.data(), nullptr), H5Sclose);
    const bool ok = H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                        count.data(), nullptr) >= 0 &&
                    H5Dread(data.get(), H5T_NATIVE_INT, memory_space.get(), file_space.get(),
                            H5P_DEFAULT, values.data()) >= 0;
    TESSERA_REQUIRE(ok, "tessera::read_hdf5_bytes: " << path << ": reading dataset '" << dataset
                                                     << "' failed (the file may be truncated)");
    const std::size_t offset = static_cast<std::size_t>(first) * row, n = count[0] * row;
    for (std::size_t i = 0; i < n; ++i) {
      TESSERA_REQUIRE(values[i] >= 0 && values[i] <= 255,
                      "tessera::read_hdf5_bytes: " << path << ": dataset '" << dataset
                                                   << "' element " << offset + i << " is "
                                                   << values[i] << "; expected 0 to 255");
      array.data[offset + i] = static_cast<std::uint8_t>(values[i]);
    }
  }
  return array;
}

Dataset load_hdf5_dataset(const std::string& path, const std::string& images_dataset,
                          const std::string& labels_dataset, float mean, float stddev) {
  ScopedRegion region("tessera::load_hdf5_dataset");
  return make_byte_dataset(read_hdf5_bytes(path, images_dataset),
                           read_hdf5_bytes(path, labels_dataset), path + ":" + images_dataset,
                           path + ":" + labels_dataset, mean, stddev);
}

void write_hdf5_dataset(const std::string& path, const IdxArray& images, const IdxArray& labels,
                        const std::string& images_dataset, const std::string& labels_dataset,
                        Hdf5Layout layout) {
  silence_hdf5();
  const Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  TESSERA_REQUIRE(file.ok(), "tessera::write_hdf5_dataset: cannot create " << path);
  const auto write = [&](const std::string& name, const IdxArray& array) {
    std::vector<hsize_t> dims(array.dims.begin(), array.dims.end());
    const Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                       H5Sclose);
    // Chunks of whole samples, about 64 KiB each, so the file compresses
    // and a reader can take slices of samples.
    std::vector<hsize_t> chunk = dims;
    hsize_t sample = 1;
    for (std::size_t d = 1; d < dims.size(); ++d) sample *= std::max<hsize_t>(dims[d], 1);
    chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(dims[0], (hsize_t(1) << 16) / sample));
    for (auto& c : chunk) c = std::max<hsize_t>(c, 1);
    const Handle props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    if (layout == Hdf5Layout::compressed) {
      H5Pset_chunk(props.get(), static_cast<int>(chunk.size()), chunk.data());
      H5Pset_deflate(props.get(), 4);
    }
    const Handle data(H5Dcreate2(file.get(), name.c_str(), H5T_STD_U8LE, space.get(), H5P_DEFAULT,
                                 props.get(), H5P_DEFAULT),
                      H5Dclose);
    TESSERA_REQUIRE(
        data.ok() && (array.data.empty() || H5Dwrite(data.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL,
                                                     H5P_DEFAULT, array.data.data()) >= 0),
        "tessera::write_hdf5_dataset: writing dataset '" << name << "' to " << path << " failed");
  };
  write(images_dataset, images);
  write(labels_dataset, labels);
}

}  // namespace tessera
