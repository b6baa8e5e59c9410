// Names of the floating-point formats, for decks and reports.
#include <tessera/core/float_format.hpp>

namespace tessera {

const std::vector<std::string>& float_format_names() {
  static const std::vector<std::string> names = float_formats.names();
  return names;
}

}  // namespace tessera
