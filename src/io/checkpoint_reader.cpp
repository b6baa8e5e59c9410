// The checkpoint reader (host code over the HDF5 C API): checks every object
// it expects and says which one is wrong, and loads a checkpoint into a
// compiled model and its optimizer.
#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/version.hpp>
#include <tessera/io/checkpoint.hpp>
#include <tessera/model/model.hpp>
#include <tessera/optim/optimizer.hpp>
#include <tessera/settings/train_options.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "checkpoint_file.hpp"

namespace tessera {

namespace fs = std::filesystem;
using impl::dims_of;
using impl::Hdf5Handle;
using impl::string_type;

double CheckpointTensor::norm() const {
  double sum = 0;
  for (float v : values) sum += static_cast<double>(v) * v;
  return std::sqrt(sum);
}

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  return os.str() + ']';
}

namespace {
// The value of `key=` among the schedule's space-separated entries, or -1.
std::int64_t schedule_entry(const std::string& schedule, const std::string& key) {
  std::istringstream entries(schedule);
  for (std::string entry; entries >> entry;) {
    if (entry.compare(0, key.size() + 1, key + "=") != 0) continue;
    try {
      std::size_t used = 0;
      const std::int64_t value = std::stoll(entry.substr(key.size() + 1), &used);
      return used == entry.size() - key.size() - 1 && value > 0 ? value : -1;
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}
}  // namespace

std::string checkpoint_progress(const CheckpointInfo& info) {
  const std::int64_t epochs = schedule_entry(info.schedule, "epochs");
  const std::int64_t batches = schedule_entry(info.schedule, "steps_per_epoch");
  const int done = info.cursor.epoch;
  std::ostringstream os;
  os << "epochs done: " << done;
  if (epochs > 0) os << " of " << epochs;
  if (info.cursor.batch > 0) {
    os << "; in epoch " << done + 1 << ", " << info.cursor.batch;
    if (batches > 0) os << " of its " << batches;
    os << (info.cursor.batch == 1 && batches <= 0 ? " batch done" : " batches done");
  } else if (epochs > 0 && done >= epochs) {
    os << " (finished)";
  } else {
    os << "; epoch " << done + 1 << " starts after step " << info.cursor.step;
  }
  return os.str();
}

namespace {

// An attribute or a dataset: how to read it and how to name it in messages.
struct Object {
  hid_t id;
  bool attribute;
  std::string label;  // "attribute 'step' of /training", "dataset '/deck/text'"

  Hdf5Handle type() const {
    return Hdf5Handle(attribute ? H5Aget_type(id) : H5Dget_type(id), H5Tclose);
  }
  Hdf5Handle space() const {
    return Hdf5Handle(attribute ? H5Aget_space(id) : H5Dget_space(id), H5Sclose);
  }
  bool read(hid_t memory_type, void* data) const {
    return (attribute ? H5Aread(id, memory_type, data)
                      : H5Dread(id, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data)) >= 0;
  }
};

class CheckpointFile {
 public:
  explicit CheckpointFile(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw Error("tessera::read_checkpoint: " + path_ + ": " + problem);
  }

  // Opens the file; not there, not HDF5, or damaged each give their own message.
  void open() {
    std::error_code ec;
    if (!fs::exists(path_, ec)) fail("no such file");
    if (fs::is_directory(path_, ec))
      fail(
          "is a directory, not a checkpoint file (tessera-inspect and resume take a directory "
          "and read its 'latest')");
    const htri_t is_hdf5 = H5Fis_hdf5(path_.c_str());
    if (is_hdf5 == 0) fail("not an HDF5 file, so not a Tessera checkpoint");
    if (is_hdf5 < 0) fail("cannot be read: " + reason_or("permission denied or I/O error"));
    file_ = Hdf5Handle(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file_.ok())
      fail("cannot open the HDF5 file (" + reason_or("unknown HDF5 error") +
           "); it is truncated or damaged, e.g. by a crash while copying it");
  }
  hid_t file() const { return file_.get(); }

  bool exists(const std::string& object) const {
    // H5Lexists needs every intermediate group to exist: test them in turn.
    std::size_t at = 0;
    while ((at = object.find('/', at + 1)) != std::string::npos)
      if (H5Lexists(file(), object.substr(0, at).c_str(), H5P_DEFAULT) <= 0) return false;
    return H5Lexists(file(), object.c_str(), H5P_DEFAULT) > 0;
  }

  Hdf5Handle group(const std::string& name) const {
    if (!exists(name)) fail("has no group '" + name + "'" + incomplete_note());
    Hdf5Handle g(H5Gopen2(file(), name.c_str(), H5P_DEFAULT), H5Gclose);
    if (!g.ok()) fail("'" + name + "' is not a group (" + reason_or("unknown HDF5 error") + ")");
    return g;
  }

  bool has_attribute(const std::string& object, const std::string& name) const {
    const Hdf5Handle o(H5Oopen(file(), object.c_str(), H5P_DEFAULT), H5Oclose);
    return o.ok() && H5Aexists(o.get(), name.c_str()) > 0;
  }
  template <class Use>
  auto with_attribute(const std::string& object, const std::string& name, Use use) const {
    const Hdf5Handle o(H5Oopen(file(), object.c_str(), H5P_DEFAULT), H5Oclose);
    const std::string label = "attribute '" + name + "' of " + object;
    if (!o.ok()) fail("has no object '" + object + "'");
    if (H5Aexists(o.get(), name.c_str()) <= 0) fail("has no " + label + incomplete_note());
    const Hdf5Handle a(H5Aopen(o.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
    if (!a.ok()) fail("cannot open " + label + " (" + reason_or("unknown HDF5 error") + ")");
    return use(Object{a.get(), true, label});
  }
  template <class Use>
  auto with_dataset(const std::string& name, Use use) const {
    if (!exists(name)) fail("has no dataset '" + name + "'" + incomplete_note());
    const Hdf5Handle d(H5Dopen2(file(), name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!d.ok()) fail("'" + name + "' is not a dataset (" + reason_or("unknown HDF5 error") + ")");
    return use(Object{d.get(), false, "dataset '" + name + "'"});
  }

  std::vector<std::string> strings(const Object& o) const {
    const Hdf5Handle type = o.type();
    if (H5Tget_class(type.get()) != H5T_STRING) fail(o.label + " is not a string");
    const std::size_t n = elements(o);
    std::vector<std::string> out;
    if (H5Tis_variable_str(type.get()) > 0) {
      std::vector<char*> data(n, nullptr);
      const bool ok = n == 0 || o.read(string_type().get(), data.data());
      for (char* s : data) {
        out.emplace_back(s ? s : "");
        if (s) H5free_memory(s);
      }
      if (!ok) fail(read_failure(o));
    } else {
      const std::size_t size = H5Tget_size(type.get());
      std::vector<char> data(n * size + 1, '\0');
      const Hdf5Handle memory(H5Tcopy(type.get()), H5Tclose);
      if (n > 0 && !o.read(memory.get(), data.data())) fail(read_failure(o));
      for (std::size_t i = 0; i < n; ++i) {
        const char* s = data.data() + i * size;
        out.emplace_back(s, strnlen(s, size));
      }
    }
    return out;
  }
  std::string string(const Object& o) const {
    const auto values = strings(o);
    if (values.size() != 1)
      fail(o.label + " holds " + std::to_string(values.size()) + " strings; expected one");
    return values[0];
  }
  std::vector<std::int64_t> integers(const Object& o) const {
    if (H5Tget_class(o.type().get()) != H5T_INTEGER) fail(o.label + " is not an integer");
    std::vector<std::int64_t> out(elements(o));
    if (!out.empty() && !o.read(H5T_NATIVE_INT64, out.data())) fail(read_failure(o));
    return out;
  }
  std::int64_t integer(const Object& o) const {
    const auto values = integers(o);
    if (values.size() != 1)
      fail(o.label + " holds " + std::to_string(values.size()) + " integers; expected one");
    return values[0];
  }
  std::uint64_t unsigned_integer(const Object& o) const {
    if (H5Tget_class(o.type().get()) != H5T_INTEGER || elements(o) != 1)
      fail(o.label + " is not one integer");
    std::uint64_t value = 0;
    if (!o.read(H5T_NATIVE_UINT64, &value)) fail(read_failure(o));
    return value;
  }
  float real(const Object& o) const {
    if (H5Tget_class(o.type().get()) != H5T_FLOAT || elements(o) != 1)
      fail(o.label + " is not one number");
    float value = 0;
    if (!o.read(H5T_NATIVE_FLOAT, &value)) fail(read_failure(o));
    return value;
  }

  // Shortcuts for attributes.
  std::string attr_string(const std::string& object, const std::string& name) const {
    return with_attribute(object, name, [&](const Object& o) { return string(o); });
  }
  std::vector<std::string> attr_strings(const std::string& object, const std::string& name) const {
    return with_attribute(object, name, [&](const Object& o) { return strings(o); });
  }
  std::int64_t attr_integer(const std::string& object, const std::string& name) const {
    return with_attribute(object, name, [&](const Object& o) { return integer(o); });
  }
  std::vector<std::int64_t> attr_integers(const std::string& object,
                                          const std::string& name) const {
    return with_attribute(object, name, [&](const Object& o) { return integers(o); });
  }

  CheckpointTensor tensor(const std::string& group, const std::string& layer,
                          const std::string& name) const {
    CheckpointTensor t{layer, name, {}, {}};
    with_dataset(group + "/" + layer + "/" + name, [&](const Object& o) {
      if (H5Tget_class(o.type().get()) != H5T_FLOAT)
        fail(o.label + " does not hold floating-point values");
      const Hdf5Handle space = o.space();
      const int rank = H5Sget_simple_extent_ndims(space.get());
      std::vector<hsize_t> dims(std::max(rank, 0));
      H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
      t.shape.assign(dims.begin(), dims.end());
      t.values.resize(elements(o));
      if (!t.values.empty() && !o.read(H5T_NATIVE_FLOAT, t.values.data())) fail(read_failure(o));
      return 0;
    });
    return t;
  }

  // Once the format version is known to be ours, a missing object means damage.
  std::string incomplete_note() const {
    return version_ == checkpoint_format_version ? " (the file is incomplete or was edited; "
                                                   "checkpoints written by Tessera always have it)"
                                                 : "";
  }
  void set_version(std::int64_t version) { version_ = version; }

 private:
  std::size_t elements(const Object& o) const {
    const Hdf5Handle space = o.space();
    const hssize_t n = H5Sget_simple_extent_npoints(space.get());
    if (n < 0) fail("cannot read the extent of " + o.label);
    return static_cast<std::size_t>(n);
  }
  std::string read_failure(const Object& o) const {
    return "reading " + o.label + " failed (" + reason_or("unknown HDF5 error") +
           "); the file is truncated or damaged";
  }
  static std::string reason_or(const std::string& fallback) {
    const std::string reason = impl::hdf5_reason();
    return reason.empty() ? fallback : reason;
  }

  std::string path_;
  Hdf5Handle file_{-1, H5Fclose};
  std::int64_t version_ = 0;
};

// Opens and checks the format; reads everything but the tensors.
CheckpointInfo read_info(CheckpointFile& r) {
  r.open();
  const hid_t root = r.file();
  const bool has_format = H5Aexists(root, "format") > 0;
  const std::string format = has_format ? r.attr_string("/", "format") : "";
  if (format != checkpoint_format)
    r.fail(std::string("not a Tessera checkpoint: an HDF5 file whose root attribute 'format' is ") +
           (has_format ? "'" + format + "'" : "missing") + "; expected '" + checkpoint_format +
           "'");
  const std::int64_t version = r.attr_integer("/", "format_version");
  if (version != checkpoint_format_version)
    r.fail("checkpoint format version " + std::to_string(version) + "; this Tessera (" +
           TESSERA_VERSION_STRING + ") reads version " + std::to_string(checkpoint_format_version) +
           " only");
  r.set_version(version);

  CheckpointInfo info;
  info.tessera_version = r.attr_string("/", "tessera_version");
  info.world_size = static_cast<int>(r.attr_integer("/", "world_size"));
  info.global_batch = r.attr_integer("/", "global_batch");
  info.cursor.epoch = static_cast<int>(r.attr_integer("/training", "epoch"));
  info.cursor.batch = r.attr_integer("/training", "batch");
  info.cursor.step = r.attr_integer("/training", "step");
  info.lr = r.with_attribute("/training", "lr", [&](const Object& o) { return r.real(o); });
  info.schedule = r.attr_string("/training", "schedule");
  // Written by runs with dynamic loss scaling only.
  info.has_loss_scale = r.has_attribute("/training", "loss_scale");
  if (info.has_loss_scale) {
    info.loss_scale =
        r.with_attribute("/training", "loss_scale", [&](const Object& o) { return r.real(o); });
    info.loss_scale_good_steps = r.attr_integer("/training", "loss_scale_good_steps");
    if (!LossScaling::valid_scale(info.loss_scale))
      r.fail("attribute 'loss_scale' of /training is " + std::to_string(info.loss_scale) +
             "; a loss scale is a power of two from 1 to " +
             std::to_string(static_cast<std::int64_t>(LossScaling::max_scale)));
    if (info.loss_scale_good_steps < 0)
      r.fail("attribute 'loss_scale_good_steps' of /training is " +
             std::to_string(info.loss_scale_good_steps) + "; it counts steps, so it is >= 0");
  }
  info.seed =
      r.with_attribute("/rng", "seed", [&](const Object& o) { return r.unsigned_integer(o); });
  info.deck_path = r.attr_string("/deck", "path");
  info.deck_text = r.with_dataset("/deck/text", [&](const Object& o) { return r.string(o); });
  info.deck_overrides =
      r.with_dataset("/deck/overrides", [&](const Object& o) { return r.strings(o); });
  info.metrics = r.with_dataset("/metrics", [&](const Object& o) { return r.string(o); });
  // Written for the layers with kernel options only.
  for (const auto& name : r.attr_strings("/model", "layers"))
    if (r.has_attribute("/model/" + name, "kernel"))
      info.kernels.emplace_back(name, r.attr_string("/model/" + name, "kernel"));
  return info;
}

CheckpointContents read_all(const std::string& path) {
  const impl::QuietHdf5 quiet;
  CheckpointFile r(path);
  CheckpointContents c;
  c.path = path;
  c.info = read_info(r);
  c.input_shape = r.attr_integers("/model", "input_shape");
  for (const auto& name : r.attr_strings("/model", "layers")) {
    const std::string object = "/model/" + name;
    r.group(object);
    CheckpointLayer layer;
    layer.name = name;
    layer.type = r.attr_string(object, "type");
    layer.inputs = r.attr_strings(object, "inputs");
    layer.output_shape = r.attr_integers(object, "output_shape");
    layer.parameters = r.attr_strings(object, "parameters");
    layer.state = r.attr_strings(object, "state");
    if (r.has_attribute(object, "kernel")) layer.kernel = r.attr_string(object, "kernel");
    for (const auto& p : layer.parameters) c.parameters.push_back(r.tensor("/parameters", name, p));
    for (const auto& s : layer.state) c.state.push_back(r.tensor("/state", name, s));
    c.layers.push_back(std::move(layer));
  }
  c.optimizer = r.attr_string("/optimizer", "name");
  c.optimizer_steps = r.attr_integer("/optimizer", "step_count");
  for (const auto& buffer : r.attr_strings("/optimizer", "buffers")) {
    CheckpointOptimizerBuffer b{buffer, {}};
    for (const auto& p : c.parameters)
      b.tensors.push_back(r.tensor("/optimizer/" + buffer, p.layer, p.name));
    c.optimizer_buffers.push_back(std::move(b));
  }
  // A dataset whose size disagrees with its shape cannot come from HDF5, but
  // a shape of zero extents would; nothing more to check here.
  return c;
}

// Checks stored tensors against a store's entries, in order.
void check_tensors(const CheckpointContents& c, const std::string& group,
                   const std::vector<CheckpointTensor>& stored, const ParameterStore& store) {
  const auto fail = [&](const std::string& problem) {
    throw Error("tessera::load_checkpoint: " + c.path + ": " + problem +
                "; the checkpoint was written for a different model (compare its deck: "
                "tessera-inspect " +
                c.path + ")");
  };
  const auto& entries = store.entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const std::string object = group + "/" + e.layer + "/" + e.spec.name;
    const auto found = std::find_if(stored.begin(), stored.end(), [&](const CheckpointTensor& t) {
      return t.layer == e.layer && t.name == e.spec.name;
    });
    if (found == stored.end()) fail("has no dataset '" + object + "', which the model needs");
    if (found->shape != dims_of(e.spec.shape))
      fail("dataset '" + object + "' has shape " + shape_text(found->shape) + "; the model's " +
           e.layer + " " + e.spec.name + " has shape " + to_string(e.spec.shape));
  }
  if (stored.size() != entries.size()) {
    for (const auto& t : stored) {
      const bool known = std::any_of(entries.begin(), entries.end(), [&](const ParameterEntry& e) {
        return t.layer == e.layer && t.name == e.spec.name;
      });
      if (!known)
        fail("holds dataset '" + group + "/" + t.layer + "/" + t.name + "', which the model lacks");
    }
  }
}

// Writes stored tensors into a device buffer laid out like `store`.
void copy_into(const std::vector<CheckpointTensor>& stored, const ParameterStore& store,
               const Vector<float>& buffer) {
  const auto host = Kokkos::create_mirror_view(Kokkos::HostSpace(), buffer);
  std::fill(host.data(), host.data() + host.size(), 0.0f);
  for (const auto& e : store.entries()) {
    const auto found = std::find_if(stored.begin(), stored.end(), [&](const CheckpointTensor& t) {
      return t.layer == e.layer && t.name == e.spec.name;
    });
    std::copy(found->values.begin(), found->values.end(), host.data() + e.offset);
  }
  Kokkos::deep_copy(buffer, host);
}

}  // namespace

CheckpointInfo read_checkpoint_info(const std::string& path) {
  ScopedRegion region("tessera::read_checkpoint_info");
  const impl::QuietHdf5 quiet;
  CheckpointFile r(path);
  return read_info(r);
}

CheckpointContents read_checkpoint(const std::string& path) {
  ScopedRegion region("tessera::read_checkpoint");
  return read_all(path);
}

CheckpointInfo load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer) {
  ScopedRegion region("tessera::load_checkpoint");
  TESSERA_REQUIRE(model.compiled(), "tessera::load_checkpoint: "
                                        << path << ": compile the model before loading into it");
  TESSERA_REQUIRE(!optimizer.sharded(),
                  "tessera::load_checkpoint: "
                      << path
                      << ": the optimizer holds a shard of the state; load into an optimizer "
                         "without a shard and take the shard from it (OptimizerSharding)");
  const CheckpointContents c = read_all(path);
  const auto fail = [&](const std::string& problem) {
    throw Error("tessera::load_checkpoint: " + path + ": " + problem);
  };

  const auto& layers = model.layers();
  for (std::size_t i = 0; i < std::max(layers.size(), c.layers.size()); ++i) {
    const auto describe = [](const std::string& name, const std::string& type) {
      return "'" + name + "' (" + type + ")";
    };
    const std::string stored =
        i < c.layers.size() ? describe(c.layers[i].name, c.layers[i].type) : "missing";
    const std::string wanted =
        i < layers.size() ? describe(layers[i]->name(), layers[i]->type()) : "missing";
    if (stored != wanted)
      fail("layer " + std::to_string(i) + " is " + stored + " in the checkpoint but " + wanted +
           " in the model; the checkpoint was written for a different model (compare its deck: "
           "tessera-inspect " +
           path + ")");
  }
  check_tensors(c, "/parameters", c.parameters, model.parameters());
  check_tensors(c, "/state", c.state, model.state());
  if (c.optimizer != optimizer.name())
    fail("the checkpoint holds " + c.optimizer + " state, the run uses " + optimizer.name() +
         "; resume with optimizer.type = \"" + c.optimizer + "\" or start a new run");
  optimizer.allocate(model.parameters());
  const auto buffers = optimizer.state_buffers();
  if (!c.optimizer_buffers.empty()) {
    std::string stored_names, wanted_names;
    for (const auto& b : c.optimizer_buffers)
      stored_names += (stored_names.empty() ? "" : ", ") + b.name;
    for (const auto& b : buffers) wanted_names += (wanted_names.empty() ? "" : ", ") + b.first;
    if (stored_names != wanted_names)
      fail("optimizer state buffers are [" + stored_names + "]; " + optimizer.name() + " has [" +
           wanted_names + "]");
    for (const auto& b : c.optimizer_buffers)
      check_tensors(c, "/optimizer/" + b.name, b.tensors, model.parameters());
  }

  copy_into(c.parameters, model.parameters(), model.parameters().values());
  copy_into(c.state, model.state(), model.state().values());
  for (std::size_t b = 0; b < buffers.size(); ++b) {
    // Written before the first step: the state was still all zeros.
    if (c.optimizer_buffers.empty())
      Kokkos::deep_copy(buffers[b].second, 0.0f);
    else
      copy_into(c.optimizer_buffers[b].tensors, model.parameters(), buffers[b].second);
  }
  optimizer.set_step_count(c.optimizer_steps);
  return c.info;
}

}  // namespace tessera
