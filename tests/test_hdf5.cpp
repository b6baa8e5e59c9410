// HDF5 datasets: a round trip through the writer and reader, the same
// dataset as from IDX, and errors that name the file and the dataset.
#include <tessera/data/hdf5.hpp>

#include <hdf5.h>

#include <cstdio>
#include <fstream>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

std::string hdf5_scratch(const std::string& name) {
  return test::scratch_path("tessera_hdf5_", name);
}

IdxArray images() {
  IdxArray a;
  a.dims = {5, 3, 2};
  for (int i = 0; i < 30; ++i) a.data.push_back(static_cast<std::uint8_t>(i * 8));
  return a;
}

const IdxArray labels{{5}, {1, 0, 4, 2, 1}};

TEST(Hdf5, RoundTripMatchesIdx) {
  const std::string h5 = hdf5_scratch("round.h5"), idx_images = hdf5_scratch("images.idx"),
                    idx_labels = hdf5_scratch("labels.idx");
  write_hdf5_dataset(h5, images(), labels, "x", "y");
  const IdxArray read = read_hdf5_bytes(h5, "x");
  EXPECT_EQ(read.dims, images().dims);
  EXPECT_EQ(read.data, images().data);
  EXPECT_EQ(read_hdf5_bytes(h5, "y").data, labels.data);

  write_idx(idx_images, images());
  write_idx(idx_labels, labels);
  const Dataset from_hdf5 = load_hdf5_dataset(h5, "x", "y", 0.25f, 0.5f);
  const Dataset from_idx = load_idx_dataset(idx_images, idx_labels, 0.25f, 0.5f);
  EXPECT_EQ(from_hdf5.sample_shape, (Shape{1, 3, 2}));
  EXPECT_EQ(from_hdf5.classes, 5);
  EXPECT_EQ(test::to_host(from_hdf5.samples), test::to_host(from_idx.samples));
  EXPECT_EQ(test::to_host(from_hdf5.labels), test::to_host(from_idx.labels));
  for (const auto& p : {h5, idx_images, idx_labels}) std::remove(p.c_str());
}

TEST(Hdf5, ErrorsNameTheFileAndDataset) {
  const std::string h5 = hdf5_scratch("errors.h5"), text = hdf5_scratch("text.h5"),
                    missing = hdf5_scratch("missing.h5");
  write_hdf5_dataset(h5, images(), IdxArray{{4}, {1, 0, 4, 2}});
  std::ofstream(text) << "not HDF5";
  test::expect_error([&] { read_hdf5_bytes(missing, "images"); }, missing + " is not an HDF5 file");
  test::expect_error([&] { read_hdf5_bytes(text, "images"); }, text + " is not an HDF5 file");
  test::expect_error([&] { read_hdf5_bytes(h5, "pixels"); },
                     h5 + " has no dataset 'pixels' (list them with h5ls " + h5 + ")");
  test::expect_error([&] { load_hdf5_dataset(h5, "images", "labels"); },
                     h5 + ":images has 5 images but " + h5 + ":labels has 4 labels");
  for (const auto& p : {h5, text}) std::remove(p.c_str());
}

// A dataset must hold samples, and samples must hold values: no model
// trains on zero images or on images of zero pixels.
TEST(Hdf5, EmptyDatasetsAreRefused) {
  const std::string h5 = hdf5_scratch("empty.h5");
  write_hdf5_dataset(h5, IdxArray{{0, 1, 2}, {}}, IdxArray{{0}, {}});
  test::expect_error([&] { load_hdf5_dataset(h5, "images", "labels"); },
                     h5 + ":images holds no samples (its first dimension is 0)");
  write_hdf5_dataset(h5, IdxArray{{3, 0, 2}, {}}, IdxArray{{3}, {0, 1, 0}});
  test::expect_error([&] { load_hdf5_dataset(h5, "images", "labels"); },
                     h5 + ":images holds samples of size 0 (a sample dimension is 0)");
  std::remove(h5.c_str());
}

// A dataset of int32 values [n, row] (value i % 256, element `bad` set to
// 300 when given), chunked so a declared extent needs no storage.
void write_ints(const std::string& path, hsize_t n, hsize_t row, std::int64_t bad = -1) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[2] = {n, row}, chunk[2] = {1, row};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t props = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(props, 2, chunk);
  const hid_t data = H5Dcreate2(file, "x", H5T_STD_I32LE, space, H5P_DEFAULT, props, H5P_DEFAULT);
  if (n * row <= (hsize_t(1) << 24)) {
    std::vector<int> values(n * row);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int>(i % 256);
    if (bad >= 0) values[static_cast<std::size_t>(bad)] = 300;
    H5Dwrite(data, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  }
  H5Dclose(data);
  H5Pclose(props);
  H5Sclose(space);
  H5Fclose(file);
}

// The reader goes through the dataset a slab of rows at a time: every
// element arrives, in order, and a bad value in a later slab is named by
// its place in the whole dataset.
TEST(Hdf5, LargeDatasetsAreReadInSlabs) {
  const std::string h5 = hdf5_scratch("slabs.h5");
  const hsize_t n = 2600, row = 1000;  // 2.6 M elements: three slabs of 1048 rows
  write_ints(h5, n, row);
  const IdxArray read = read_hdf5_bytes(h5, "x");
  ASSERT_EQ(read.dims, (std::vector<std::int64_t>{2600, 1000}));
  ASSERT_EQ(read.data.size(), n * row);
  for (std::size_t i = 0; i < read.data.size(); ++i)
    ASSERT_EQ(read.data[i], i % 256) << "element " << i;
  write_ints(h5, n, row, 2512345);
  test::expect_error([&] { read_hdf5_bytes(h5, "x"); },
                     h5 + ": dataset 'x' element 2512345 is 300; expected 0 to 255");
  std::remove(h5.c_str());
}

// A chunked dataset declaring 2^41 elements takes a few hundred bytes of
// file; the reader refuses it before allocating.
TEST(Hdf5, DeclaredExtentBeyondMemoryIsRefused) {
  const std::string h5 = hdf5_scratch("huge.h5");
  write_ints(h5, hsize_t(1) << 31, 1024);
  test::expect_error([&] { read_hdf5_bytes(h5, "x"); },
                     h5 + ": dataset 'x' holds 2199023255552 elements (8192 GiB as float "
                          "samples), more than this machine's ");
  std::remove(h5.c_str());
}

}  // namespace
