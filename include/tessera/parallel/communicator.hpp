// The collectives data-parallel training needs, over an MPI communicator,
// and the collective verdict that keeps every rank's decision the same: a
// failure on any rank becomes the same error on every rank, so none waits
// for a partner that has given up.
//
// Every MPI call of the library and its apps goes through the classes of
// this header (their one implementation, src/parallel/communicator.cpp,
// checks each return code and names the MPI function and MPI's message in
// its errors). The one exception is tessera::Runtime (src/core/runtime.cpp):
// MPI's start and end, with the world's rank and size, belong to core/,
// which sits below parallel/ on the ladder of docs/architecture.md and so
// cannot include this header. `scripts/check-layout.py mpi` fails on any
// other direct MPI call.
#pragma once

#include <tessera/core/batch_sync.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/types.hpp>
#include <tessera/settings/device_mpi.hpp>

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

// Raised on every rank together (after agree(), or from values every rank
// shares such as an averaged loss): the job can end without an abort.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// How gradients reach MPI when they live in device memory.

// One non-blocking operation in flight, from a Communicator's start_*
// call. Its buffers must stay untouched until it completes: hand it to a
// Requests list, which completes it. Moved, never copied (MPI completes a
// request once).
class Request {
 public:
  Request() = default;
  Request(Request&& other) noexcept : handle_(std::exchange(other.handle_, MPI_REQUEST_NULL)) {}
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

 private:
  friend class Communicator;
  friend class Requests;
  explicit Request(MPI_Request handle) : handle_(handle) {}
  MPI_Request handle_ = MPI_REQUEST_NULL;
};

// Non-blocking operations in flight, by place: appended (add) or put at a
// place of their own (set, e.g. one per bucket). Completed together, a
// range of places at a time, as MPI completes an array of requests; a
// completed place holds no request and may be set again.
class Requests {
 public:
  Requests() = default;
  // `count` places, none in flight.
  explicit Requests(std::size_t count) : handles_(count, MPI_REQUEST_NULL) {}
  Requests(Requests&&) noexcept = default;
  Requests& operator=(Requests&&) noexcept = default;
  Requests(const Requests&) = delete;
  Requests& operator=(const Requests&) = delete;

  std::size_t size() const { return handles_.size(); }
  bool empty() const { return handles_.empty(); }
  void add(Request request) {
    handles_.push_back(std::exchange(request.handle_, MPI_REQUEST_NULL));
  }
  void set(std::size_t place, Request request) {
    handles_.at(place) = std::exchange(request.handle_, MPI_REQUEST_NULL);
  }
  // Forgets every place; each must have completed.
  void clear() { handles_.clear(); }

  // Whether every request of places [first, last) has completed. A test
  // lets MPI progress them too: Open MPI progresses non-blocking
  // collectives only inside MPI calls.
  bool test_all(std::size_t first, std::size_t last);
  // Blocks until the request at `place`, or every one of places [first,
  // last) (all of them), has completed.
  void wait(std::size_t place);
  void wait_all(std::size_t first, std::size_t last);
  void wait_all() { wait_all(0, size()); }
  // Gives up on the requests still in flight without waiting (unwinding
  // from an error, when their partners are gone too): MPI frees them once
  // they complete. Nothing once MPI has ended.
  void release() noexcept;

 private:
  // Places [first, last), checked against the list.
  MPI_Request* places(std::size_t first, std::size_t last, const char* what);
  std::vector<MPI_Request> handles_;
};

class Communicator {
 public:
  explicit Communicator(MPI_Comm comm = MPI_COMM_WORLD, DeviceMpi device = DeviceMpi::automatic);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The MPI handle, for constructors that build a Communicator of their own
  // with other settings (tessera::Run takes it with the deck's device
  // setting); MPI calls belong in this class.
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

  // Rank 0's value on every rank (MPI_INT; a string as its MPI_LONG length,
  // then its characters).
  void broadcast(int& value) const;
  void broadcast(std::string& text) const;

  // Non-blocking sums over the ranks with the reduction `op`: MPI_SUM for
  // float, impl::sum16_op(format) for 16-bit codes (T is float or
  // std::uint16_t). start_sum sums `count` values in place; start_sum_scatter
  // sums `values` (counts[r] elements for each rank r, in rank order) and
  // leaves this rank's part of the sums in `mine`.
  template <class T>
  [[nodiscard]] Request start_sum(T* values, int count, MPI_Op op) const;
  template <class T>
  [[nodiscard]] Request start_sum_scatter(const T* values, T* mine, const std::vector<int>& counts,
                                          MPI_Op op) const;
  // allgather_slices started, on memory MPI reads as it is (the caller
  // stages device memory when direct() is false).
  [[nodiscard]] Request start_allgather_slices(float* values, const std::vector<int>& counts,
                                               const std::vector<int>& offsets) const;

  // Point to point. start_send posts `count` values (or a text) to rank
  // `to` with `tag`; receive blocks until `count` values of `tag` from rank
  // `from` have arrived. receive_text takes the next text of `tag` from any
  // rank, waiting for one; poll_text takes one that has already arrived
  // into `text`, or returns false at once.
  [[nodiscard]] Request start_send(const float* values, int count, int to, int tag) const;
  [[nodiscard]] Request start_send(const std::string& text, int to, int tag) const;
  void receive(float* values, int count, int from, int tag) const;
  std::string receive_text(int tag) const;
  bool poll_text(int tag, std::string& text) const;

  // Collective: a communicator of the ranks that give the same `color`,
  // ranked by `key` (split), or of the same ranks with a message space of
  // its own (duplicate). Both keep this one's device setting, and free
  // their MPI communicator when their last copy goes while MPI still runs.
  Communicator split(int color, int key) const;
  Communicator duplicate() const;

  // Whether MPI has started and not yet ended (destructors ask: never throws).
  static bool running() noexcept;
  // A commutative reduction of `function`, created now and freed by
  // MPI_Finalize, so that it outlives every request that uses it and is
  // never freed after MPI has gone. Call while MPI runs.
  static MPI_Op create_reduction(MPI_User_function* function);

 private:
  // A new communicator (from split or duplicate) that frees `comm` when its
  // last copy goes.
  Communicator adopt(MPI_Comm comm) const;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  bool direct_ = true;
  // Split and duplicated communicators: the handle MPI_Comm_free takes when
  // the last copy of this communicator goes.
  std::shared_ptr<MPI_Comm> owned_;
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
