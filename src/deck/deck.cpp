// Deck parsing and validation with toml++, section by section. Every error
// names the file, line and column, the key, and what was expected. Defaults
// come from the engine's settings structs, never from here.
#include <tessera/deck/deck.hpp>
#include <tessera/layers/registry.hpp>
#include <tessera/settings/device_mpi.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "reader.hpp"

namespace tessera {

namespace {

using impl::Reader;

void read_optimizer(const Reader& r, const toml::table& opt, OptimizerParams& out, float& lr) {
  const std::string p = "optimizer.";
  const std::vector<std::string> sgd{"sgd"}, adam{"adam", "adamw"};
  r.only_keys(opt, p,
              {"type", "lr", "weight_decay", "momentum", "nesterov", "beta1", "beta2", "eps"});
  // The type's own defaults (settings/optimizer_params.hpp), then the deck's keys over them.
  out = OptimizerParams::for_type(r.choice(opt, p, "type", out.type, {"sgd", "adam", "adamw"}));
  r.keys_for_type(
      opt, p, out.type,
      {{"momentum", sgd}, {"nesterov", sgd}, {"beta1", adam}, {"beta2", adam}, {"eps", adam}});
  lr = r.get<float>(opt, p, "lr", OptimizerParams::default_lr(out.type));
  r.require_range(opt, p, "lr", lr, 0.0f, 100.0f);
  float& weight_decay = out.type == "sgd" ? out.sgd.weight_decay : out.adam.weight_decay;
  weight_decay = r.get<float>(opt, p, "weight_decay", weight_decay);
  r.require_range(opt, p, "weight_decay", weight_decay, 0.0f, 1.0f);
  if (out.type == "sgd") {
    out.sgd.momentum = r.get<float>(opt, p, "momentum", out.sgd.momentum);
    r.require_range(opt, p, "momentum", out.sgd.momentum, 0.0f, 0.999999f);
    out.sgd.nesterov = r.get<bool>(opt, p, "nesterov", out.sgd.nesterov);
    r.check(!out.sgd.nesterov || out.sgd.momentum > 0, opt, p, "nesterov",
            "Nesterov momentum needs optimizer.momentum > 0");
    return;
  }
  out.adam.beta1 = r.get<float>(opt, p, "beta1", out.adam.beta1);
  r.require_range(opt, p, "beta1", out.adam.beta1, 0.0f, 0.999999f);
  out.adam.beta2 = r.get<float>(opt, p, "beta2", out.adam.beta2);
  r.require_range(opt, p, "beta2", out.adam.beta2, 0.0f, 0.999999f);
  out.adam.eps = r.get<float>(opt, p, "eps", out.adam.eps);
  r.check(out.adam.eps > 0.0f && out.adam.eps <= 1.0f, opt, p, "eps",
          "value " + Reader::number(out.adam.eps) + " is out of range (0, 1]");
}

// out.base_lr is the optimizer's lr, already read.
void read_schedule(const Reader& r, const toml::table& sch, LrSchedule& out) {
  const std::string p = "schedule.";
  r.only_keys(sch, p,
              {"type", "step_size", "gamma", "milestones", "min_lr", "warmup_steps",
               "warmup_start_factor"});
  const std::string type =
      r.choice(sch, p, "type", schedule_name(out.type), schedule_types.names());
  out.type = schedule_type(type);
  r.keys_for_type(sch, p, type,
                  {{"step_size", {"step"}},
                   {"gamma", {"step", "multistep", "exponential"}},
                   {"milestones", {"multistep"}},
                   {"min_lr", {"cosine"}}});
  r.check(type != "exponential" || sch.get("gamma"), sch, p, "gamma",
          "required for type 'exponential'");
  out.gamma = r.get<float>(sch, p, "gamma", out.gamma);
  r.check(out.gamma > 0.0f && out.gamma <= 1.0f, sch, p, "gamma",
          "value " + Reader::number(out.gamma) + " is out of range (0, 1]");
  r.check(type != "step" || sch.get("step_size"), sch, p, "step_size", "required for type 'step'");
  out.step_size = r.get<std::int64_t>(sch, p, "step_size", out.step_size);
  r.require_range<std::int64_t>(sch, p, "step_size", out.step_size, 1, 1000000);
  if (type == "multistep") {
    const toml::node* node = sch.get("milestones");
    r.check(node, sch, p, "milestones",
            "required for type 'multistep': an array of increasing epochs, e.g. [30, 60]");
    const toml::array* milestones = node->as_array();
    r.check(milestones && !milestones->empty(), sch, p, "milestones",
            "expected a non-empty array of increasing epochs, e.g. [30, 60]");
    for (const auto& m : *milestones) {
      const auto v = m.value_exact<std::int64_t>();
      if (!v || *v < 1) r.fail(m.source(), p + "milestones", "expected integers >= 1 (epochs)");
      if (!out.milestones.empty() && *v <= out.milestones.back())
        r.fail(m.source(), p + "milestones",
               "epoch " + std::to_string(*v) + " does not follow " +
                   std::to_string(out.milestones.back()) + "; milestones must increase");
      out.milestones.push_back(*v);
    }
  }
  out.min_lr = r.get<float>(sch, p, "min_lr", out.min_lr);
  r.check(out.min_lr >= 0.0f && out.min_lr <= out.base_lr, sch, p, "min_lr",
          "value " + Reader::number(out.min_lr) +
              " is out of range [0, optimizer.lr = " + Reader::number(out.base_lr) + "]");
  out.warmup_steps = r.get<std::int64_t>(sch, p, "warmup_steps", out.warmup_steps);
  r.require_range<std::int64_t>(sch, p, "warmup_steps", out.warmup_steps, 0, INT64_MAX);
  out.warmup_start_factor = r.get<float>(sch, p, "warmup_start_factor", out.warmup_start_factor);
  r.require_range(sch, p, "warmup_start_factor", out.warmup_start_factor, 0.0f, 1.0f);
  r.check(out.warmup_steps > 0 || !sch.get("warmup_start_factor"), sch, p, "warmup_start_factor",
          "has no effect without schedule.warmup_steps > 0");
}

void read_checkpoint(const Reader& r, const toml::table& ckpt, const std::string& output_dir,
                     CheckpointCadence& out) {
  const std::string p = "checkpoint.";
  r.only_keys(ckpt, p, {"directory", "keep", "every_epochs", "every_steps", "every_minutes"});
  out.directory = r.get<std::string>(ckpt, p, "directory", output_dir + "/checkpoints");
  r.check(!out.directory.empty(), ckpt, p, "directory", "must not be empty");
  out.keep = r.get<int>(ckpt, p, "keep", out.keep);
  r.require_range(ckpt, p, "keep", out.keep, 1, 1000000);
  out.every_epochs = r.get<int>(ckpt, p, "every_epochs", out.every_epochs);
  r.require_range(ckpt, p, "every_epochs", out.every_epochs, 0, 1000000);
  out.every_steps = r.get<std::int64_t>(ckpt, p, "every_steps", out.every_steps);
  r.require_range<std::int64_t>(ckpt, p, "every_steps", out.every_steps, 0, INT64_MAX);
  out.every_minutes = r.get<float>(ckpt, p, "every_minutes", out.every_minutes);
  r.require_range(ckpt, p, "every_minutes", out.every_minutes, 0.0f, 1e6f);
}

// A window extent: one integer in `range` for both axes, or [rows, columns].
void read_extent2(const Reader& r, const toml::node& node, const std::string& key,
                  const Range& range, std::int64_t out[2]) {
  const std::string expected = "expected an integer >= " + Reader::number(range.low) +
                               " or an array [rows, columns] of them (at most " +
                               Reader::number(range.high) + ")";
  const auto read = [&](const toml::node& item) {
    const auto v = item.value_exact<std::int64_t>();
    if (!v || !range.contains(static_cast<double>(*v))) r.fail(item.source(), key, expected);
    return *v;
  };
  if (const auto* a = node.as_array()) {
    if (a->size() != 2) r.fail(node.source(), key, expected);
    out[0] = read((*a)[0]);
    out[1] = read((*a)[1]);
    return;
  }
  out[0] = out[1] = read(node);
}

// "[1, 16777216]", "[0, 1)", "(0, 1]": an interval in messages.
// (std::string first: GCC 12 as C++20 warns falsely, -Wrestrict, on
// literal + temporary string; GCC bug 105329.)
std::string range_interval(const Range& range) {
  return std::string(range.low_open ? "(" : "[") + Reader::number(range.low) + ", " +
         Reader::number(range.high) + (range.high_open ? ")" : "]");
}

// One key of a layer entry, by the kind its layer type registered.
KeyValue read_layer_key(const Reader& r, const toml::table& lt, const std::string& prefix,
                        const LayerKey& spec) {
  const toml::node& node = *lt.get(spec.name);
  const std::string key = prefix + spec.name;
  KeyValue value;
  const auto in_range = [&](double v) {
    if (!spec.range.contains(v))
      r.fail(node.source(), key,
             "value " + Reader::number(v) + " is out of range " + range_interval(spec.range));
  };
  switch (spec.kind) {
    case KeyKind::integer:
      value.integer = r.get<std::int64_t>(lt, prefix, spec.name, 0);
      in_range(static_cast<double>(value.integer));
      break;
    case KeyKind::number:
      value.number = r.get<float>(lt, prefix, spec.name, 0.0f);
      in_range(value.number);
      break;
    case KeyKind::boolean:
      value.boolean = r.get<bool>(lt, prefix, spec.name, false);
      break;
    case KeyKind::choice:
      value.text = r.choice(lt, prefix, spec.name, "", spec.choices);
      break;
    case KeyKind::extent2:
      read_extent2(r, node, key, spec.range, value.pair);
      break;
    case KeyKind::layer:
      value.text = r.get<std::string>(lt, prefix, spec.name, "");
      break;
  }
  return value;
}

LayerDeck read_layer(const Reader& r, const toml::table& lt, std::size_t index,
                     std::set<std::string>& names) {
  const std::string prefix = "model.layers[" + std::to_string(index) + "].";
  LayerDeck layer;
  layer.location = r.location(lt.source());
  layer.type = r.get<std::string>(lt, prefix, "type", "", true);
  const LayerType* type = find_layer_type(layer.type);
  if (!type)
    r.fail(lt.get("type")->source(), prefix + "type",
           "unknown layer type '" + layer.type + "'; allowed: " + layer_type_names());
  layer.layer_type = type;
  std::vector<std::string> allowed = {"type", "name", "inputs"};
  for (const auto& k : type->keys) allowed.push_back(k.name);
  r.only_keys(lt, prefix, allowed);

  layer.name = r.get<std::string>(lt, prefix, "name", layer.type + std::to_string(index));
  r.check(!layer.name.empty(), lt, prefix, "name", "layer names must not be empty");
  if (!names.insert(layer.name).second)
    r.fail(lt.get("name") ? lt.get("name")->source() : lt.source(), prefix + "name",
           "layer name '" + layer.name + "' is used twice (or is the reserved name 'input')");

  const bool merges = type->arity < 0;
  if (const toml::node* node = lt.get("inputs")) {
    const toml::array* a = node->as_array();
    if (!a) r.fail(node->source(), prefix + "inputs", "expected an array of layer names");
    for (const auto& item : *a) {
      const auto name = item.value_exact<std::string>();
      if (!name) r.fail(item.source(), prefix + "inputs", "expected layer names (strings)");
      // Names are inserted in declaration order, so this also rejects cycles.
      if (!names.count(*name) || *name == layer.name)
        r.fail(item.source(), prefix + "inputs",
               "'" + *name + "' is not 'input' or the name of a layer declared before this one");
      layer.inputs.push_back(*name);
    }
    const std::string takes =
        merges ? "two or more inputs"
               : (type->arity == 1 ? std::string("exactly one input")
                                   : "exactly " + std::to_string(type->arity) + " inputs");
    r.check(merges ? layer.inputs.size() >= 2
                   : layer.inputs.size() == static_cast<std::size_t>(type->arity),
            lt, prefix, "inputs", "a " + layer.type + " layer takes " + takes);
  } else if (merges) {
    r.fail(lt.source(), prefix + "inputs",
           "required for " + layer.type + ": the names of two or more layers to merge");
  }

  // Every key the type registered, over the defaults of its Options struct.
  layer.options = type->default_options();
  for (const auto& spec : type->keys) {
    if (!lt.get(spec.name)) {
      if (spec.required) r.fail(lt.source(), prefix + spec.name, "required key is missing");
      continue;
    }
    const KeyValue value = read_layer_key(r, lt, prefix, spec);
    if (spec.kind == KeyKind::layer && !value.text.empty() &&
        (!names.count(value.text) || value.text == "input" || value.text == layer.name))
      r.fail(lt.get(spec.name)->source(), prefix + spec.name,
             "'" + value.text + "' is not the name of a layer declared before this one");
    spec.set(layer.options, value);
  }
  if (type->complete) type->complete(layer.options);
  return layer;
}
}  // namespace

Deck load_deck(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream file(path);
  if (!file) {
    throw DeckError(path + ": cannot open the deck file: " + std::strerror(errno));
  }
  const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  return parse_deck(text, path, overrides);
}

namespace {

// The [data] keys that belong to some formats only.
const std::vector<impl::Reader::KeyUse>& data_format_keys() {
  static const std::vector<std::string> idx{"idx"}, hdf5{"hdf5"}, tokens{"tokens"},
      pixels{"idx", "hdf5"};
  static const std::vector<impl::Reader::KeyUse> keys{
      {"train_images", idx},     {"train_labels", idx},      {"test_images", idx},
      {"test_labels", idx},      {"train_file", hdf5},       {"test_file", hdf5},
      {"images_dataset", hdf5},  {"labels_dataset", hdf5},   {"streaming", hdf5},
      {"max_resident_mb", hdf5}, {"train_tokens", tokens},   {"test_tokens", tokens},
      {"token_type", tokens},    {"normalize_mean", pixels}, {"normalize_std", pixels}};
  return keys;
}

// --set data.format=F switches the deck's data to format F: the keys the
// deck wrote for its own format that F does not use are dropped (the
// files of the new format come with --set too), so that one deck runs on
// IDX, HDF5 or streamed data from the command line.
void switch_data_format(toml::table& root, const std::vector<std::string>& overrides) {
  std::set<std::string> set_keys;
  bool switched = false;
  for (const auto& o : overrides) {
    const std::string key = o.substr(0, o.find('='));
    set_keys.insert(key);
    switched = switched || key == "data.format";
  }
  toml::table* data = root.get_as<toml::table>("data");
  const auto* format = data ? data->get_as<std::string>("format") : nullptr;
  if (!switched || !format) return;
  for (const auto& use : data_format_keys())
    if (std::find(use.types.begin(), use.types.end(), format->get()) == use.types.end() &&
        !set_keys.count("data." + use.key))
      data->erase(use.key);
}

}  // namespace

Deck parse_deck(const std::string& text, const std::string& path,
                const std::vector<std::string>& overrides) {
  Deck deck;
  deck.path = path;
  deck.overrides = overrides;
  deck.text = text;
  toml::table root;
  try {
    root = toml::parse(deck.text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << path << ":" << e.source().begin.line << ":" << e.source().begin.column
       << ": TOML syntax error: " << e.description();
    throw DeckError(os.str());
  }
  for (const auto& o : overrides) impl::apply_override(root, o);
  switch_data_format(root, overrides);
  const Reader r(path);
  r.only_keys(root, "",
              {"run", "data", "model", "loss", "optimizer", "schedule", "training", "precision",
               "parallel", "checkpoint"});

  const auto& run = r.table(root, "run", false);
  r.only_keys(run, "run.", {"name", "seed", "output_dir"});
  deck.run.name = r.get<std::string>(run, "run.", "name", deck.run.name);
  r.check(!deck.run.name.empty() && deck.run.name.find('/') == std::string::npos, run, "run.",
          "name", "must be a non-empty name without '/'");
  deck.run.output_dir = r.get<std::string>(run, "run.", "output_dir", "output/" + deck.run.name);
  r.check(!deck.run.output_dir.empty(), run, "run.", "output_dir", "must not be empty");
  const auto seed = r.get<std::int64_t>(run, "run.", "seed", 0);
  r.require_range<std::int64_t>(run, "run.", "seed", seed, 0, INT64_MAX);
  deck.training.seed = static_cast<std::uint64_t>(seed);

  const auto& data = r.table(root, "data", true);
  r.only_keys(data, "data.",
              {"format", "train_images", "train_labels", "test_images", "test_labels", "train_file",
               "test_file", "images_dataset", "labels_dataset", "train_tokens", "test_tokens",
               "token_type", "normalize_mean", "normalize_std", "validation_split", "train_samples",
               "test_samples", "streaming", "max_resident_mb"});
  deck.data_format = r.choice(data, "data.", "format", "idx", {"idx", "hdf5", "tokens"});
  r.keys_for_type(data, "data.", deck.data_format, data_format_keys(), "format");
  using FileKey = std::pair<const char*, std::string*>;
  const std::vector<FileKey> files =
      deck.data_format == "idx" ? std::vector<FileKey>{{"train_images", &deck.train_images},
                                                       {"train_labels", &deck.train_labels},
                                                       {"test_images", &deck.test_images},
                                                       {"test_labels", &deck.test_labels}}
      : deck.data_format == "hdf5"
          ? std::vector<FileKey>{{"train_file", &deck.train_file}, {"test_file", &deck.test_file}}
          : std::vector<FileKey>{{"train_tokens", &deck.train_tokens},
                                 {"test_tokens", &deck.test_tokens}};
  for (const auto& [key, target] : files) {
    const std::string written = r.get<std::string>(data, "data.", key, "", true);
    const toml::source_region& where = data.get(key)->source();
    try {
      *target = expand_data_path(written);
    } catch (const DeckError& e) {
      r.fail(where, std::string("data.") + key, e.what());
    }
    deck.data_files.push_back({key, *target, r.location(where)});
  }
  deck.images_dataset = r.get<std::string>(data, "data.", "images_dataset", "images");
  deck.labels_dataset = r.get<std::string>(data, "data.", "labels_dataset", "labels");
  deck.token_type = r.choice(data, "data.", "token_type", deck.token_type, {"uint16", "int32"});
  deck.streaming = r.get<bool>(data, "data.", "streaming", false);
  deck.max_resident_mb = r.get<std::int64_t>(data, "data.", "max_resident_mb", 0);
  r.require_range<std::int64_t>(data, "data.", "max_resident_mb", deck.max_resident_mb, 0,
                                std::int64_t(1) << 40);
  if (const toml::node* limit = data.get("max_resident_mb"))
    deck.max_resident_mb_location = r.location(limit->source());
  // Pixels are scaled to [0, 1] before (x - mean) / std, so a mean outside
  // [0, 1] or a std above 1 is a setting for another scale (0 to 255).
  const std::string scale_hint =
      "; pixels are scaled to [0, 1] before normalising (for statistics on the 0-255 scale, "
      "divide them by 255)";
  deck.normalize_mean = r.get<float>(data, "data.", "normalize_mean", 0.0f);
  r.check(deck.normalize_mean >= 0.0f && deck.normalize_mean <= 1.0f, data, "data.",
          "normalize_mean",
          "value " + Reader::number(deck.normalize_mean) + " is out of range [0, 1]" + scale_hint);
  deck.normalize_std = r.get<float>(data, "data.", "normalize_std", 1.0f);
  r.check(
      deck.normalize_std >= 1e-3f && deck.normalize_std <= 1.0f, data, "data.", "normalize_std",
      "value " + Reader::number(deck.normalize_std) + " is out of range [0.001, 1]" + scale_hint);
  deck.validation_split = r.get<float>(data, "data.", "validation_split", 0.0f);
  r.require_range(data, "data.", "validation_split", deck.validation_split, 0.0f, 0.9f);
  if (const toml::node* split = data.get("validation_split"))
    deck.validation_split_location = r.location(split->source());
  deck.train_samples = r.get<std::int64_t>(data, "data.", "train_samples", 0);
  r.require_range<std::int64_t>(data, "data.", "train_samples", deck.train_samples, 0, INT64_MAX);
  deck.test_samples = r.get<std::int64_t>(data, "data.", "test_samples", 0);
  r.require_range<std::int64_t>(data, "data.", "test_samples", deck.test_samples, 0, INT64_MAX);

  const auto& model = r.table(root, "model", true);
  r.only_keys(model, "model.", {"input_shape", "layers"});
  const toml::array* shape = model.get_as<toml::array>("input_shape");
  if (!shape)
    r.fail(model.source(), "model.input_shape",
           "required array of 1 to 3 positive integers, e.g. [784]");
  for (const auto& d : *shape) {
    auto v = d.value_exact<std::int64_t>();
    if (!v || *v <= 0) r.fail(d.source(), "model.input_shape", "expected positive integers");
    deck.input_shape.push_back(*v);
  }
  if (deck.input_shape.empty() || deck.input_shape.size() > 3)
    r.fail(shape->source(), "model.input_shape", "expected 1 to 3 dimensions");
  deck.input_shape_location = r.location(shape->source());
  if (deck.data_format == "tokens" && deck.input_shape.size() != 1)
    r.fail(shape->source(), "model.input_shape",
           "token data needs one extent, the window of tokens a sample holds, e.g. [128]");
  const toml::array* layers = model.get_as<toml::array>("layers");
  if (!layers || layers->empty())
    r.fail(model.source(), "model.layers", "at least one [[model.layers]] entry is required");
  std::set<std::string> names{"input"};
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const toml::table* lt = (*layers)[i].as_table();
    if (!lt)
      r.fail((*layers)[i].source(), "model.layers[" + std::to_string(i) + "]", "expected a table");
    deck.layers.push_back(read_layer(r, *lt, i, names));
  }

  TrainOptions& training = deck.training;
  const auto& loss = r.table(root, "loss", false);
  r.only_keys(loss, "loss.", {"type", "label_smoothing"});
  training.loss.type = r.choice(loss, "loss.", "type", training.loss.type, loss_types());
  training.loss.label_smoothing =
      r.get<float>(loss, "loss.", "label_smoothing", training.loss.label_smoothing);
  r.require_range(loss, "loss.", "label_smoothing", training.loss.label_smoothing, 0.0f, 0.99f);

  read_optimizer(r, r.table(root, "optimizer", false), deck.optimizer, training.schedule.base_lr);
  read_schedule(r, r.table(root, "schedule", false), training.schedule);

  const auto& t = r.table(root, "training", false);
  const std::string p = "training.";
  r.only_keys(
      t, p, {"epochs", "batch_size", "accumulation_steps", "log_every", "clip_norm", "eval_every"});
  training.epochs = r.get<int>(t, p, "epochs", training.epochs);
  r.require_range(t, p, "epochs", training.epochs, 1, 1000000);
  training.batch_size = r.get<std::int64_t>(t, p, "batch_size", training.batch_size);
  r.require_range<std::int64_t>(t, p, "batch_size", training.batch_size, 1, 1 << 20);
  training.accumulation_steps =
      r.get<std::int64_t>(t, p, "accumulation_steps", training.accumulation_steps);
  r.check(training.accumulation_steps >= 1 && training.accumulation_steps <= training.batch_size, t,
          p, "accumulation_steps",
          "value " + std::to_string(training.accumulation_steps) +
              " is out of range [1, batch_size = " + std::to_string(training.batch_size) + "]");
  training.log_every = r.get<std::int64_t>(t, p, "log_every", training.log_every);
  r.require_range<std::int64_t>(t, p, "log_every", training.log_every, 0, INT64_MAX);
  training.clip_norm = r.get<float>(t, p, "clip_norm", training.clip_norm);
  r.require_range(t, p, "clip_norm", training.clip_norm, 0.0f, 1e6f);
  deck.run.eval_every = r.get<int>(t, p, "eval_every", deck.run.eval_every);
  r.require_range(t, p, "eval_every", deck.run.eval_every, 0, 1000000);

  const auto& precision = r.table(root, "precision", false);
  const std::string q = "precision.";
  r.only_keys(precision, q,
              {"compute", "loss_scale", "initial_loss_scale", "loss_scale_growth_interval"});
  training.compute = float_format_from_name(
      r.choice(precision, q, "compute", float_format_name(training.compute), float_format_names()));
  LossScaling& scaling = training.loss_scaling;
  scaling.dynamic = r.choice(precision, q, "loss_scale", "none", {"none", "dynamic"}) == "dynamic";
  r.keys_for_type(
      precision, q, scaling.dynamic ? "dynamic" : "none",
      {{"initial_loss_scale", {"dynamic"}}, {"loss_scale_growth_interval", {"dynamic"}}},
      "loss_scale");
  scaling.initial = r.get<float>(precision, q, "initial_loss_scale", scaling.initial);
  r.check(LossScaling::valid_scale(scaling.initial), precision, q, "initial_loss_scale",
          "must be a power of two from 1 to 16777216 (2^24)");
  scaling.growth_interval =
      r.get<std::int64_t>(precision, q, "loss_scale_growth_interval", scaling.growth_interval);
  r.require_range<std::int64_t>(precision, q, "loss_scale_growth_interval", scaling.growth_interval,
                                1, INT64_MAX);

  const auto& parallel = r.table(root, "parallel", false);
  r.only_keys(parallel, "parallel.",
              {"bucket_mb", "overlap", "batchnorm", "gpu_aware_mpi", "gradient_dtype",
               "shard_optimizer", "overlap_gather", "pipeline_stages", "stage_boundaries"});
  const float bucket_mb = r.get<float>(parallel, "parallel.", "bucket_mb",
                                       static_cast<float>(training.bucket_bytes) / (1 << 20));
  r.require_range(parallel, "parallel.", "bucket_mb", bucket_mb, 1e-6f, 4096.0f);
  training.bucket_bytes =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(bucket_mb * 1024.0 * 1024.0));
  training.overlap = r.get<bool>(parallel, "parallel.", "overlap", training.overlap);
  training.sync_batchnorm =
      r.choice(parallel, "parallel.", "batchnorm", training.sync_batchnorm ? "sync" : "local",
               {"local", "sync"}) == "sync";
  deck.gpu_aware_mpi = r.choice(parallel, "parallel.", "gpu_aware_mpi", deck.gpu_aware_mpi,
                                device_mpi_names.names());
  training.gradient_dtype = float_format_from_name(
      r.choice(parallel, "parallel.", "gradient_dtype", float_format_name(training.gradient_dtype),
               float_format_names()));
  training.shard_optimizer =
      r.get<bool>(parallel, "parallel.", "shard_optimizer", training.shard_optimizer);
  training.overlap_gather =
      r.get<bool>(parallel, "parallel.", "overlap_gather", training.overlap_gather);
  const auto stages =
      r.get<std::int64_t>(parallel, "parallel.", "pipeline_stages", deck.pipeline_stages);
  r.require_range<std::int64_t>(parallel, "parallel.", "pipeline_stages", stages, 1, 4096);
  deck.pipeline_stages = static_cast<int>(stages);
  if (const toml::node* node = parallel.get("pipeline_stages"))
    deck.pipeline_location = r.location(node->source());
  r.check(deck.pipeline_stages == 1 || !training.shard_optimizer, parallel, "parallel.",
          "pipeline_stages",
          "a pipeline keeps each stage's optimizer state on its own ranks already; it cannot be "
          "combined with parallel.shard_optimizer = true");
  r.check(deck.pipeline_stages == 1 || training.gradient_dtype == FloatFormat::fp32, parallel,
          "parallel.", "pipeline_stages",
          "a pipeline sums its stages' gradients in fp32; it cannot be combined with "
          "parallel.gradient_dtype = \"" +
              std::string(float_format_name(training.gradient_dtype)) + "\"");
  if (const toml::node* node = parallel.get("stage_boundaries")) {
    const toml::array* a = node->as_array();
    if (!a)
      r.fail(node->source(), "parallel.stage_boundaries",
             "expected an array of layer names (the first layer of each stage after the first)");
    for (const auto& item : *a) {
      const auto name = item.value_exact<std::string>();
      if (!name)
        r.fail(item.source(), "parallel.stage_boundaries", "expected layer names (strings)");
      const bool known = std::any_of(deck.layers.begin(), deck.layers.end(),
                                     [&](const LayerDeck& l) { return l.name == *name; });
      if (!known)
        r.fail(item.source(), "parallel.stage_boundaries", "'" + *name + "' is not a layer name");
      deck.stage_boundaries.push_back(*name);
    }
    r.check(deck.stage_boundaries.size() + 1 == static_cast<std::size_t>(deck.pipeline_stages),
            parallel, "parallel.", "stage_boundaries",
            "names " + std::to_string(deck.stage_boundaries.size()) +
                " layer(s); parallel.pipeline_stages = " + std::to_string(deck.pipeline_stages) +
                " needs " + std::to_string(deck.pipeline_stages - 1) +
                " (the first layer of every stage but the first)");
  }

