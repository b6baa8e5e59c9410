// Process-wide runtime: MPI and Kokkos initialised in the right order and
// finalised on scope exit, plus a description of the build for reports.
#pragma once

#include <string>

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

// "Tessera 0.1.0, Kokkos 3.4.1 (OpenMP, 2 threads), g++ 12.2.0"
std::string build_description();
std::string version();

}  // namespace tessera
