// Builds a small model through the installed Tessera package and checks
// one forward pass against the value it must have, and that a check in an
// installed header names it relative to the source tree.
#include <tessera/core/runtime.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/model/model.hpp>

#include <cmath>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  tessera::Runtime runtime(argc, argv);
  std::printf("%s\n", tessera::build_description().c_str());
  tessera::Model model(tessera::Shape{3});
  model.add<tessera::Dense>("fc", 2);
  model.compile(1, 0);
  Kokkos::deep_copy(model.parameters().values(), 0.5f);  // weights and biases all 0.5
  Kokkos::deep_copy(model.input(1).flat(), 1.0f);
  const auto out = Kokkos::create_mirror_view_and_copy(
      Kokkos::HostSpace(), model.forward(1, tessera::StepContext{false}).flat());
  // Each output: 3 * (1 * 0.5) + 0.5 = 2.
  if (out.extent(0) != 2 || std::fabs(out(0) - 2.0f) > 1e-6f || std::fabs(out(1) - 2.0f) > 1e-6f) {
    std::printf("downstream: unexpected output\n");
    return 1;
  }
  try {
    tessera::Shape{2, -1};
    std::printf("downstream: a negative extent was accepted\n");
    return 1;
  } catch (const tessera::Error& e) {
    if (std::string(e.what()).find(" [include/tessera/core/tensor.hpp:") == std::string::npos) {
      std::printf("downstream: the error does not name the installed header relatively: %s\n",
                  e.what());
      return 1;
    }
  }
  std::printf("downstream: Tessera::tessera works from the installed package\n");
  return 0;
}
