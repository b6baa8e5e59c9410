// The interface layers use to sum statistics over every data-parallel rank
// (synchronised BatchNorm); parallel/communicator.hpp implements it over MPI.
// It lives in core so that layers need not know MPI and the communicator
// need not know layers.
#pragma once

#include <tessera/core/types.hpp>

namespace tessera {

// Sums per-rank statistics over every data-parallel rank working on one
// global batch, for layers whose statistics span it (synchronised BatchNorm).
class BatchSync {
 public:
  virtual ~BatchSync() = default;
  // Element-wise sum over the ranks, in place; every rank must call it.
  virtual void sum(const Vector<double>& values) const = 0;
};

}  // namespace tessera
