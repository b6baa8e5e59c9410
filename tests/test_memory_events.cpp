// The allocation and deep-copy counter, and the model's promise that a warm
// forward/backward pass allocates no memory.
#include <tessera/core/memory_events.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/structural.hpp>
#include <tessera/optim/adam.hpp>
#include <tessera/train/trainer.hpp>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

TEST(MemoryEventCounter, SeesAllocationsAndCopies) {
  MemoryEventCounter counter;
  Vector<float> a("tessera_test::a", 100);
  Kokkos::View<float*, Kokkos::HostSpace> host("tessera_test::host", 100);
  Kokkos::deep_copy(a, host);
  EXPECT_EQ(counter.allocations(), 2);
  EXPECT_EQ(counter.bytes_allocated(), 2 * 100 * sizeof(float));
  EXPECT_EQ(counter.allocation_labels().at(0),
            std::string("tessera_test::a (400 bytes, ") + MemSpace::name() + ")");
  // By memory space: the device's and the host's apart (one space on host
  // backends).
  const bool one_space = std::is_same<MemSpace, Kokkos::HostSpace>::value;
  EXPECT_EQ(counter.bytes_allocated_in(MemSpace::name()), (one_space ? 2 : 1) * 400u);
  EXPECT_EQ(counter.bytes_allocated_in(Kokkos::HostSpace::name()), (one_space ? 2 : 1) * 400u);
  EXPECT_EQ(counter.bytes_allocated_in("NoSuchSpace"), 0u);
  ASSERT_EQ(counter.deep_copies().size(), 1u);
  EXPECT_EQ(counter.deep_copies()[0].destination_label, "tessera_test::a");
  EXPECT_EQ(counter.deep_copies()[0].bytes, 100 * sizeof(float));
  // Device memory is host memory on host backends.
  const int expected_uploads = std::is_same<MemSpace, Kokkos::HostSpace>::value ? 0 : 1;
  EXPECT_EQ(counter.host_to_device_copies(), expected_uploads);
  // A fill with one value, with or without an execution space, is seen but
  // uploads no data.
  Kokkos::deep_copy(a, 1.0f);
  Kokkos::deep_copy(ExecSpace(), a, 2.0f);
  ExecSpace().fence();
  EXPECT_EQ(counter.deep_copies().size(), 3u);
  EXPECT_EQ(counter.host_to_device_copies(), expected_uploads);
  counter.reset();
  EXPECT_EQ(counter.allocations(), 0);
  EXPECT_THROW(MemoryEventCounter second, Error);
}

// The uploads the counter saw, for failure messages.
std::string uploads(const MemoryEventCounter& counter) {
  std::string out;
  for (const auto& c : counter.deep_copies())
    if (c.source_space != c.destination_space)
      out += c.source_space + ":" + c.source_label + " -> " + c.destination_space + ":" +
             c.destination_label + " (" + std::to_string(c.bytes) + " bytes); ";
  return out;
}

TEST(MemoryEventCounter, WarmForwardBackwardAllocatesNothing) {
  auto model = std::make_unique<Model>(Shape{6});
  model->add<Dense>("fc1", 8)
      .add<ReLU>("relu")
      .add<Dense>("fc2", 8)
      .add<Add>("add", std::vector<std::string>{"relu", "fc2"})
      .add<Dense>("out", 3);
  model->compile(5, 1);
  test::from_host(model->input(5).flat(), test::random_values(30, 3));
  model->forward(5, StepContext{});
  model->backward(5, StepContext{});
  Kokkos::fence();
  MemoryEventCounter counter;
  for (int step = 0; step < 3; ++step) {
    model->forward(step == 2 ? 4 : 5, StepContext{});  // a smaller last batch too
    model->backward(step == 2 ? 4 : 5, StepContext{});
  }
  Kokkos::fence();
  std::string labels;
  for (const auto& l : counter.allocation_labels()) labels += l + " ";
  EXPECT_EQ(counter.allocations(), 0) << labels;
  EXPECT_EQ(counter.host_to_device_copies(), 0) << uploads(counter);
}

// A whole warm epoch of training (gather, forward, loss, backward, clipping,
// optimizer) and an evaluation allocate nothing; uploads are at most the
// epoch's shuffled order.
TEST(MemoryEventCounter, WarmTrainingEpochAllocatesNothing) {
  const Dataset data = test::xor_dataset(100, 5);  // 100 / 32: a partial last batch
  auto model = std::make_unique<Model>(Shape{2});
  model->add<Dense>("fc1", 8).add<ReLU>("relu").add<Dense>("fc2", 2);
  TrainOptions options;
  options.batch_size = 32;
  options.epochs = 2;
  options.clip_norm = 1.0f;
  options.schedule.base_lr = 0.01f;
  model->compile(options.batch_size, 3);
  AdamW adamw;
  Trainer trainer(*model, adamw, options);
  trainer.train_epoch(data, 0);
  trainer.evaluate(data);
  Kokkos::fence();
  MemoryEventCounter counter;
  trainer.train_epoch(data, 1);
  trainer.evaluate(data);
  Kokkos::fence();
  std::string labels;
  for (const auto& l : counter.allocation_labels()) labels += l + " ";
  EXPECT_EQ(counter.allocations(), 0) << labels;
  EXPECT_LE(counter.host_to_device_copies(), 1) << uploads(counter);
  EXPECT_EQ(trainer.step(), 8);
}

}  // namespace
