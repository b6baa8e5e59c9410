// A minimal Kokkos Tools library: counts the profiling regions a run opens
// and writes "count name" lines to $TESSERA_REGION_TOOL_OUTPUT when Kokkos
// finalises. Loaded through KOKKOS_TOOLS_LIBS, it shows that Tessera's
// named regions reach a tool with the documented variable, on any Kokkos.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace {
std::map<std::string, long>& counts() {
  static std::map<std::string, long> regions;
  return regions;
}
}  // namespace

extern "C" {

void kokkosp_init_library(const int, const std::uint64_t, const std::uint32_t, void*) {}

void kokkosp_push_profile_region(const char* name) { ++counts()[name]; }

void kokkosp_pop_profile_region() {}

void kokkosp_finalize_library() {
  const char* path = std::getenv("TESSERA_REGION_TOOL_OUTPUT");
  std::FILE* out = path ? std::fopen(path, "w") : nullptr;
  if (!out) return;
  for (const auto& [name, count] : counts()) std::fprintf(out, "%ld %s\n", count, name.c_str());
  std::fclose(out);
}

}  // extern "C"
