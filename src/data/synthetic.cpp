// Synthetic classification data written to HDF5 in slabs of samples.
#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/random.hpp>
#include <tessera/data/synthetic.hpp>
#include <tessera/io/impl/hdf5.hpp>

#include <hdf5.h>

#include <algorithm>

namespace tessera {

namespace {
using Handle = impl::Hdf5Handle;
// Keep the template, label and noise streams apart for one seed.
constexpr std::uint64_t template_stream = 0x54454d504cULL, label_stream = 0x4c4142454cULL,
                        noise_stream = 0x4e4f495345ULL;
// Values per sample of a spec within every limit; throws naming the one
// it exceeds.
std::int64_t checked_features(const std::string& where, const SyntheticSpec& spec) {
  TESSERA_REQUIRE(spec.samples > 0,
                  where << ": " << spec.samples << " samples; expected at least 1");
  TESSERA_REQUIRE(
      !spec.sample_dims.empty() && spec.sample_dims.size() <= 3,
      where << ": a sample has " << spec.sample_dims.size() << " extents; expected 1 to 3");
  std::int64_t features = 1;
  for (const std::int64_t d : spec.sample_dims) {
    TESSERA_REQUIRE(d > 0 && d <= (std::int64_t(1) << 30),
                    where << ": sample extent " << d << " must lie in [1, 2^30]");
    features *= d;
    TESSERA_REQUIRE(features <= (std::int64_t(1) << 32),
                    where << ": samples of more than 2^32 values");
  }
  TESSERA_REQUIRE(
      spec.samples <= (std::int64_t(1) << 48) / features,
      where << ": " << spec.samples << " samples of " << features << " values exceed 2^48 bytes");
  TESSERA_REQUIRE(spec.classes >= 2 && spec.classes <= 256,
                  where << ": " << spec.classes << " classes; expected 2 to 256");
  TESSERA_REQUIRE(spec.noise >= 1 && spec.noise <= 255,
                  where << ": noise " << spec.noise << " must lie in [1, 255]");
  return features;
}
}  // namespace

void write_synthetic_hdf5(const std::string& path, const SyntheticSpec& spec,
                          const std::string& images_dataset, const std::string& labels_dataset,
                          const std::function<void(std::int64_t, std::int64_t)>& progress) {
  ScopedRegion region("tessera::write_synthetic_hdf5");
  const std::string where = "tessera::write_synthetic_hdf5: " + path;
  const std::int64_t features = checked_features(where, spec);

  impl::QuietHdf5 quiet;
  Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  TESSERA_REQUIRE(file.ok(), where << ": cannot create the file");
  std::vector<hsize_t> dims{static_cast<hsize_t>(spec.samples)};
  for (const std::int64_t d : spec.sample_dims) dims.push_back(static_cast<hsize_t>(d));
  const auto create = [&](const std::string& name, int rank) {
    const Handle space(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose);
    Handle data(H5Dcreate2(file.get(), name.c_str(), H5T_STD_U8LE, space.get(), H5P_DEFAULT,
                           H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose);
    TESSERA_REQUIRE(data.ok(), where << ": cannot create dataset '" << name << "'");
    return data;
  };
  Handle images = create(images_dataset, static_cast<int>(dims.size()));
  Handle labels = create(labels_dataset, 1);

  // Templates use the upper part of the range, noise is added on top.
  const int span = 256 - spec.noise;
  std::vector<std::uint8_t> templates(static_cast<std::size_t>(spec.classes * features));
  for (std::size_t i = 0; i < templates.size(); ++i)
    templates[i] = static_cast<std::uint8_t>(counter_hash(spec.seed, template_stream, i) %
                                             static_cast<std::uint64_t>(span));
  std::vector<std::uint8_t> label_bytes(static_cast<std::size_t>(spec.samples));
  for (std::int64_t i = 0; i < spec.samples; ++i)
    label_bytes[i] = static_cast<std::uint8_t>(
        counter_hash(spec.seed, label_stream, static_cast<std::uint64_t>(i)) %
        static_cast<std::uint64_t>(spec.classes));
  TESSERA_REQUIRE(H5Dwrite(labels.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                           label_bytes.data()) >= 0,
                  where << ": writing dataset '" << labels_dataset << "' failed (disk full?)");

  // Slabs of about 16 MiB of whole samples.
  const std::int64_t slab = std::max<std::int64_t>(1, (std::int64_t(1) << 24) / features);
  const std::int64_t total = spec.samples * features;
  std::vector<std::uint8_t> bytes(
      static_cast<std::size_t>(std::min(slab, spec.samples) * features));
  for (std::int64_t first = 0; first < spec.samples; first += slab) {
    const std::int64_t count = std::min(slab, spec.samples - first);
    for (std::int64_t s = 0; s < count; ++s) {
      const std::int64_t sample = first + s;
      const std::uint8_t* pattern = templates.data() + label_bytes[sample] * features;
      std::uint8_t* to = bytes.data() + s * features;
      // One hash gives eight noise bytes.
      for (std::int64_t j = 0; j < features; j += 8) {
        std::uint64_t r = counter_hash(spec.seed, noise_stream,
                                       static_cast<std::uint64_t>(sample * features + j));
        for (std::int64_t k = j; k < std::min(features, j + 8); ++k, r >>= 8)
          to[k] = static_cast<std::uint8_t>(
              pattern[k] + (r & 0xff) * static_cast<std::uint64_t>(spec.noise) / 256);
      }
    }
    std::vector<hsize_t> start(dims.size(), 0), extent(dims);
    start[0] = static_cast<hsize_t>(first);
    extent[0] = static_cast<hsize_t>(count);
    const Handle file_space(H5Dget_space(images.get()), H5Sclose);
    const Handle memory_space(
        H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr), H5Sclose);
    const bool ok = H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                        extent.data(), nullptr) >= 0 &&
                    H5Dwrite(images.get(), H5T_NATIVE_UCHAR, memory_space.get(), file_space.get(),
                             H5P_DEFAULT, bytes.data()) >= 0;
    TESSERA_REQUIRE(ok, where << ": writing samples " << first << " to " << first + count - 1
                              << " of dataset '" << images_dataset << "' failed (disk full?)");
    if (progress) progress((first + count) * features, total);
  }
  const bool closed = images.close() >= 0 && labels.close() >= 0 && file.close() >= 0;
  TESSERA_REQUIRE(closed, where << ": closing the file failed (disk full?)");
}

}  // namespace tessera
