// Kernel choices: the model's layers with kernel options, and how a run
// chooses among them (model/kernels.hpp): measured and cached, fixed, or
// named.
#include <tessera/core/machine.hpp>
#include <tessera/core/version.hpp>
#include <tessera/model/kernels.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <set>
#include <sstream>

namespace tessera {

namespace {
bool among(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}
// "threads, winograd, direct"
std::string listed(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& n : names) text += (text.empty() ? "" : ", ") + n;
  return text;
}
}  // namespace

bool Model::computes_input_gradient(std::size_t i) const {
  const auto& nodes = layer_inputs_.at(i);
  return std::any_of(nodes.begin(), nodes.end(), [](std::size_t node) { return node != 0; });
}

std::vector<std::pair<std::size_t, KernelOptions>> Model::kernel_options() const {
  TESSERA_REQUIRE(inferred_, "tessera::Model::kernel_options: infer or compile the model first");
  std::vector<std::pair<std::size_t, KernelOptions>> options;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    KernelOptions o =
        layers_[i]->kernel_options(layer_input_shapes(i, max_batch_), computes_input_gradient(i));
    if (!o.names.empty()) options.emplace_back(i, std::move(o));
  }
  return options;
}

std::vector<std::pair<std::size_t, KernelOptions>> Model::kernel_choices() const {
  auto choices = kernel_options();
  choices.erase(std::remove_if(choices.begin(), choices.end(),
                               [](const auto& c) { return c.second.names.size() < 2; }),
                choices.end());
  return choices;
}

KernelTable Model::kernels() const {
  KernelTable table;
  for (const auto& [i, options] : kernel_choices()) {
    const std::string running = layers_[i]->kernel_option();
    table.emplace_back(layers_[i]->name(), running.empty() ? options.fixed : running);
  }
  return table;
}

void Model::set_kernels(const KernelTable& table) {
  const auto choices = kernel_choices();
  for (const auto& entry : table) {
    const std::string& name = entry.first;  // C++17 lambdas capture no structured binding
    const std::string& option = entry.second;
    const auto found = std::find_if(choices.begin(), choices.end(), [&](const auto& c) {
      return layers_[c.first]->name() == name;
    });
    TESSERA_REQUIRE(found != choices.end(),
                    "tessera::Model::set_kernels: no layer '" << name << "' with kernel options");
    TESSERA_REQUIRE(among(found->second.names, option),
                    "tessera::Model::set_kernels: layer '"
                        << name << "' has no kernel option '" << option
                        << "' on this build; its options: " << listed(found->second.names));
    layers_[found->first]->set_kernel_option(option);
  }
}

std::string default_kernel_cache() {
  if (const char* dir = std::getenv("TESSERA_CACHE_DIR"); dir != nullptr && *dir != '\0')
    return dir;
  if (const char* dir = std::getenv("XDG_CACHE_HOME"); dir != nullptr && *dir != '\0')
    return std::string(dir) + "/tessera";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return std::string(home) + "/.cache/tessera";
  return {};
}

std::string kernel_cache_file(const std::string& directory) {
  return directory + "/kernels-1.jsonl";
}

std::string kernel_machine(const ExecSpace& exec) {
  std::ostringstream os;
  const BlasInfo blas = blas_info();
  os << cpu_identity() << "; Tessera " << TESSERA_VERSION_STRING << " (kernel sources "
     << TESSERA_KERNELS_HASH << "), kernels for " << isa_name(compiled_isa());
  if (*host_arch() != '\0') os << " (-march=" << host_arch() << ")";
  os << ", " << kernel_paths_name() << "; " << ExecSpace::name() << ", " << exec.concurrency()
     << " threads; BLAS " << blas.library;
  if (!blas.core.empty()) os << " (" << blas.core << ")";
  return os.str();
}

namespace {

using json = nlohmann::json;

// The measurements' file, one JSON object a line: {"machine", "key",
// "choice", "seconds": {option: seconds}}. Readers hold a shared lock,
// writers an exclusive one; the first entry for a (machine, key) counts.
class KernelCache {
 public:
  explicit KernelCache(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  // The choices the file holds for `machine`, by key.
  std::map<std::string, std::string> read(const std::string& machine, std::string& note) const {
    std::map<std::string, std::string> choices;
    Lock lock(path_, LOCK_SH, note);
    if (!lock) return choices;
    take_entries(machine, choices);
    return choices;
  }

  // Adds each measured entry whose key the file does not hold yet; returns
  // the file's choice for every key afterwards (another process's where it
  // wrote first).
  std::map<std::string, std::string> add(const std::string& machine, const std::vector<json>& fresh,
                                         std::string& note) const {
    std::map<std::string, std::string> choices;
    Lock lock(path_, LOCK_EX, note);
    if (!lock) return choices;
    take_entries(machine, choices);
    std::string lines;
    for (const json& entry : fresh) {
      const std::string key = entry["key"].get<std::string>();
      if (choices.count(key) > 0) continue;
      choices[key] = entry["choice"].get<std::string>();
      lines += entry.dump() + "\n";
    }
    if (!lines.empty() &&
        ::write(lock.fd, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size()))
      note = "cannot write " + path_ + ": " + std::strerror(errno);
    return choices;
  }

 private:
  struct Lock {
    int fd = -1;
    Lock(const std::string& path, int how, std::string& note) {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0 || ::flock(fd, how) != 0) {
        note = "cannot use " + path + ": " + std::strerror(errno);
        if (fd >= 0) ::close(fd);
        fd = -1;
      }
    }
    ~Lock() {
      if (fd >= 0) ::close(fd);  // releases the lock
    }
    explicit operator bool() const { return fd >= 0; }
  };

