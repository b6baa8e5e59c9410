// The pool placement of buffers by liveness.
#include <tessera/core/error.hpp>
#include <tessera/model/memory.hpp>

#include <algorithm>
#include <numeric>
#include <utility>

namespace tessera {

namespace {
bool alive_together(const LiveBuffer& a, const LiveBuffer& b) {
  for (const LiveSpan& s : a.spans)
    for (const LiveSpan& t : b.spans)
      if (s.first <= t.last && t.first <= s.last) return true;
  return false;
}
}  // namespace

std::vector<std::int64_t> place_buffers(const std::vector<LiveBuffer>& buffers, std::int64_t align,
                                        std::int64_t& pool) {
  TESSERA_REQUIRE(align > 0, "tessera::place_buffers: alignment " << align << " must be positive");
  const auto rounded = [align](std::int64_t n) { return (n + align - 1) / align * align; };
  std::vector<std::size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return buffers[a].elements > buffers[b].elements;
  });
  std::vector<std::int64_t> offsets(buffers.size(), 0);
  std::vector<std::size_t> placed;
  pool = 0;
  for (const std::size_t i : order) {
    const LiveBuffer& b = buffers[i];
    TESSERA_REQUIRE(b.elements >= 0,
                    "tessera::place_buffers: buffer " << i << " of " << b.elements << " elements");
    for (const LiveSpan& s : b.spans)
      TESSERA_REQUIRE(s.first <= s.last, "tessera::place_buffers: buffer "
                                             << i << " alive from step " << s.first << " to "
                                             << s.last);
    if (b.elements == 0) continue;
    // The address ranges of the placed buffers alive at a step of this one.
    std::vector<std::pair<std::int64_t, std::int64_t>> busy;
    for (const std::size_t j : placed)
      if (alive_together(buffers[j], b))
        busy.emplace_back(offsets[j], offsets[j] + rounded(buffers[j].elements));
    std::sort(busy.begin(), busy.end());
    const std::int64_t size = rounded(b.elements);
    std::int64_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + size <= lo) break;
      at = std::max(at, hi);
    }
    offsets[i] = at;
    placed.push_back(i);
    pool = std::max(pool, at + size);
  }
  return offsets;
}

}  // namespace tessera
