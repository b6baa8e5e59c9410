// tessera-tokenize: text files to byte-level token files for a `tokens`
// deck: one token per byte (ids 0 to 255), the files concatenated in the
// order given (gzip-compressed ones decompressed), the last share held out
// for validation. Prints the token counts and the unigram entropy of the
// text in bits per byte: the loss of a model that ignores all context.
#include <tessera/data/tokens.hpp>

#include <CLI/CLI.hpp>

#include <cmath>
#include <iomanip>
#include <iostream>

#include "cli.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tessera-tokenize: text files to byte-level token files (one token per byte)"};
  std::vector<std::string> inputs;
  std::string prefix;
  double validation = 0.1;
  std::string token_type = "uint16";
  app.add_option("text", inputs, "text files (plain or gzip), concatenated in this order")
      ->required();
  app.add_option("--out", prefix,
                 "output prefix: writes <prefix>.train.bin and, with a validation share, "
                 "<prefix>.val.bin")
      ->required();
  app.add_option("--validation", validation,
                 "share of the text held out for validation, from its end (default 0.1; 0: none)")
      ->check(CLI::Range(0.0, 0.9));
  app.add_option("--type", token_type, "token type of the files (default uint16)")
      ->check(CLI::IsMember(tessera::token_types()));
  if (const auto status = tessera::app::parse_command_line(app, argc, argv, "tessera-tokenize"))
    return *status;
  try {
    std::string text;
    for (const auto& path : inputs) text += tessera::read_text_file(path);
    const auto tokens = tessera::byte_tokens(text);
    const auto held = static_cast<std::size_t>(std::llround(validation * tokens.size()));
    if (tokens.size() < 2 || (validation > 0 && (held < 2 || held + 2 > tokens.size()))) {
      std::cerr << "tessera-tokenize: " << tokens.size() << " bytes of text cannot be split into "
                << "training and validation tokens of at least 2 each (--validation " << validation
                << ")\n";
      return 2;
    }
    const std::vector<std::int32_t> train(tokens.begin(), tokens.end() - held);
    const std::vector<std::int32_t> val(tokens.end() - held, tokens.end());
    tessera::write_token_file(prefix + ".train.bin", train, token_type);
    std::cout << std::fixed << std::setprecision(4) << prefix << ".train.bin: " << train.size()
              << " tokens\n";
    if (held > 0) {
      tessera::write_token_file(prefix + ".val.bin", val, token_type);
      std::cout << prefix << ".val.bin: " << val.size() << " tokens\n";
    }
    std::cout << "unigram entropy of the text: " << tessera::unigram_entropy_bits(tokens)
              << " bits per byte\n";
    if (held > 0)
      std::cout << "validation under the training text's byte frequencies: "
                << tessera::unigram_cross_entropy_bits(train, val, 256) << " bits per byte\n";
  } catch (const std::exception& e) {
    std::cerr << "tessera-tokenize: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
