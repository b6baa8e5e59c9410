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

  std::int64_t allocations() const;
  std::uint64_t bytes_allocated() const;
  // Bytes of the allocations whose label starts with `prefix`.
  std::uint64_t bytes_allocated(const std::string& prefix) const;
  // Labels of the allocations seen, in order (for failure messages).
  std::vector<std::string> allocation_labels() const;
  const std::vector<DeepCopyEvent>& deep_copies() const;
  // Copies whose source is host memory and destination is not.
  std::int64_t host_to_device_copies() const;
  void reset();
};

}  // namespace tessera
