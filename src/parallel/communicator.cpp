// Collectives, the collective verdict, replica hashes, and every other MPI
// call of the library: non-blocking operations and their completion, point
// to point messages, communicators of subsets of ranks, reductions.
#include <tessera/core/profiling.hpp>
#include <tessera/core/random.hpp>
#include <tessera/parallel/communicator.hpp>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <cstdlib>
#include <limits>
#include <sstream>

namespace tessera {

namespace {
// Throws Error("<who>: <what> failed: <MPI's text>") unless status is MPI_SUCCESS.
void check(int status, const char* what, const char* who = "tessera::Communicator") {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw Error(std::string(who) + ": " + what + " failed: " + std::string(text, length));
}

// Whether the MPI library reads device memory for this backend. The build
// can say so (Tessera_ENABLE_GPU_AWARE_MPI, Spack's +gpu_aware_mpi), since
// MPICH and Cray MPICH have no MPIX_*_AWARE_SUPPORT macros and Open MPI's is 0
// where UCX, not Open MPI itself, carries the device memory; else the
// library's own answer where its header offers one.
bool mpi_reads_device_memory() {
#if defined(TESSERA_GPU_AWARE_MPI)
  return true;
#elif defined(KOKKOS_ENABLE_CUDA) && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#elif defined(KOKKOS_ENABLE_HIP) && defined(MPIX_ROCM_AWARE_SUPPORT) && MPIX_ROCM_AWARE_SUPPORT
  return MPIX_Query_rocm_support() == 1;
#else
  return false;
#endif
}

constexpr bool host_memory = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;

template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}
template <>
MPI_Datatype mpi_type<std::uint16_t>() {
  return MPI_UINT16_T;
}
template <>
MPI_Datatype mpi_type<int>() {
  return MPI_INT;
}
template <>
MPI_Datatype mpi_type<long>() {
  return MPI_LONG;
}
template <>
MPI_Datatype mpi_type<char>() {
  return MPI_CHAR;
}

// Root's `count` values on every rank of `comm`.
template <class T>
void broadcast_from(int root, T* values, int count, MPI_Comm comm) {
  check(MPI_Bcast(values, count, mpi_type<T>(), root, comm), "MPI_Bcast");
}

template <class T>
MPI_Request send_to(int to, int tag, const T* values, int count, MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Isend(values, count, mpi_type<T>(), to, tag, comm, &request), "MPI_Isend");
  return request;
}

// The text of the message `status` describes (from MPI_Probe or MPI_Iprobe).
std::string receive_probed(const MPI_Status& status, int tag, MPI_Comm comm) {
  int count = 0;
  check(MPI_Get_count(&status, MPI_CHAR, &count), "MPI_Get_count");
  std::string text(static_cast<std::size_t>(count), ' ');
  check(MPI_Recv(text.data(), count, MPI_CHAR, status.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE),
        "MPI_Recv");
  return text;
}

// The reductions of Communicator::create_reduction. MPI_Finalize deletes
// MPI_COMM_SELF's attributes first, while MPI still works: the keyval's
// delete function frees them then, after every request that used them.
struct Reductions {
  std::vector<MPI_Op> ops;
  int keyval = MPI_KEYVAL_INVALID;
};
Reductions& reductions() {
  static Reductions all;
  return all;
}
int free_reductions(MPI_Comm, int, void*, void*) {
  Reductions& all = reductions();
  for (MPI_Op& op : all.ops) MPI_Op_free(&op);
  all.ops.clear();
  MPI_Comm_free_keyval(&all.keyval);
  return MPI_SUCCESS;
}

constexpr const char* requests_who = "tessera::Requests";

// In-place sum of a view, handing MPI the view's memory or a host copy.
template <class T>
void sum_view(const Communicator& comm, const Vector<T>& values) {
  if (comm.size() == 1 || values.size() == 0) return;
  Kokkos::fence();
  if (comm.direct()) {
    check(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), mpi_type<T>(),
                        MPI_SUM, comm.comm()),
          "MPI_Allreduce");
    return;
  }
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), values);
  check(MPI_Allreduce(MPI_IN_PLACE, host.data(), static_cast<int>(host.size()), mpi_type<T>(),
                      MPI_SUM, comm.comm()),
        "MPI_Allreduce");
  Kokkos::deep_copy(values, host);
}
}  // namespace

