// Data-parallel building blocks on one process: batch shards, the bucket
// plan of gradient averaging, the collective verdict and replica hashes.
// Several ranks are tested end to end under mpiexec (tests/mpi/).
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/layers/norm.hpp>
#include <tessera/parallel/gradient_averager.hpp>

#include <numeric>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

TEST(Parallel, ShardsCoverTheGlobalBatchInOrder) {
  for (const std::int64_t global : {0, 1, 7, 96, 128}) {
    for (const int ranks : {1, 2, 3, 5}) {
      std::int64_t next = 0, smallest = global, largest = 0;
      for (int r = 0; r < ranks; ++r) {
        const Shard s = shard_of(global, r, ranks);
        EXPECT_EQ(s.offset, next) << global << " over " << ranks << ", rank " << r;
        next += s.count;
        smallest = std::min(smallest, s.count);
        largest = std::max(largest, s.count);
      }
      EXPECT_EQ(next, global);
      EXPECT_LE(largest - smallest, 1) << "uneven split of " << global << " over " << ranks;
    }
  }
  // The first global % ranks ranks take the extra sample.
  EXPECT_EQ(shard_of(7, 0, 3).count, 3);
  EXPECT_EQ(shard_of(7, 2, 3).offset, 5);
  EXPECT_EQ(shard_of(7, 2, 3).count, 2);
  test::expect_error([] { shard_of(5, 3, 3); }, "tessera::shard_of: rank 3 of 3");
}

std::unique_ptr<Model> mlp() {
  auto m = std::make_unique<Model>(Shape{20});
  m->add<Dense>("fc1", 30).add<BatchNorm>("bn").add<ReLU>("relu").add<Dense>("fc2", 10).add<Dense>(
      "fc3", 4);
  m->compile(4, 1);
  return m;
}

TEST(Parallel, BucketsTileTheGradientsFromTheLastLayerBackwards) {
  auto model = mlp();
  const Communicator comm;
  const std::int64_t count = model->parameters().count();
  for (const std::int64_t bytes : {4, 400, 1 << 30}) {
    const GradientAverager averager(comm, *model, bytes);
    const auto& buckets = averager.buckets();
    ASSERT_FALSE(buckets.empty());
    // Contiguous, from the end of the buffer to its start.
    std::int64_t end = count;
    std::size_t previous_layer = model->layers().size();
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      EXPECT_EQ(buckets[b].offset + buckets[b].count, end) << "bucket " << b << " of " << bytes;
      EXPECT_LT(buckets[b].ready_after, previous_layer);
      if (b + 1 < buckets.size()) EXPECT_GE(buckets[b].count * 4, bytes);
      end = buckets[b].offset;
      previous_layer = buckets[b].ready_after;
    }
    EXPECT_EQ(end, 0);
    // A bucket is ready once the first layer it holds has run backward.
    EXPECT_EQ(buckets.back().ready_after, 0u);
    if (bytes == 4) {
      // One bucket per layer with parameters: fc3, fc2, bn, fc1.
      ASSERT_EQ(buckets.size(), 4u);
      EXPECT_EQ(buckets[0].ready_after, 4u);
      EXPECT_EQ(buckets[2].ready_after, 1u);
    }
    if (bytes == (1 << 30)) EXPECT_EQ(buckets.size(), 1u);
  }
  test::expect_error([&] { GradientAverager(comm, *model, 0); },
                     "tessera::GradientAverager: bucket size 0 bytes must be positive");
}

TEST(Parallel, OneRankAveragesNothingAndAgreesWithItself) {
  auto model = mlp();
  const Communicator comm;
  EXPECT_EQ(comm.size(), 1);
  GradientAverager averager(comm, *model, 64);
  std::vector<float> grads(model->parameters().count());
  std::iota(grads.begin(), grads.end(), 0.0f);
  test::from_host(model->parameters().gradients(), grads);
  averager.begin();
  for (std::size_t i = model->layers().size(); i-- > 0;) averager.layer_done(i);
  averager.finish();
  EXPECT_EQ(test::to_host(model->parameters().gradients()), grads);
  EXPECT_EQ(averager.overlap_fraction(), 0.0);

  comm.agree("");  // success everywhere: no throw
  try {
    comm.agree("data.train_images: cannot read");
    FAIL() << "agree() with a failure must throw";
  } catch (const CollectiveError& e) {
    EXPECT_STREQ(e.what(), "data.train_images: cannot read");
  }
  require_same_on_every_rank(comm, 42, "the deck", "");
}

TEST(Parallel, ContentHashSeesEveryBit) {
  Vector<float> a("a", 100), b("b", 100);
  EXPECT_EQ(content_hash(a), content_hash(b));
  Kokkos::deep_copy(Kokkos::subview(b, 99), -0.0f);  // only the sign bit differs
  EXPECT_NE(content_hash(a), content_hash(b));
  EXPECT_NE(content_hash(std::string("deck a")), content_hash(std::string("deck b")));
}

}  // namespace
