// Token files and the byte-level tokenizer.
#include <tessera/core/profiling.hpp>
#include <tessera/data/tokens.hpp>

#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

namespace tessera {

const std::vector<std::string>& token_types() {
  static const std::vector<std::string> types = {"uint16", "int32"};
  return types;
}

namespace {
std::int64_t token_width(const std::string& token_type, const std::string& fn) {
  TESSERA_REQUIRE(token_type == "uint16" || token_type == "int32",
                  fn << ": token type '" << token_type << "'; allowed: uint16, int32");
  return token_type == "uint16" ? 2 : 4;
}
}  // namespace

std::vector<std::int32_t> read_token_file(const std::string& path, const std::string& token_type) {
  const std::int64_t width = token_width(token_type, "tessera::read_token_file");
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  TESSERA_REQUIRE(file, path << ": cannot open the token file: " << std::strerror(errno));
  const auto bytes = static_cast<std::int64_t>(file.tellg());
  TESSERA_REQUIRE(bytes % width == 0, path << ": " << bytes << " bytes is not a whole number of "
                                           << token_type << " tokens (" << width
                                           << " bytes each); is data.token_type right?");
  file.seekg(0);
  std::vector<unsigned char> raw(static_cast<std::size_t>(bytes));
  TESSERA_REQUIRE(file.read(reinterpret_cast<char*>(raw.data()), bytes),
                  path << ": read failed after " << file.gcount() << " of " << bytes << " bytes");
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(bytes / width));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const unsigned char* p = raw.data() + i * width;
    // Little-endian whatever the host.
    std::uint32_t v = 0;
    for (std::int64_t b = width; b-- > 0;) v = (v << 8) | p[b];
    tokens[i] = static_cast<std::int32_t>(v);
  }
  return tokens;
}

void write_token_file(const std::string& path, const std::vector<std::int32_t>& tokens,
                      const std::string& token_type) {
  const std::int64_t width = token_width(token_type, "tessera::write_token_file");
  const std::int64_t max = width == 2 ? 65535 : 2147483647;
  std::vector<unsigned char> raw(tokens.size() * width);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    TESSERA_REQUIRE(tokens[i] >= 0 && tokens[i] <= max,
                    "tessera::write_token_file: " << path << ": token " << i << " is " << tokens[i]
                                                  << ", outside a " << token_type);
    auto v = static_cast<std::uint32_t>(tokens[i]);
    for (std::int64_t b = 0; b < width; ++b, v >>= 8) raw[i * width + b] = v & 0xff;
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  TESSERA_REQUIRE(file, path << ": cannot write: " << std::strerror(errno));
  TESSERA_REQUIRE(file.write(reinterpret_cast<const char*>(raw.data()), raw.size()) && file.flush(),
                  path << ": write failed: " << std::strerror(errno));
}

Dataset load_token_dataset(const std::string& path, const std::string& token_type,
                           std::int64_t block, bool random_windows) {
  ScopedRegion region("tessera::load_token_dataset");
  return make_token_dataset(read_token_file(path, token_type), block, random_windows, path);
}

std::string read_text_file(const std::string& path) {
  // gzopen reads plain files as they are and gzip files decompressed.
  gzFile file = gzopen(path.c_str(), "rb");
  TESSERA_REQUIRE(file != nullptr, path << ": cannot open: " << std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  int got = 0;
  while ((got = gzread(file, buffer, sizeof buffer)) > 0) text.append(buffer, got);
  int code = 0;
  const std::string error = got < 0 ? gzerror(file, &code) : "";
  gzclose(file);
  TESSERA_REQUIRE(got == 0, path << ": read failed: " << error);
  return text;
}

std::vector<std::int32_t> byte_tokens(const std::string& text) {
  std::vector<std::int32_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

namespace {
std::map<std::int32_t, double> counts(const std::vector<std::int32_t>& tokens) {
  std::map<std::int32_t, double> c;
  for (auto t : tokens) c[t] += 1;
  return c;
}
}  // namespace

double unigram_entropy_bits(const std::vector<std::int32_t>& tokens) {
  const double n = static_cast<double>(tokens.size());
  double h = 0;
  for (const auto& [token, count] : counts(tokens)) h -= count / n * std::log2(count / n);
  return h;
}

double unigram_cross_entropy_bits(const std::vector<std::int32_t>& model,
                                  const std::vector<std::int32_t>& tokens,
                                  std::int64_t vocabulary) {
  const auto c = counts(model);
  const double total = static_cast<double>(model.size() + vocabulary);
  double bits = 0;
  for (auto t : tokens) {
    const auto found = c.find(t);
    bits -= std::log2(((found == c.end() ? 0.0 : found->second) + 1.0) / total);
  }
  return tokens.empty() ? 0.0 : bits / static_cast<double>(tokens.size());
}

}  // namespace tessera
