// Ranges and numbers as the reference and messages write them.
#include <tessera/core/error.hpp>
#include <tessera/settings/range.hpp>

#include <cstdio>
#include <cstdlib>

namespace tessera {

namespace impl {
std::string number_text(double value) {
  // The shortest %g form that reads back as the same float.
  char text[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (static_cast<float>(std::strtod(text, nullptr)) == static_cast<float>(value)) break;
  }
  return text;
}
std::string end_text(double value) {
  // Bounds first: converting a double beyond long long's range is undefined.
  if (value > -1e7 && value < 1e7 && value == static_cast<double>(static_cast<long long>(value)))
    return std::to_string(static_cast<long long>(value));
  return number_text(value);
}
}  // namespace impl

std::string Range::text() const {
  if (!bounded) return "";
  const std::string a = impl::end_text(low), b = impl::end_text(high);
  if (!low_open && !high_open) return a + " to " + b;
  return (low_open ? "(" : "[") + a + ", " + b + (high_open ? ")" : "]");
}

void Range::require(const char* who, const char* what, double value) const {
  TESSERA_REQUIRE(contains(value),
                  who << ": " << what << " " << value << " must be in " << interval());
}

std::string Range::interval() const {
  return std::string(low_open ? "(" : "[") + impl::end_text(low) + ", " + impl::end_text(high) +
         (high_open ? ")" : "]");
}

}  // namespace tessera
