// Checkpoints: a bitwise round trip of parameters, BatchNorm statistics and
// Adam state; resuming equals not stopping; every kind of bad file gives an
// error naming the file and the problem; directories keep the newest K.
#include <tessera/core/version.hpp>
#include <tessera/data/hdf5.hpp>
#include <tessera/io/checkpoint.hpp>
#include <tessera/io/impl/hdf5.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/norm.hpp>
#include <tessera/optim/adam.hpp>
#include <tessera/optim/sgd.hpp>
#include <tessera/train/trainer.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tessera_test.hpp"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

// A fresh scratch directory per test, removed afterwards.
class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("tessera_checkpoint_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::unique_ptr<Model> small_model(std::int64_t hidden = 8, std::uint64_t seed = 3) {
  auto model = std::make_unique<Model>(Shape{2});
  model->add<Dense>("fc1", hidden).add<BatchNorm>("bn").add<ReLU>("relu").add<Dense>("fc2", 2);
  model->compile(32, seed);
  return model;
}

TrainOptions options() {
  TrainOptions o;
  o.batch_size = 32;
  o.seed = 3;
  o.schedule.base_lr = 0.01f;
  return o;
}

CheckpointInfo info_at(std::int64_t step) {
  CheckpointInfo info;
  info.deck_path = "decks/xor.toml";
  info.deck_text = "[run]\nname = \"xor ✓\"\n";
  info.deck_overrides = {"training.epochs=2", "optimizer.type=adam"};
  info.seed = 3;
  info.cursor = {1, 0, step};
  info.world_size = 2;
  info.global_batch = 32;
  info.lr = 0.01f;
  info.schedule = "constant";
  info.metrics = "{\"type\":\"step\",\"step\":1}\n{\"type\":\"step\",\"step\":2}\n";
  return info;
}

// A model trained for `epochs` epochs with Adam, with its optimizer.
struct Trained {
  std::unique_ptr<Model> model = small_model();
  Adam adam;
  void train(const Dataset& data, int first_epoch, int epochs) {
    Trainer trainer(*model, adam, options());
    for (int e = first_epoch; e < first_epoch + epochs; ++e) trainer.train_epoch(data, e);
  }
};

std::vector<std::vector<float>> optimizer_state(const Optimizer& o) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, buffer] : o.state_buffers()) out.push_back(test::to_host(buffer));
  return out;
}

TEST_F(Checkpoint, RoundTripIsBitwise) {
  const Dataset data = test::xor_dataset(96, 5);
  Trained a;
  a.train(data, 0, 1);
  ASSERT_EQ(a.adam.step_count(), 3);
  write_checkpoint(path("a.h5"), *a.model, a.adam, info_at(3));

  auto model = small_model(8, 99);  // other initial weights
  Adam adam;
  ASSERT_NE(test::to_host(model->parameters().values()),
            test::to_host(a.model->parameters().values()));
  const CheckpointInfo info = load_checkpoint(path("a.h5"), *model, adam);
  EXPECT_EQ(test::to_host(model->parameters().values()),
            test::to_host(a.model->parameters().values()));
  EXPECT_EQ(test::to_host(model->state().values()), test::to_host(a.model->state().values()));
  ASSERT_EQ(adam.state_buffers().size(), 2u);
  EXPECT_EQ(optimizer_state(adam), optimizer_state(a.adam));
  EXPECT_EQ(adam.step_count(), 3);

  const CheckpointInfo expected = info_at(3);
  EXPECT_EQ(info.tessera_version, TESSERA_VERSION_STRING);
  EXPECT_EQ(info.deck_path, expected.deck_path);
  EXPECT_EQ(info.deck_text, expected.deck_text);
  EXPECT_EQ(info.deck_overrides, expected.deck_overrides);
  EXPECT_EQ(info.seed, 3u);
  EXPECT_EQ(info.cursor.epoch, 1);
  EXPECT_EQ(info.cursor.batch, 0);
  EXPECT_EQ(info.cursor.step, 3);
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.global_batch, 32);
  EXPECT_EQ(info.lr, 0.01f);
  EXPECT_EQ(info.schedule, "constant");
  EXPECT_EQ(info.metrics, expected.metrics);
  EXPECT_EQ(read_checkpoint_info(path("a.h5")).metrics, expected.metrics);
  EXPECT_FALSE(info.has_loss_scale);
}

