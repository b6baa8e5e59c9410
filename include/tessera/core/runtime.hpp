// Process-wide runtime: MPI and Kokkos initialised in the right order and
// finalised on scope exit, plus a description of the build for reports.
#pragma once

#include <tessera/core/machine.hpp>

#include <string>
#include <vector>

namespace tessera {

class Runtime {
 public:
  // Initialises MPI (if not already) and Kokkos; Kokkos consumes its own
  // --kokkos-* arguments from argv. Rank 0 warns once on stderr when the
  // BLAS runs narrower vector kernels than the CPU has (core/machine.hpp).
  Runtime(int& argc, char**& argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  bool owns_mpi_ = false;
  int rank_ = 0;
  int size_ = 1;
};

// "Tessera 0.1.0, Kokkos 3.4.1 (OpenMP, 2 threads), g++ 12.2.0"; needs Kokkos
// initialised (it asks the execution space for its concurrency).
std::string build_description();
std::string version();
// The Kokkos version compiled against, "major.minor.patch" ("4.6.1").
std::string kokkos_version();

// What this build is, without starting Kokkos: Tessera's version, the Kokkos
// and Kokkos Kernels versions and backends it was compiled against, the
// execution space its kernels run on, the BLAS, compiler, build type and
// (from the Spack package) the spec. One "key: value" per line; --version.
std::string build_configuration();
// The Kokkos backends compiled in, e.g. {"OpenMP", "Serial"}.
std::vector<std::string> kokkos_backends();
// The name of the execution space Tessera's kernels run on.
std::string execution_space_name();

}  // namespace tessera
