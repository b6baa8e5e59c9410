// tessera-synthetic: write a synthetic classification dataset of any size
// to HDF5 (contiguous, as data.streaming reads it), slab by slab, for
// testing streaming and scale without downloading anything.
#include <tessera/data/synthetic.hpp>

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli.hpp"

namespace {

// "1x64x64" -> {1, 64, 64}.
std::vector<std::int64_t> parse_shape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, 'x')) {
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != part.size() || value <= 0)
      throw CLI::ValidationError("--shape", "'" + text +
                                                "' is not 1 to 3 positive extents joined by 'x', "
                                                "e.g. 784 or 1x28x28");
    dims.push_back(value);
  }
  if (dims.empty() || dims.size() > 3)
    throw CLI::ValidationError("--shape", "'" + text + "' needs 1 to 3 extents, e.g. 1x28x28");
  return dims;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tessera-synthetic: write a synthetic classification dataset (class templates plus noise) "
      "to an HDF5 file that data.format = \"hdf5\" reads, loaded whole or streamed"};
  std::string output, shape = "1x28x28", images_dataset = "images", labels_dataset = "labels";
  tessera::SyntheticSpec spec;
  spec.samples = 0;
  std::uint64_t seed = 0;
  app.add_option("output", output, "HDF5 file to write (replaced if it exists)")->required();
  app.add_option("--samples", spec.samples, "number of samples")
      ->required()
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 40));
  app.add_option("--shape", shape, "one sample's extents, e.g. 784, 28x28 or 3x32x32")
      ->capture_default_str();
  app.add_option("--classes", spec.classes, "number of classes (2 to 256)")
      ->capture_default_str()
      ->check(CLI::Range(2, 256));
  app.add_option("--noise", spec.noise, "noise amplitude on the 0-255 scale (1 to 255)")
      ->capture_default_str()
      ->check(CLI::Range(1, 255));
  app.add_option("--seed", seed, "the same seed writes the same file")->capture_default_str();
  app.add_option("--images-dataset", images_dataset, "name of the images dataset")
      ->capture_default_str();
  app.add_option("--labels-dataset", labels_dataset, "name of the labels dataset")
      ->capture_default_str();
  if (const auto status = tessera::app::parse_command_line(app, argc, argv, "tessera-synthetic"))
    return *status;
  try {
    spec.sample_dims = parse_shape(shape);
    spec.seed = seed;
    const bool terminal = ::isatty(STDOUT_FILENO) != 0;
    tessera::write_synthetic_hdf5(
        output, spec, images_dataset, labels_dataset, [&](std::int64_t done, std::int64_t total) {
          if (!terminal) return;
          std::printf("\r\033[Kwriting %s: %.0f of %.0f MiB", output.c_str(),
                      static_cast<double>(done) / (1 << 20),
                      static_cast<double>(total) / (1 << 20));
          std::fflush(stdout);
        });
    if (terminal) std::printf("\r\033[K");
    std::int64_t values = 1;
    for (const auto d : spec.sample_dims) values *= d;
    std::cout << "wrote " << output << ": '" << images_dataset << "' (" << spec.samples
              << " samples of " << shape << " bytes, "
              << static_cast<double>(spec.samples * values) / (1 << 20) << " MiB) and '"
              << labels_dataset << "' (" << spec.classes << " classes)\n";
  } catch (const std::exception& e) {
    std::cerr << "tessera-synthetic: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
