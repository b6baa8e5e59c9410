// The collectives data-parallel training needs, over an MPI communicator,
// and the collective verdict that keeps every rank's decision the same: a
// failure on any rank becomes the same error on every rank, so none waits
// for a partner that has given up.
#pragma once

#include <tessera/core/batch_sync.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/types.hpp>

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// Raised on every rank together (after agree(), or from values every rank
// shares such as an averaged loss): the job can end without an abort.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// How gradients reach MPI when they live in device memory.
enum class DeviceMpi {
  automatic,  // device pointers if the build (Tessera_ENABLE_GPU_AWARE_MPI) or the MPI
              // library reports GPU support, else staging
  direct,     // always pass device pointers (the MPI library must be GPU-aware)
  staged      // always copy through host memory
};
DeviceMpi device_mpi_from_name(const std::string& name);  // "auto" | "on" | "off"

class Communicator {
 public:
  explicit Communicator(MPI_Comm comm = MPI_COMM_WORLD, DeviceMpi device = DeviceMpi::automatic);

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  // Whether buffers in MemSpace are handed to MPI as they are (host memory,
  // or device memory with a GPU-aware MPI) rather than staged through host.
  bool direct() const { return direct_; }
  // "host memory", "GPU-aware MPI (device pointers)" or "host staging".
  std::string transport() const;

  // Element-wise sums over the ranks, in place.
  void sum(double* values, int count) const;
  void sum(const Vector<double>& values) const;
  void sum(const Vector<float>& values) const;
  // Rank 0's values on every rank.
  void broadcast(const Vector<float>& values) const;
  // Slices: rank r owns values[offsets[r], offsets[r] + counts[r]).
  // allgather_slices gives every rank every rank's slice, in place.
  // gather_slices copies every rank's `mine` (its slice's values) into its
  // slice of rank 0's `whole`; `whole` is not used on the other ranks.
  void allgather_slices(const Vector<float>& values, const std::vector<int>& counts,
                        const std::vector<int>& offsets) const;
  void gather_slices(const Vector<float>& mine, const Vector<float>& whole,
                     const std::vector<int>& counts, const std::vector<int>& offsets) const;
  std::vector<std::uint64_t> gather(std::uint64_t value) const;
  // Every rank's values, concatenated in rank order, on every rank.
  std::vector<double> allgather(const std::vector<double>& values) const;
  void barrier() const;

  // The collective verdict: every rank calls it with its own failure (empty
  // when it succeeded). If any rank failed, every rank throws a
  // CollectiveError with the message of the lowest failing rank (prefixed
  // with "rank r: " when there are several ranks) and how many failed.
  void agree(const std::string& failure) const;

  // Ends every rank of the job (after a failure only this rank saw).
  [[noreturn]] void abort(int code) const;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  bool direct_ = true;
};

// Synchronised BatchNorm statistics through a Communicator.
class CommunicatorSync final : public BatchSync {
 public:
  explicit CommunicatorSync(const Communicator& comm) : comm_(comm) {}
  void sum(const Vector<double>& values) const override { comm_.sum(values); }

 private:
  const Communicator& comm_;
};

// FNV-1a over the bytes of a buffer (copied to the host): replicas that
// must be identical compare these.
std::uint64_t content_hash(const Vector<float>& values);
std::uint64_t content_hash(const std::string& text);

// Checks that every rank holds the same `what` (its hash): throws
// CollectiveError on every rank naming the ranks that differ.
void require_same_on_every_rank(const Communicator& comm, std::uint64_t hash,
                                const std::string& what, const std::string& fix);
// The same for replicated weights; one rank copies and hashes nothing.
void require_same_weights_on_every_rank(const Communicator& comm, const Vector<float>& values,
                                        const std::string& what,
                                        const std::string& fix = "report this as a bug");

}  // namespace tessera