Communicator::Communicator(MPI_Comm comm, DeviceMpi device) : comm_(comm) {
  check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
  switch (device) {
    case DeviceMpi::automatic:
      direct_ = host_memory || mpi_reads_device_memory();
      break;
    case DeviceMpi::direct:
      direct_ = true;
      break;
    case DeviceMpi::staged:
      direct_ = host_memory;
      break;
  }
}

std::string Communicator::transport() const {
  if (host_memory) return "host memory";
  return direct_ ? "GPU-aware MPI (device pointers)" : "host staging";
}

void Communicator::sum(double* values, int count) const {
  if (size_ == 1 || count == 0) return;
  check(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce");
}

void Communicator::sum(const Vector<double>& values) const { sum_view(*this, values); }
void Communicator::sum(const Vector<float>& values) const { sum_view(*this, values); }

void Communicator::broadcast(const Vector<float>& values) const {
  if (size_ == 1 || values.size() == 0) return;
  ScopedRegion region("tessera::Communicator::broadcast");
  Kokkos::fence();
  const int count = static_cast<int>(values.size());
  if (direct_) {
    broadcast_from(0, values.data(), count, comm_);
    return;
  }
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), values);
  broadcast_from(0, host.data(), count, comm_);
  Kokkos::deep_copy(values, host);
}

void Communicator::broadcast(int& value) const { broadcast_from(0, &value, 1, comm_); }

void Communicator::broadcast(std::string& text) const {
  long size = static_cast<long>(text.size());
  broadcast_from(0, &size, 1, comm_);
  text.resize(static_cast<std::size_t>(size));
  broadcast_from(0, text.data(), static_cast<int>(size), comm_);
}

void Communicator::allgather_slices(const Vector<float>& values, const std::vector<int>& counts,
                                    const std::vector<int>& offsets) const {
  if (size_ == 1) return;
  ScopedRegion region("tessera::Communicator::allgather_slices");
  Kokkos::fence();
  if (direct_) {
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, values.data(), counts.data(),
                         offsets.data(), MPI_FLOAT, comm_),
          "MPI_Allgatherv");
    return;
  }
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), values);
  check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host.data(), counts.data(),
                       offsets.data(), MPI_FLOAT, comm_),
        "MPI_Allgatherv");
  Kokkos::deep_copy(values, host);
}

void Communicator::gather_slices(const Vector<float>& mine, const Vector<float>& whole,
                                 const std::vector<int>& counts,
                                 const std::vector<int>& offsets) const {
  ScopedRegion region("tessera::Communicator::gather_slices");
  TESSERA_REQUIRE(static_cast<std::int64_t>(mine.size()) == counts.at(rank_),
                  "tessera::Communicator::gather_slices: rank " << rank_ << " holds " << mine.size()
                                                                << " values for a slice of "
                                                                << counts.at(rank_));
  Kokkos::fence();
  const bool root = rank_ == 0;
  if (direct_) {
    check(MPI_Gatherv(mine.data(), counts[rank_], MPI_FLOAT, root ? whole.data() : nullptr,
                      counts.data(), offsets.data(), MPI_FLOAT, 0, comm_),
          "MPI_Gatherv");
    return;
  }
  const auto from = Kokkos::create_mirror_view_and_copy(HostSpace(), mine);
  const auto into = Kokkos::create_mirror_view(HostSpace(), whole);
  check(MPI_Gatherv(from.data(), counts[rank_], MPI_FLOAT, root ? into.data() : nullptr,
                    counts.data(), offsets.data(), MPI_FLOAT, 0, comm_),
        "MPI_Gatherv");
  if (root) Kokkos::deep_copy(whole, into);
}

std::vector<std::uint64_t> Communicator::gather(std::uint64_t value) const {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
  check(MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_),
        "MPI_Allgather");
  return all;
}

