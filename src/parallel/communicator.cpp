// Collectives, the collective verdict and replica hashes.
#include <tessera/core/profiling.hpp>
#include <tessera/core/random.hpp>
#include <tessera/parallel/communicator.hpp>
#include <tessera/parallel/impl/mpi_status.hpp>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <cstdlib>
#include <limits>
#include <sstream>

namespace tessera {

namespace {
void check(int status, const char* what) { impl::check_mpi(status, "tessera::Communicator", what); }

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

DeviceMpi device_mpi_from_name(const std::string& name) {
  if (name == "auto") return DeviceMpi::automatic;
  if (name == "on") return DeviceMpi::direct;
  if (name == "off") return DeviceMpi::staged;
  throw Error("tessera::device_mpi_from_name: '" + name + "' is not one of auto, on, off");
}

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
    check(MPI_Bcast(values.data(), count, MPI_FLOAT, 0, comm_), "MPI_Bcast");
    return;
  }
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), values);
  check(MPI_Bcast(host.data(), count, MPI_FLOAT, 0, comm_), "MPI_Bcast");
  Kokkos::deep_copy(values, host);
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
  check(MPI_Bcast(&length, 1, MPI_INT, first, comm_), "MPI_Bcast");
  std::string message =
      rank_ == first ? failure : std::string(static_cast<std::size_t>(length), ' ');
  check(MPI_Bcast(message.data(), length, MPI_CHAR, first, comm_), "MPI_Bcast");
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
