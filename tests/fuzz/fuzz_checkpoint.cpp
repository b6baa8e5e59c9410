// Fuzz target: the checkpoint reader. A real checkpoint of a small model
// (dense, BatchNorm, ReLU, dense; AdamW state) is written once; each input
// then edits a copy of it through the HDF5 API, up to four edits: delete an
// object or an attribute, replace a dataset or an attribute with one of
// another type, shape or value, or overwrite a tensor's values with special
// numbers. read_checkpoint and load_checkpoint must then either succeed or
// fail with tessera::Error; a crash, another exception or a sanitizer
// report is a finding. (Bytes of the file itself are left to HDF5's own
// parser, a third-party library; the truncated-file tests cover that path.)
#include <tessera/core/error.hpp>
#include <tessera/io/checkpoint.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/norm.hpp>
#include <tessera/model/model.hpp>
#include <tessera/optim/adam.hpp>

#include <hdf5.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_hdf5_objects.hpp"

namespace {

using tessera::fuzz::Choices;

struct Fixture {
  std::unique_ptr<tessera::Model> model;
  std::unique_ptr<tessera::Adam> adam;
  std::vector<char> original;        // the checkpoint's bytes
  std::vector<std::string> objects;  // every group and dataset, e.g. "/parameters/fc1/weight"
  std::string path;                  // the copy each input edits
};

herr_t collect(hid_t, const char* name, const H5O_info_t*, void* out) {
  if (std::string(name) != ".")
    static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
  return 0;
}

Fixture& fixture() {
  static Fixture f = [] {
    Fixture f;
    f.model = std::make_unique<tessera::Model>(tessera::Shape{3});
    f.model->add<tessera::Dense>("fc1", 4)
        .add<tessera::BatchNorm>("bn")
        .add<tessera::ReLU>("relu")
        .add<tessera::Dense>("fc2", 2);
    f.model->compile(4, 1);
    f.adam = std::make_unique<tessera::Adam>();
    f.adam->allocate(f.model->parameters());
    f.adam->set_step_count(3);
    tessera::CheckpointInfo info;
    info.deck_path = "fuzz.toml";
    info.deck_text = "[run]\nname = \"fuzz\"\n";
    info.seed = 1;
    info.cursor = {0, 1, 3};
    info.global_batch = 4;
    info.metrics = "{\"type\":\"step\",\"step\":1}\n";
    const std::string base = tessera::fuzz::scratch_path("base.h5");
    tessera::write_checkpoint(base, *f.model, *f.adam, info);
    std::ifstream in(base, std::ios::binary);
    f.original.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    const hid_t file = H5Fopen(base.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    f.objects.push_back("/");
    H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, collect, &f.objects);
    H5Fclose(file);
    std::remove(base.c_str());
    f.path = tessera::fuzz::scratch_path("edited.h5");
    return f;
  }();
  return f;
}

// The names of `object`'s attributes.
std::vector<std::string> attributes_of(hid_t object) {
  std::vector<std::string> names;
  H5Aiterate2(
      object, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
        static_cast<std::vector<std::string>*>(out)->push_back(name);
        return 0;
      },
      &names);
  return names;
}

void edit(hid_t file, const std::vector<std::string>& objects, Choices& in) {
  const std::string& path = objects[static_cast<std::size_t>(in.in(0, objects.size() - 1))];
  const auto slash = path.find_last_of('/');
  const std::string parent = slash == 0 ? "/" : path.substr(0, slash),
                    leaf = path.substr(slash + 1);
  switch (in.in(0, 4)) {
    case 0:  // the object disappears
      if (path != "/") H5Ldelete(file, path.c_str(), H5P_DEFAULT);
      break;
    case 1: {  // one of its attributes disappears
      const hid_t object = H5Oopen(file, path.c_str(), H5P_DEFAULT);
      if (object < 0) break;
      const auto names = attributes_of(object);
      if (!names.empty())
        H5Adelete(object, names[static_cast<std::size_t>(in.in(0, names.size() - 1))].c_str());
      H5Oclose(object);
      break;
    }
    case 2: {  // the object is replaced by another dataset (or a group, or nothing)
      if (path == "/" || H5Ldelete(file, path.c_str(), H5P_DEFAULT) < 0) break;
      const hid_t group = H5Oopen(file, parent.c_str(), H5P_DEFAULT);
      if (group < 0) break;
      tessera::fuzz::write_dataset(group, leaf.c_str(), in);
      H5Oclose(group);
      break;
    }
    case 3: {  // an attribute is replaced (or added) with any type and shape
      const hid_t object = H5Oopen(file, path.c_str(), H5P_DEFAULT);
      if (object < 0) break;
      const auto names = attributes_of(object);
      std::string name = "extra";
      if (!names.empty() && (in.byte() & 3)) {
        name = names[static_cast<std::size_t>(in.in(0, names.size() - 1))];
        H5Adelete(object, name.c_str());
      }
      tessera::fuzz::write_attribute(object, name.c_str(), in);
      H5Oclose(object);
      break;
    }
    default: {  // a float dataset keeps its shape and gets special numbers
      const hid_t data = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
      if (data < 0) break;
      const hid_t type = H5Dget_type(data), space = H5Dget_space(data);
      const hssize_t n = H5Sget_simple_extent_npoints(space);
      if (H5Tget_class(type) == H5T_FLOAT && n > 0 && n <= 4096) {
        std::vector<double> values(static_cast<std::size_t>(n));
        for (auto& v : values) v = in.number();
        H5Dwrite(data, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
      }
      H5Sclose(space);
      H5Tclose(type);
      H5Dclose(data);
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  tessera::fuzz::ensure_kokkos();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Fixture& f = fixture();
  {
    std::ofstream out(f.path, std::ios::binary | std::ios::trunc);
    out.write(f.original.data(), static_cast<std::streamsize>(f.original.size()));
  }
  Choices in(bytes, size);
  const hid_t file = H5Fopen(f.path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) std::abort();
  const int edits = static_cast<int>(in.in(1, 4));
  for (int e = 0; e < edits && !in.empty(); ++e) edit(file, f.objects, in);
  H5Fclose(file);
  try {
    tessera::read_checkpoint(f.path);
  } catch (const tessera::Error&) {
  }
  try {
    tessera::load_checkpoint(f.path, *f.model, *f.adam);
  } catch (const tessera::Error&) {
  }
  return 0;
}
