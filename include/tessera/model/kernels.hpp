// How a run chooses its layers' kernels (Layer::kernel_options; the
// deck's [kernels] section, docs/decks.md): by measurement on this machine,
// kept in a cache file so that a later run of the same layers on the same
// machine takes the same choice without measuring (the same bits); by a
// rule of the shapes alone (the same choice on every machine of a
// backend); or by name. The choice is recorded in checkpoints and a
// restart takes the checkpoint's (docs/checkpoint.md).
#pragma once

#include <tessera/model/model.hpp>
#include <tessera/settings/kernel_settings.hpp>

#include <cstdint>
#include <string>

namespace tessera {

// $TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else
// $HOME/.cache/tessera; "" when none of them is set.
std::string default_kernel_cache();

// The measurements' file in a cache directory.
std::string kernel_cache_file(const std::string& directory);

// What the machine's measurements depend on besides a layer's shapes: the
// CPU, the instructions Tessera's kernels were built for, the execution
// space and exec's threads, the BLAS kernels and Tessera's version.
std::string kernel_machine(const ExecSpace& exec);

// What choose_kernels decided, and how.
struct KernelChoice {
  KernelTable table;          // every layer with a choice, in layer order
  std::int64_t kept = 0;      // layers that kept the choice given them
  std::int64_t measured = 0;  // layers whose options were timed now
  std::int64_t cached = 0;    // layers whose choice the cache held
  double seconds = 0;         // spent timing
  std::string cache_file;     // "" without a cache
  std::string note;           // a cache that could not be read or written, a named option
                              // that does not run some layer
};

// Chooses an option for every layer of `model` with a choice (after infer
// or compile: all its layers, those of other pipeline stages too): a layer
// that `kept` names with an option it has here keeps that (a restart keeps
// its checkpoint's), the others are chosen by `settings`, timed on exec
// where it measures. One process decides; a run decides on its first rank
// and sends the table to the others. Cache entries are kept first-written:
// a process that measured a layer another one had meanwhile written takes
// the written choice. A layer with one option here is not in the table; a
// deck that names another option for it (or a checkpoint that recorded
// another) gets a note.
KernelChoice choose_kernels(const Model& model, const KernelSettings& settings,
                            const ExecSpace& exec, const KernelTable& kept = {});

// "kernels: conv2d measured (...): stem threads, s1b1_conv1 winograd, ...",
// one line for the run's log, then a line "note: ..." with its notes
// where it has any; only that note when the model has no choice; "" without
// either.
std::string kernel_description(const KernelSettings& settings, const KernelChoice& choice);

// The table as one line of text ("layer=option,layer=option") and back.
std::string kernel_table_text(const KernelTable& table);
KernelTable kernel_table_from_text(const std::string& text);

}  // namespace tessera