// A shard of the optimizer state is no checkpoint: the file holds the
// whole state (OptimizerSharding gathers it).
TEST_F(Checkpoint, ShardedOptimizerStateIsRefused) {
  auto model = small_model();
  Adam whole;
  write_checkpoint(path("whole.h5"), *model, whole, info_at(0));
  Adam shard;
  shard.set_shard(0, 4);
  test::expect_error(
      [&] { write_checkpoint(path("shard.h5"), *model, shard, info_at(0)); },
      "tessera::write_checkpoint: " + path("shard.h5") +
          ": the optimizer holds a shard of the state; gather the whole state into an optimizer "
          "without a shard first");
  EXPECT_FALSE(fs::exists(path("shard.h5")));
  test::expect_error([&] { load_checkpoint(path("whole.h5"), *model, shard); },
                     "tessera::load_checkpoint: " + path("whole.h5") +
                         ": the optimizer holds a shard of the state; load into an optimizer "
                         "without a shard");
}

// Dynamic loss scaling's state travels in /training, written only by runs
// that use it.
TEST_F(Checkpoint, LossScaleStateRoundTrips) {
  auto model = small_model();
  Adam adam;
  CheckpointInfo info = info_at(7);
  info.has_loss_scale = true;
  info.loss_scale = 8192.0f;
  info.loss_scale_good_steps = 5;
  write_checkpoint(path("scaled.h5"), *model, adam, info);
  const CheckpointInfo read = read_checkpoint_info(path("scaled.h5"));
  EXPECT_TRUE(read.has_loss_scale);
  EXPECT_EQ(read.loss_scale, 8192.0f);
  EXPECT_EQ(read.loss_scale_good_steps, 5);
}

TEST_F(Checkpoint, ResumingMatchesTrainingWithoutStopping) {
  const Dataset data = test::xor_dataset(100, 7);  // a partial last batch
  Trained straight;
  straight.train(data, 0, 2);

  Trained first;
  first.train(data, 0, 1);
  write_checkpoint(path("epoch1.h5"), *first.model, first.adam, info_at(first.adam.step_count()));
  Trained resumed;
  const CheckpointInfo info = load_checkpoint(path("epoch1.h5"), *resumed.model, resumed.adam);
  resumed.train(data, info.cursor.epoch, 1);

  EXPECT_EQ(test::to_host(resumed.model->parameters().values()),
            test::to_host(straight.model->parameters().values()));
  EXPECT_EQ(test::to_host(resumed.model->state().values()),
            test::to_host(straight.model->state().values()));
  EXPECT_EQ(optimizer_state(resumed.adam), optimizer_state(straight.adam));
  EXPECT_EQ(resumed.adam.step_count(), straight.adam.step_count());
}

