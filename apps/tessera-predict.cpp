// tessera-predict: inference with a trained model. The model is built from
// the deck and its weights and BatchNorm running statistics are read from a
// checkpoint (checked against the deck: a layer or shape that differs is
// refused, naming the file and dataset); the deck's test set, or --data,
// runs forward in evaluation mode (running statistics, dropout off) in the
// deck's precision, in batches, and the loss, accuracy and throughput are
// printed. --out writes every prediction (class, probabilities, logits;
// --save-inputs also the inputs as the model took them) to HDF5 or CSV.
// --describe writes the model's layer graph as JSON for tessera-export.
#include <tessera/app/run.hpp>
#include <tessera/core/runtime.hpp>
#include <tessera/deck/build.hpp>
#include <tessera/io/checkpoint.hpp>
#include <tessera/io/impl/hdf5.hpp>
#include <tessera/io/impl/publish.hpp>
#include <tessera/model/kernels.hpp>
#include <tessera/model/loss.hpp>
#include <tessera/optim/optimizer.hpp>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <type_traits>

#include "cli.hpp"
#include "model_description.hpp"

namespace {

using tessera::Shape;

struct Options {
  std::string deck, checkpoint, data, labels, out, describe;
  std::vector<std::string> overrides;
  std::int64_t limit = 0, batch = 0;
  bool save_inputs = false;
};

// Every prediction of a run over the data, on the host.
struct Predictions {
  Shape sample_shape, output_shape;  // per sample
  std::int64_t samples = 0, positions = 1, classes = 0;
  std::vector<float> inputs, logits, probabilities;
  std::vector<int> labels, predicted;
  double loss = 0, correct = 0, seconds = 0;
};

// Whether --out names a CSV file (else HDF5).
bool is_csv(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
}

// --data and --labels as overrides of the test set's keys of the deck's format.
std::vector<std::string> data_overrides(const Options& o, const std::string& format) {
  std::vector<std::string> sets;
  const char* key = format == "idx"    ? "data.test_images"
                    : format == "hdf5" ? "data.test_file"
                                       : "data.test_tokens";
  if (!o.data.empty()) sets.push_back(std::string(key) + "=" + tessera::toml_string(o.data));
  if (!o.labels.empty()) {
    if (format != "idx")
      throw tessera::DeckError("--labels: the deck's data.format is '" + format +
                               "', whose files hold their labels; --labels is for idx");
    sets.push_back("data.test_labels=" + tessera::toml_string(o.labels));
  }
  return sets;
}

tessera::Deck read_deck(const Options& o) {
  tessera::Deck deck = tessera::load_deck(o.deck, o.overrides);
  if (!o.data.empty() || !o.labels.empty()) {
    std::vector<std::string> overrides = o.overrides;
    for (auto& s : data_overrides(o, deck.data_format)) overrides.push_back(s);
    deck = tessera::load_deck(o.deck, overrides);
  }
  // The test set is read whole: its samples go through the model once.
  deck.streaming = false;
  deck.max_resident_mb = 0;
  return deck;
}

// Softmax over the last axis of every row of `logits`, and each row's arg max.
void classify(Predictions& p) {
  const std::int64_t k = p.classes;
  for (std::int64_t r = 0; r < p.samples * p.positions; ++r) {
    const float* z = &p.logits[r * k];
    const std::int64_t best = std::max_element(z, z + k) - z;
    double total = 0;
    for (std::int64_t c = 0; c < k; ++c) total += std::exp(double(z[c]) - z[best]);
    for (std::int64_t c = 0; c < k; ++c)
      p.probabilities[r * k + c] = static_cast<float>(std::exp(double(z[c]) - z[best]) / total);
    p.predicted[r] = static_cast<int>(best);
  }
}

template <class View>
void append(std::vector<typename View::value_type>& to, const View& device, std::int64_t count) {
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), device);
  to.insert(to.end(), host.data(), host.data() + count);
}

