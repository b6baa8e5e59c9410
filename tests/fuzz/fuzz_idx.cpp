// Fuzz target: the IDX reader and the dataset built from two IDX files. The
// first input byte chooses raw or gzip-compressed files, and where the input
// splits into an images file and a labels file or, for one file, whether
// it is read whole or its head of 1 to 3 items. Reading either fails with
// tessera::Error or gives arrays whose sizes agree with their headers.
#include <tessera/core/error.hpp>
#include <tessera/data/dataset.hpp>
#include <tessera/data/idx.hpp>

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_common.hpp"

namespace {

void write_input(const std::string& path, const std::vector<std::uint8_t>& bytes, bool gzip) {
  if (!gzip) {
    tessera::fuzz::write_file(path, bytes.data(), bytes.size());
    return;
  }
  gzFile f = gzopen(path.c_str(), "wb");
  if (!bytes.empty()) gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

void check_consistent(const tessera::IdxArray& a) {
  std::size_t total = 1;
  for (auto d : a.dims) total *= static_cast<std::size_t>(d);
  if (a.dims.empty() || total != a.data.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tessera::fuzz::ensure_kokkos();
  tessera::fuzz::Choices in(data, size);
  const std::uint8_t mode = in.byte();
  const bool gzip = mode & 1, pair = mode & 2;
  std::vector<std::uint8_t> bytes = in.rest();
  static const std::string images = tessera::fuzz::scratch_path("images.idx");
  static const std::string labels = tessera::fuzz::scratch_path("labels.idx");
  if (!pair) {
    // The whole file, or its head of 1 to 3 items (data.train_samples).
    const std::int64_t head = (mode >> 2) % 4;
    write_input(images, bytes, gzip);
    try {
      const tessera::IdxArray a = tessera::read_idx(images, head);
      check_consistent(a);
      if (head > 0 && a.dims[0] > head) std::abort();
    } catch (const tessera::Error&) {
    }
    return 0;
  }
  // Split after a whole number of 4-byte words, so headers stay aligned often.
  const std::size_t split =
      bytes.empty() ? 0 : 4 * (std::size_t(mode >> 2) % (bytes.size() / 4 + 1));
  write_input(images, {bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(split)}, gzip);
  write_input(labels, {bytes.begin() + static_cast<std::ptrdiff_t>(split), bytes.end()}, gzip);
  try {
    const tessera::Dataset d = tessera::load_idx_dataset(images, labels);
    if (d.samples.extent(0) != d.labels.extent(0) || d.classes < 1 || d.classes > 256) std::abort();
  } catch (const tessera::Error&) {
  }
  return 0;
}
