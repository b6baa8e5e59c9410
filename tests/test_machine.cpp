// The BLAS/CPU check: which vector instructions CPU flags and OpenBLAS core
// types stand for, and when the warning speaks, for given flag sets and core
// names (the decision must be right on CPUs this machine is not); and that
// this machine's BLAS and flags are read.
#include <tessera/core/machine.hpp>

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

// This machine: the flags and the BLAS are read, and the verdict for them
// is the one the functions above give.
TEST(Machine, ReadsThisMachine) {
  const BlasInfo blas = blas_info();
  EXPECT_FALSE(blas.library.empty());
  if (blas.openblas) {
    EXPECT_NE(blas.library.find("OpenBLAS"), std::string::npos) << blas.library;
    EXPECT_FALSE(blas.core.empty());
  }
#if defined(__x86_64__) && defined(__linux__)
  const auto flags = cpu_flags();
  EXPECT_NE(widest_isa(flags), VectorIsa::unknown);
  EXPECT_NE(compiled_isa(), VectorIsa::unknown);
#endif
}

}  // namespace
