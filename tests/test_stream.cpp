// Streaming samples from HDF5: the rows read equal the file's bytes, a
// batch stream hands out planned batches in order, training and evaluation
// on a streamed dataset equal the same file loaded whole bit for bit (with
// micro-batches, a partial last batch and a held-out slice), the synthetic
// generator, and errors that name the file (also from the reader thread).
#include <tessera/data/hdf5.hpp>
#include <tessera/data/stream.hpp>
#include <tessera/data/synthetic.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/dropout.hpp>
#include <tessera/layers/structural.hpp>
#include <tessera/optim/sgd.hpp>
#include <tessera/train/trainer.hpp>

#include <unistd.h>

#include <cstdio>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

std::string stream_scratch(const std::string& name) {
  return test::scratch_path("tessera_stream_", name);
}

// A contiguous file of `n` samples [1, 6, 6] in 4 classes.
std::string synthetic_file(const std::string& name, std::int64_t n, std::uint64_t seed = 5) {
  const std::string path = stream_scratch(name);
  SyntheticSpec spec;
  spec.samples = n;
  spec.sample_dims = {1, 6, 6};
  spec.classes = 4;
  spec.seed = seed;
  write_synthetic_hdf5(path, spec);
  return path;
}

TEST(Stream, ReadsTheFileRowsInAnyOrder) {
  const std::string path = synthetic_file("rows.h5", 50);
  const IdxArray images = read_hdf5_bytes(path, "images"), labels = read_hdf5_bytes(path, "labels");
  ASSERT_EQ(images.dims, (std::vector<std::int64_t>{50, 1, 6, 6}));
  const SampleFile file(path, "images", "labels", 0.0f, 1.0f);
  EXPECT_EQ(file.size(), 50);
  EXPECT_EQ(file.features(), 36);
  EXPECT_EQ(file.sample_shape(), (Shape{1, 6, 6}));
  int max_label = 0;
  for (auto l : labels.data) max_label = std::max<int>(max_label, l);
  EXPECT_EQ(file.classes(), max_label + 1);
  // Runs of consecutive rows, repeats and a jump back.
  const std::vector<std::int64_t> rows{7, 8, 9, 3, 3, 49, 0, 1, 25};
  std::vector<std::uint8_t> bytes(rows.size() * 36);
  std::vector<int> got_labels(rows.size());
  file.read(rows.data(), static_cast<std::int64_t>(rows.size()), bytes.data(), got_labels.data());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(got_labels[i], labels.data[rows[i]]) << i;
    for (int j = 0; j < 36; ++j)
      ASSERT_EQ(bytes[i * 36 + j], images.data[rows[i] * 36 + j]) << i << " " << j;
  }
  std::vector<std::int64_t> outside{50};
  test::expect_error([&] { file.read(outside.data(), 1, bytes.data(), got_labels.data()); },
                     "sample 50 of " + path + ":images, which holds 50");
  std::remove(path.c_str());
}

TEST(Stream, HandsOutPlannedBatchesAsGatherBatchDoes) {
  const std::string path = synthetic_file("batches.h5", 40);
  const Dataset whole = load_hdf5_dataset(path, "images", "labels", 0.25f, 0.5f);
  const Dataset streamed = stream_hdf5_dataset(path, "images", "labels", 0.25f, 0.5f);
  EXPECT_TRUE(streamed.streamed());
  EXPECT_EQ(streamed.size(), 40);
  EXPECT_EQ(streamed.classes, whole.classes);
  EXPECT_EQ(streamed.sample_shape, whole.sample_shape);
  // A shuffled order in batches of 7 (the last holds 5), through one and
  // through three buffers.
  std::vector<std::int64_t> order(40);
  for (std::int64_t i = 0; i < 40; ++i) order[i] = (i * 17 + 3) % 40;
  const Vector<std::int64_t> order_device("order", 40);
  test::from_host(order_device, order);
  for (const int depth : {1, 3}) {
    std::vector<std::int64_t> counts;
    for (std::int64_t start = 0; start < 40; start += 7)
      counts.push_back(std::min<std::int64_t>(7, 40 - start));
    BatchStream stream(streamed, order, counts, depth);
    const ExecSpace exec;
    std::int64_t start = 0;
    for (const std::int64_t count : counts) {
      Tensor<float> expected("expected", Shape{count, 1, 6, 6}), got("got", Shape{count, 1, 6, 6});
      const Vector<int> expected_labels("expected", count), got_labels("got", count);
      gather_batch(exec, whole, order_device, start, expected, expected_labels);
      stream.next(exec, got, got_labels);
      EXPECT_EQ(test::to_host(got.matrix()), test::to_host(expected.matrix())) << start;
      EXPECT_EQ(test::to_host(got_labels), test::to_host(expected_labels)) << start;
      start += count;
    }
    Tensor<float> extra("extra", Shape{1, 1, 6, 6});
    const Vector<int> extra_labels("extra", 1);
    test::expect_error([&] { stream.next(exec, extra, extra_labels); },
                       "all 6 planned batches were handed out");
  }
  // A stream left early stops its reader.
  { BatchStream unfinished(streamed, order, {20, 20}, 1); }
  std::remove(path.c_str());
}

std::unique_ptr<Model> stream_model() {
  auto m = std::make_unique<Model>(Shape{1, 6, 6});
  m->add<Flatten>("flat")
      .add<Dense>("fc1", 16)
      .add<ReLU>("relu")
      .add<Dropout>("drop", 0.1f)
      .add<Dense>("fc2", 4);
  return m;
}

