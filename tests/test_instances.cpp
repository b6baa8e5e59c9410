// Execution space instances are honoured: a model given an instance of its
// own (Model::set_execution_space) runs every kernel of its training there:
// initialisation, the batch gather, each layer's forward and backward, the
// loss, clipping and the optimizer; a model beside it on the default
// instance keeps to that one. Instances are told apart by the launches'
// records (kernels/impl/launch.hpp). Kokkos 3.4's host backends have one
// instance each, so this runs from Kokkos 4 on (the Kokkos 4.6.01 tier of
// CI).
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/conv.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/norm.hpp>
#include <tessera/layers/pool.hpp>
#include <tessera/layers/structural.hpp>
#include <tessera/optim/adam.hpp>
#include <tessera/train/trainer.hpp>

#include <map>
#include <string>

#include "model_check.hpp"

namespace {

using namespace tessera;

// Launches seen since the last clear(), by the instance they ran on.
std::map<const void*, std::map<std::string, int>> launches_by_instance;

void record_instance(const char* label, std::uint32_t, std::uint64_t*) {
  auto& record = kernels::impl::last_launch();
  if (!record.fresh) return;  // a library's own kernel
  record.fresh = false;
  ++launches_by_instance[record.instance][label];
}

struct InstanceListener {
  InstanceListener() {
    launches_by_instance.clear();
    // A launch noted before the listener (an earlier test's, in a suite
    // built as one program) is not this test's: without this, the first
    // Kokkos event (a View's initialisation) would take its record.
    kernels::impl::last_launch().fresh = false;
    namespace tools = Kokkos::Tools::Experimental;
    tools::set_begin_parallel_for_callback(&record_instance);
    tools::set_begin_parallel_reduce_callback(&record_instance);
    tools::set_begin_parallel_scan_callback(&record_instance);
  }
  ~InstanceListener() {
    namespace tools = Kokkos::Tools::Experimental;
    tools::set_begin_parallel_for_callback(nullptr);
    tools::set_begin_parallel_reduce_callback(nullptr);
    tools::set_begin_parallel_scan_callback(nullptr);
  }
};

// Convolution, BatchNorm, pooling and dense layers on `exec`, trained for
// one epoch of bar images with clipping and AdamW.
void train_cnn_on(const ExecSpace& exec, const Dataset& data) {
  Model model(Shape{1, 8, 8});
  model.set_execution_space(exec);
  model.add<Conv2D>("conv", 4, 3, 1, 1)
      .add<BatchNorm>("bn")
      .add<ReLU>("relu")
      .add<MaxPool2D>("pool", 2)
      .add<Flatten>("flat")
      .add<Dense>("fc", 2);
  TrainOptions options;
  options.batch_size = 16;
  options.clip_norm = 1.0f;
  options.schedule.base_lr = 0.01f;
  model.compile(options.batch_size, 5);
  AdamW adamw;
  Trainer trainer(model, adamw, options);
  trainer.train_epoch(data, 0);
  trainer.evaluate(data);
  exec.fence();
}

std::string launch_labels(const std::map<std::string, int>& launches) {
  std::string text;
  for (const auto& [label, count] : launches) text += label + " x" + std::to_string(count) + "\n";
  return text;
}

TEST(Instances, AModelsKernelsRunOnTheInstanceItIsGiven) {
#if KOKKOS_VERSION < 40000
  GTEST_SKIP() << "Kokkos " << KOKKOS_VERSION
               << " has one instance per host backend and no partition_space";
#else
  const Dataset data = test::bar_images(48, 7);
  const ExecSpace main_instance;
  const ExecSpace own = Kokkos::Experimental::partition_space(main_instance, 1)[0];
  const void* own_id = kernels::impl::instance_of(own);
  const void* main_id = kernels::impl::instance_of(main_instance);
  ASSERT_NE(own_id, main_id) << "partition_space gave the default instance back";
  {
    const InstanceListener listener;
    train_cnn_on(own, data);
    ASSERT_EQ(launches_by_instance.count(own_id), 1u) << "no launch ran on the model's instance";
    EXPECT_EQ(launches_by_instance.size(), 1u) << "launches on another instance:\n"
                                               << launch_labels(launches_by_instance[main_id]);
    // Every part of the step is among them (by the start of its labels).
    const auto& mine = launches_by_instance[own_id];
    for (const std::string prefix :
         {"tessera::kernels::init_", "tessera::gather_batch",
          "tessera::kernels::softmax_cross_entropy", "tessera::kernels::adam_step",
          "tessera::kernels::sum_squares_chunks", "tessera::kernels::activation_backward",
          "tessera::kernels::group_", "tessera::kernels::max_pool2d_backward"}) {
      bool found = false;
      for (const auto& entry : mine) found = found || entry.first.rfind(prefix, 0) == 0;
      EXPECT_TRUE(found) << prefix << "... did not run on the model's instance:\n"
                         << launch_labels(mine);
    }
  }
  {
    const InstanceListener listener;
    train_cnn_on(main_instance, data);
    EXPECT_EQ(launches_by_instance.size(), 1u);
    EXPECT_EQ(launches_by_instance.count(main_id), 1u);
  }
#endif
}

}  // namespace
