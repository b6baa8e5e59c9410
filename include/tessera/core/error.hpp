// Errors Tessera raises at its API boundary. A message starts with the
// function or deck key that failed, prints the shapes involved and says what
// was expected; the source location is appended for developers.
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
[[noreturn]] inline void throw_error(const std::string& message, const char* file, int line) {
  std::ostringstream os;
  os << message << " [" << file << ":" << line << "]";
  throw Error(os.str());
}
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
