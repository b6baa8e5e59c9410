// Names of the floating-point formats, for decks and reports.
#include <tessera/core/error.hpp>
#include <tessera/core/float_format.hpp>

namespace tessera {

const char* float_format_name(FloatFormat format) {
  switch (format) {
    case FloatFormat::fp32:
      return "fp32";
    case FloatFormat::bf16:
      return "bf16";
    case FloatFormat::fp16:
      return "fp16";
  }
  TESSERA_REQUIRE(false, "tessera::float_format_name: unknown FloatFormat "
                             << static_cast<int>(format) << "; use fp32, bf16 or fp16");
  return "";
}

const std::vector<std::string>& float_format_names() {
  static const std::vector<std::string> names = {"fp32", "bf16", "fp16"};
  return names;
}

FloatFormat float_format_from_name(const std::string& name) {
  for (const FloatFormat format : {FloatFormat::fp32, FloatFormat::bf16, FloatFormat::fp16})
    if (name == float_format_name(format)) return format;
  TESSERA_REQUIRE(
      false, "tessera::float_format_from_name: '" << name << "' is not one of fp32, bf16, fp16");
  return FloatFormat::fp32;
}

}  // namespace tessera
