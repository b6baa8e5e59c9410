// How a run chooses its layers' kernels: the deck's [kernels] section
// (docs/decks.md); model/kernels.hpp chooses by it.
#pragma once

#include <string>

namespace tessera {

struct KernelSettings {
  // kernels.conv2d: "measured", "fixed", or an option's name ("threads",
  // "winograd", "direct", "blocks"): that option wherever it runs a
  // layer's shapes, the fixed rule's choice elsewhere.
  std::string conv2d = "measured";
  // kernels.cache: the directory of the measurements' file; "" for
  // default_kernel_cache(), "none" for none (every run measures).
  std::string cache;
  // kernels.repetitions: timed passes per option (after a warm-up pass);
  // the best counts.
  int repetitions = 5;
};

}  // namespace tessera
