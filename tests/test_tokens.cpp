// Token data: token files round trip in both types and fail with the file
// named; text (plain or gzip) becomes one token per byte; windows of T + 1
// tokens: consecutive in evaluation, drawn from (seed, epoch, sample) in
// training; a held-out split keeps its own tokens; the unigram entropy.
#include <tessera/data/tokens.hpp>

#include <zlib.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <set>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "tessera_tokens_" + std::to_string(::getpid()) + "_" + name;
}

TEST(TokenFile, RoundTripsBothTypes) {
  const std::vector<std::int32_t> small = {0, 1, 255, 256, 65535, 7};
  const std::string p16 = temp_path("u16.bin"), p32 = temp_path("i32.bin");
  write_token_file(p16, small, "uint16");
  EXPECT_EQ(std::filesystem::file_size(p16), small.size() * 2);
  EXPECT_EQ(read_token_file(p16, "uint16"), small);
  std::vector<std::int32_t> large = small;
  large.push_back(1 << 20);
  write_token_file(p32, large, "int32");
  EXPECT_EQ(std::filesystem::file_size(p32), large.size() * 4);
  EXPECT_EQ(read_token_file(p32, "int32"), large);
  // Little-endian on disk: 256 is 00 01.
  std::ifstream raw(p16, std::ios::binary);
  char bytes[8];
  raw.read(bytes, 8);
  EXPECT_EQ(static_cast<unsigned char>(bytes[6]), 0x00);
  EXPECT_EQ(static_cast<unsigned char>(bytes[7]), 0x01);
  test::expect_error([&] { write_token_file(p16, large, "uint16"); },
                     "token 6 is 1048576, outside a uint16");
  std::filesystem::remove(p16);
  std::filesystem::remove(p32);
}

TEST(TokenFile, ErrorsNameTheFile) {
  const std::string odd = temp_path("odd.bin");
  std::ofstream(odd, std::ios::binary) << "abc";
  test::expect_error([&] { read_token_file(odd, "uint16"); },
                     odd + ": 3 bytes is not a whole number of uint16 tokens (2 bytes each)");
  test::expect_error([&] { read_token_file(odd + ".missing", "uint16"); },
                     odd + ".missing: cannot open the token file");
  test::expect_error([&] { read_token_file(odd, "int8"); }, "token type 'int8'; allowed");
  test::expect_error([&] { load_token_dataset(odd, "int32", 4, true); },
                     odd + ": 3 bytes is not a whole number of int32 tokens");
  std::filesystem::remove(odd);
  test::expect_error(
      [&] {
        make_token_dataset({1, 2, 3}, 3, true, "short.bin");
      },
      "short.bin: 3 tokens, too few for one window of 3 + 1");
  test::expect_error(
      [&] {
        make_token_dataset({1, -2, 3, 4}, 2, true, "negative.bin");
      },
      "negative.bin: token 1 is -2; ids must lie in [0, 16777216)");
}

