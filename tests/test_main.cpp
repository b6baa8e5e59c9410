// Test entry point: MPI and Kokkos come up once for all tests of a binary.
#include <gtest/gtest.h>
#include <tessera/core/runtime.hpp>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tessera::Runtime runtime(argc, argv);
  return RUN_ALL_TESTS();
}
