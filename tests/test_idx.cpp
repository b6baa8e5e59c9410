// IDX files: gzip and raw round trips, and errors that name the file.
#include <tessera/core/error.hpp>
#include <tessera/data/dataset.hpp>
#include <tessera/data/idx.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

std::string idx_scratch(const std::string& name) {
  return test::scratch_path("tessera_idx_", name);
}

IdxArray sample_images() {
  IdxArray a;
  a.dims = {3, 2, 2};
  for (int i = 0; i < 12; ++i) a.data.push_back(static_cast<std::uint8_t>(i * 20));
  return a;
}

// Cuts the last `count` bytes off the file at path.
void drop_last_bytes(const std::string& path, std::size_t count) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size() - count);
}

void expect_error_mentions(const std::string& path, const std::string& fragment) {
  try {
    read_idx(path);
    FAIL() << "expected an error reading " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST(Idx, RoundTripGzipAndRaw) {
  const IdxArray a = sample_images();
  for (const std::string name : {"a.idx.gz", "a.idx"}) {
    const std::string path = idx_scratch(name);
    write_idx(path, a);
    const IdxArray b = read_idx(path);
    EXPECT_EQ(b.dims, a.dims) << name;
    EXPECT_EQ(b.data, a.data) << name;
    std::remove(path.c_str());
  }
}

// The head of a file (data.train_samples, data.test_samples): the first
// items exactly, dims[0] cut to them; a head that is the whole file or more
// reads it all and still checks its size; a file truncated after the head
// serves the head (the rest is not read), one truncated inside it fails.
TEST(Idx, HeadOfTheFileOnly) {
  const IdxArray a = sample_images();
  const std::string path = idx_scratch("head.idx.gz");
  write_idx(path, a);
  const IdxArray two = read_idx(path, 2);
  EXPECT_EQ(two.dims, (std::vector<std::int64_t>{2, 2, 2}));
  EXPECT_EQ(two.data, std::vector<std::uint8_t>(a.data.begin(), a.data.begin() + 8));
  for (const std::int64_t all : {0, 3, 4}) {
    const IdxArray b = read_idx(path, all);
    EXPECT_EQ(b.dims, a.dims) << all;
    EXPECT_EQ(b.data, a.data) << all;
  }
  const std::string raw = idx_scratch("head.idx");
  write_idx(raw, a);
  drop_last_bytes(raw, 3);
  EXPECT_EQ(read_idx(raw, 2).data, two.data);
  try {
    read_idx(raw, 3);
    FAIL() << "expected an error reading 3 items of a file truncated in the third";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
  std::remove(raw.c_str());
}

TEST(Idx, MissingFile) { expect_error_mentions(idx_scratch("missing.gz"), "cannot open"); }

TEST(Idx, TruncatedFile) {
  const std::string path = idx_scratch("truncated.idx");
  write_idx(path, sample_images());
  drop_last_bytes(path, 5);
  expect_error_mentions(path, "truncated");
  std::remove(path.c_str());
}

// A 16-byte header claiming 3 extents of 2^32 - 1 (and one claiming more
// than 2^62 bytes in all) fails as truncated or damaged at once, without
// allocating what the header claims.
TEST(Idx, HeaderClaimingMoreThanTheFileHolds) {
  const std::string path = idx_scratch("huge.idx");
  const char three[] = {0, 0, 8, 3, -1, -1, -1, -1, 0, 0, 0, 2, 0, 0, 1, 0, 7, 7};
  std::ofstream(path, std::ios::binary).write(three, sizeof three);
  expect_error_mentions(path, "file is truncated: the data needs 2199023255040 bytes, found 2");
  const char four[] = {0, 0, 8, 4, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 2};
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(four, sizeof four);
  expect_error_mentions(path, "the dimensions in the header multiply to more than 2^62 bytes");
  std::remove(path.c_str());
}

TEST(Idx, NotAnIdxFile) {
  const std::string path = idx_scratch("text.idx");
  std::ofstream(path) << "hello, this is not IDX";
  expect_error_mentions(path, "not an IDX file");
  std::remove(path.c_str());
}

TEST(Idx, DatasetNormalisesAndChecksCounts) {
  const std::string images = idx_scratch("images.gz"), labels = idx_scratch("labels.gz"),
                    short_labels = idx_scratch("short.gz");
  write_idx(images, sample_images());
  write_idx(labels, IdxArray{{3}, {2, 0, 1}});
  write_idx(short_labels, IdxArray{{2}, {2, 0}});
  const Dataset d = load_idx_dataset(images, labels, 0.5f, 0.25f);
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(d.classes, 3);
  EXPECT_EQ(d.sample_shape, (Shape{1, 2, 2}));
  const auto x = test::to_host(d.samples);
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(x[i], (i * 20 / 255.0 - 0.5) / 0.25, 1e-5);
  EXPECT_THROW(load_idx_dataset(images, short_labels), Error);
  for (const auto& p : {images, labels, short_labels}) std::remove(p.c_str());
}

}  // namespace