std::vector<double> Communicator::allgather(const std::vector<double>& values) const {
  TESSERA_REQUIRE(
      values.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
      "tessera::Communicator::allgather: " << values.size() << " values exceed MPI's int counts");
  const auto counts64 = gather(values.size());
  std::vector<int> counts(counts64.begin(), counts64.end()), offsets(counts.size(), 0);
  for (std::size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<double> all(static_cast<std::size_t>(offsets.back() + counts.back()));
  check(MPI_Allgatherv(values.data(), static_cast<int>(values.size()), MPI_DOUBLE, all.data(),
                       counts.data(), offsets.data(), MPI_DOUBLE, comm_),
        "MPI_Allgatherv");
  return all;
}

void Communicator::barrier() const { check(MPI_Barrier(comm_), "MPI_Barrier"); }

void Communicator::agree(const std::string& failure) const {
  if (size_ == 1) {
    if (!failure.empty()) throw CollectiveError(failure);
    return;
  }
  // (failed?, lowest failing rank) in one reduction: failing ranks offer
  // their rank, the others a value above every rank.
  int mine[2] = {failure.empty() ? 0 : 1, failure.empty() ? size_ : rank_};
  int sums[2] = {0, 0};
  int first = 0;
  check(MPI_Allreduce(&mine[0], &sums[0], 1, MPI_INT, MPI_SUM, comm_), "MPI_Allreduce");
  check(MPI_Allreduce(&mine[1], &first, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
  if (sums[0] == 0) return;
  // The lowest failing rank's message, on every rank.
  int length = rank_ == first ? static_cast<int>(failure.size()) : 0;
  broadcast_from(first, &length, 1, comm_);
  std::string message =
      rank_ == first ? failure : std::string(static_cast<std::size_t>(length), ' ');
  broadcast_from(first, message.data(), length, comm_);
  std::ostringstream os;
  os << "rank " << first << ": " << message;
  if (sums[0] > 1)
    os << " (and " << sums[0] - 1 << " other rank" << (sums[0] > 2 ? "s" : "") << " failed)";
  throw CollectiveError(os.str());
}

void Communicator::abort(int code) const {
  if (size_ > 1) MPI_Abort(comm_, code);
  std::exit(code);
}

template <class T>
Request Communicator::start_sum(T* values, int count, MPI_Op op) const {
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallreduce(MPI_IN_PLACE, values, count, mpi_type<T>(), op, comm_, &request),
        "MPI_Iallreduce");
  return Request(request);
}
template Request Communicator::start_sum(float*, int, MPI_Op) const;
template Request Communicator::start_sum(std::uint16_t*, int, MPI_Op) const;

template <class T>
Request Communicator::start_sum_scatter(const T* values, T* mine, const std::vector<int>& counts,
                                        MPI_Op op) const {
  TESSERA_REQUIRE(counts.size() == static_cast<std::size_t>(size_),
                  "tessera::Communicator::start_sum_scatter: " << counts.size() << " counts for "
                                                               << size_ << " ranks");
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ireduce_scatter(values, mine, counts.data(), mpi_type<T>(), op, comm_, &request),
        "MPI_Ireduce_scatter");
  return Request(request);
}
template Request Communicator::start_sum_scatter(const float*, float*, const std::vector<int>&,
                                                 MPI_Op) const;
template Request Communicator::start_sum_scatter(const std::uint16_t*, std::uint16_t*,
                                                 const std::vector<int>&, MPI_Op) const;

Request Communicator::start_allgather_slices(float* values, const std::vector<int>& counts,
                                             const std::vector<int>& offsets) const {
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, values, counts.data(), offsets.data(),
                        MPI_FLOAT, comm_, &request),
        "MPI_Iallgatherv");
  return Request(request);
}

Request Communicator::start_send(const float* values, int count, int to, int tag) const {
  return Request(send_to(to, tag, values, count, comm_));
}

Request Communicator::start_send(const std::string& text, int to, int tag) const {
  return Request(send_to(to, tag, text.data(), static_cast<int>(text.size()), comm_));
}

void Communicator::receive(float* values, int count, int from, int tag) const {
  check(MPI_Recv(values, count, MPI_FLOAT, from, tag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
}

std::string Communicator::receive_text(int tag) const {
  MPI_Status status;
  check(MPI_Probe(MPI_ANY_SOURCE, tag, comm_, &status), "MPI_Probe");
  return receive_probed(status, tag, comm_);
}

bool Communicator::poll_text(int tag, std::string& text) const {
  MPI_Status status;
  int arrived = 0;
  check(MPI_Iprobe(MPI_ANY_SOURCE, tag, comm_, &arrived, &status), "MPI_Iprobe");
  if (!arrived) return false;
  text = receive_probed(status, tag, comm_);
  return true;
}

Communicator Communicator::split(int color, int key) const {
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_split(comm_, color, key, &comm), "MPI_Comm_split");
  return adopt(comm);
}

Communicator Communicator::duplicate() const {
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_dup(comm_, &comm), "MPI_Comm_dup");
  return adopt(comm);
}

