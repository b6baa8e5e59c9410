// CPU vector instructions, and the warning when the BLAS in use
// (blas_info(), found at run time) runs narrower ones.
#include <tessera/core/machine.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

namespace tessera {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool has_all(const std::vector<std::string>& flags, std::initializer_list<const char*> wanted) {
  for (const char* w : wanted)
    if (std::find(flags.begin(), flags.end(), w) == flags.end()) return false;
  return true;
}

// The OpenBLAS core type whose kernels use `isa` (the one to suggest).
const char* openblas_core_for(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::avx512:
      return "SkylakeX";
    case VectorIsa::avx2:
      return "Haswell";
    case VectorIsa::avx:
      return "Sandybridge";
    default:
      return "";
  }
}
}  // namespace

VectorIsa widest_isa(const std::vector<std::string>& flags) {
  if (has_all(flags, {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}))
    return VectorIsa::avx512;
  if (has_all(flags, {"avx2", "fma"})) return VectorIsa::avx2;
  if (has_all(flags, {"avx"})) return VectorIsa::avx;
  if (has_all(flags, {"sse2"})) return VectorIsa::sse;
  return VectorIsa::unknown;
}

std::vector<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    std::istringstream words(line.substr(colon + 1));
    std::vector<std::string> flags;
    for (std::string w; words >> w;) flags.push_back(w);
    return flags;
  }
  return {};
}

VectorIsa openblas_core_isa(const std::string& core) {
  const std::string c = lower(core);
  for (const char* name : {"skylakex", "cooperlake", "sapphirerapids"})
    if (c == name) return VectorIsa::avx512;
  for (const char* name : {"haswell", "zen", "excavator"})
    if (c == name) return VectorIsa::avx2;
  for (const char* name : {"sandybridge", "bulldozer", "piledriver", "steamroller"})
    if (c == name) return VectorIsa::avx;
  for (const char* name : {"katmai", "coppermine", "northwood", "prescott", "banias", "atom",
                           "core2", "penryn", "dunnington", "nehalem", "athlon", "opteron",
                           "opteron_sse3", "barcelona", "nano", "bobcat"})
    if (c == name) return VectorIsa::sse;
  return VectorIsa::unknown;
}

std::string blas_vector_warning(const std::vector<std::string>& flags, const BlasInfo& blas,
                                const std::string& coretype_setting) {
  if (!blas.openblas) return {};
  const VectorIsa cpu = widest_isa(flags), used = openblas_core_isa(blas.core);
  if (cpu == VectorIsa::unknown || used == VectorIsa::unknown || used >= cpu) return {};
  std::ostringstream os;
  os << "tessera: warning: OpenBLAS runs its " << blas.core << " kernels (" << isa_name(used)
     << ") on a CPU with " << isa_name(cpu) << "; matrix products run at a fraction of the "
     << "CPU's speed. Set OPENBLAS_CORETYPE=" << openblas_core_for(cpu)
     << " in the environment to use " << isa_name(cpu) << " kernels";
  if (!coretype_setting.empty())
    os << " (OPENBLAS_CORETYPE is set to '" << coretype_setting << "' now)";
  os << ".";
  return os.str();
}

std::string blas_vector_warning() {
  const char* setting = std::getenv("OPENBLAS_CORETYPE");
  return blas_vector_warning(cpu_flags(), blas_info(), setting != nullptr ? setting : "");
}

void warn_if_blas_is_narrow() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string message = blas_vector_warning();
    if (!message.empty()) std::cerr << message << "\n";
  });
}

VectorIsa compiled_isa() {
#if defined(__AVX512F__) && defined(__AVX512CD__) && defined(__AVX512BW__) && \
    defined(__AVX512DQ__) && defined(__AVX512VL__)
  return VectorIsa::avx512;
#elif defined(__AVX2__) && defined(__FMA__)
  return VectorIsa::avx2;
#elif defined(__AVX__)
  return VectorIsa::avx;
#elif defined(__SSE2__)
  return VectorIsa::sse;
#else
  return VectorIsa::unknown;
#endif
}

std::string cpu_identity() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name, family, model, stepping;
  const auto value = [&line] {
    const auto colon = line.find(':');
    const auto start =
        colon == std::string::npos ? colon : line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  };
  while (std::getline(in, line)) {
    const std::string key = line.substr(0, line.find_first_of("\t:"));
    if (key == "processor" && !name.empty()) break;  // the second processor's entries
    if (key == "model name") name = value();
    if (key == "cpu family") family = value();
    if (key == "model") model = value();
    if (key == "stepping") stepping = value();
  }
  if (name.empty()) return "unknown CPU";
  std::string identity = name;
  if (!family.empty())
    identity += ", family " + family + " model " + model + " stepping " + stepping;
  return identity;
}

const char* host_arch() {
#ifdef TESSERA_HOST_ARCH
  return TESSERA_HOST_ARCH;
#else
  return "";
#endif
}

std::string host_isa_mismatch(VectorIsa compiled, VectorIsa cpu, const std::string& arch) {
  if (compiled == VectorIsa::unknown || cpu == VectorIsa::unknown || compiled <= cpu) return {};
  std::ostringstream os;
  os << "tessera: this build's host code uses " << isa_name(compiled) << " instructions";
  if (!arch.empty()) os << " (built with -march=" << arch << ")";
  os << ", but this CPU has only " << isa_name(cpu)
     << ": it would stop on an illegal instruction. Rebuild on this kind of CPU "
     << "(-DTessera_HOST_ARCH=native), or with ";
  // x86-64-v3 is the AVX2+FMA level every such CPU runs; below it only the
  // portable baseline (SSE2) is certain to run.
  if (cpu == VectorIsa::avx2) os << "-DTessera_HOST_ARCH=x86-64-v3 (AVX2) or ";
  os << "-DTessera_HOST_ARCH=x86-64 (portable).";
  return os.str();
}

std::string host_isa_mismatch() {
  return host_isa_mismatch(compiled_isa(), widest_isa(cpu_flags()));
}

double peak_resident_mib() {
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux counts KiB
}

}  // namespace tessera
