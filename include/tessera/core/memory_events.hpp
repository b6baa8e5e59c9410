// Counts memory allocations and view-to-view deep copies while alive, via
// Kokkos Tools callbacks, so tests and benchmarks can prove that a warm
// training step allocates nothing and copies no data to the device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

struct DeepCopyEvent {
  std::string destination_space, destination_label;
  std::string source_space, source_label;
  std::uint64_t bytes = 0;
};

class MemoryEventCounter {
 public:
  // Installs the callbacks; at most one counter may be alive at a time.
  MemoryEventCounter();
  // Removes the callbacks (Kokkos then runs without tool hooks again).
  ~MemoryEventCounter();
  MemoryEventCounter(const MemoryEventCounter&) = delete;
  MemoryEventCounter& operator=(const MemoryEventCounter&) = delete;

  // Allocations that hold memory. Zero-byte allocation events are left out:
  // Kokkos 4's CUDA backend reports one for every team launch that asks for
  // no level-1 scratch (Kokkos Kernels' gemm on the GPU).
  std::int64_t allocations() const;
  std::uint64_t bytes_allocated() const;
  // Bytes of the allocations whose label starts with `prefix`.
  std::uint64_t bytes_allocated(const std::string& prefix) const;
  // Bytes of the allocations in the memory space named `space` (Kokkos'
  // name, e.g. MemSpace::name()): on a GPU what lives on the device,
  // without the host mirrors a caller makes to read it.
  std::uint64_t bytes_allocated_in(const std::string& space) const;
  // Labels of the allocations counted, in order, each with its bytes and
  // memory space ("label (N bytes, Host)"), for failure messages.
  std::vector<std::string> allocation_labels() const;
  const std::vector<DeepCopyEvent>& deep_copies() const;
  // Copies whose source is host memory and destination is not. A fill with
  // one value (Kokkos::deep_copy([exec,] view, value), which Kokkos reports
  // as a copy from host memory labelled "Scalar" or "(none)") uploads no
  // data and is not one.
  std::int64_t host_to_device_copies() const;
  void reset();
};

}  // namespace tessera