struct Trained {
  std::vector<double> losses;
  std::vector<float> weights;
  double held_out_loss = 0, test_loss = 0;
};

// Two epochs on samples [0, 250) of the file (250 / 32: a partial last
// batch), two micro-batches a step, the second epoch entered at its third
// step as a restart does; evaluated on samples [250, 300) and on the whole
// file.
Trained train_on(const Dataset& data) {
  const Dataset train = slice(data, 0, 250), held_out = slice(data, 250, 50);
  auto model = stream_model();
  TrainOptions options;
  options.batch_size = 32;
  options.accumulation_steps = 2;
  options.seed = 11;
  options.schedule.base_lr = 0.05f;
  model->compile(options.batch_size, options.seed);
  SGD sgd(SGD::Params{0.9f, 1e-4f, false});
  Trainer trainer(*model, sgd, options);
  Trained out;
  trainer.on_step([&](const StepReport& r) { out.losses.push_back(r.loss); });
  trainer.train_epoch(train, 0);
  trainer.train_epoch(train, 1, {}, 2);
  out.weights = test::to_host(model->parameters().values());
  out.held_out_loss = trainer.evaluate(held_out).loss;
  out.test_loss = trainer.evaluate(data).loss;
  return out;
}

TEST(Stream, TrainsBitwiseAsTheFileLoadedWhole) {
  const std::string path = synthetic_file("train.h5", 300);
  const Trained whole = train_on(load_hdf5_dataset(path, "images", "labels", 0.3f, 0.4f));
  const Trained streamed = train_on(stream_hdf5_dataset(path, "images", "labels", 0.3f, 0.4f));
  ASSERT_EQ(whole.losses.size(), 8u + 6u);
  EXPECT_EQ(streamed.losses, whole.losses);
  EXPECT_EQ(streamed.weights, whole.weights);
  EXPECT_EQ(streamed.held_out_loss, whole.held_out_loss);
  EXPECT_EQ(streamed.test_loss, whole.test_loss);
  // And it learned: templates plus noise separate linearly.
  EXPECT_LT(whole.losses.back(), 0.5 * whole.losses.front());
  std::remove(path.c_str());
}

TEST(Stream, SyntheticFilesFollowTheSeed) {
  const std::string a = synthetic_file("seed_a.h5", 30, 1), b = synthetic_file("seed_b.h5", 30, 1),
                    c = synthetic_file("seed_c.h5", 30, 2);
  EXPECT_EQ(read_hdf5_bytes(a, "images").data, read_hdf5_bytes(b, "images").data);
  EXPECT_EQ(read_hdf5_bytes(a, "labels").data, read_hdf5_bytes(b, "labels").data);
  EXPECT_NE(read_hdf5_bytes(a, "images").data, read_hdf5_bytes(c, "images").data);
  for (auto l : read_hdf5_bytes(a, "labels").data) EXPECT_LT(l, 4);
  SyntheticSpec bad;
  bad.samples = 10;
  bad.sample_dims = {1, 2, 3, 4};
  test::expect_error([&] { write_synthetic_hdf5(stream_scratch("bad.h5"), bad); },
                     "a sample has 4 extents; expected 1 to 3");
  bad.sample_dims = {8};
  bad.classes = 1;
  test::expect_error([&] { write_synthetic_hdf5(stream_scratch("bad.h5"), bad); },
                     "1 classes; expected 2 to 256");
  for (const auto& p : {a, b, c, stream_scratch("bad.h5")}) std::remove(p.c_str());
}

TEST(Stream, ErrorsNameTheFile) {
  IdxArray images;
  images.dims = {4, 2, 3};
  images.data.assign(24, 7);
  const IdxArray labels{{4}, {0, 1, 2, 1}};
  const std::string chunked = stream_scratch("chunked.h5"), plain = stream_scratch("plain.h5");
  write_hdf5_dataset(chunked, images, labels);
  test::expect_error([&] { SampleFile(chunked, "images", "labels", 0, 1); },
                     chunked + ": dataset 'images' is stored in chunks");
  test::expect_error([&] { SampleFile(chunked, "images", "labels", 0, 1); },
                     "tessera-idx2hdf5 --contiguous");
  write_hdf5_dataset(plain, images, labels, "images", "labels", Hdf5Layout::contiguous);
  test::expect_error([&] { SampleFile(plain, "labels", "labels", 0, 1); },
                     plain + ":labels: images need 2 to 4 dimensions");
  test::expect_error([&] { SampleFile(plain, "pixels", "labels", 0, 1); },
                     plain + " has no dataset 'pixels'");

  // Cut short under an open stream: the reader thread's error comes out
  // of next(), naming the file and the samples.
  const std::string cut = stream_scratch("cut.h5");
  write_hdf5_dataset(cut, images, labels, "images", "labels", Hdf5Layout::contiguous);
  const Dataset data = stream_hdf5_dataset(cut, "images", "labels");
  ASSERT_EQ(::truncate(cut.c_str(), 64), 0);
  {
    BatchStream stream(data, {2, 3}, {2}, 1);
    Tensor<float> batch("batch", Shape{2, 1, 2, 3});
    const Vector<int> batch_labels("labels", 2);
    test::expect_error([&] { stream.next(ExecSpace(), batch, batch_labels); },
                       cut + ":images: reading samples 2 to 3 failed: the file ended early");
  }
  // Opened when already cut short.
  test::expect_error([&] { SampleFile(cut, "images", "labels", 0, 1); }, cut);
  std::remove(cut.c_str());
  for (const auto& p : {chunked, plain}) std::remove(p.c_str());
}

}  // namespace
