// The sliding-window geometry that convolution (conv.hpp) and pooling
// (pool.hpp) share: along one spatial axis, where each window starts, which
// input positions it covers, and which windows cover an input position.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace tessera::kernels {

// One spatial axis of a sliding window: `in` positions, windows of `kernel`
// taps placed every `stride` positions over the input padded by `pad` on
// both sides. `out` is 0 when not even one window fits.
struct WindowAxis {
  int in = 0, kernel = 1, stride = 1, pad = 0, out = 0;

  WindowAxis() = default;
  WindowAxis(std::int64_t in_, std::int64_t kernel_, std::int64_t stride_, std::int64_t pad_)
      : in(static_cast<int>(in_)),
        kernel(static_cast<int>(kernel_)),
        stride(static_cast<int>(stride_)),
        pad(static_cast<int>(pad_)),
        out(in_ + 2 * pad_ >= kernel_ && stride_ > 0
                ? static_cast<int>((in_ + 2 * pad_ - kernel_) / stride_ + 1)
                : 0) {}

  // Input position of tap 0 of window o (negative inside the padding).
  KOKKOS_INLINE_FUNCTION int start(int o) const { return o * stride - pad; }

  // Input positions [lo, hi) of window o, without the padding.
  KOKKOS_INLINE_FUNCTION void clipped(int o, int& lo, int& hi) const {
    lo = start(o) < 0 ? 0 : start(o);
    hi = start(o) + kernel > in ? in : start(o) + kernel;
  }

  // Input positions [lo, hi) that windows [first, first + count) own when
  // each run of windows writes its input gradients whole: those they reach
  // and those before the next run's (with stride >= kernel, or count =
  // out), so that the runs of an axis cover [0, in) once.
  KOKKOS_INLINE_FUNCTION void owned(int first, int count, int& lo, int& hi) const {
    const int a = start(first), b = start(first + count);
    lo = first == 0 ? 0 : (a < 0 ? 0 : (a > in ? in : a));
    hi = first + count >= out ? in : (b < 0 ? 0 : (b > in ? in : b));
  }

  // Windows [lo, hi) that contain input position i.
  KOKKOS_INLINE_FUNCTION void covering(int i, int& lo, int& hi) const {
    const int first = i + pad - kernel + 1;  // o * stride >= first
    lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    hi = (i + pad) / stride + 1;
    if (hi > out) hi = out;
  }

  // Windows [lo, hi) whose tap `tap` lands inside the input (not padding).
  KOKKOS_INLINE_FUNCTION void inside(int tap, int& lo, int& hi) const {
    const int first = pad - tap;  // o * stride >= first
    lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    const int last = in - 1 + pad - tap;  // o * stride <= last
    hi = last < 0 ? 0 : last / stride + 1;
    if (hi > out) hi = out;
    if (hi < lo) hi = lo;
  }

  // Input positions that at least one window covers, and taps inside the
  // input summed over the windows (for the work a pooling pass states).
  std::int64_t covered() const {
    std::int64_t count = 0;
    for (int i = 0; i < in; ++i) {
      int lo, hi;
      covering(i, lo, hi);
      count += lo < hi;
    }
    return count;
  }
  std::int64_t taps() const {
    std::int64_t count = 0;
    for (int o = 0; o < out; ++o) {
      int lo, hi;
      clipped(o, lo, hi);
      count += hi - lo;
    }
    return count;
  }
};

}  // namespace tessera::kernels
