// Runtime start-up and build description.
#include <tessera/core/compat.hpp>
#include <tessera/core/host_paths.hpp>
#include <tessera/core/machine.hpp>
#include <tessera/core/runtime.hpp>
#include <tessera/core/types.hpp>
#include <tessera/core/version.hpp>

#include <KokkosKernels_config.h>
#include <dlfcn.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <type_traits>

namespace tessera {

namespace {

// Stops a process whose CPU lacks the vector instructions this build's host
// code uses, before Kokkos runs any of it: otherwise the first such
// instruction ends the run with SIGILL and no word why. Each rank checks its
// own CPU (a job may span nodes of different kinds); a failing rank names
// itself and ends the whole job, so that no rank waits on it in a collective.
void stop_if_cpu_lacks_host_isa(int rank, int size, bool owns_mpi) {
  const std::string message = host_isa_mismatch();
  if (message.empty()) return;
  // One write per rank, so that ranks sharing a terminal do not interleave.
  const std::string line =
      (size > 1 ? "[rank " + std::to_string(rank) + " of " + std::to_string(size) + "] "
                : std::string()) +
      message + "\n";
  std::cerr << line << std::flush;
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, 2);
  if (owns_mpi) MPI_Finalize();
  std::exit(2);
}

}  // namespace

// MPI's start, end and abort are the one place outside tessera::Communicator
// that calls MPI: core/ sits below parallel/ on the ladder, and every app
// starts MPI here before Kokkos (scripts/check-layout.py mpi allows these
// calls).
Runtime::Runtime(int& argc, char**& argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    owns_mpi_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  stop_if_cpu_lacks_host_isa(rank_, size_, owns_mpi_);
  compat::translate_kokkos_arguments(argc, argv);
  Kokkos::initialize(argc, argv);
  // Once, from the first rank: a BLAS on narrow kernels costs every app that
  // multiplies matrices, and the fix is one environment variable.
  if (rank_ == 0) warn_if_blas_is_narrow();
}

Runtime::~Runtime() {
  Kokkos::finalize();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_mpi_ && !finalized) MPI_Finalize();
}

std::string version() { return TESSERA_VERSION_STRING; }

std::string kokkos_version() {
  std::ostringstream os;
  os << KOKKOS_VERSION / 10000 << "." << (KOKKOS_VERSION / 100) % 100 << "."
     << KOKKOS_VERSION % 100;
  return os.str();
}

std::string build_description() {
  std::ostringstream os;
  os << "Tessera " << TESSERA_VERSION_STRING << ", Kokkos " << kokkos_version() << " ("
     << ExecSpace::name() << ", " << ExecSpace().concurrency() << " threads), "
     << TESSERA_CXX_COMPILER;
  return os.str();
}

namespace {

// A function of the BLAS library, if the process has loaded one that has it:
// looked up at run time, so that any BLAS (or none) links.
template <class Function>
Function* blas_function(const char* name) {
  return reinterpret_cast<Function*>(::dlsym(RTLD_DEFAULT, name));
}

}  // namespace

std::vector<std::string> kokkos_backends() {
  std::vector<std::string> out;
#ifdef KOKKOS_ENABLE_CUDA
  out.push_back("Cuda");
#endif
#ifdef KOKKOS_ENABLE_HIP
  out.push_back("HIP");
#endif
#ifdef KOKKOS_ENABLE_SYCL
  out.push_back("SYCL");
#endif
#ifdef KOKKOS_ENABLE_OPENMP
  out.push_back("OpenMP");
#endif
#ifdef KOKKOS_ENABLE_THREADS
  out.push_back("Threads");
#endif
#ifdef KOKKOS_ENABLE_SERIAL
  out.push_back("Serial");
#endif
  return out;
}

std::string execution_space_name() { return ExecSpace::name(); }

BlasInfo blas_info() {
  BlasInfo info;
  const bool host = std::is_same<MemSpace, Kokkos::HostSpace>::value;
#if defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS)
  if (!host) return {"cuBLAS", "", ""};
#endif
#if defined(KOKKOSKERNELS_ENABLE_TPL_ROCBLAS)
  if (!host) return {"rocBLAS", "", ""};
#endif
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  if (host) {
    if (auto config = blas_function<char*()>("openblas_get_config")) {
      info.library = config();
      info.openblas = true;
      if (auto core = blas_function<char*()>("openblas_get_corename")) info.core = core();
      if (auto parallel = blas_function<int()>("openblas_get_parallel")) {
        const int p = parallel();
        info.threading = p == 2 ? "OpenMP" : p == 1 ? "pthreads" : "sequential";
      }
      return info;
    }
    if (auto mkl = blas_function<void(char*, int)>("MKL_Get_Version_String")) {
      char text[256] = {0};
      mkl(text, sizeof text - 1);
      return {text, "", ""};
    }
    if (auto blis = blas_function<const char*()>("bli_info_get_version_str"))
      return {std::string("BLIS ") + blis(), "", ""};
    return {"a BLAS library that is not OpenBLAS, MKL or BLIS", "", ""};
  }
#endif
  (void)host;
  return {"none (Kokkos Kernels' own gemm)", "", ""};
}

HostSgemm* thread_sgemm() {
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  static HostSgemm* const gemm = [] {
    const BlasInfo blas = blas_info();
    const bool one_thread = blas.openblas
                                ? blas.threading == "OpenMP" || blas.threading == "sequential"
                                : blas.library.rfind("Intel", 0) == 0;
    return one_thread ? blas_function<HostSgemm>("sgemm_") : nullptr;
  }();
  return gemm;
#else
  return nullptr;
#endif
}

std::string build_configuration() {
  std::ostringstream os;
  std::string backends;
  for (const auto& b : kokkos_backends()) backends += (backends.empty() ? "" : ", ") + b;
  const BlasInfo blas = blas_info();
  os << "Tessera " << TESSERA_VERSION_STRING << "\n"
     << "Kokkos: " << kokkos_version() << ", backends " << backends << "\n"
     << "execution space: " << execution_space_name() << "\n"
     << "kernel paths: " << kernel_paths_name() << "\n"
     << "host kernels: " << isa_name(compiled_isa());
  if (*host_arch()) os << ", -march=" << host_arch();
  os << " (this CPU: " << isa_name(widest_isa(cpu_flags())) << ")\n";
  const std::string mismatch = host_isa_mismatch();
  if (!mismatch.empty()) os << mismatch << "\n";
  os << "Kokkos Kernels: " << TESSERA_KOKKOS_KERNELS_VERSION << "\n"
     << "BLAS: " << blas.library;
  if (!blas.core.empty()) os << "; core " << blas.core;
  if (!blas.threading.empty()) os << "; threads " << blas.threading;
  const std::string narrow = blas_vector_warning();
  if (!narrow.empty()) os << "\n" << narrow;
  os << "\ncompiler: " << TESSERA_CXX_COMPILER << ", " << TESSERA_BUILD_TYPE << "\n";
  if (*TESSERA_BUILD_SPEC) os << "spec: " << TESSERA_BUILD_SPEC << "\n";
  return os.str();
}

}  // namespace tessera
