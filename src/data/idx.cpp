// IDX reader and writer over zlib (which reads raw files transparently).
#include <tessera/core/error.hpp>
#include <tessera/data/idx.hpp>

#include <zlib.h>

#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

namespace tessera {

namespace {
struct GzCloser {
  void operator()(gzFile f) const {
    if (f) gzclose(f);
  }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads up to `bytes` bytes; 0 at the end of the file.
std::size_t read_some(gzFile f, unsigned char* out, std::size_t bytes, const std::string& path,
                      const char* what) {
  const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(bytes, 1u << 24));
  const int got = gzread(f, out, chunk);
  if (got < 0) {
    int err = 0;
    const char* msg = gzerror(f, &err);
    TESSERA_REQUIRE(false, "tessera::read_idx: " << path << ": corrupt or unreadable while reading "
                                                 << what << " (" << msg << ")");
  }
  return static_cast<std::size_t>(got);
}

void truncated(const std::string& path, const char* what, std::size_t needed, std::size_t found) {
  TESSERA_REQUIRE(false, "tessera::read_idx: " << path << ": file is truncated: " << what
                                               << " needs " << needed << " bytes, found " << found);
}

void read_exact(gzFile f, void* buffer, std::size_t bytes, const std::string& path,
                const char* what) {
  std::size_t done = 0;
  while (done < bytes) {
    const std::size_t got =
        read_some(f, static_cast<unsigned char*>(buffer) + done, bytes - done, path, what);
    if (got == 0) truncated(path, what, bytes, done);
    done += got;
  }
}

// The data, grown as it arrives: a damaged or hostile header can claim far
// more than the file holds (four extents of 2^32 - 1 in 16 bytes), and the
// size is only trusted once the bytes are there.
void read_data(gzFile f, std::vector<std::uint8_t>& data, std::size_t total,
               const std::string& path) {
  std::size_t done = 0;
  while (done < total) {
    data.resize(done + std::min<std::size_t>(total - done, std::size_t(1) << 24));
    const std::size_t got = read_some(f, data.data() + done, data.size() - done, path, "the data");
    if (got == 0) truncated(path, "the data", total, done);
    done += got;
  }
  data.resize(total);
}

}  // namespace

IdxArray read_idx(const std::string& path, std::int64_t max_items) {
  GzFile f(gzopen(path.c_str(), "rb"));
  TESSERA_REQUIRE(f != nullptr, "tessera::read_idx: cannot open "
                                    << path << " (does the file exist and is it readable?)");
  unsigned char magic[4];
  read_exact(f.get(), magic, 4, path, "the 4-byte magic number");
  TESSERA_REQUIRE(magic[0] == 0 && magic[1] == 0,
                  "tessera::read_idx: " << path << ": not an IDX file (magic starts with bytes "
                                        << int(magic[0]) << ", " << int(magic[1])
                                        << "; expected 0, 0)");
  TESSERA_REQUIRE(magic[2] == 0x08,
                  "tessera::read_idx: " << path << ": element type code 0x" << std::hex
                                        << int(magic[2])
                                        << " is not supported; expected 0x08 (unsigned byte)");
  const int rank = magic[3];
  TESSERA_REQUIRE(rank >= 1 && rank <= 4,
                  "tessera::read_idx: " << path << ": " << rank << " dimensions; expected 1 to 4");
  IdxArray array;
  std::size_t total = 1;
  for (int d = 0; d < rank; ++d) {
    unsigned char b[4];
    read_exact(f.get(), b, 4, path, "the dimension sizes");
    const std::int64_t extent = (std::int64_t(b[0]) << 24) | (std::int64_t(b[1]) << 16) |
                                (std::int64_t(b[2]) << 8) | std::int64_t(b[3]);
    array.dims.push_back(extent);
    TESSERA_REQUIRE(
        extent == 0 || total <= (std::size_t(1) << 62) / static_cast<std::size_t>(extent),
        "tessera::read_idx: " << path << ": the dimensions in the header multiply to "
                              << "more than 2^62 bytes; the header is damaged");
    total *= static_cast<std::size_t>(extent);
  }
  // The head only: the items after it stay unread (and so unchecked).
  const bool head = max_items > 0 && max_items < array.dims[0];
  if (head) {
    total = total / static_cast<std::size_t>(array.dims[0]) * static_cast<std::size_t>(max_items);
    array.dims[0] = max_items;
  }
  read_data(f.get(), array.data, total, path);
  if (head) return array;
  unsigned char extra;
  TESSERA_REQUIRE(gzread(f.get(), &extra, 1) == 0,
                  "tessera::read_idx: " << path << ": trailing bytes after " << total
                                        << " data bytes; the header and the size disagree");
  return array;
}

void write_idx(const std::string& path, const IdxArray& array) {
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  GzFile f(gzopen(path.c_str(), gz ? "wb" : "wbT"));
  TESSERA_REQUIRE(f != nullptr, "tessera::write_idx: cannot create " << path);
  std::vector<unsigned char> header = {0, 0, 0x08, static_cast<unsigned char>(array.dims.size())};
  for (auto d : array.dims)
    for (int shift = 24; shift >= 0; shift -= 8)
      header.push_back(static_cast<unsigned char>(d >> shift));
  const bool ok =
      gzwrite(f.get(), header.data(), static_cast<unsigned>(header.size())) == int(header.size()) &&
      (array.data.empty() ||
       gzwrite(f.get(), array.data.data(), static_cast<unsigned>(array.data.size())) ==
           int(array.data.size()));
  TESSERA_REQUIRE(ok, "tessera::write_idx: write to " << path << " failed");
  TESSERA_REQUIRE(gzclose(f.release()) == Z_OK,
                  "tessera::write_idx: closing " << path << " failed");
}

}  // namespace tessera
