// Deck parsing and validation with toml++. Every error names the file,
// line and column, the key, and what was expected.
#include <tessera/deck/deck.hpp>

// CUDA's host headers define __noinline__ as a macro, which breaks toml++'s
// attribute probes under nvcc; this file has no device code, so hide it.
#if defined(__noinline__)
#pragma push_macro("__noinline__")
#undef __noinline__
#define TESSERA_RESTORE_NOINLINE
#endif
#include <toml++/toml.h>
#if defined(TESSERA_RESTORE_NOINLINE)
#pragma pop_macro("__noinline__")
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

namespace tessera {

namespace {

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const toml::source_region& where, const std::string& key,
                         const std::string& message) const {
    std::ostringstream os;
    os << path_ << ":" << where.begin.line << ":" << where.begin.column << ": " << key << ": "
       << message;
    throw DeckError(os.str());
  }

  // Rejects keys of `table` outside `allowed`, suggesting the closest one.
  void only_keys(const toml::table& table, const std::string& prefix,
                 const std::vector<std::string>& allowed) const {
    for (const auto& [key, node] : table) {
      const std::string k(key.str());
      if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
      std::string best;
      std::size_t best_distance = 3;  // suggest only near misses
      for (const auto& a : allowed) {
        const std::size_t d = edit_distance(k, a);
        if (d < best_distance) best_distance = d, best = a;
      }
      std::string allowed_list;
      for (const auto& a : allowed) allowed_list += (allowed_list.empty() ? "" : ", ") + a;
      fail(key.source(), prefix + k,
           "unknown key" + (best.empty() ? "" : " (did you mean '" + prefix + best + "'?)") +
               "; allowed: " + allowed_list);
    }
  }

  const toml::table& table(const toml::table& parent, const std::string& key, bool required) const {
    static const toml::table empty;
    const toml::node* node = parent.get(key);
    if (!node) {
      if (required) fail(parent.source(), key, "missing table [" + key + "]");
      return empty;
    }
    if (!node->is_table()) fail(node->source(), key, "expected a table");
    return *node->as_table();
  }

  template <class T>
  T get(const toml::table& t, const std::string& prefix, const std::string& key, const T& fallback,
        bool required = false) const {
    const toml::node* node = t.get(key);
    if (!node) {
      if (required) fail(t.source(), prefix + key, "required key is missing");
      return fallback;
    }
    if constexpr (std::is_same_v<T, bool>) {
      if (auto v = node->value_exact<bool>()) return *v;
      fail(node->source(), prefix + key, "expected a boolean (true or false)");
    } else if constexpr (std::is_integral_v<T>) {
      if (auto v = node->value_exact<std::int64_t>()) return static_cast<T>(*v);
      fail(node->source(), prefix + key, "expected an integer");
    } else if constexpr (std::is_floating_point_v<T>) {
      if (auto v = node->value<double>()) return static_cast<T>(*v);
      fail(node->source(), prefix + key, "expected a number");
    } else {
      if (auto v = node->value_exact<std::string>()) return *v;
      fail(node->source(), prefix + key, "expected a string");
    }
  }

  template <class T>
  void require_range(const toml::table& t, const std::string& prefix, const std::string& key,
                     T value, T low, T high) const {
    if (value >= low && value <= high) return;
    const toml::node* node = t.get(key);
    std::ostringstream os;
    os << "value " << value << " is out of range [" << low << ", " << high << "]";
    fail(node ? node->source() : t.source(), prefix + key, os.str());
  }

 private:
  static std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diagonal = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = up;
      }
    }
    return row[b.size()];
  }

  std::string path_;
};

}  // namespace