  // The file's entries for `machine` not yet in `choices` (lines that do
  // not parse, a write cut short, are skipped).
  void take_entries(const std::string& machine, std::map<std::string, std::string>& choices) const {
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      const json entry = json::parse(line, nullptr, false);
      if (!entry.is_object() || !entry.contains("machine") || !entry.contains("key") ||
          !entry.contains("choice") || !entry["machine"].is_string() || !entry["key"].is_string() ||
          !entry["choice"].is_string() || entry["machine"].get<std::string>() != machine)
        continue;
      choices.emplace(entry["key"].get<std::string>(), entry["choice"].get<std::string>());
    }
  }

  std::string path_;
};

// The deck's setting for a family of options.
const std::string& mode_of(const KernelSettings& settings, const std::string& family) {
  static const std::string fixed = "fixed";
  return family == "conv2d" ? settings.conv2d : fixed;
}

// The cache of `settings` for the measured choices, "" without one.
std::string cache_directory(const KernelSettings& settings) {
  if (settings.cache == "none") return {};
  return settings.cache.empty() ? default_kernel_cache() : settings.cache;
}

// The option of `names` with the least time (the first of equals).
std::string fastest(const std::vector<std::string>& names, const std::vector<double>& seconds) {
  std::size_t best = 0;
  for (std::size_t k = 1; k < names.size() && k < seconds.size(); ++k)
    if (seconds[k] < seconds[best]) best = k;
  return names.at(best);
}

// The measured choices of one choose_kernels call: the cache's, and those
// it times (written to the cache at the end, first-written kept).
class Measurements {
 public:
  Measurements(const KernelSettings& settings, std::string machine, std::string& notes)
      : settings_(settings), machine_(std::move(machine)), notes_(notes) {}

  // Layer i's choice: the cache's for its key, else the fastest of its
  // options timed on exec.
  std::string choose(const Model& model, std::size_t i, const KernelOptions& options,
                     const ExecSpace& exec, KernelChoice& choice) {
    open_cache();
    const auto hit = known_.find(options.key);
    if (hit != known_.end() && among(options.names, hit->second)) {
      ++(timed_.count(options.key) > 0 ? choice.measured : choice.cached);
      return hit->second;
    }
    const auto start = std::chrono::steady_clock::now();
    const std::vector<double> seconds = model.layers()[i]->time_kernel_options(
        exec, model.layer_input_shapes(i, model.max_batch()), model.computes_input_gradient(i),
        settings_.repetitions);
    choice.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string option = fastest(options.names, seconds);
    json timed = json::object();
    for (std::size_t k = 0; k < options.names.size() && k < seconds.size(); ++k)
      timed[options.names[k]] = seconds[k];
    fresh_.push_back(json{{"machine", machine_},
                          {"key", options.key},
                          {"choice", option},
                          {"seconds", timed},
                          {"repetitions", settings_.repetitions}});
    known_[options.key] = option;
    timed_.insert(options.key);
    ++choice.measured;
    return option;
  }

  // Writes the timed choices; then the cache's choice for `key` where it
  // holds another process's, written first, else "".
  void write(KernelChoice& choice) {
    if (cache_ && !fresh_.empty()) {
      std::string note;
      written_ = cache_->add(machine_, fresh_, note);
      add_note(note);
    }
    if (cache_) choice.cache_file = cache_->path();
  }
  std::string written(const std::string& key) const {
    const auto w = written_.find(key);
    return w == written_.end() ? std::string() : w->second;
  }

 private:
  void add_note(const std::string& note) {
    if (!note.empty()) notes_ += (notes_.empty() ? "" : "; ") + note;
  }
  void open_cache() {
    if (opened_) return;
    opened_ = true;
    const std::string dir = cache_directory(settings_);
    if (dir.empty()) return;
    std::error_code made;
    std::filesystem::create_directories(dir, made);
    if (made) return add_note("cannot create the cache directory " + dir + ": " + made.message());
    cache_ = std::make_unique<KernelCache>(kernel_cache_file(dir));
    std::string note;
    known_ = cache_->read(machine_, note);
    add_note(note);
    if (!note.empty()) cache_.reset();
  }

