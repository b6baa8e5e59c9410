// Runtime start-up and build description.
#include <tessera/core/machine.hpp>
#include <tessera/core/runtime.hpp>
#include <tessera/core/version.hpp>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <sstream>

namespace tessera {

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

std::string build_description() {
  std::ostringstream os;
  os << "Tessera " << TESSERA_VERSION_STRING << ", Kokkos " << KOKKOS_VERSION / 10000 << "."
     << (KOKKOS_VERSION / 100) % 100 << "." << KOKKOS_VERSION % 100 << " ("
     << Kokkos::DefaultExecutionSpace::name() << ", "
     << Kokkos::DefaultExecutionSpace::concurrency() << " threads), " << TESSERA_CXX_COMPILER;
  return os.str();
}

}  // namespace tessera
