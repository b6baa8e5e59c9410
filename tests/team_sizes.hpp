// The team sizes a team kernel's test runs at: the backend's choice (0)
// first, then 1, 2, 3, 32, 64, 128 and 256 where the backend allows them
// (Serial one thread, OpenMP its thread count).
#pragma once

#include <tessera/kernels/impl/team.hpp>

#include <vector>

namespace tessera::test {

template <class E>
std::vector<kernels::TeamShape> team_shapes() {
  const int max_size = kernels::impl::team_size_max(E());
  std::vector<kernels::TeamShape> shapes = {{0}};
  for (const int size : {1, 2, 3, 32, 64, 128, 256})
    if (size <= max_size) shapes.push_back({size});
  return shapes;
}

}  // namespace tessera::test
