// The floating-point formats numbers are computed, stored or sent in: float,
// bf16 and fp16 (the 16-bit types of core/precision.hpp), by name. Plain C++
// without Kokkos: the deck reader includes it.
#pragma once

#include <tessera/core/enum_names.hpp>

#include <string>
#include <vector>

namespace tessera {

enum class FloatFormat { fp32, bf16, fp16 };
inline constexpr EnumNames<FloatFormat, 3> float_formats{
    "format",
    {{FloatFormat::fp32, "fp32"}, {FloatFormat::bf16, "bf16"}, {FloatFormat::fp16, "fp16"}}};
// "fp32", "bf16", "fp16".
inline const char* float_format_name(FloatFormat format) { return float_formats.name(format); }
// The inverse of float_format_name; throws Error naming the allowed names.
inline FloatFormat float_format_from_name(const std::string& name) {
  return float_formats.value(name, "tessera::float_format_from_name");
}
// Every name, in declaration order (what a deck key allows).
const std::vector<std::string>& float_format_names();
// Bytes per value.
inline int float_format_bytes(FloatFormat format) { return format == FloatFormat::fp32 ? 4 : 2; }

}  // namespace tessera
