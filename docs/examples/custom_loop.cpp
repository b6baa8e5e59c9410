// A training loop of one's own over tessera::Trainer::step: the loop
// tessera-train runs, written out, with room for whatever a study needs
// between steps. Here: a two-layer network learns which quadrants of the
// plane hold class 1 (XOR of the signs), printing every step's loss, and
// evaluates after each epoch. Under mpiexec every rank runs the same loop;
// each step splits its batch over the ranks and sums the gradients in
// buckets while backward runs.
//
//   mpiexec -n 2 ./example_custom_loop [epochs]
//
// Built with the tests (target example_custom_loop); ctest runs it on 1 and
// 2 ranks (example_custom_loop). It exits 1 when the test loss did not fall.
#include <tessera/core/runtime.hpp>
#include <tessera/layers/activation.hpp>
#include <tessera/layers/dense.hpp>
#include <tessera/optim/adam.hpp>
#include <tessera/parallel/communicator.hpp>
#include <tessera/train/trainer.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// n points of [-1, 1)^2 from a fixed linear congruential sequence (the same
// on every rank), labelled 1 where x and y have different signs.
tessera::Dataset quadrants(std::int64_t n, std::uint32_t seed) {
  std::vector<float> xy(2 * n);
  std::vector<int> labels(n);
  std::uint32_t state = seed;
  for (auto& v : xy) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
  }
  for (std::int64_t i = 0; i < n; ++i) labels[i] = (xy[2 * i] > 0) != (xy[2 * i + 1] > 0);
  tessera::Dataset data;
  data.sample_shape = tessera::Shape{2};
  data.classes = 2;
  data.samples = tessera::Matrix<float>("samples", n, 2);
  data.labels = tessera::Vector<int>("labels", n);
  Kokkos::deep_copy(
      data.samples,
      Kokkos::View<const float**, Kokkos::LayoutRight, Kokkos::HostSpace>(xy.data(), n, 2));
  Kokkos::deep_copy(data.labels, Kokkos::View<const int*, Kokkos::HostSpace>(labels.data(), n));
  return data;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::Runtime runtime(argc, argv);  // MPI, then Kokkos
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 4;
  if (epochs < 1 || epochs > 1000) {
    std::fprintf(stderr, "usage: %s [epochs from 1 to 1000]\n", argv[0]);
    return 2;
  }
  int status = 0;
  {  // Kokkos objects go before the runtime finalises Kokkos.
    const tessera::Communicator world;
    const bool root = world.rank() == 0;
    const tessera::Dataset train = quadrants(2048, 1), test = quadrants(512, 2);

    tessera::TrainOptions options;
    options.batch_size = 64;
    options.epochs = epochs;
    options.seed = 7;
    options.schedule.base_lr = 0.01f;

    tessera::Model model(tessera::Shape{2});
    model.add<tessera::Dense>("hidden", 32)
        .add<tessera::ReLU>("relu")
        .add<tessera::Dense>("logits", 2);
    model.compile(options.max_shard(world.size()), options.seed);
    tessera::Adam adam;
    tessera::Trainer trainer(model, adam, options, &world);
    if (root)
      std::printf("%d rank(s); exchange: %s; schedule: %s\n", world.size(),
                  trainer.exchange().name(), trainer.schedule().name());

    const double before = trainer.evaluate(test).loss;
    double after = before;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      const tessera::EpochPlan plan = trainer.begin_epoch(train, epoch);
      for (std::int64_t s = plan.first; s < plan.last; ++s) {
        const tessera::StepReport r = trainer.step(trainer.batch(s));
        // Anything may go here: every rank has the same report.
        if (root && r.step_in_epoch % 8 == 0)
          std::printf("epoch %d step %2lld  loss %.4f  grad norm %.4f  lr %g\n", epoch + 1,
                      static_cast<long long>(r.step_in_epoch + 1), r.loss, r.grad_norm, r.lr);
      }
      const tessera::EpochReport e = trainer.end_epoch();
      const tessera::Evaluation t = trainer.evaluate(test);  // collective: every rank calls it
      after = t.loss;
      if (root)
        std::printf(
            "epoch %d: train loss %.4f, test loss %.4f, test accuracy %.3f (%.0f samples/s)\n",
            epoch + 1, e.train.loss, t.loss, t.accuracy, e.samples_per_second);
    }
    if (root) std::printf("test loss %.4f before training, %.4f after\n", before, after);
    status = after < before ? 0 : 1;
  }
  return status;
}
