// Checks on whole models: finite-difference gradients of every parameter
// through the loss, and training that must converge.
#pragma once

#include <tessera/kernels/loss.hpp>
#include <tessera/model/trainer.hpp>
#include <tessera/optim/sgd.hpp>

#include "tessera_test.hpp"

namespace tessera::test {

// With the model's input for labels.size() samples already filled: every
// parameter gradient of the mean softmax cross-entropy against central
// differences.
inline void expect_model_gradients(Model& model, const std::vector<int>& labels) {
  const auto batch = static_cast<std::int64_t>(labels.size());
  Vector<int> device_labels("labels", batch);
  from_host(device_labels, labels);
  Vector<float> sample_loss("loss", batch);
  Vector<int> correct("correct", batch);
  const auto loss = [&]() {
    const auto logits = model.forward(batch, StepContext{});
    kernels::softmax_cross_entropy(ExecSpace(), logits.matrix(), device_labels, 1.0f / batch,
                                   model.output_gradient(batch).matrix(), sample_loss, correct);
    double sum = 0;
    for (float l : to_host(sample_loss)) sum += l;
    return sum / batch;
  };
  loss();
  model.backward(batch, StepContext{});
  const auto& store = model.parameters();
  for (std::size_t i = 0; i < store.entries().size(); ++i) {
    const std::string what = store.entries()[i].layer + "." + store.entries()[i].spec.name;
    expect_gradient(what.c_str(), store.value(i).flat(), to_host(store.gradient(i).flat()), loss,
                    1e-3f, 1e-2, 1e-3);
  }
}

// Trains `epochs` epochs; the loss must fall below a quarter of where it
// started and the accuracy rise above `accuracy`. Returns the final evaluation.
inline Evaluation expect_converges(Trainer& trainer, const Dataset& data, int epochs,
                                   double accuracy = 0.95) {
  const double initial = trainer.evaluate(data).loss;
  for (int epoch = 0; epoch < epochs; ++epoch) trainer.train_epoch(data, epoch);
  const Evaluation final_eval = trainer.evaluate(data);
  EXPECT_LT(final_eval.loss, 0.25 * initial);
  EXPECT_GT(final_eval.accuracy, accuracy);
  return final_eval;
}

// 8x8 images holding one bar, horizontal (label 0) or vertical (label 1), of
// length 4 to 8 at a random place, over uniform noise.
inline Dataset bar_images(std::int64_t n, std::uint64_t seed) {
  constexpr int side = 8;
  const auto noise = random_values(n * side * side, seed, -0.3f, 0.3f);
  const auto draws = random_values(4 * n, seed + 1, 0.0f, 1.0f);
  std::vector<float> pixels(noise);
  std::vector<int> labels(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const int label = draws[4 * i] < 0.5f ? 0 : 1;
    const int length = 4 + static_cast<int>(draws[4 * i + 1] * 5);
    const int across = static_cast<int>(draws[4 * i + 2] * side);
    const int along = static_cast<int>(draws[4 * i + 3] * (side - length + 1));
    for (int t = along; t < along + length; ++t) {
      const int row = label == 0 ? across : t, col = label == 0 ? t : across;
      pixels[(i * side + row) * side + col] += 1.0f;
    }
    labels[i] = label;
  }
  return make_dataset(Shape{1, side, side}, 2, pixels, labels);
}

// Trains `model` (input [1, 8, 8], two classes) on bar images with SGD and
// momentum; it must reach > 95% training accuracy.
inline Evaluation expect_learns_bars(Model& model, float lr, int epochs) {
  const Dataset data = bar_images(512, 91);
  TrainOptions options;
  options.batch_size = 32;
  options.seed = 3;
  options.schedule.base_lr = lr;
  if (!model.compiled()) model.compile(options.batch_size, options.seed);
  SGD::Params hp;
  hp.momentum = 0.9f;
  SGD sgd(hp);
  Trainer trainer(model, sgd, options);
  return expect_converges(trainer, data, epochs);
}

// Trains a sequence model (input [8] token ids, output [8, vocabulary]) on
// counting tokens with SGD and momentum; it must predict > 95% of the next
// tokens.
inline Evaluation expect_learns_counting(Model& model, std::int64_t vocabulary, float lr,
                                         int epochs) {
  const Dataset data = counting_tokens(256, 8, vocabulary, 91);
  TrainOptions options;
  options.batch_size = 32;
  options.seed = 3;
  options.schedule.base_lr = lr;
  if (!model.compiled()) model.compile(options.batch_size, options.seed);
  SGD::Params hp;
  hp.momentum = 0.9f;
  SGD sgd(hp);
  Trainer trainer(model, sgd, options);
  return expect_converges(trainer, data, epochs);
}

}  // namespace tessera::test
