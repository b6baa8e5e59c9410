// Checks on whole models: finite-difference gradients of every parameter
// through the loss, and training that must converge.
#pragma once

#include <tessera/kernels/loss.hpp>
#include <tessera/optim/sgd.hpp>
#include <tessera/train/trainer.hpp>

#include <gtest/gtest-spi.h>

#include <cmath>
#include <string>

#include "tessera_test.hpp"

namespace tessera::test {

// The mean softmax cross-entropy of `model` on its input (filled for
// labels.size() samples), and the backward pass that fills the gradients.
class ModelLoss {
 public:
  ModelLoss(Model& model, const std::vector<int>& labels)
      : model_(model),
        batch_(static_cast<std::int64_t>(labels.size())),
        labels_("labels", batch_),
        sample_loss_("loss", batch_),
        correct_("correct", batch_) {
    from_host(labels_, labels);
  }
  double operator()() const {
    const auto logits = model_.forward(batch_, StepContext{});
    kernels::softmax_cross_entropy(ExecSpace(), logits.matrix(), labels_, 1.0f / batch_,
                                   model_.output_gradient(batch_).matrix(), sample_loss_, correct_);
    double sum = 0;
    for (float l : to_host(sample_loss_)) sum += l;
    return sum / batch_;
  }
  // Backward accumulates: the gradients are zeroed first.
  void backward() const {
    model_.zero_gradients();
    model_.backward(batch_, StepContext{});
  }

 private:
  Model& model_;
  std::int64_t batch_;
  Vector<int> labels_;
  Vector<float> sample_loss_;
  Vector<int> correct_;
};

// Relative tolerance of the directional check below, on the derivative along
// a tensor's own gradient (|g|): a gradient scaled by 1.01 is off by 1e-2.
constexpr double directional_rtol = 2e-3;
// Below this norm a gradient is zero in exact arithmetic (a bias in front of
// BatchNorm): it has no direction to check along, and scaling it changes
// nothing. The per-element check covers it.
constexpr double zero_gradient_norm = 1e-6;

// For parameter tensor `v` with analytic gradient g: the derivative of the
// loss along d = g / |g| (which is |g|) against the central difference at
// step h (the parameters move by h in norm), in double. One number a
// tensor, but it sees a uniform error of the whole tensor (a gradient scaled
// by 1.01) that the per-element check, limited by float rounding at each
// element's small step, lets through. Measured on the model tests: within
// 1e-4 of |g| at h = 2.5e-3 (float rounding of the loss dominates below
// 1e-3; steps of 1e-2 and more cross a ReLU's kink in the residual model).
inline double gradient_norm(const std::vector<float>& g) {
  double sum = 0;
  for (float x : g) sum += double(x) * x;
  return std::sqrt(sum);
}

template <class V>
void expect_directional_derivative(const char* what, const V& v, const std::vector<float>& g,
                                   const ModelLoss& loss, double h = 2.5e-3) {
  const std::vector<float> saved = to_host(v);
  // Also the analytic derivative along d: g . g / |g|.
  const double norm = gradient_norm(g);
  if (norm < zero_gradient_norm) return;
  std::vector<float> moved(saved.size());
  const auto loss_at = [&](double t) {
    for (std::size_t i = 0; i < saved.size(); ++i) moved[i] = float(saved[i] + t * g[i] / norm);
    from_host(v, moved);
    return loss();
  };
  const auto central = [&](double step) { return (loss_at(step) - loss_at(-step)) / (2 * step); };
  const double numeric = central(h), half = central(h / 2);
  from_host(v, saved);
  EXPECT_NEAR(norm, numeric, directional_rtol * std::fabs(numeric))
      << what << ": the derivative along the gradient (|g| = " << norm << ") against the "
      << "central difference " << numeric << " at step " << h << " (" << half << " at " << h / 2
      << ")";
}

// With the model's input for labels.size() samples already filled: every
// parameter gradient of the mean softmax cross-entropy against central
// differences, element by element (float steps: within 1e-2 relative), and
// each tensor's derivative along its gradient (within directional_rtol).
// scaled_tensor >= 0 multiplies that tensor's analytic gradient by `scale`
// first: a planted error the check must catch (expect_catches_scaled_gradients).
inline void expect_model_gradients(Model& model, const std::vector<int>& labels,
                                   int scaled_tensor = -1, float scale = 1.0f) {
  const ModelLoss loss(model, labels);
  loss();
  loss.backward();
  const auto& store = model.parameters();
  std::vector<std::vector<float>> analytic;
  for (std::size_t i = 0; i < store.entries().size(); ++i) {
    analytic.push_back(to_host(store.gradient(i).flat()));
    if (static_cast<int>(i) == scaled_tensor)
      for (auto& x : analytic.back()) x *= scale;
  }
  const auto loss_fn = [&] { return loss(); };
  for (std::size_t i = 0; i < store.entries().size(); ++i) {
    const std::string what = store.entries()[i].layer + "." + store.entries()[i].spec.name;
    expect_gradient(what.c_str(), store.value(i).flat(), analytic[i], loss_fn, 1e-3f, 1e-2, 1e-3);
    expect_directional_derivative(what.c_str(), store.value(i).flat(), analytic[i], loss);
  }
}

// The check above fails when any one parameter tensor's gradient is scaled
// by 1.01: run with each tensor's gradient scaled in turn, failures
// intercepted, the directional check must name that tensor. Zero gradients (see
// zero_gradient_norm) are not scaled. The model's parameters are left as
// they were.
inline void expect_catches_scaled_gradients(Model& model, const std::vector<int>& labels,
                                            float scale = 1.01f) {
  const ModelLoss loss(model, labels);
  loss();
  loss.backward();
  const auto& store = model.parameters();
  int scaled = 0;
  for (std::size_t i = 0; i < store.entries().size(); ++i) {
    const std::string what = store.entries()[i].layer + "." + store.entries()[i].spec.name;
    if (gradient_norm(to_host(store.gradient(i).flat())) < zero_gradient_norm) continue;
    ++scaled;
    ::testing::TestPartResultArray failures;
    {
      const ::testing::ScopedFakeTestPartResultReporter intercept(
          ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
      expect_model_gradients(model, labels, static_cast<int>(i), scale);
    }
    // The directional check must catch it (the per-element check may too).
    const std::string mark = what + ": the derivative along the gradient";
    bool named = false;
    for (int f = 0; f < failures.size(); ++f)
      named = named ||
              std::string(failures.GetTestPartResult(f).message()).find(mark) != std::string::npos;
    EXPECT_TRUE(named) << "the directional check passed " << what << "'s gradient scaled by "
                       << scale << " (" << failures.size() << " other failures)";
  }
  EXPECT_GT(scaled, 0) << "every gradient is zero";
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