Communicator Communicator::adopt(MPI_Comm comm) const {
  // Owned before anything can throw; freed only while MPI runs (a
  // communicator may outlive MPI_Finalize, which frees it itself).
  std::shared_ptr<MPI_Comm> owned(new MPI_Comm(comm), [](MPI_Comm* handle) {
    if (running() && *handle != MPI_COMM_NULL) MPI_Comm_free(handle);
    delete handle;
  });
  // direct_ is true for every setting but a staged device, so these two
  // give the new communicator this one's.
  Communicator made(comm, direct_ ? DeviceMpi::direct : DeviceMpi::staged);
  made.owned_ = std::move(owned);
  return made;
}

bool Communicator::running() noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

MPI_Op Communicator::create_reduction(MPI_User_function* function) {
  Reductions& all = reductions();
  if (all.keyval == MPI_KEYVAL_INVALID) {
    check(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_reductions, &all.keyval, nullptr),
          "MPI_Comm_create_keyval");
    check(MPI_Comm_set_attr(MPI_COMM_SELF, all.keyval, nullptr), "MPI_Comm_set_attr");
  }
  MPI_Op op = MPI_OP_NULL;
  check(MPI_Op_create(function, /*commute=*/1, &op), "MPI_Op_create");
  all.ops.push_back(op);
  return op;
}

MPI_Request* Requests::places(std::size_t first, std::size_t last, const char* what) {
  TESSERA_REQUIRE(first <= last && last <= handles_.size(),
                  "tessera::Requests::" << what << ": places [" << first << ", " << last
                                        << ") of a list of " << handles_.size());
  return handles_.data() + first;
}

bool Requests::test_all(std::size_t first, std::size_t last) {
  int done = 0;
  check(MPI_Testall(static_cast<int>(last - first), places(first, last, "test_all"), &done,
                    MPI_STATUSES_IGNORE),
        "MPI_Testall", requests_who);
  return done != 0;
}

void Requests::wait(std::size_t place) {
  check(MPI_Wait(places(place, place + 1, "wait"), MPI_STATUS_IGNORE), "MPI_Wait", requests_who);
}

void Requests::wait_all(std::size_t first, std::size_t last) {
  check(MPI_Waitall(static_cast<int>(last - first), places(first, last, "wait_all"),
                    MPI_STATUSES_IGNORE),
        "MPI_Waitall", requests_who);
}

void Requests::release() noexcept {
  if (!Communicator::running()) return;
  for (MPI_Request& request : handles_)
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
}

std::uint64_t content_hash(const std::string& text) { return fnv1a64(text.data(), text.size()); }

std::uint64_t content_hash(const Vector<float>& values) {
  const auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), values);
  return fnv1a64(host.data(), host.size() * sizeof(float));
}

void require_same_on_every_rank(const Communicator& comm, std::uint64_t hash,
                                const std::string& what, const std::string& fix) {
  if (comm.size() == 1) return;
  const auto all = comm.gather(hash);
  std::ostringstream differ;
  int count = 0;
  for (int r = 1; r < comm.size(); ++r)
    if (all[r] != all[0]) differ << (count++ ? ", " : "") << r;
  if (count == 0) return;
  std::ostringstream os;
  os << what << " differs between ranks: rank" << (count > 1 ? "s " : " ") << differ.str()
     << (count > 1 ? " differ" : " differs") << " from rank 0 (hash " << std::hex << all[0] << "); "
     << fix;
  throw CollectiveError(os.str());
}

void require_same_weights_on_every_rank(const Communicator& comm, const Vector<float>& values,
                                        const std::string& what, const std::string& fix) {
  if (comm.size() == 1) return;
  require_same_on_every_rank(comm, content_hash(values), what, fix);
}

}  // namespace tessera
