// A row's maximum and the first position holding it, as a value that
// impl::team_sum combines: its += keeps the larger value, the earlier
// position on a tie, and a NaN over any number (the earliest NaN among
// NaNs). That combination is associative and commutative, so team_sum's
// lanes and tree give the same value and position as a scan in order,
// whatever the team size.
#pragma once

#include <tessera/core/types.hpp>

#include <cstdint>

namespace tessera::kernels::impl {

template <class V>
struct MaxAt {
  V value = 0;
  std::int64_t at = -1;  // -1: no term yet (team_sum's zero)

  KOKKOS_INLINE_FUNCTION MaxAt& operator+=(const MaxAt& o) {
    if (o.at < 0) return *this;
    const bool nan = value != value, o_nan = o.value != o.value;
    const bool earlier = o.at < at;
    const bool take = at < 0 || (o_nan && !nan) ||
                      (o_nan == nan && (o.value > value || (!(value > o.value) && earlier)));
    if (take) *this = o;
    return *this;
  }
};

}  // namespace tessera::kernels::impl
