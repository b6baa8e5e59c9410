// Token files: raw little-endian `uint16` or `int32` token ids with no
// header (the layout nanoGPT-style tools write), and the byte-level
// tokenizer tessera-tokenize uses (one token per byte, ids 0 to 255).
#pragma once

#include <tessera/data/dataset.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// "uint16" or "int32": the token types a file may hold.
const std::vector<std::string>& token_types();

// The ids of a token file; errors name the file and what is wrong with it.
std::vector<std::int32_t> read_token_file(const std::string& path, const std::string& token_type);
// Writes ids (each must fit the type) to a new file, replacing it.
void write_token_file(const std::string& path, const std::vector<std::int32_t>& tokens,
                      const std::string& token_type);

// A token file as windows of `block` + 1 tokens (data/dataset.hpp).
Dataset load_token_dataset(const std::string& path, const std::string& token_type,
                           std::int64_t block, bool random_windows);

// The bytes of a text file, gunzipped when it is gzip-compressed.
std::string read_text_file(const std::string& path);
// One token per byte: the byte's value.
std::vector<std::int32_t> byte_tokens(const std::string& text);

// Entropy in bits per token of the tokens' own frequencies: the loss a
// model that ignores every context reaches at best on them.
double unigram_entropy_bits(const std::vector<std::int32_t>& tokens);
// Bits per token of `tokens` under the frequencies of `model` (add-one
// smoothed over `vocabulary` ids, so unseen ids cost finite bits).
double unigram_cross_entropy_bits(const std::vector<std::int32_t>& model,
                                  const std::vector<std::int32_t>& tokens, std::int64_t vocabulary);

}  // namespace tessera
