// The deck's sections of the engine's resources: how values share memory
// ([memory]) and how each layer's kernels are chosen ([kernels]), declared
// as sections.cpp declares the others.
#include <tessera/deck/deck.hpp>

namespace tessera::impl {

Section<Deck> memory_section() {
  return SectionBuilder<Deck>("memory")
      .named(
          "buffers", [](auto& d) -> auto& { return d.memory.buffers; }, buffer_plans,
          "how layer outputs, their gradients and the layers' temporaries share memory")
      .number(
          "cap_mb", [](auto& d) -> auto& { return d.memory.cap_mb; }, Range::closed(0, 1e9),
          "device memory (MiB) a rank may plan for; 0: no limit")
      .finish([](Deck& d, const KeyFailure& f) {
        if (d.memory.recompute.mode != RecomputeMode::none &&
            d.memory.buffers != BufferPlan::shared)
          f.fail("buffers",
                 "training.recompute frees memory only when the values share it; it needs "
                 "memory.buffers = \"shared\" (the default)");
      });
}

Section<Deck> kernels_section() {
  return SectionBuilder<Deck>("kernels")
      .choice(
          "conv2d", [](auto& d) -> auto& { return d.kernels.conv2d; },
          {"measured", "fixed", "threads", "winograd", "direct", "blocks"},
          "each convolution's schedule: the fastest timed here (kept in the cache), a rule of "
          "its shapes alone, or the one named wherever it runs them")
      .text(
          "cache", [](auto& d) -> auto& { return d.kernels.cache; },
          "directory of the file that keeps measured choices; \"none\": every run measures")
      .default_text(
          "`$TESSERA_CACHE_DIR`, else `$XDG_CACHE_HOME/tessera`, else `$HOME/.cache/tessera`")
      .integer(
          "repetitions", [](auto& d) -> auto& { return d.kernels.repetitions; },
          Range::closed(1, 1000), "timed passes of each option when measuring (the best counts)");
}

}  // namespace tessera::impl