// Every batch through the model; the predictions (and the inputs) are kept
// on the host only when --out writes them.
Predictions run(tessera::Model& model, const tessera::Deck& deck, const tessera::Dataset& data,
                std::int64_t batch, const Options& o) {
  const bool keep = !o.out.empty(), keep_inputs = o.save_inputs;
  Predictions p;
  p.sample_shape = model.input_shape();
  p.output_shape = model.output_shape();
  p.samples = data.size();
  p.positions = data.label_positions();
  p.classes = p.output_shape[p.output_shape.rank() - 1];
  const tessera::ExecSpace& exec = model.execution_space();
  const auto loss = tessera::make_loss(deck.training.loss);
  tessera::Vector<std::int64_t> order("tessera-predict::order", p.samples);
  const auto order_host = Kokkos::create_mirror_view(order);
  std::iota(order_host.data(), order_host.data() + p.samples, std::int64_t(0));
  Kokkos::deep_copy(order, order_host);
  const std::int64_t rows = batch * p.positions;
  tessera::Vector<int> labels("tessera-predict::labels", rows),
      correct("tessera-predict::correct", rows);
  tessera::Vector<float> sample_loss("tessera-predict::loss", rows);
  tessera::StepContext eval;
  eval.training = false;
  const auto start = std::chrono::steady_clock::now();
  auto shown = start;
  for (std::int64_t first = 0; first < p.samples; first += batch) {
    const std::int64_t b = std::min(batch, p.samples - first), n = b * p.positions;
    const auto batch_labels = Kokkos::subview(labels, std::make_pair(std::int64_t(0), n));
    tessera::gather_batch(exec, data, order, first, model.input(b), batch_labels,
                          tessera::WindowDraw{deck.training.seed, 0});
    if (keep_inputs) append(p.inputs, model.input(b).flat(), b * data.features());
    const tessera::Tensor<float> output = model.forward(b, eval);
    loss->evaluate(exec, output, batch_labels, 1.0f, model.output_gradient(b), sample_loss, correct,
                   false);
    if (keep) {
      append(p.logits, output.flat(), n * p.classes);
      append(p.labels, batch_labels, n);
    }
    std::vector<float> losses;
    std::vector<int> right;
    append(losses, sample_loss, n);
    append(right, correct, n);
    p.loss += std::accumulate(losses.begin(), losses.end(), 0.0);
    p.correct += std::accumulate(right.begin(), right.end(), 0.0);
    const auto now = std::chrono::steady_clock::now();
    if (now - shown > std::chrono::seconds(5) && first + b < p.samples) {
      shown = now;
      std::printf("  %lld/%lld samples\n", static_cast<long long>(first + b),
                  static_cast<long long>(p.samples));
      std::fflush(stdout);
    }
  }
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (keep) {
    p.probabilities.resize(p.logits.size());
    p.predicted.resize(p.labels.size());
    classify(p);
  }
  return p;
}

std::vector<hsize_t> dims_of(std::int64_t samples, const Shape& per_sample) {
  std::vector<hsize_t> dims{static_cast<hsize_t>(samples)};
  for (int d = 0; d < per_sample.rank(); ++d) dims.push_back(static_cast<hsize_t>(per_sample[d]));
  return dims;
}

