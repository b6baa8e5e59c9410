// Checkpoint directories: step-NNNNNNNN.h5 files, the `latest` pointer
// committed atomically, keep-K pruning, and what --restart names.
#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/io/checkpoint.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "checkpoint_file.hpp"

namespace tessera {

namespace fs = std::filesystem;
using impl::publish_atomically;
using impl::system_error;

std::string resolve_checkpoint(const std::string& what) {
  const std::string function = "tessera::resolve_checkpoint";
  std::error_code ec;
  TESSERA_REQUIRE(!what.empty(), function << ": no checkpoint named");
  TESSERA_REQUIRE(fs::exists(what, ec), function
                                            << ": " << what
                                            << " does not exist (expected a checkpoint file, a "
                                               "checkpoint directory or its 'latest' file)");
  fs::path pointer(what);
  if (fs::is_directory(pointer, ec)) {
    pointer /= "latest";
    TESSERA_REQUIRE(fs::exists(pointer, ec),
                    function << ": directory " << what
                             << " has no 'latest' file, so no checkpoint has been committed there");
  } else if (pointer.filename() != "latest") {
    return what;
  }
  std::ifstream in(pointer);
  std::string name;
  std::getline(in, name);
  TESSERA_REQUIRE(
      in && !name.empty() && name.find('/') == std::string::npos,
      function << ": " << pointer.string()
               << " does not name a checkpoint file (expected one file name on its first line)");
  const std::string target = (pointer.parent_path() / name).string();
  TESSERA_REQUIRE(fs::exists(target, ec), function << ": " << pointer.string() << " names " << name
                                                   << ", which does not exist");
  return target;
}

CheckpointDirectory::CheckpointDirectory(std::string directory, int keep)
    : directory_(std::move(directory)), keep_(keep) {
  TESSERA_REQUIRE(!directory_.empty(), "tessera::CheckpointDirectory: empty directory name");
  TESSERA_REQUIRE(keep_ >= 1, "tessera::CheckpointDirectory: keep = " << keep_ << " must be >= 1");
}

std::string CheckpointDirectory::file_name(std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.h5", static_cast<long long>(step));
  return name;
}

std::vector<std::string> CheckpointDirectory::checkpoints() const {
  // At most 18 digits: any such number is a step; a longer name is no file
  // Tessera wrote, and is left alone like any other.
  static const std::regex pattern("step-([0-9]{8,18})\\.h5");
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory_, ec)) {
    const std::string name = entry.path().filename().string();
    std::smatch match;
    if (entry.is_regular_file(ec) && std::regex_match(name, match, pattern))
      found.emplace_back(std::stoll(match[1].str()), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

bool CheckpointDirectory::has_latest() const {
  std::error_code ec;
  return fs::exists(fs::path(directory_) / "latest", ec);
}

std::string CheckpointDirectory::resolve(const std::string& what) const {
  if (what.empty() || what == "latest") return resolve_checkpoint(directory_);
  std::error_code ec;
  const fs::path inside = fs::path(directory_) / what;
  if (fs::path(what).is_relative() && fs::exists(inside, ec))
    return resolve_checkpoint(inside.string());
  return resolve_checkpoint(what);
}

std::string CheckpointDirectory::commit(const Model& model, const Optimizer& optimizer,
                                        const CheckpointInfo& info) {
  ScopedRegion region("tessera::CheckpointDirectory::commit");
  const std::string function = "tessera::CheckpointDirectory::commit";
  std::error_code ec;
  fs::create_directories(directory_, ec);
  TESSERA_REQUIRE(!ec,
                  function << ": cannot create directory " << directory_ << ": " << ec.message());
  const std::string name = file_name(info.cursor.step);
  const std::string path = (fs::path(directory_) / name).string();
  write_checkpoint(path, model, optimizer, info);

  publish_atomically(
      (fs::path(directory_) / "latest").string(), function, [&](const std::string& temporary) {
        std::ofstream out(temporary, std::ios::trunc);
        out << name << "\n";
        out.close();
        TESSERA_REQUIRE(out, function << ": cannot write " << temporary << ": " << system_error());
      });

  // The checkpoint just written stays even when older files carry larger
  // steps (a run resumed from an earlier checkpoint).
  std::vector<std::string> others;
  for (const auto& p : checkpoints())
    if (fs::path(p).filename() != name) others.push_back(p);
  const std::size_t keep_others = static_cast<std::size_t>(keep_ - 1);
  for (std::size_t i = 0; i + keep_others < others.size(); ++i) fs::remove(others[i], ec);
  return path;
}

}  // namespace tessera
