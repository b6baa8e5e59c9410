// What the CPU offers and what the BLAS makes of it: the widest vector
// instructions the CPU has, the BLAS library and (for OpenBLAS) the kernel
// family it chose at run time, and the check that warns when the BLAS runs
// narrower vectors than the CPU has. Debian's OpenBLAS 0.3.21 picks its
// kernels by CPU model and takes AVX2 (Haswell) kernels on AVX-512 CPUs it
// does not know (AMD family 26): sgemm then runs at about half the speed
// OPENBLAS_CORETYPE=SkylakeX gives.
#pragma once

#include <tessera/core/enum_names.hpp>

#include <string>
#include <vector>

namespace tessera {

// Vector instruction sets, narrowest first. avx2 means AVX2 with FMA;
// avx512 the Skylake-X set (F, CD, BW, DQ, VL) that OpenBLAS's SkylakeX
// kernels use.
enum class VectorIsa { unknown, sse, avx, avx2, avx512 };
inline constexpr EnumNames<VectorIsa, 5> vector_isas{"instruction set",
                                                     {{VectorIsa::unknown, "unknown"},
                                                      {VectorIsa::sse, "SSE"},
                                                      {VectorIsa::avx, "AVX"},
                                                      {VectorIsa::avx2, "AVX2+FMA"},
                                                      {VectorIsa::avx512, "AVX-512"}}};

inline const char* isa_name(VectorIsa isa) { return vector_isas.name(isa); }

// The widest set the CPU flags (as /proc/cpuinfo lists them) cover.
VectorIsa widest_isa(const std::vector<std::string>& cpu_flags);

// This machine's CPU flags; empty where /proc/cpuinfo has none (not Linux
// on x86).
std::vector<std::string> cpu_flags();

// The BLAS library behind KokkosBlas::gemm in this process, as found at run
// time: for OpenBLAS its configuration string (e.g. "OpenBLAS 0.3.21
// DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"), the core type whose
// kernels it chose (they round differently and differ in vector width) and
// its threading; MKL, BLIS, or cuBLAS and rocBLAS on GPUs otherwise.
struct BlasInfo {
  std::string library;    // "OpenBLAS 0.3.21 DYNAMIC_ARCH ...", "cuBLAS", ...
  std::string core;       // "Haswell", or empty where not known
  std::string threading;  // "OpenMP", "pthreads", "sequential", or empty
  bool openblas = false;
};

// Defined with the build description (core/runtime.cpp).
BlasInfo blas_info();

// The host BLAS's single-precision gemm, Fortran interface (column-major).
using HostSgemm = void(const char* trans_a, const char* trans_b, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

// The host BLAS's sgemm when every thread of a parallel region may call it
// at once and each call then runs on its calling thread alone: OpenBLAS
// built for OpenMP (one thread inside a parallel region) or sequential, and
// MKL. Null otherwise: no host BLAS, OpenBLAS with its own pthreads (the
// calls would share and wait for its thread pool), or a library whose
// threading is not known. Defined with blas_info().
HostSgemm* thread_sgemm();

// The vector instructions of an OpenBLAS core type's kernels (case does not
// matter); unknown for names it does not know.
VectorIsa openblas_core_isa(const std::string& core);

// A warning when OpenBLAS runs kernels narrower than the widest of the
// CPU's instruction sets it has kernels for, naming the setting that
// fixes it (OPENBLAS_CORETYPE=...); empty when there is nothing to say.
// coretype_setting: the value of OPENBLAS_CORETYPE, or empty when unset.
std::string blas_vector_warning(const std::vector<std::string>& cpu_flags, const BlasInfo& blas,
                                const std::string& coretype_setting);

// blas_vector_warning() for this machine's CPU flags, the BLAS this process
// runs and its OPENBLAS_CORETYPE setting.
std::string blas_vector_warning();

// Writes blas_vector_warning() for this machine and process to stderr,
// once per process however often it is called.
void warn_if_blas_is_narrow();

// The vector instructions Tessera's own kernels were compiled for (x86:
// from the compiler's target macros; unknown elsewhere).
VectorIsa compiled_isa();

// The -march of this build's host code (-DTessera_HOST_ARCH: "native",
// "x86-64-v3", ...); empty for the compiler's default.
const char* host_arch();

// Why this build cannot run on a CPU whose widest set is `cpu`, when its
// host code uses `compiled` and that is wider: the message names both sets,
// the -march it was built with (`arch`, left out when empty) and the
// settings that build for such a CPU. Empty when the CPU runs the code or
// either set is unknown.
std::string host_isa_mismatch(VectorIsa compiled, VectorIsa cpu,
                              const std::string& arch = host_arch());

// host_isa_mismatch() for this build on this machine's CPU.
std::string host_isa_mismatch();

// The CPU as /proc/cpuinfo names its first processor: "AMD EPYC, family
// 25 model 17 stepping 1" (a virtual machine's model name alone can stand
// for several generations); "unknown CPU" where it says nothing.
std::string cpu_identity();

// The most host memory this process has held at once (its peak resident
// set, MiB); 0 where the system does not say.
double peak_resident_mib();

}  // namespace tessera