TEST(TokenText, BytesOfPlainAndGzipText) {
  const std::string text = "Tessera\n\xc3\xa9t\xc3\xa9";
  const auto tokens = byte_tokens(text);
  ASSERT_EQ(tokens.size(), text.size());
  EXPECT_EQ(tokens[0], 'T');
  EXPECT_EQ(tokens[8], 0xc3);  // bytes, not characters: ids 0 to 255
  const std::string plain = temp_path("plain.txt"), gz = temp_path("text.gz");
  std::ofstream(plain, std::ios::binary) << text;
  gzFile f = gzopen(gz.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  EXPECT_EQ(read_text_file(plain), text);
  EXPECT_EQ(read_text_file(gz), text);
  std::filesystem::remove(plain);
  std::filesystem::remove(gz);
  test::expect_error([&] { read_text_file(plain); }, plain + ": cannot open");
}

TEST(TokenText, UnigramEntropy) {
  EXPECT_DOUBLE_EQ(unigram_entropy_bits({1, 1, 2, 2}), 1.0);
  EXPECT_DOUBLE_EQ(unigram_entropy_bits({3, 3, 3}), 0.0);
  EXPECT_NEAR(unigram_entropy_bits({0, 1, 2, 3, 0, 1, 2, 3}), 2.0, 1e-12);
  // Add-one smoothing over 4 ids: model counts {0: 2, 1: 2} + 1 each over 8.
  EXPECT_NEAR(unigram_cross_entropy_bits({0, 0, 1, 1}, {0, 3}, 4),
              -(std::log2(3.0 / 8) + std::log2(1.0 / 8)) / 2, 1e-12);
}

struct Gathered {
  std::vector<float> inputs;
  std::vector<int> labels;
};

Gathered gather(const Dataset& data, std::int64_t batch, const WindowDraw& draw) {
  const std::int64_t T = data.sample_shape[0];
  Tensor<float> samples("samples", Shape{batch, T});
  Vector<int> labels("labels", batch * T);
  Vector<std::int64_t> order("order", batch);
  std::vector<std::int64_t> ids(batch);
  for (std::int64_t i = 0; i < batch; ++i) ids[i] = i;
  test::from_host(order, ids);
  gather_batch(ExecSpace(), data, order, 0, samples, labels, draw);
  return {test::to_host(samples.flat()), test::to_host(labels)};
}

TEST(TokenWindows, ConsecutiveInEvaluationDrawnInTraining) {
  const std::int64_t T = 4, length = 41;
  std::vector<std::int32_t> tokens(length);
  for (std::int64_t i = 0; i < length; ++i) tokens[i] = static_cast<std::int32_t>(i);
  const Dataset eval = make_token_dataset(tokens, T, false, "eval");
  EXPECT_EQ(eval.size(), 10);  // (41 - 1) / 4 whole windows with their next tokens
  EXPECT_EQ(eval.label_positions(), T);
  EXPECT_EQ(eval.classes, 41);
  const Gathered e = gather(eval, 10, {});
  for (std::int64_t b = 0; b < 10; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(e.inputs[b * T + t], static_cast<float>(b * T + t));
      EXPECT_EQ(e.labels[b * T + t], b * T + t + 1);
    }
  const Dataset train = make_token_dataset(tokens, T, true, "train");
  const Gathered a = gather(train, 8, {7, 0}), again = gather(train, 8, {7, 0});
  const Gathered next = gather(train, 8, {7, 1}), other = gather(train, 8, {8, 0});
  EXPECT_EQ(a.inputs, again.inputs);
  EXPECT_NE(a.inputs, next.inputs);
  EXPECT_NE(a.inputs, other.inputs);
  std::set<float> starts;
  for (std::int64_t b = 0; b < 8; ++b) {
    const float first = a.inputs[b * T];
    starts.insert(first);
    EXPECT_LE(first + T, static_cast<float>(length - 1));
    for (std::int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(a.inputs[b * T + t], first + static_cast<float>(t));  // a contiguous window
      EXPECT_EQ(a.labels[b * T + t], static_cast<int>(first) + t + 1);
    }
  }
  EXPECT_GT(starts.size(), 4u);
}

TEST(TokenWindows, HeldOutSplitKeepsItsOwnTokens) {
  const std::int64_t T = 4;
  std::vector<std::int32_t> tokens(41);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i);
  const Dataset data = make_token_dataset(tokens, T, true, "train");
  const Dataset train = slice(data, 0, 8), held = slice(data, 8, 2);
  EXPECT_TRUE(train.random_windows);
  EXPECT_FALSE(held.random_windows);
  EXPECT_EQ(held.size(), 2);
  const Gathered h = gather(held, 2, {});
  EXPECT_EQ(h.inputs, (std::vector<float>{32, 33, 34, 35, 36, 37, 38, 39}));
  EXPECT_EQ(h.labels, (std::vector<int>{33, 34, 35, 36, 37, 38, 39, 40}));
  // Training windows end where the held-out tokens begin (token 32 may be a label).
  for (int epoch = 0; epoch < 4; ++epoch) {
    const Gathered t = gather(train, 8, {3, epoch});
    for (int label : t.labels) EXPECT_LE(label, 32);
  }
}

}  // namespace
