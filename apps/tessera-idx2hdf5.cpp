// tessera-idx2hdf5: convert an IDX image file and its label file (raw or
// gzip) into one HDF5 file that a deck with data.format = "hdf5" reads.
#include <tessera/data/hdf5.hpp>
#include <tessera/data/idx.hpp>

#include <CLI/CLI.hpp>

#include <iostream>

#include "cli.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tessera-idx2hdf5: convert IDX images and labels into one HDF5 file"};
  std::string images, labels, output, images_dataset = "images", labels_dataset = "labels";
  app.add_option("images", images, "IDX file of images (raw or .gz)")->required();
  app.add_option("labels", labels, "IDX file of labels (raw or .gz)")->required();
  app.add_option("output", output, "HDF5 file to write (replaced if it exists)")->required();
  app.add_option("--images-dataset", images_dataset, "name of the images dataset")
      ->capture_default_str();
  app.add_option("--labels-dataset", labels_dataset, "name of the labels dataset")
      ->capture_default_str();
  bool contiguous = false;
  app.add_flag("--contiguous", contiguous,
               "store the arrays contiguous and uncompressed (a larger file that "
               "data.streaming = true reads sample by sample) instead of in gzip chunks");
  if (const auto status = tessera::app::parse_command_line(app, argc, argv, "tessera-idx2hdf5"))
    return *status;
  try {
    const tessera::IdxArray image_array = tessera::read_idx(images);
    const tessera::IdxArray label_array = tessera::read_idx(labels);
    if (image_array.dims.empty() || label_array.dims.size() != 1 ||
        image_array.dims[0] != label_array.dims[0]) {
      std::cerr
          << "tessera-idx2hdf5: " << images << " and " << labels
          << " do not hold the same number of samples (or the labels are not one-dimensional)\n";
      return 2;
    }
    tessera::write_hdf5_dataset(
        output, image_array, label_array, images_dataset, labels_dataset,
        contiguous ? tessera::Hdf5Layout::contiguous : tessera::Hdf5Layout::compressed);
    std::cout << "wrote " << output << ": '" << images_dataset << "' and '" << labels_dataset
              << "', " << image_array.dims[0] << " samples\n";
  } catch (const std::exception& e) {
    std::cerr << "tessera-idx2hdf5: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
