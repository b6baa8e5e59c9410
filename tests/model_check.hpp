// Checks on whole models: finite-difference gradients of every parameter
// through the loss, and training that must converge.
#pragma once

#include <tessera/kernels/loss.hpp>
#include <tessera/model/trainer.hpp>

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

}  // namespace tessera::test
