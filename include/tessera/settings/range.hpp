// An interval a setting's values must lie in, stated once beside the
// setting: the deck's key declarations and the engine's own checks of the
// settings structs read the same Range. Plain C++.
#pragma once

#include <string>

namespace tessera {

// Each end closed unless marked open.
struct Range {
  double low = 0, high = 0;
  bool low_open = false, high_open = false;
  bool bounded = false;  // false: any value

  // The upper end of a range with none (INT64_MAX, as a double: 2^63).
  static constexpr double no_end = 9223372036854775807.0;

  static constexpr Range any() { return {}; }
  // low or more (an integer key's at most INT64_MAX).
  static constexpr Range at_least(double low) { return {low, no_end, false, false, true}; }
  static constexpr Range closed(double low, double high) { return {low, high, false, false, true}; }
  static constexpr Range half_open(double low, double high) {
    return {low, high, false, true, true};
  }
  static constexpr Range open_closed(double low, double high) {
    return {low, high, true, false, true};
  }

  constexpr bool contains(double value) const {
    if (!bounded) return true;
    const bool above = low_open ? value > low : value >= low;
    const bool below = high_open ? value < high : value <= high;
    return above && below;
  }
  // "1 to 16777216" when closed, "[0, 1)" or "(0, 1]" otherwise.
  std::string text() const;
  // "[0, 0.999999]", "(0, 1]": the interval in messages.
  std::string interval() const;
  // Throws Error "<who>: <what> <value> must be in <interval>" unless the
  // range contains value: the engine's check of a setting against its range.
  void require(const char* who, const char* what, double value) const;
};

namespace impl {
// Deck text of a number: the shortest form that reads back the same float.
std::string number_text(double value);
// A range's end: whole numbers below 10^7 in full (100, 1000000), others
// as number_text (1e-06, 0.999999).
std::string end_text(double value);
}  // namespace impl

}  // namespace tessera
