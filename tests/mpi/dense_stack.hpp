// The model of the MPI unit tests: five Dense layers of 6,952 parameters
// in all, one gradient bucket each with 256-byte buckets, and seven
// 1,024-parameter chunks, so buckets and rank slices cut across each other.
#pragma once

#include <tessera/layers/dense.hpp>
#include <tessera/model/model.hpp>

#include <memory>

namespace tessera::test {

inline std::unique_ptr<Model> dense_stack() {
  auto m = std::make_unique<Model>(Shape{24});
  m->add<Dense>("fc1", 64)
      .add<Dense>("fc2", 48)
      .add<Dense>("fc3", 32)
      .add<Dense>("fc4", 16)
      .add<Dense>("fc5", 8);
  m->compile(2, 1);
  return m;
}

}  // namespace tessera::test