  const KernelSettings& settings_;
  const std::string machine_;
  std::string& notes_;
  bool opened_ = false;
  std::unique_ptr<KernelCache> cache_;
  std::map<std::string, std::string> known_, written_;  // by key
  std::set<std::string> timed_;                         // keys timed by this call
  std::vector<json> fresh_;                             // their cache entries
};

}  // namespace

KernelChoice choose_kernels(const Model& model, const KernelSettings& settings,
                            const ExecSpace& exec, const KernelTable& kept) {
  KernelChoice choice;
  std::string notes;
  const auto add_note = [&notes](const std::string& note) {
    notes += (notes.empty() ? "" : "; ") + note;
  };
  Measurements measurements(settings, kernel_machine(exec), notes);
  auto layers = model.kernel_options();
  std::vector<bool> measured;  // by table row: chosen by measurement
  for (const auto& [i, options] : layers) {
    const std::string& name = model.layers()[i]->name();
    const std::string& mode = mode_of(settings, options.family);
    const auto given =
        std::find_if(kept.begin(), kept.end(), [&](const auto& k) { return k.first == name; });
    const bool keeps = given != kept.end() && among(options.names, given->second);
    const bool single = options.names.size() < 2;  // no choice on this build
    if (given != kept.end() && !keeps)
      add_note("layer '" + name + "' cannot keep its kernel option '" + given->second +
               "' here (this build runs " + listed(options.names) + ")" +
               (single ? "" : ": chosen by kernels." + options.family));
    const bool named = mode != "measured" && mode != "fixed";
    if (!keeps && named && !among(options.names, mode))
      add_note("kernels." + options.family + " = \"" + mode + "\" does not run layer '" + name +
               "' (" + options.key + ") here: it runs " + options.fixed);
    if (single) continue;
    std::string option = options.fixed;
    if (keeps) {
      option = given->second;
      ++choice.kept;
    } else if (named && among(options.names, mode)) {
      option = mode;
    } else if (mode == "measured") {
      option = measurements.choose(model, i, options, exec, choice);
    }
    measured.push_back(!keeps && mode == "measured");
    choice.table.emplace_back(name, option);
  }
  measurements.write(choice);
  // Where another process wrote a layer's measurement first, its choice.
  layers.erase(std::remove_if(layers.begin(), layers.end(),
                              [](const auto& l) { return l.second.names.size() < 2; }),
               layers.end());
  for (std::size_t row = 0; row < layers.size(); ++row) {
    const std::string written = measurements.written(layers[row].second.key);
    if (measured[row] && !written.empty() && among(layers[row].second.names, written))
      choice.table[row].second = written;
  }
  choice.note = notes;
  return choice;
}

std::string kernel_description(const KernelSettings& settings, const KernelChoice& choice) {
  if (choice.table.empty()) return choice.note.empty() ? std::string() : "note: " + choice.note;
  std::ostringstream os;
  os << "kernels: conv2d = \"" << settings.conv2d << "\"";
  if (choice.kept > 0 || choice.measured > 0 || choice.cached > 0) {
    os << " (";
    if (choice.kept > 0)
      os << choice.kept << " layer" << (choice.kept > 1 ? "s" : "") << " as given"
         << (choice.cached > 0 || choice.measured > 0 ? ", " : "");
    if (choice.cached > 0)
      os << choice.cached << " layer" << (choice.cached > 1 ? "s" : "") << " from the cache";
    if (choice.cached > 0 && choice.measured > 0) os << ", ";
    if (choice.measured > 0)
      os << choice.measured << " measured in " << std::fixed << std::setprecision(1)
         << choice.seconds << " s";
    if (!choice.cache_file.empty()) os << "; " << choice.cache_file;
    os << ")";
  }
  os << ":";
  for (std::size_t k = 0; k < choice.table.size(); ++k)
    os << (k ? ", " : " ") << choice.table[k].first << " " << choice.table[k].second;
  if (!choice.note.empty()) os << "\nnote: " << choice.note;
  return os.str();
}

std::string kernel_table_text(const KernelTable& table) {
  std::string text;
  for (const auto& [name, option] : table) text += name + "\t" + option + "\n";
  return text;
}

KernelTable kernel_table_from_text(const std::string& text) {
  KernelTable table;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto tab = line.find('\t');
    TESSERA_REQUIRE(tab != std::string::npos,
                    "tessera::kernel_table_from_text: line '" << line << "' has no tab");
    table.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return table;
}

}  // namespace tessera
