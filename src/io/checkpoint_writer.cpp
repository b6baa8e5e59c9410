// The checkpoint writer (host code over the HDF5 C API): lays out the groups
// docs/checkpoint.md describes and publishes the file atomically.
#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/version.hpp>
#include <tessera/io/checkpoint.hpp>
#include <tessera/model/model.hpp>
#include <tessera/optim/optimizer.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "checkpoint_file.hpp"

namespace tessera {

namespace fs = std::filesystem;
using impl::dims_of;
using impl::Hdf5Handle;
using impl::string_type;
using impl::system_error;

namespace {

Hdf5Handle simple_space(const std::vector<std::int64_t>& dims) {
  if (dims.empty()) return Hdf5Handle(H5Screate(H5S_SCALAR), H5Sclose);
  const std::vector<hsize_t> extents(dims.begin(), dims.end());
  return Hdf5Handle(H5Screate_simple(static_cast<int>(extents.size()), extents.data(), nullptr),
                    H5Sclose);
}

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
  if (info.has_loss_scale) {
    w.attribute(training.get(), "loss_scale", info.loss_scale);
    w.attribute(training.get(), "loss_scale_good_steps", info.loss_scale_good_steps);
  }

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
    // What a restart runs again for the same bits.
    if (const std::string kernel = layers[i]->kernel_option(); !kernel.empty())
      w.attribute(layer.get(), "kernel", kernel);
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

}  // namespace

namespace impl {

void publish_atomically(const std::string& path, const std::string& function,
                        const std::function<void(const std::string& temporary)>& write_file,
                        bool pause) {
  const fs::path target(path);
  // Appended, not "." + name: GCC 12 as C++20 warns falsely (-Wrestrict) on that.
  const std::string name = std::string(".")
                               .append(target.filename().string())
                               .append(".tmp.")
                               .append(std::to_string(::getpid()));
  const std::string temporary = (target.parent_path() / name).string();
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

}  // namespace impl

void write_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer,
                      const CheckpointInfo& info) {
  ScopedRegion region("tessera::write_checkpoint");
  TESSERA_REQUIRE(model.compiled(),
                  "tessera::write_checkpoint: " << path << ": the model is not compiled");
  TESSERA_REQUIRE(!optimizer.sharded(),
                  "tessera::write_checkpoint: "
                      << path
                      << ": the optimizer holds a shard of the state; gather the whole state into "
                         "an optimizer without a shard first (OptimizerSharding::gather_state)");
  for (const auto& layer : model.layers())
    TESSERA_REQUIRE(
        layer->name().find('/') == std::string::npos && layer->name() != "." &&
            !layer->name().empty(),
        "tessera::write_checkpoint: " << path << ": layer name '" << layer->name()
                                      << "' cannot name an HDF5 group; rename the layer "
                                         "without '/'");
  const impl::QuietHdf5 quiet;
  impl::publish_atomically(
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

}  // namespace tessera
