// Sweeps over flat buffers for the memory-bound kernels. Kokkos' host
// backends call a lambda once per index, and the lambda reads its views'
// data pointers from the captured functor: GCC must assume that a store
// through one view may change another view's pointer, reloads them every
// element and vectorises nothing (ReLU backward ran at a tenth of the
// memory bandwidth, branching on every element's sign). Here a host thread
// takes a span of consecutive elements and the body loops over pointers it
// loaded once, which vectorises; a GPU thread takes one element, so
// neighbouring threads touch neighbouring addresses. Element-wise results
// do not depend on the span.
#pragma once

#include <tessera/core/host_paths.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/launch.hpp>

#include <cstdint>

namespace tessera::kernels::impl {

// True for the backends whose threads run on the host (Serial, OpenMP)
// where the build takes the host paths (core/host_paths.hpp).
template <class ExecSpace>
constexpr bool runs_on_host = host_fast_paths_v<ExecSpace>;

// Whether a kernel adding element i of `src` (or a function of it) into
// element i of `dst` has them in one memory: a layer's input gradient
// placed over its output gradient (Layer::backward_in_place). The kernel
// then writes 0 + what it would add, the bits of adding into a zeroed dst.
template <class Src, class Dst>
bool same_memory(const Src& src, const Dst& dst) {
  return static_cast<const void*>(src.data()) == static_cast<const void*>(dst.data());
}

// Sets n elements from p on to zero: the part of a gradient a task owns,
// zeroed in cache just before the task adds to it when its kernel writes
// the gradient whole (Layer::writes_input_gradients).
template <class T>
KOKKOS_INLINE_FUNCTION void zero_elements(T* p, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = narrow<T>(0.0f);
}

// Elements per host span: 32 KiB of floats per buffer, enough to hide the
// loop set-up, small enough to balance a few hundred thousand elements
// over the threads.
constexpr std::int64_t host_span = 8192;

// A sweep's work, saying why a host's spans are few where the caller did
// not (impl/launch.hpp).
template <class ExecSpace>
Work span_work(Work work) {
  if (runs_on_host<ExecSpace> && work.narrow == nullptr)
    work.narrow = "host schedule: a span of consecutive elements a task";
  return work;
}

// body(begin, end) for consecutive spans covering [0, n), in parallel;
// spans of `span_on_host` elements on the host (a kernel whose element is a
// whole column takes fewer). work: the whole sweep's (impl/launch.hpp).
template <class ExecSpace, class Body>
void for_each_span(const ExecSpace& exec, const char* label, std::int64_t n, const Work& work,
                   const Body& body, std::int64_t span_on_host = host_span) {
  const std::int64_t span = runs_on_host<ExecSpace> ? span_on_host : 1;
  const std::int64_t spans = (n + span - 1) / span;
  parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(exec, 0, spans), span_work<ExecSpace>(work),
      KOKKOS_LAMBDA(const std::int64_t s) {
        const std::int64_t begin = s * span;
        body(begin, begin + span < n ? begin + span : n);
      });
}

// body(row, begin, end) over rows of `width` elements, each cut into spans
// as above; for kernels whose element needs its row (a bias per feature).
// Rows shorter than a span are taken several to a host task (a 4 x 4
// plane is one row of 16), so no task is only loop set-up.
template <class ExecSpace, class Body>
void for_each_row_span(const ExecSpace& exec, const char* label, std::int64_t rows,
                       std::int64_t width, const Work& work, const Body& body,
                       std::int64_t span_on_host = host_span) {
  const std::int64_t span = runs_on_host<ExecSpace> ? span_on_host : 1;
  if (width > 0 && width < span) {
    const std::int64_t rows_per_task = span / width;
    for_each_span(
        exec, label, rows, work,
        KOKKOS_LAMBDA(const std::int64_t first, const std::int64_t last) {
          for (std::int64_t row = first; row < last; ++row) body(row, 0, width);
        },
        rows_per_task);
    return;
  }
  const std::int64_t per_row = (width + span - 1) / span;
  parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(exec, 0, rows * per_row), span_work<ExecSpace>(work),
      KOKKOS_LAMBDA(const std::int64_t s) {
        const std::int64_t row = s / per_row, begin = (s % per_row) * span;
        body(row, begin, begin + span < width ? begin + span : width);
      });
}

}  // namespace tessera::kernels::impl