  read_checkpoint(r, r.table(root, "checkpoint", false), deck.run.output_dir, deck.run.checkpoint);
  return deck;
}

namespace {

// The data directory `variable` names, or nullptr.
const DataDirectory* find_data_directory(const std::string& variable) {
  for (const DataDirectory& d : data_directories)
    if (variable == d.variable) return &d;
  return nullptr;
}

std::string directory_of(const DataDirectory& d) {
  const char* dir = std::getenv(d.variable);
  return dir && *dir ? dir : d.default_value;
}

}  // namespace

std::string data_dir(const std::string& variable) {
  const DataDirectory* d = find_data_directory(variable);
  if (!d) throw Error("tessera::data_dir: '" + variable + "' is not a data directory variable");
  return directory_of(*d);
}

std::string expand_data_path(const std::string& path) {
  std::string out, known;
  for (const DataDirectory& d : data_directories)
    known += (known.empty() ? "${" : " or ${") + std::string(d.variable) + "}";
  for (std::size_t at = 0; at < path.size();) {
    const std::size_t open = path.find("${", at);
    if (open == std::string::npos) {
      out += path.substr(at);
      break;
    }
    out += path.substr(at, open - at);
    const std::size_t close = path.find('}', open);
    const std::string name =
        close == std::string::npos ? "" : path.substr(open + 2, close - open - 2);
    const DataDirectory* found = find_data_directory(name);
    if (!found)
      throw DeckError(
          "'" + path + "': only " + known + " are expanded in data paths (found '" +
          path.substr(open, close == std::string::npos ? std::string::npos : close - open + 1) +
          "')");
    out += directory_of(*found);
    at = close + 1;
  }
  return out;
}

void check_data_files(const Deck& deck) {
  for (const auto& f : deck.data_files)
    if (!std::ifstream(f.path))
      throw DeckError(f.location + ": data." + f.key + ": cannot read '" + f.path +
                      "': " + std::strerror(errno));
}

}  // namespace tessera
