// Spaces and view aliases used throughout Tessera.
#pragma once

#include <tessera/core/config.hpp>

#include <Kokkos_Core.hpp>

namespace tessera {

using ExecSpace = TESSERA_EXECUTION_SPACE;
using MemSpace = ExecSpace::memory_space;
using HostSpace = Kokkos::HostSpace;

// Dense row-major matrices (batch x features) and flat buffers.
template <class T, class Space = MemSpace>
using Matrix = Kokkos::View<T**, Kokkos::LayoutRight, Space>;
template <class T, class Space = MemSpace>
using Vector = Kokkos::View<T*, Kokkos::LayoutRight, Space>;

// Views over memory that someone else owns (slices of the parameter buffer).
template <class T, class Space = MemSpace>
using UnmanagedMatrix =
    Kokkos::View<T**, Kokkos::LayoutRight, Space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T, class Space = MemSpace>
using UnmanagedVector =
    Kokkos::View<T*, Kokkos::LayoutRight, Space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

}  // namespace tessera
