// The pool placement of buffers by liveness.
#include <tessera/core/error.hpp>
#include <tessera/model/memory.hpp>

#include <algorithm>
#include <functional>
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

// First fit in `order`: each buffer at the lowest offset, a multiple of
// `align`, free at its steps.
std::vector<std::int64_t> first_fit(const std::vector<LiveBuffer>& buffers,
                                    const std::vector<std::size_t>& order, std::int64_t align,
                                    std::int64_t& pool) {
  const auto rounded = [align](std::int64_t n) { return (n + align - 1) / align * align; };
  std::vector<std::int64_t> offsets(buffers.size(), 0);
  std::vector<std::size_t> placed;
  pool = 0;
  for (const std::size_t i : order) {
    const LiveBuffer& b = buffers[i];
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
}  // namespace

std::vector<std::int64_t> place_buffers(const std::vector<LiveBuffer>& buffers, std::int64_t align,
                                        std::int64_t& pool) {
  TESSERA_REQUIRE(align > 0, "tessera::place_buffers: alignment " << align << " must be positive");
  std::vector<std::int64_t> first(buffers.size(), 0), steps(buffers.size(), 0);
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const LiveBuffer& b = buffers[i];
    TESSERA_REQUIRE(b.elements >= 0,
                    "tessera::place_buffers: buffer " << i << " of " << b.elements << " elements");
    first[i] = b.spans.empty() ? 0 : b.spans.front().first;
    for (const LiveSpan& s : b.spans) {
      TESSERA_REQUIRE(s.first <= s.last, "tessera::place_buffers: buffer "
                                             << i << " alive from step " << s.first << " to "
                                             << s.last);
      first[i] = std::min(first[i], s.first);
      steps[i] += s.last - s.first + 1;
    }
  }
  // The orders tried: the largest first; the largest first, ties the
  // earliest alive; the earliest alive first, ties the largest; the most
  // bytes x steps first. Ties left in index order.
  const auto size = [&](std::size_t i) { return buffers[i].elements; };
  const auto area = [&](std::size_t i) { return static_cast<double>(size(i)) * steps[i]; };
  const std::vector<std::function<bool(std::size_t, std::size_t)>> before{
      [&](std::size_t a, std::size_t b) { return size(a) > size(b); },
      [&](std::size_t a, std::size_t b) {
        return size(a) != size(b) ? size(a) > size(b) : first[a] < first[b];
      },
      [&](std::size_t a, std::size_t b) {
        return first[a] != first[b] ? first[a] < first[b] : size(a) > size(b);
      },
      [&](std::size_t a, std::size_t b) { return area(a) > area(b); }};
  // The smallest pool, the first order's of equal ones.
  std::vector<std::int64_t> best;
  bool tried = false;
  for (const auto& order_by : before) {
    std::vector<std::size_t> order(buffers.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), order_by);
    std::int64_t elements = 0;
    std::vector<std::int64_t> offsets = first_fit(buffers, order, align, elements);
    if (!tried || elements < pool) {
      best = std::move(offsets);
      pool = elements;
      tried = true;
    }
  }
  return best;
}

}  // namespace tessera
