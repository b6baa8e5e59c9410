// Kokkos Tools allocation and deep-copy callbacks feeding MemoryEventCounter.
#include <tessera/core/error.hpp>
#include <tessera/core/memory_events.hpp>

#include <Kokkos_Core.hpp>

#include <cstring>
#include <mutex>

namespace tessera {

namespace {
struct Events {
  std::mutex mutex;
  bool active = false;
  std::int64_t allocations = 0;
  std::uint64_t bytes = 0;
  std::vector<std::string> labels;
  std::vector<std::uint64_t> sizes;  // of each allocation in `labels`
  std::vector<std::string> spaces;   // and its memory space
  std::vector<DeepCopyEvent> copies;
};

Events& events() {
  static Events e;
  return e;
}

bool is_host(const char* space) {
  return std::strcmp(space, "Host") == 0 || std::strcmp(space, "HostSpace") == 0;
}

// Kokkos reports a fill with one value (deep_copy(view, value), with or
// without an execution space) as a copy from that value in host memory,
// labelled "Scalar" or "(none)".
bool is_fill(const std::string& source_label) {
  return source_label == "Scalar" || source_label == "(none)";
}

void on_allocate(Kokkos::Tools::SpaceHandle space, const char* label, const void*,
                 std::uint64_t size) {
  if (size == 0) return;  // holds no memory (see memory_events.hpp)
  Events& e = events();
  std::lock_guard<std::mutex> lock(e.mutex);
  ++e.allocations;
  e.bytes += size;
  e.labels.emplace_back(label);
  e.sizes.push_back(size);
  e.spaces.emplace_back(space.name);
}

void on_deep_copy(Kokkos::Tools::SpaceHandle dst_space, const char* dst_label, const void*,
                  Kokkos::Tools::SpaceHandle src_space, const char* src_label, const void*,
                  std::uint64_t size) {
  Events& e = events();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.copies.push_back(DeepCopyEvent{dst_space.name, dst_label, src_space.name, src_label, size});
}
}  // namespace

MemoryEventCounter::MemoryEventCounter() {
  Events& e = events();
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    TESSERA_REQUIRE(!e.active,
                    "tessera::MemoryEventCounter: only one counter may be alive at a time");
    e.active = true;
  }
  reset();
  Kokkos::Tools::Experimental::set_allocate_data_callback(on_allocate);
  Kokkos::Tools::Experimental::set_begin_deep_copy_callback(on_deep_copy);
}

MemoryEventCounter::~MemoryEventCounter() {
  Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
  Kokkos::Tools::Experimental::set_begin_deep_copy_callback(nullptr);
  std::lock_guard<std::mutex> lock(events().mutex);
  events().active = false;
}

std::int64_t MemoryEventCounter::allocations() const { return events().allocations; }
std::uint64_t MemoryEventCounter::bytes_allocated() const { return events().bytes; }
std::uint64_t MemoryEventCounter::bytes_allocated(const std::string& prefix) const {
  const Events& e = events();
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < e.labels.size(); ++i)
    if (e.labels[i].rfind(prefix, 0) == 0) bytes += e.sizes[i];
  return bytes;
}
std::uint64_t MemoryEventCounter::bytes_allocated_in(const std::string& space) const {
  const Events& e = events();
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < e.spaces.size(); ++i)
    if (e.spaces[i] == space) bytes += e.sizes[i];
  return bytes;
}
std::vector<std::string> MemoryEventCounter::allocation_labels() const {
  const Events& e = events();
  std::vector<std::string> out;
  for (std::size_t i = 0; i < e.labels.size(); ++i)
    out.push_back(e.labels[i] + " (" + std::to_string(e.sizes[i]) + " bytes, " + e.spaces[i] + ")");
  return out;
}
const std::vector<DeepCopyEvent>& MemoryEventCounter::deep_copies() const {
  return events().copies;
}

std::int64_t MemoryEventCounter::host_to_device_copies() const {
  std::int64_t count = 0;
  for (const auto& c : events().copies)
    if (is_host(c.source_space.c_str()) && !is_host(c.destination_space.c_str()) &&
        !is_fill(c.source_label))
      ++count;
  return count;
}

void MemoryEventCounter::reset() {
  Events& e = events();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.allocations = 0;
  e.bytes = 0;
  e.labels.clear();
  e.sizes.clear();
  e.spaces.clear();
  e.copies.clear();
}

}  // namespace tessera
