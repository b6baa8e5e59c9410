// HDF5 datasets: a round trip through the writer and reader, the same
// dataset as from IDX, and errors that name the file and the dataset.
#include <tessera/data/hdf5.hpp>

#include <unistd.h>
#include <cstdio>
#include <fstream>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

std::string scratch(const std::string& name) {
  return ::testing::TempDir() + "tessera_hdf5_" + std::to_string(::getpid()) + "_" + name;
}

IdxArray images() {
  IdxArray a;
  a.dims = {5, 3, 2};
  for (int i = 0; i < 30; ++i) a.data.push_back(static_cast<std::uint8_t>(i * 8));
  return a;
}

const IdxArray labels{{5}, {1, 0, 4, 2, 1}};

TEST(Hdf5, RoundTripMatchesIdx) {
  const std::string h5 = scratch("round.h5"), idx_images = scratch("images.idx"),
                    idx_labels = scratch("labels.idx");
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
  const std::string h5 = scratch("errors.h5"), text = scratch("text.h5"),
                    missing = scratch("missing.h5");
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

}  // namespace
