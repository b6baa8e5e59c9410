// The BLAS/CPU check: which vector instructions CPU flags and OpenBLAS core
// types stand for, and when the warning speaks, for given flag sets and core
// names (the decision must be right on CPUs this machine is not); and that
// this machine's BLAS and flags are read.
#include <tessera/core/machine.hpp>
#include <tessera/core/runtime.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

const std::vector<std::string> zen3_flags{"fpu", "sse", "sse2", "avx", "fma", "avx2", "bmi2"};
// AMD family 26 (Zen 5): AVX-512 with BF16.
const std::vector<std::string> zen5_flags{"sse2",     "avx",         "fma",       "avx2",
                                          "avx512f",  "avx512dq",    "avx512cd",  "avx512bw",
                                          "avx512vl", "avx512_bf16", "avx512vnni"};
const std::vector<std::string> sandy_flags{"sse2", "sse4_2", "avx"};

BlasInfo openblas(const std::string& core) {
  return BlasInfo{"OpenBLAS 0.3.21", core, "OpenMP", true};
}

TEST(Machine, WidestIsaFromFlags) {
  EXPECT_EQ(widest_isa(zen3_flags), VectorIsa::avx2);
  EXPECT_EQ(widest_isa(zen5_flags), VectorIsa::avx512);
  EXPECT_EQ(widest_isa(sandy_flags), VectorIsa::avx);
  EXPECT_EQ(widest_isa({"sse", "sse2"}), VectorIsa::sse);
  EXPECT_EQ(widest_isa({}), VectorIsa::unknown);
  // AVX2 without FMA is not the Haswell set; AVX-512F alone not Skylake-X's.
  EXPECT_EQ(widest_isa({"sse2", "avx", "avx2"}), VectorIsa::avx);
  EXPECT_EQ(widest_isa({"sse2", "avx", "avx2", "fma", "avx512f"}), VectorIsa::avx2);
}

TEST(Machine, OpenBlasCoreTypes) {
  EXPECT_EQ(openblas_core_isa("Haswell"), VectorIsa::avx2);
  EXPECT_EQ(openblas_core_isa("Zen"), VectorIsa::avx2);
  EXPECT_EQ(openblas_core_isa("skylakex"), VectorIsa::avx512);
  EXPECT_EQ(openblas_core_isa("Cooperlake"), VectorIsa::avx512);
  EXPECT_EQ(openblas_core_isa("Sandybridge"), VectorIsa::avx);
  EXPECT_EQ(openblas_core_isa("Nehalem"), VectorIsa::sse);
  EXPECT_EQ(openblas_core_isa("Unknown"), VectorIsa::unknown);
  EXPECT_EQ(openblas_core_isa(""), VectorIsa::unknown);
}

TEST(Machine, WarnsWhenOpenBlasIsNarrowerAndNamesTheSetting) {
  // Debian's OpenBLAS 0.3.21 on AMD family 26.
  const std::string w = blas_vector_warning(zen5_flags, openblas("Haswell"), "");
  EXPECT_NE(w.find("Haswell kernels (AVX2+FMA)"), std::string::npos) << w;
  EXPECT_NE(w.find("CPU with AVX-512"), std::string::npos) << w;
  EXPECT_NE(w.find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos) << w;
  EXPECT_EQ(w.find("is set to"), std::string::npos) << w;
  // A setting that asks for narrow kernels is named as the cause.
  EXPECT_NE(blas_vector_warning(zen5_flags, openblas("Zen"), "Zen").find("is set to 'Zen'"),
            std::string::npos);
  // AVX kernels on an AVX2 CPU: the Haswell kernels fix it.
  EXPECT_NE(blas_vector_warning(zen3_flags, openblas("Sandybridge"), "")
                .find("OPENBLAS_CORETYPE=Haswell"),
            std::string::npos);
}

TEST(Machine, SilentWhenKernelsMatchOrNothingIsKnown) {
  // This machine's case: an AVX2 CPU on Zen or Haswell kernels.
  EXPECT_EQ(blas_vector_warning(zen3_flags, openblas("Zen"), ""), "");
  EXPECT_EQ(blas_vector_warning(zen3_flags, openblas("Haswell"), ""), "");
  EXPECT_EQ(blas_vector_warning(zen5_flags, openblas("SkylakeX"), ""), "");
  EXPECT_EQ(blas_vector_warning(zen5_flags, openblas("Cooperlake"), ""), "");
  // Wider kernels than the CPU (a forced core type) are not this warning's business.
  EXPECT_EQ(blas_vector_warning(zen3_flags, openblas("SkylakeX"), "SkylakeX"), "");
  // Unknown CPU, unknown core, or a BLAS that names no core.
  EXPECT_EQ(blas_vector_warning({}, openblas("Haswell"), ""), "");
  EXPECT_EQ(blas_vector_warning(zen5_flags, openblas("Unknown"), ""), "");
  EXPECT_EQ(blas_vector_warning(zen5_flags, BlasInfo{"BLIS 0.9.0", "", "", false}, ""), "");
}

