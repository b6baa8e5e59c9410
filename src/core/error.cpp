// The source-location suffix of TESSERA_REQUIRE's messages.
#include <tessera/core/error.hpp>

#include <cstring>
#include <string_view>

namespace tessera::impl {

namespace {

// The source tree's root as the compiler spelled it, with its final '/':
// this file's path less "src/core/error.cpp" (empty when that is all of it,
// as under a -ffile-prefix-map that already made paths relative).
std::string_view source_root() {
  constexpr std::string_view self = __FILE__, tail = "src/core/error.cpp";
  if (self.size() < tail.size() || self.substr(self.size() - tail.size()) != tail) return {};
  return self.substr(0, self.size() - tail.size());
}

}  // namespace

const char* source_relative(const char* file) {
  // Tessera's headers, in its tree or installed (wherever the install went,
  // inside the source tree included): from the last "include/tessera/" on,
  // the path they have in the source tree.
  const char* from = nullptr;
  for (const char* at = std::strstr(file, "include/tessera/"); at;
       at = std::strstr(at + 1, "include/tessera/"))
    from = at;
  if (from) return from;
  const std::string_view root = source_root(), path = file;
  if (!root.empty() && path.size() > root.size() && path.substr(0, root.size()) == root)
    return file + root.size();
  return file;
}

void throw_error(const std::string& message, const char* file, int line) {
  std::ostringstream os;
  os << message << " [" << source_relative(file) << ":" << line << "]";
  throw Error(os.str());
}

}  // namespace tessera::impl
