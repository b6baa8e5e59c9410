// Column sums by a team, for the device paths of the reductions over rows
// (a bias gradient, an embedding table's gradient). A team takes up to
// column_block neighbouring columns and cuts the rows into column_chunks
// stretches of equal length; its threads take (chunk, column) items,
// column fastest, so neighbouring threads read neighbouring addresses of a
// row. Each item sums its stretch in row order into team scratch, then one
// thread per column adds the stretches in stretch order. The sums depend on
// neither the team size nor the thread count (the block and the number of
// stretches are part of their rounding).
#pragma once

#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/team.hpp>

#include <cstddef>
#include <cstdint>

namespace tessera::kernels::impl {

constexpr int column_block = 8;
constexpr int column_chunks = 128;
// Threads of such a team on a GPU: four of its 1024 items each.
constexpr int column_sums_gpu_team = 256;

// Level-0 scratch bytes of team_column_sums for sums of type A.
template <class A>
KOKKOS_INLINE_FUNCTION constexpr std::size_t column_sums_bytes() {
  return column_block * column_chunks * sizeof(A);
}

// The team size for a team of column sums: a fixed one, or 0 (the
// backend's choice) on the host and column_sums_gpu_team on a GPU.
template <class ExecSpace>
TeamShape column_sums_shape(TeamShape shape) {
  return gpu_team_shape<ExecSpace>(shape, column_sums_gpu_team);
}

// Columns of the block from column `first` on, of `width` columns in all.
KOKKOS_INLINE_FUNCTION int column_block_width(std::int64_t width, std::int64_t first) {
  return static_cast<int>(width - first < column_block ? width - first : column_block);
}

// write(j, sum of read(i, j) over i < rows) for j < columns <= column_block.
// partial: column_sums_bytes<A>() of the team's scratch.
template <class A, class Member, class Read, class Write>
KOKKOS_INLINE_FUNCTION void team_column_sums(const Member& member, A* partial, std::int64_t rows,
                                             int columns, const Read& read, const Write& write) {
  const std::int64_t chunk = (rows + column_chunks - 1) / column_chunks;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, column_block * column_chunks),
                       [&](const int item) {
                         const int j = item % column_block;
                         const std::int64_t begin = (item / column_block) * chunk;
                         const std::int64_t end = begin + chunk < rows ? begin + chunk : rows;
                         A sum = 0;
                         if (j < columns)
                           for (std::int64_t i = begin; i < end; ++i) sum += read(i, j);
                         partial[item] = sum;
                       });
  member.team_barrier();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, columns), [&](const int j) {
    A sum = 0;
    for (int k = 0; k < column_chunks; ++k) sum += partial[k * column_block + j];
    write(j, sum);
  });
  member.team_barrier();  // partial is free for the next call
}

}  // namespace tessera::kernels::impl
