// Errors Tessera raises at its API boundary. A message starts with the
// function or deck key that failed, prints the shapes involved and says what
// was expected; the source location is appended for developers, relative to
// the source tree ("[src/layers/conv.cpp:35]"), never as the build machine's
// absolute path.
#pragma once

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An error in one layer of a model, which layer() numbers in declaration
// order, so a caller can point at where the layer was declared.
class LayerError : public Error {
 public:
  LayerError(std::size_t layer, const std::string& message) : Error(message), layer_(layer) {}
  std::size_t layer() const { return layer_; }

 private:
  std::size_t layer_;
};

namespace impl {
// `file` as the message names it: relative to Tessera's source tree for its
// sources, tests and apps; from "include/tessera/" on for its headers, in its
// tree or installed; any other path unchanged.
const char* source_relative(const char* file);

// Throws Error("<message> [<source_relative(file)>:<line>]").
[[noreturn]] void throw_error(const std::string& message, const char* file, int line);
}  // namespace impl

}  // namespace tessera

// TESSERA_REQUIRE(cond, "tessera::fn: " << shape << " expected ...")
// The message is a stream expression, built only when the check fails.
#define TESSERA_REQUIRE(cond, message)                                             \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::ostringstream tessera_require_os_;                                      \
      tessera_require_os_ << message;                                              \
      ::tessera::impl::throw_error(tessera_require_os_.str(), __FILE__, __LINE__); \
    }                                                                              \
  } while (false)