Deck load_deck(const std::string& path) {
  Deck deck;
  deck.path = path;
  if (!std::ifstream(path)) {
    throw DeckError(path + ": cannot open the deck file: " + std::strerror(errno));
  }
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << path << ":" << e.source().begin.line << ":" << e.source().begin.column
       << ": TOML syntax error: " << e.description();
    throw DeckError(os.str());
  }
  {
    std::ostringstream os;
    os << root;
    deck.text = os.str();
  }
  const Reader r(path);
  r.only_keys(root, "", {"run", "data", "model", "optimizer", "training"});

  const auto& run = r.table(root, "run", false);
  r.only_keys(run, "run.", {"name", "seed"});
  deck.run_name = r.get<std::string>(run, "run.", "name", "run");
  const auto seed = r.get<std::int64_t>(run, "run.", "seed", 0);
  r.require_range<std::int64_t>(run, "run.", "seed", seed, 0, INT64_MAX);
  deck.seed = static_cast<std::uint64_t>(seed);

  const auto& data = r.table(root, "data", true);
  r.only_keys(data, "data.", {"format", "train_images", "train_labels", "test_images", "test_labels",
                              "normalize_mean", "normalize_std"});
  const auto format = r.get<std::string>(data, "data.", "format", "idx");
  if (format != "idx") r.fail(data.get("format")->source(), "data.format", "'" + format + "' is not supported; allowed: idx");
  deck.train_images = r.get<std::string>(data, "data.", "train_images", "", true);
  deck.train_labels = r.get<std::string>(data, "data.", "train_labels", "", true);
  deck.test_images = r.get<std::string>(data, "data.", "test_images", "", true);
  deck.test_labels = r.get<std::string>(data, "data.", "test_labels", "", true);
  deck.normalize_mean = r.get<float>(data, "data.", "normalize_mean", 0.0f);
  deck.normalize_std = r.get<float>(data, "data.", "normalize_std", 1.0f);
  r.require_range(data, "data.", "normalize_std", deck.normalize_std, 1e-6f, 1e6f);

  const auto& model = r.table(root, "model", true);
  r.only_keys(model, "model.", {"input_shape", "layers"});
  const toml::array* shape = model.get_as<toml::array>("input_shape");
  if (!shape) r.fail(model.source(), "model.input_shape", "required array of 1 to 3 positive integers, e.g. [784]");
  for (const auto& d : *shape) {
    auto v = d.value_exact<std::int64_t>();
    if (!v || *v <= 0) r.fail(d.source(), "model.input_shape", "expected positive integers");
    deck.input_shape.push_back(*v);
  }
  if (deck.input_shape.empty() || deck.input_shape.size() > 3)
    r.fail(shape->source(), "model.input_shape", "expected 1 to 3 dimensions");
  const toml::array* layers = model.get_as<toml::array>("layers");
  if (!layers || layers->empty())
    r.fail(model.source(), "model.layers", "at least one [[model.layers]] entry is required");
  std::set<std::string> names;
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const std::string prefix = "model.layers[" + std::to_string(i) + "].";
    const toml::table* lt = (*layers)[i].as_table();
    if (!lt) r.fail((*layers)[i].source(), prefix, "expected a table");
    LayerDeck layer;
    layer.type = r.get<std::string>(*lt, prefix, "type", "", true);
    layer.name = r.get<std::string>(*lt, prefix, "name", layer.type + std::to_string(i));
    if (!names.insert(layer.name).second)
      r.fail(lt->get("name") ? lt->get("name")->source() : lt->source(), prefix + "name",
             "layer name '" + layer.name + "' is used twice");
    if (layer.type == "dense") {
      r.only_keys(*lt, prefix, {"type", "name", "units"});
      layer.units = r.get<std::int64_t>(*lt, prefix, "units", 0, true);
      r.require_range<std::int64_t>(*lt, prefix, "units", layer.units, 1, 1 << 24);
    } else if (layer.type == "relu") {
      r.only_keys(*lt, prefix, {"type", "name"});
    } else {
      r.fail(lt->get("type")->source(), prefix + "type", "unknown layer type '" + layer.type + "'; allowed: dense, relu");
    }
    deck.layers.push_back(layer);
  }

  const auto& opt = r.table(root, "optimizer", false);
  r.only_keys(opt, "optimizer.", {"type", "lr", "momentum", "weight_decay", "nesterov"});
  deck.optimizer.type = r.get<std::string>(opt, "optimizer.", "type", "sgd");
  if (deck.optimizer.type != "sgd")
    r.fail(opt.get("type")->source(), "optimizer.type",
           "'" + deck.optimizer.type + "' is not supported; allowed: sgd");
  deck.optimizer.lr = r.get<float>(opt, "optimizer.", "lr", 0.01f);
  r.require_range(opt, "optimizer.", "lr", deck.optimizer.lr, 0.0f, 100.0f);
  deck.optimizer.momentum = r.get<float>(opt, "optimizer.", "momentum", 0.0f);
  r.require_range(opt, "optimizer.", "momentum", deck.optimizer.momentum, 0.0f, 0.999999f);
  deck.optimizer.weight_decay = r.get<float>(opt, "optimizer.", "weight_decay", 0.0f);
  r.require_range(opt, "optimizer.", "weight_decay", deck.optimizer.weight_decay, 0.0f, 1.0f);
  deck.optimizer.nesterov = r.get<bool>(opt, "optimizer.", "nesterov", false);

  const auto& training = r.table(root, "training", false);
  r.only_keys(training, "training.", {"epochs", "batch_size", "log_every"});
  deck.training.epochs = r.get<int>(training, "training.", "epochs", 1);
  r.require_range(training, "training.", "epochs", deck.training.epochs, 1, 1000000);
  deck.training.batch_size = r.get<std::int64_t>(training, "training.", "batch_size", 128);
  r.require_range<std::int64_t>(training, "training.", "batch_size", deck.training.batch_size, 1, 1 << 20);
  deck.training.log_every = r.get<std::int64_t>(training, "training.", "log_every", 100);
  r.require_range<std::int64_t>(training, "training.", "log_every", deck.training.log_every, 0, INT64_MAX);
  return deck;
}

}  // namespace tessera