// The start-up check of the CPU, for every order of the build's and the
// CPU's instruction sets: only a build wider than the CPU is refused, and
// the message says what the build uses, what the CPU has and how to rebuild.
TEST(Machine, RefusesHostCodeWiderThanTheCpu) {
  const std::string m = host_isa_mismatch(VectorIsa::avx512, VectorIsa::avx2, "native");
  EXPECT_NE(m.find("uses AVX-512 instructions (built with -march=native)"), std::string::npos) << m;
  EXPECT_NE(m.find("this CPU has only AVX2+FMA"), std::string::npos) << m;
  EXPECT_NE(m.find("illegal instruction"), std::string::npos) << m;
  EXPECT_NE(m.find("-DTessera_HOST_ARCH=x86-64-v3 (AVX2)"), std::string::npos) << m;
  EXPECT_NE(m.find("-DTessera_HOST_ARCH=x86-64 (portable)"), std::string::npos) << m;
  // Without a known -march the message leaves it out; x86-64-v3 is offered
  // only to CPUs that run it.
  const std::string avx = host_isa_mismatch(VectorIsa::avx2, VectorIsa::avx, "");
  EXPECT_NE(avx.find("uses AVX2+FMA instructions, but this CPU has only AVX:"), std::string::npos)
      << avx;
  EXPECT_EQ(avx.find("x86-64-v3"), std::string::npos) << avx;
  EXPECT_NE(avx.find("-DTessera_HOST_ARCH=x86-64 (portable)"), std::string::npos) << avx;
  // The same set, a narrower one, or a set that is not known: it runs.
  EXPECT_EQ(host_isa_mismatch(VectorIsa::avx2, VectorIsa::avx2, "native"), "");
  EXPECT_EQ(host_isa_mismatch(VectorIsa::avx512, VectorIsa::avx512, "native"), "");
  EXPECT_EQ(host_isa_mismatch(VectorIsa::sse, VectorIsa::avx512, ""), "");
  EXPECT_EQ(host_isa_mismatch(VectorIsa::avx2, VectorIsa::avx512, "x86-64-v3"), "");
  EXPECT_EQ(host_isa_mismatch(VectorIsa::unknown, VectorIsa::avx2, ""), "");
  EXPECT_EQ(host_isa_mismatch(VectorIsa::avx512, VectorIsa::unknown, "native"), "");
  // This test runs, so this build runs on this CPU.
  EXPECT_EQ(host_isa_mismatch(), "");
}

// --version (build_configuration()) names the host code's instruction set,
// its -march where one was given, and the CPU's.
TEST(Machine, BuildConfigurationNamesTheHostPath) {
  const std::string config = build_configuration();
  std::string line = std::string("host kernels: ") + isa_name(compiled_isa());
  if (*host_arch()) line += std::string(", -march=") + host_arch();
  line += std::string(" (this CPU: ") + isa_name(widest_isa(cpu_flags())) + ")\n";
  EXPECT_NE(config.find(line), std::string::npos) << config;
}

// This machine, against what the test reads itself: the flags are those of
// /proc/cpuinfo's first `flags` line; the library was compiled for the
// vector set this file was compiled for (the same flags), which the CPU
// runs; the BLAS named is the one mapped into this process, its threading
// that of the Debian flavour mapped (openblas-openmp, -pthread, -serial),
// its core type the one OPENBLAS_CORETYPE asks for when set, and the
// per-thread gemm the convolution uses exists exactly when the BLAS runs
// each call on its calling thread.
TEST(Machine, ReadsThisMachine) {
  const BlasInfo blas = blas_info();
  EXPECT_FALSE(blas.library.empty());
  std::string mapped;
  {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);)
      if (line.find("libopenblas") != std::string::npos) mapped = line.substr(line.find('/'));
  }
  EXPECT_EQ(blas.openblas, !mapped.empty()) << blas.library << "; mapped: " << mapped;
  if (blas.openblas) {
    EXPECT_NE(blas.library.find("OpenBLAS"), std::string::npos) << blas.library;
    EXPECT_FALSE(blas.core.empty());
    const std::string flavour = mapped.find("openblas-openmp") != std::string::npos    ? "OpenMP"
                                : mapped.find("openblas-pthread") != std::string::npos ? "pthreads"
                                : mapped.find("openblas-serial") != std::string::npos ? "sequential"
                                                                                      : "";
    if (!flavour.empty()) EXPECT_EQ(blas.threading, flavour) << mapped;
    EXPECT_EQ(thread_sgemm() != nullptr, blas.threading != "pthreads") << blas.threading;
    if (const char* coretype = std::getenv("OPENBLAS_CORETYPE"); coretype && *coretype) {
      std::string asked = coretype, got = blas.core;
      for (auto* s : {&asked, &got})
        for (auto& c : *s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      EXPECT_EQ(got, asked) << "OPENBLAS_CORETYPE=" << coretype;
    }
  }
#if defined(__x86_64__) && defined(__linux__)
  std::vector<std::string> flags;
  {
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);)
      if (line.rfind("flags", 0) == 0) {
        std::istringstream words(line.substr(line.find(':') + 1));
        for (std::string w; words >> w;) flags.push_back(w);
        break;
      }
  }
  ASSERT_FALSE(flags.empty());
  EXPECT_EQ(cpu_flags(), flags);
  const bool has = [&] {
    for (const char* f : {"sse2", "avx"})
      if (std::find(flags.begin(), flags.end(), f) == flags.end()) return false;
    return true;
  }();
  EXPECT_TRUE(has) << "an x86-64 CPU without SSE2 and AVX";
  const VectorIsa widest = widest_isa(flags), compiled = compiled_isa();
  EXPECT_GE(static_cast<int>(widest), static_cast<int>(VectorIsa::avx));
  VectorIsa here = VectorIsa::sse;
#if defined(__AVX512F__) && defined(__AVX512CD__) && defined(__AVX512BW__) && \
    defined(__AVX512DQ__) && defined(__AVX512VL__)
  here = VectorIsa::avx512;
#elif defined(__AVX2__) && defined(__FMA__)
  here = VectorIsa::avx2;
#elif defined(__AVX__)
  here = VectorIsa::avx;
#endif
  EXPECT_EQ(compiled, here);
  EXPECT_LE(static_cast<int>(compiled), static_cast<int>(widest))
      << "compiled for " << isa_name(compiled) << " on a CPU with " << isa_name(widest);
#endif
}

}  // namespace
