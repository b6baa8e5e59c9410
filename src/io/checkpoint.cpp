// Checkpoint files over the HDF5 C API (host code): the writer lays out the
// groups docs/checkpoint.md describes and publishes the file atomically; the
// reader checks every object it expects and says which one is wrong.
#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/version.hpp>
#include <tessera/io/checkpoint.hpp>
#include <tessera/io/impl/hdf5.hpp>
#include <tessera/model/model.hpp>
#include <tessera/optim/optimizer.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

namespace tessera {

namespace fs = std::filesystem;
using impl::Hdf5Handle;

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

std::vector<std::int64_t> dims_of(const Shape& shape) {
  std::vector<std::int64_t> dims;
  for (int i = 0; i < shape.rank(); ++i) dims.push_back(shape[i]);
  return dims;
}

std::string system_error() { return std::strerror(errno); }

// Variable-length UTF-8 strings, which h5py reads as str.
Hdf5Handle string_type() {
  Hdf5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

Hdf5Handle simple_space(const std::vector<std::int64_t>& dims) {
  if (dims.empty()) return Hdf5Handle(H5Screate(H5S_SCALAR), H5Sclose);
  const std::vector<hsize_t> extents(dims.begin(), dims.end());
  return Hdf5Handle(H5Screate_simple(static_cast<int>(extents.size()), extents.data(), nullptr),
                    H5Sclose);
}

// ---------------------------------------------------------------- writing

class Writer {
 public:
  Writer(std::string path, hid_t file) : path_(std::move(path)), file_(file) {}

  Hdf5Handle group(hid_t parent, const std::string& name, const std::string& label) const {
    Hdf5Handle g(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (!g.ok()) fail("group '" + label + "'");
    return g;
  }
  hid_t root() const { return file_; }

  void attribute(hid_t object, const std::string& name, const std::string& value) const {
    const char* data = value.c_str();
    write_attribute(object, name, string_type().get(), string_type().get(), {}, &data);
  }
  void attribute(hid_t object, const std::string& name,
                 const std::vector<std::string>& values) const {
    std::vector<const char*> data;
    for (const auto& v : values) data.push_back(v.c_str());
    write_attribute(object, name, string_type().get(), string_type().get(),
                    {static_cast<std::int64_t>(values.size())}, data.data());
  }
  void attribute(hid_t object, const std::string& name, std::int64_t value) const {
    write_attribute(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, {}, &value);
  }
  void attribute(hid_t object, const std::string& name, std::uint64_t value) const {
    write_attribute(object, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, {}, &value);
  }
  void attribute(hid_t object, const std::string& name, float value) const {
    write_attribute(object, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {}, &value);
  }
  void attribute(hid_t object, const std::string& name,
                 const std::vector<std::int64_t>& values) const {
    write_attribute(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64,
                    {static_cast<std::int64_t>(values.size())}, values.data());
  }

  void dataset(hid_t parent, const std::string& name, const std::string& label,
               const std::string& text) const {
    const char* data = text.c_str();
    write_dataset(parent, name, label, string_type().get(), string_type().get(), {}, &data);
  }
  void dataset(hid_t parent, const std::string& name, const std::string& label,
               const std::vector<std::string>& values) const {
    std::vector<const char*> data;
    for (const auto& v : values) data.push_back(v.c_str());
    write_dataset(parent, name, label, string_type().get(), string_type().get(),
                  {static_cast<std::int64_t>(values.size())}, data.data());
  }
  void dataset(hid_t parent, const std::string& name, const std::string& label,
               const std::vector<std::int64_t>& shape, const float* values) const {
    write_dataset(parent, name, label, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, shape, values);
  }

  [[noreturn]] void fail(const std::string& object) const {
    const std::string reason = impl::hdf5_reason();
    throw Error("tessera::write_checkpoint: " + path_ + ": writing " + object + " failed" +
                (reason.empty() ? "" : " (" + reason + ")") + "; check free space and permissions");
  }

 private:
  void write_attribute(hid_t object, const std::string& name, hid_t file_type, hid_t memory_type,
                       const std::vector<std::int64_t>& dims, const void* data) const {
    const Hdf5Handle space = simple_space(dims);
    const Hdf5Handle a(
        H5Acreate2(object, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
        H5Aclose);
    if (!a.ok() || (!empty(dims) && H5Awrite(a.get(), memory_type, data) < 0))
      fail("attribute '" + name + "'");
  }
  void write_dataset(hid_t parent, const std::string& name, const std::string& label,
                     hid_t file_type, hid_t memory_type, const std::vector<std::int64_t>& dims,
                     const void* data) const {
    const Hdf5Handle space = simple_space(dims);
    const Hdf5Handle d(H5Dcreate2(parent, name.c_str(), file_type, space.get(), H5P_DEFAULT,
                                  H5P_DEFAULT, H5P_DEFAULT),
                       H5Dclose);
    if (!d.ok() ||
        (!empty(dims) && H5Dwrite(d.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0))
      fail("dataset '" + label + "'");
  }

  // HDF5 refuses a null buffer, which an empty std::vector may hand over.
  static bool empty(const std::vector<std::int64_t>& dims) {
    return std::find(dims.begin(), dims.end(), 0) != dims.end();
  }

  std::string path_;
  hid_t file_;
};

// Host copies of a device buffer in the parameter layout.
std::vector<float> host_copy(const Vector<float>& buffer) {
  const auto mirror = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), buffer);
  return std::vector<float>(mirror.data(), mirror.data() + mirror.size());
}

// /<group>/<layer>/<name> for every entry of a store, from a host copy of a
// buffer in its layout.
void write_tensors(const Writer& w, const std::string& group_path, const ParameterStore& store,
                   const std::vector<float>& buffer) {
  const Hdf5Handle group = w.group(w.root(), group_path, group_path);
  std::string current;
  Hdf5Handle layer(-1, H5Gclose);
  for (const auto& e : store.entries()) {
    const std::string layer_path = group_path + "/" + e.layer;
    if (e.layer != current) {
      layer = w.group(w.root(), layer_path, layer_path);
      current = e.layer;
    }
    w.dataset(layer.get(), e.spec.name, layer_path + "/" + e.spec.name, dims_of(e.spec.shape),
              buffer.data() + e.offset);
  }
}

std::vector<std::string> names_in(const ParameterStore& store, const std::string& layer) {
  std::vector<std::string> names;
  for (const auto& e : store.entries())
    if (e.layer == layer) names.push_back(e.spec.name);
  return names;
}

void write_contents(const Writer& w, const Model& model, const Optimizer& optimizer,
                    const CheckpointInfo& info) {
  const hid_t root = w.root();
  w.attribute(root, "format", std::string(checkpoint_format));
  w.attribute(root, "format_version", std::int64_t{checkpoint_format_version});
  w.attribute(root, "tessera_version", std::string(TESSERA_VERSION_STRING));
  w.attribute(root, "world_size", std::int64_t{info.world_size});
  w.attribute(root, "global_batch", info.global_batch);

  const Hdf5Handle training = w.group(root, "training", "/training");
  w.attribute(training.get(), "epoch", std::int64_t{info.cursor.epoch});
  w.attribute(training.get(), "batch", info.cursor.batch);
  w.attribute(training.get(), "step", info.cursor.step);
  w.attribute(training.get(), "lr", info.lr);
  w.attribute(training.get(), "schedule", info.schedule);

  // Every random stream is counter-based: these counters are its whole state.
  const Hdf5Handle rng = w.group(root, "rng", "/rng");
  w.attribute(rng.get(), "seed", info.seed);
  w.attribute(rng.get(), "initialization_seed", info.seed);
  w.attribute(rng.get(), "shuffle_epoch", std::int64_t{info.cursor.epoch});
  w.attribute(rng.get(), "dropout_step", info.cursor.step);

  const Hdf5Handle deck = w.group(root, "deck", "/deck");
  w.attribute(deck.get(), "path", info.deck_path);
  w.dataset(deck.get(), "text", "/deck/text", info.deck_text);
  w.dataset(deck.get(), "overrides", "/deck/overrides", info.deck_overrides);
  w.dataset(root, "metrics", "/metrics", info.metrics);

  const auto& layers = model.layers();
  const Hdf5Handle topology = w.group(root, "model", "/model");
  // One sample's shape: the model's input for a batch of one, without the batch.
  const auto batch_of_one = dims_of(model.input(1).shape());
  w.attribute(topology.get(), "input_shape",
              std::vector<std::int64_t>(batch_of_one.begin() + 1, batch_of_one.end()));
  std::vector<std::string> order;
  for (const auto& l : layers) order.push_back(l->name());
  w.attribute(topology.get(), "layers", order);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Hdf5Handle layer =
        w.group(topology.get(), layers[i]->name(), "/model/" + layers[i]->name());
    std::vector<std::string> inputs;
    for (const std::size_t node : model.layer_inputs(i))
      inputs.push_back(node == 0 ? "input" : layers[node - 1]->name());
    w.attribute(layer.get(), "index", static_cast<std::int64_t>(i));
    w.attribute(layer.get(), "type", std::string(layers[i]->type()));
    w.attribute(layer.get(), "inputs", inputs);
    w.attribute(layer.get(), "output_shape", dims_of(model.layer_output_shape(i)));
    w.attribute(layer.get(), "parameters", names_in(model.parameters(), layers[i]->name()));
    w.attribute(layer.get(), "state", names_in(model.state(), layers[i]->name()));
  }

  write_tensors(w, "/parameters", model.parameters(), host_copy(model.parameters().values()));
  write_tensors(w, "/state", model.state(), host_copy(model.state().values()));

  const Hdf5Handle opt = w.group(root, "optimizer", "/optimizer");
  w.attribute(opt.get(), "name", optimizer.name());
  w.attribute(opt.get(), "step_count", optimizer.step_count());
  std::vector<std::string> buffers;
  for (const auto& [name, buffer] : optimizer.state_buffers()) {
    buffers.push_back(name);
    write_tensors(w, "/optimizer/" + name, model.parameters(), host_copy(buffer));
  }
  w.attribute(opt.get(), "buffers", buffers);
}

void fsync_path(const std::string& path, bool directory, const std::string& function) {
  const int fd = ::open(path.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0));
  TESSERA_REQUIRE(fd >= 0,
                  function << ": cannot open " << path << " to sync it: " << system_error());
  const int status = ::fsync(fd);
  const std::string error = system_error();
  ::close(fd);
  TESSERA_REQUIRE(status == 0, function << ": fsync of " << path << " failed: " << error);
}

std::string parent_directory(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// Test hook: a window between the complete temporary file and the rename,
// for a test to kill the writer in.
void pause_before_rename(const std::string& temporary) {
  const char* value = std::getenv("TESSERA_CHECKPOINT_PAUSE_SECONDS");
  if (!value) return;
  const double seconds = std::atof(value);
  if (!(seconds > 0)) return;
  std::cerr << "tessera::write_checkpoint: pausing " << seconds << " s before renaming "
            << temporary << " into place (TESSERA_CHECKPOINT_PAUSE_SECONDS)" << std::endl;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// Writes `path` through a temporary file beside it: write, fsync, rename,
// fsync the directory. The temporary name starts with '.', so no listing of
// checkpoints takes a half-written file for one.
template <class WriteFile>
void publish_atomically(const std::string& path, const std::string& function, WriteFile write_file,
                        bool pause = false) {
  const fs::path target(path);
  const std::string temporary = (target.parent_path() / ("." + target.filename().string() +
                                                         ".tmp." + std::to_string(::getpid())))
                                    .string();
  try {
    write_file(temporary);
    fsync_path(temporary, false, function);
    if (pause) pause_before_rename(temporary);
    TESSERA_REQUIRE(
        std::rename(temporary.c_str(), path.c_str()) == 0,
        function << ": cannot rename " << temporary << " to " << path << ": " << system_error());
  } catch (...) {
    std::remove(temporary.c_str());
    throw;
  }
  fsync_path(parent_directory(path), true, function);
}

// ---------------------------------------------------------------- reading

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

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

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
CheckpointInfo read_info(Reader& r) {
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
  info.seed =
      r.with_attribute("/rng", "seed", [&](const Object& o) { return r.unsigned_integer(o); });
  info.deck_path = r.attr_string("/deck", "path");
  info.deck_text = r.with_dataset("/deck/text", [&](const Object& o) { return r.string(o); });
  info.deck_overrides =
      r.with_dataset("/deck/overrides", [&](const Object& o) { return r.strings(o); });
  info.metrics = r.with_dataset("/metrics", [&](const Object& o) { return r.string(o); });
  return info;
}

CheckpointContents read_all(const std::string& path) {
  const impl::QuietHdf5 quiet;
  Reader r(path);
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

void write_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer,
                      const CheckpointInfo& info) {
  ScopedRegion region("tessera::write_checkpoint");
  TESSERA_REQUIRE(model.compiled(),
                  "tessera::write_checkpoint: " << path << ": the model is not compiled");
  for (const auto& layer : model.layers())
    TESSERA_REQUIRE(
        layer->name().find('/') == std::string::npos && layer->name() != "." &&
            !layer->name().empty(),
        "tessera::write_checkpoint: " << path << ": layer name '" << layer->name()
                                      << "' cannot name an HDF5 group; rename the layer "
                                         "without '/'");
  const impl::QuietHdf5 quiet;
  publish_atomically(
      path, "tessera::write_checkpoint",
      [&](const std::string& temporary) {
        Hdf5Handle file(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                        H5Fclose);
        if (!file.ok())
          throw Error("tessera::write_checkpoint: cannot create " + temporary + " (" +
                      impl::hdf5_reason() + "); check that the directory exists and is writable");
        const Writer w(path, file.get());
        write_contents(w, model, optimizer, info);
        if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0 || file.close() < 0) w.fail("the file");
      },
      true);
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  ScopedRegion region("tessera::read_checkpoint_info");
  const impl::QuietHdf5 quiet;
  Reader r(path);
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

// ---------------------------------------------------------------- directories

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
  static const std::regex pattern("step-([0-9]{8,})\\.h5");
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