template <class T>
void write_dataset(hid_t file, const char* name, const std::vector<hsize_t>& dims,
                   const std::vector<T>& values) {
  using tessera::impl::Hdf5Handle;
  const hid_t type = std::is_same<T, float>::value ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT;
  const hid_t stored = std::is_same<T, float>::value ? H5T_IEEE_F32LE : H5T_STD_I32LE;
  Hdf5Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Hdf5Handle set(H5Dcreate2(file, name, stored, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose);
  if (!set.ok() || H5Dwrite(set.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    throw tessera::Error(std::string("cannot write dataset ") + name + ": " +
                         tessera::impl::hdf5_reason());
}

template <class T>
void write_attribute(hid_t file, const char* name, const T& value) {
  using tessera::impl::Hdf5Handle;
  Hdf5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if constexpr (std::is_same<T, std::string>::value) {
    const Hdf5Handle type = tessera::impl::string_type();
    Hdf5Handle attr(H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    H5Aclose);
    const char* text = value.c_str();
    H5Awrite(attr.get(), type.get(), &text);
  } else {
    Hdf5Handle attr(H5Acreate2(file, name, H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    H5Aclose);
    const double number = static_cast<double>(value);
    H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &number);
  }
}

void write_hdf5(const std::string& path, const Predictions& p, const Options& o,
                const std::string& checkpoint) {
  const tessera::impl::QuietHdf5 quiet;
  tessera::impl::Hdf5Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                                 H5Fclose);
  if (!file.ok())
    throw tessera::Error("cannot create " + path + ": " + tessera::impl::hdf5_reason());
  const hid_t f = file.get();
  write_attribute(f, "format", std::string("tessera-predictions"));
  write_attribute(f, "deck", o.deck);
  write_attribute(f, "checkpoint", checkpoint);
  write_attribute(f, "samples", p.samples);
  write_attribute(f, "loss", p.loss / (p.samples * p.positions));
  write_attribute(f, "accuracy", p.correct / (p.samples * p.positions));
  Shape per_label = p.positions > 1 ? Shape({p.positions}) : Shape();
  write_dataset(f, "logits", dims_of(p.samples, p.output_shape), p.logits);
  write_dataset(f, "probabilities", dims_of(p.samples, p.output_shape), p.probabilities);
  write_dataset(f, "class", dims_of(p.samples, per_label), p.predicted);
  write_dataset(f, "labels", dims_of(p.samples, per_label), p.labels);
  if (o.save_inputs) write_dataset(f, "inputs", dims_of(p.samples, p.sample_shape), p.inputs);
}

void write_csv(const std::string& path, const Predictions& p) {
  std::ofstream out(path);
  out << (p.positions > 1 ? "sample,position,label,class" : "sample,label,class");
  for (std::int64_t c = 0; c < p.classes; ++c) out << ",p" << c;
  out << "\n";
  char number[32];
  for (std::int64_t r = 0; r < p.samples * p.positions; ++r) {
    out << r / p.positions;
    if (p.positions > 1) out << "," << r % p.positions;
    out << "," << p.labels[r] << "," << p.predicted[r];
    for (std::int64_t c = 0; c < p.classes; ++c) {
      std::snprintf(number, sizeof number, ",%.9g", p.probabilities[r * p.classes + c]);
      out << number;
    }
    out << "\n";
  }
  out.close();
  if (!out) throw tessera::Error("cannot write " + path);
}

// The predictions to o.out (.csv: CSV, else HDF5), published as the
// checkpoints are: an interrupted write leaves no partial file.
void write_predictions(const Options& o, const Predictions& p, const std::string& checkpoint) {
  tessera::impl::publish_atomically(o.out, "tessera-predict", [&](const std::string& temporary) {
    if (is_csv(o.out))
      write_csv(temporary, p);
    else
      write_hdf5(temporary, p, o, checkpoint);
  });
}

// Refuses an --out whose directory cannot take the file before any work.
void check_writable(const std::string& path) {
  if (path.empty()) return;
  const auto slash = path.rfind('/');
  const std::string directory = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (::access(directory.c_str(), W_OK) != 0)
    throw tessera::Error("--out " + path + ": the directory " + directory +
                         " does not exist or is not writable");
}

int predict(const Options& o) {
  check_writable(o.out);
  check_writable(o.describe);
  const tessera::Deck deck = read_deck(o);
  const std::string checkpoint = tessera::resolve_checkpoint(o.checkpoint);
  const std::int64_t batch = o.batch > 0 ? o.batch : deck.training.batch_size;
  auto model = tessera::build_model(deck, batch);
  const auto optimizer = tessera::make_optimizer(deck.optimizer);
  const tessera::CheckpointInfo info = tessera::load_checkpoint(checkpoint, *model, *optimizer);
  // The checkpoint's kernels where this build runs them, else the fixed
  // rule's: nothing is measured for a forward pass.
  tessera::KernelSettings fixed;
  fixed.conv2d = "fixed";
  model->set_kernels(
      tessera::choose_kernels(*model, fixed, model->execution_space(), info.kernels).table);
  if (!o.describe.empty()) {
    std::ofstream out(o.describe);
    const std::string absolute = std::filesystem::absolute(checkpoint).lexically_normal().string();
    out << tessera::app::describe_model(deck, *model, absolute).dump(1) << "\n";
    out.close();
    if (!out) throw tessera::Error("cannot write " + o.describe);
    return 0;
  }
  tessera::Dataset data = tessera::read_data_set(deck, false);
  if (data.features() != model->input_shape().numel())
    throw tessera::DeckError(deck.location("model.input_shape") + ": the model takes " +
                             std::to_string(model->input_shape().numel()) +
                             " values per sample, the data's samples have shape " +
                             tessera::to_string(data.sample_shape));
  const std::int64_t limit = o.limit > 0 ? o.limit : deck.test_samples;
  if (limit > 0 && limit < data.size()) data = tessera::slice(data, 0, limit);
  std::cout << "predict: " << data.size() << " samples of " << model->input_shape()
            << " in batches of " << batch << ", "
            << tessera::float_format_name(deck.training.compute) << ", from " << checkpoint << "\n"
            << std::flush;
  const Predictions p = run(*model, deck, data, batch, o);
  const double predictions = static_cast<double>(p.samples * p.positions);
  std::printf("test: %lld samples, loss %.4f, accuracy %.4f (%lld/%lld), %.0f samples/s (%.2f s)\n",
              static_cast<long long>(p.samples), p.loss / predictions, p.correct / predictions,
              static_cast<long long>(p.correct), static_cast<long long>(predictions),
              p.samples / std::max(p.seconds, 1e-9), p.seconds);
  if (!o.out.empty()) {
    write_predictions(o, p, checkpoint);
    std::cout << "wrote " << o.out << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-predict: inference with a trained model on a data set"};
  Options o;
  app.add_option("deck", o.deck, "the deck the model was trained with (TOML)")->required();
  app.add_option("checkpoint", o.checkpoint,
                 "a checkpoint file, or a checkpoint directory (its latest)")
      ->required();
  app.add_option("--data", o.data,
                 "the data set instead of the deck's test set: its file in the deck's data.format "
                 "(idx: the images, with --labels; hdf5: the file; tokens: the token file)");
  app.add_option("--labels", o.labels, "idx: the labels file of --data");
  app.add_option("--limit", o.limit, "the first N samples only (default: all)")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 40));
  app.add_option("--batch", o.batch, "samples per forward pass (default: training.batch_size)")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 24));
  app.add_option("--out", o.out,
                 "write every prediction: FILE.csv (sample, label, class, probabilities) or "
                 "HDF5 (datasets class, labels, probabilities, logits)");
  app.add_flag("--save-inputs", o.save_inputs,
               "with --out (HDF5): also the inputs as the model took them (dataset inputs)");
  app.add_option("--describe", o.describe,
                 "write the model's layer graph (JSON, for tessera-export) and exit");
  app.add_option("--set", o.overrides, "override a deck value, as tessera-train --set")
      ->take_all()
      ->allow_extra_args(false);
  if (const auto status = tessera::app::parse_command_line(app, argc, argv, "tessera-predict"))
    return *status;
  tessera::Runtime runtime(argc, argv);
  const tessera::Communicator world;
  if (world.size() > 1) {
    if (world.rank() == 0)
      std::cerr << "tessera-predict: runs on one process; start it without mpiexec ("
                << world.size() << " ranks)\n";
    return 2;
  }
  if (o.save_inputs && (o.out.empty() || is_csv(o.out))) {
    std::cerr << "tessera-predict: --save-inputs needs --out with an HDF5 file\n";
    return 2;
  }
  try {
    return predict(o);
  } catch (const std::exception& e) {
    std::cerr << "tessera-predict: " << e.what() << "\n";
    return 2;
  }
}