TEST_F(Checkpoint, ContentsReadWithoutAModel) {
  Trained a;
  a.train(test::xor_dataset(64, 5), 0, 1);
  write_checkpoint(path("a.h5"), *a.model, a.adam, info_at(2));
  const CheckpointContents c = read_checkpoint(path("a.h5"));
  EXPECT_EQ(c.input_shape, (std::vector<std::int64_t>{2}));
  ASSERT_EQ(c.layers.size(), 4u);
  EXPECT_EQ(c.layers[1].name, "bn");
  EXPECT_EQ(c.layers[1].type, "BatchNorm");
  EXPECT_EQ(c.layers[0].inputs, (std::vector<std::string>{"input"}));
  EXPECT_EQ(c.layers[3].inputs, (std::vector<std::string>{"relu"}));
  EXPECT_EQ(c.layers[3].output_shape, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(c.layers[1].state, (std::vector<std::string>{"running_mean", "running_var"}));
  ASSERT_EQ(c.parameters.size(), a.model->parameters().entries().size());
  const auto values = test::to_host(a.model->parameters().values());
  for (std::size_t i = 0; i < c.parameters.size(); ++i) {
    const auto& e = a.model->parameters().entries()[i];
    EXPECT_EQ(c.parameters[i].layer, e.layer);
    EXPECT_EQ(c.parameters[i].name, e.spec.name);
    double sum = 0;
    for (std::int64_t k = 0; k < e.spec.shape.numel(); ++k)
      sum += double(values[e.offset + k]) * values[e.offset + k];
    EXPECT_DOUBLE_EQ(c.parameters[i].norm(), std::sqrt(sum)) << e.layer << "." << e.spec.name;
  }
  EXPECT_EQ(c.optimizer, "Adam");
  EXPECT_EQ(c.optimizer_steps, 2);
  ASSERT_EQ(c.optimizer_buffers.size(), 2u);
  EXPECT_EQ(c.optimizer_buffers[0].name, "exp_avg");
  EXPECT_EQ(c.optimizer_buffers[1].tensors.size(), c.parameters.size());
}

// tessera-inspect's progress line: epochs done out of the deck's, and the
// batches done of the epoch in progress.
TEST(CheckpointProgress, SaysHowManyEpochsAreDone) {
  CheckpointInfo info;
  info.schedule = "type=cosine lr=0.001 warmup_steps=0 steps_per_epoch=235 epochs=4";
  info.cursor = {4, 0, 940};
  EXPECT_EQ(checkpoint_progress(info), "epochs done: 4 of 4 (finished)");
  info.cursor = {0, 0, 0};
  EXPECT_EQ(checkpoint_progress(info), "epochs done: 0 of 4; epoch 1 starts after step 0");
  info.schedule = "type=cosine lr=0.001 warmup_steps=0 steps_per_epoch=235 epochs=10";
  info.cursor = {4, 0, 940};
  EXPECT_EQ(checkpoint_progress(info), "epochs done: 4 of 10; epoch 5 starts after step 940");
  info.cursor = {2, 17, 487};
  EXPECT_EQ(checkpoint_progress(info),
            "epochs done: 2 of 10; in epoch 3, 17 of its 235 batches done");
  // A schedule without the counts (written by an embedding program): no totals.
  info.schedule = "constant";
  EXPECT_EQ(checkpoint_progress(info), "epochs done: 2; in epoch 3, 17 batches done");
  info.cursor = {1, 0, 7};
  EXPECT_EQ(checkpoint_progress(info), "epochs done: 1; epoch 2 starts after step 7");
}

TEST_F(Checkpoint, WrittenBeforeTheFirstStepLoadsZeroOptimizerState) {
  auto fresh = small_model();
  Adam unused;
  write_checkpoint(path("start.h5"), *fresh, unused, info_at(0));
  Trained a;
  a.train(test::xor_dataset(64, 5), 0, 1);  // a has non-zero moments
  load_checkpoint(path("start.h5"), *a.model, a.adam);
  EXPECT_EQ(a.adam.step_count(), 0);
  for (const auto& buffer : optimizer_state(a.adam))
    for (float v : buffer) ASSERT_EQ(v, 0.0f);
  EXPECT_EQ(test::to_host(a.model->parameters().values()),
            test::to_host(fresh->parameters().values()));
}

// ---------------------------------------------------------------- bad files

// Writes a good checkpoint, lets `damage` change it, then expects loading it
// into the same architecture to fail naming the file and `problem`.
class BadCheckpoint : public Checkpoint {
 protected:
  void SetUp() override {
    Checkpoint::SetUp();
    file_ = path("bad.h5");
    write_checkpoint(file_, *model_, adam_, info_at(0));
  }
  void expect_load_error(const std::string& problem) {
    auto model = small_model();
    Adam adam;
    const auto before = test::to_host(model->parameters().values());
    test::expect_error([&] { load_checkpoint(file_, *model, adam); }, file_ + ": " + problem);
    EXPECT_EQ(test::to_host(model->parameters().values()), before)
        << "a failed load changed the model";
  }
  template <class Edit>
  void edit(Edit e) {
    const impl::QuietHdf5 quiet;
    const impl::Hdf5Handle file(H5Fopen(file_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_TRUE(file.ok());
    e(file.get());
  }

  std::unique_ptr<Model> model_ = small_model();
  Adam adam_;
  std::string file_;
};

TEST_F(BadCheckpoint, TruncatedFile) {
  fs::resize_file(file_, fs::file_size(file_) / 2);
  expect_load_error("cannot open the HDF5 file (truncated file");
  test::expect_error([&] { read_checkpoint_info(file_); }, "it is truncated or damaged");
}

TEST_F(BadCheckpoint, WrongFormatVersion) {
  edit([](hid_t file) {
    const impl::Hdf5Handle a(H5Aopen(file, "format_version", H5P_DEFAULT), H5Aclose);
    const std::int64_t version = 99;
    ASSERT_GE(H5Awrite(a.get(), H5T_NATIVE_INT64, &version), 0);
  });
  expect_load_error("checkpoint format version 99; this Tessera (" TESSERA_VERSION_STRING
                    ") reads version 1 only");
}

TEST_F(BadCheckpoint, ParameterShapeDoesNotMatchTheModel) {
  auto wider = small_model(12);
  Adam adam;
  write_checkpoint(file_, *wider, adam, info_at(0));
  expect_load_error(
      "dataset '/parameters/fc1/weight' has shape [12, 2]; the model's fc1 weight has "
      "shape [8, 2]; the checkpoint was written for a different model");
}

TEST_F(BadCheckpoint, MissingDataset) {
  edit([](hid_t file) { ASSERT_GE(H5Ldelete(file, "/parameters/fc2/bias", H5P_DEFAULT), 0); });
  expect_load_error("has no dataset '/parameters/fc2/bias' (the file is incomplete or was edited");
}

// An optimizer moment stored with more values than its parameter must be
// refused before anything is copied (it once overran the host buffer).
TEST_F(BadCheckpoint, OptimizerStateShapeDoesNotMatchTheModel) {
  Adam adam;
  adam.allocate(model_->parameters());
  write_checkpoint(file_, *model_, adam, info_at(1));
  edit([](hid_t file) {
    const char* name = "/optimizer/exp_avg/fc1/weight";
    ASSERT_GE(H5Ldelete(file, name, H5P_DEFAULT), 0);
    const hsize_t dims[2] = {64, 64};
    const impl::Hdf5Handle space(H5Screate_simple(2, dims, nullptr), H5Sclose);
    const impl::Hdf5Handle data(
        H5Dcreate2(file, name, H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
        H5Dclose);
    ASSERT_TRUE(data.ok());
  });
  expect_load_error(
      "dataset '/optimizer/exp_avg/fc1/weight' has shape [64, 64]; the model's fc1 weight has "
      "shape [8, 2]; the checkpoint was written for a different model");
}

TEST_F(BadCheckpoint, LossScaleThatIsNotAPowerOfTwo) {
  CheckpointInfo info = info_at(1);
  info.has_loss_scale = true;
  info.loss_scale = 3.0f;  // no scale dynamic scaling can reach
  write_checkpoint(file_, *model_, adam_, info);
  test::expect_error([&] { read_checkpoint_info(file_); },
                     file_ +
                         ": attribute 'loss_scale' of /training is 3.000000; a loss scale is a "
                         "power of two from 1 to 16777216");
  info.loss_scale = 4.0f;
  info.loss_scale_good_steps = -1;
  write_checkpoint(file_, *model_, adam_, info);
  test::expect_error([&] { read_checkpoint_info(file_); },
                     file_ + ": attribute 'loss_scale_good_steps' of /training is -1");
}

TEST_F(BadCheckpoint, NotAnHdf5File) {
  std::ofstream(file_) << "step = 3\nthis is not HDF5\n";
  expect_load_error("not an HDF5 file, so not a Tessera checkpoint");
}

TEST_F(BadCheckpoint, Hdf5FileThatIsNotACheckpoint) {
  write_hdf5_dataset(file_, IdxArray{{1, 2}, {0, 1}}, IdxArray{{1}, {0}});
  expect_load_error(
      "not a Tessera checkpoint: an HDF5 file whose root attribute 'format' is missing");
}

TEST_F(BadCheckpoint, MissingFile) {
  fs::remove(file_);
  expect_load_error("no such file");
}

TEST_F(BadCheckpoint, OtherLayers) {
  Model other(Shape{2});
  other.add<Dense>("fc1", 8).add<ReLU>("relu").add<Dense>("fc2", 2);
  other.compile(4, 1);
  Adam adam;
  test::expect_error(
      [&] { load_checkpoint(file_, other, adam); },
      file_ + ": layer 1 is 'bn' (BatchNorm) in the checkpoint but 'relu' (ReLU) in the model");
}

TEST_F(BadCheckpoint, OtherOptimizer) {
  auto model = small_model();
  SGD sgd;
  test::expect_error([&] { load_checkpoint(file_, *model, sgd); },
                     file_ + ": the checkpoint holds Adam state, the run uses SGD");
}

// ---------------------------------------------------------------- directories

TEST_F(Checkpoint, DirectoryKeepsTheNewestAndPointsLatestAtIt) {
  auto model = small_model();
  Adam adam;
  CheckpointDirectory dir(path("run/checkpoints"), 2);  // created on the first commit
  EXPECT_FALSE(dir.has_latest());
  test::expect_error([&] { dir.resolve(); }, "does not exist");
  std::vector<std::string> written;
  for (std::int64_t step : {5, 10, 15}) written.push_back(dir.commit(*model, adam, info_at(step)));
  EXPECT_EQ(written[2], path("run/checkpoints/step-00000015.h5"));
  EXPECT_EQ(dir.checkpoints(), (std::vector<std::string>{written[1], written[2]}));
  // A name of a step number no int64 holds is not a checkpoint of Tessera's.
  const std::string foreign = path("run/checkpoints/step-1234567890123456789012.h5");
  std::ofstream(foreign) << "x";
  EXPECT_EQ(dir.checkpoints(), (std::vector<std::string>{written[1], written[2]}));
  fs::remove(foreign);
  EXPECT_FALSE(fs::exists(written[0]));
  EXPECT_TRUE(dir.has_latest());
  std::string latest;
  std::getline(std::ifstream(path("run/checkpoints/latest")), latest);
  EXPECT_EQ(latest, "step-00000015.h5");
  // Nothing but the checkpoints and `latest` is left behind.
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(path("run/checkpoints"))) {
    ++files;
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
  EXPECT_EQ(files, 3u);

  EXPECT_EQ(dir.resolve(), written[2]);
  EXPECT_EQ(dir.resolve("latest"), written[2]);
  EXPECT_EQ(dir.resolve("step-00000010.h5"), written[1]);
  EXPECT_EQ(dir.resolve(written[1]), written[1]);
  EXPECT_EQ(resolve_checkpoint(path("run/checkpoints")), written[2]);
  EXPECT_EQ(resolve_checkpoint(path("run/checkpoints/latest")), written[2]);
  EXPECT_EQ(resolve_checkpoint(written[1]), written[1]);
  EXPECT_EQ(read_checkpoint_info(dir.resolve()).cursor.step, 15);

  // A run resumed from step 10 commits step 12: it becomes latest and stays,
  // although step 15 is larger.
  const std::string resumed = dir.commit(*model, adam, info_at(12));
  EXPECT_EQ(dir.resolve(), resumed);
  EXPECT_TRUE(fs::exists(resumed));
  EXPECT_EQ(dir.checkpoints().size(), 2u);
}

TEST_F(Checkpoint, ResolveErrorsNameThePath) {
  test::expect_error([&] { resolve_checkpoint(path("empty")); }, path("empty") + " does not exist");
  fs::create_directories(path("empty"));
  test::expect_error([&] { resolve_checkpoint(path("empty")); },
                     "directory " + path("empty") + " has no 'latest' file");
  std::ofstream(path("empty/latest")) << "step-00000007.h5\n";
  test::expect_error([&] { resolve_checkpoint(path("empty")); },
                     path("empty/latest") + " names step-00000007.h5, which does not exist");
}

TEST_F(Checkpoint, WriteErrorsNameTheFile) {
  auto model = small_model();
  Adam adam;
  test::expect_error([&] { write_checkpoint(path("missing/dir/a.h5"), *model, adam, info_at(0)); },
                     "tessera::write_checkpoint: cannot create " + path("missing/dir/.a.h5.tmp."));
  test::expect_error([] { CheckpointDirectory("x", 0); }, "keep = 0 must be >= 1");
}

}  // namespace
