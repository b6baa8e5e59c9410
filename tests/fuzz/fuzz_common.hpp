// What the fuzz targets share: Kokkos brought up once per process, a scratch
// file per process for readers that take a path, and a reader of the fuzz
// input as a stream of choices (structure-aware targets decode it into the
// objects of a file rather than feeding its bytes to a third-party parser).
//
// Every target is built twice: for libFuzzer under clang with
// Tessera_ENABLE_FUZZING (scripts/fuzz.sh), and otherwise linked with
// replay_main.cpp, which runs each file of the seed corpus and of the
// regressions directory once (ctest fuzz_*_replay).
#pragma once

#include <Kokkos_Core.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace tessera::fuzz {

// Kokkos for the whole process: libFuzzer ends it with exit(), so it is
// brought up on first use and left for the operating system to reclaim.
inline void ensure_kokkos() {
  if (!Kokkos::is_initialized()) Kokkos::initialize();
}

// A file name of this process's own under $TMPDIR (default /tmp).
inline std::string scratch_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/tessera-fuzz-" + std::to_string(::getpid()) +
         "-" + name;
}

inline void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// Choices drawn from the input, front to back; an exhausted input yields
// zeros, so every input decodes to something.
class Choices {
 public:
  Choices(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  bool empty() const { return at_ >= size_; }
  std::uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  // An integer in [low, high].
  std::int64_t in(std::int64_t low, std::int64_t high) {
    std::uint64_t value = 0;
    const std::uint64_t span = static_cast<std::uint64_t>(high - low);
    for (std::uint64_t s = span; s; s >>= 8) value = (value << 8) | byte();
    return low + static_cast<std::int64_t>(span == UINT64_MAX ? value : value % (span + 1));
  }
  std::uint32_t u32() { return static_cast<std::uint32_t>(in(0, UINT32_MAX)); }
  std::int64_t i64() {
    std::uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value = (value << 8) | byte();
    return static_cast<std::int64_t>(value);
  }
  // Finite, special (nan, inf, huge, tiny) and ordinary values.
  double number() {
    switch (in(0, 7)) {
      case 0:
        return std::numeric_limits<double>::quiet_NaN();
      case 1:
        return (byte() & 1 ? -1 : 1) * std::numeric_limits<double>::infinity();
      case 2:
        return (byte() & 1 ? -1 : 1) * 1e300;
      case 3:
        return 1e-300;
      case 4:
        return static_cast<double>(i64());
      default:
        return static_cast<double>(static_cast<std::int32_t>(u32())) / 65536.0;
    }
  }
  std::string text(std::size_t max_length) {
    std::string out(static_cast<std::size_t>(in(0, static_cast<std::int64_t>(max_length))), ' ');
    for (auto& c : out) c = static_cast<char>(byte());
    return out;
  }
  // The bytes not yet consumed.
  std::vector<std::uint8_t> rest() {
    std::vector<std::uint8_t> out(data_ + std::min(at_, size_), data_ + size_);
    at_ = size_;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_, at_ = 0;
};

}  // namespace tessera::fuzz
