// A file published whole or not at all: the checkpoints, a sweep's results
// and tessera-predict's predictions are written through it.
#pragma once

#include <functional>
#include <string>

namespace tessera::impl {

// Writes `path` through a temporary file beside it: write_file(temporary),
// fsync, rename, fsync the directory. The temporary name starts with '.', so
// no listing of checkpoints takes a half-written file for one. `pause`
// honours the test hook TESSERA_CHECKPOINT_PAUSE_SECONDS before the rename.
// Errors name `function`. (src/io/checkpoint_writer.cpp)
void publish_atomically(const std::string& path, const std::string& function,
                        const std::function<void(const std::string& temporary)>& write_file,
                        bool pause = false);

}  // namespace tessera::impl
