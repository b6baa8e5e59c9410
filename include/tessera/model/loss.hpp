// The loss a model trains against, as an object the deck selects
// ([loss] type): per-sample losses and correct predictions of a batch, and
// the gradient of the scaled loss sum with respect to the model output.
#pragma once

#include <tessera/core/tensor.hpp>
#include <tessera/settings/train_options.hpp>

#include <memory>

namespace tessera {

class Loss {
 public:
  virtual ~Loss() = default;
  // The deck's name, e.g. "cross_entropy".
  virtual const char* name() const = 0;
  // output: [N, classes], or [N, ..., classes] with one prediction per row
  // of the last axis (a language model's [N, T, vocabulary]); labels: one
  // per prediction. Writes sample_loss(i) and correct(i) for every
  // prediction i (evaluation reports the plain loss: no label smoothing
  // when training is false), and the gradient of scale times the sum of the
  // training losses into grad (the output's shape).
  virtual void evaluate(const ExecSpace& exec, const Tensor<float>& output,
                        const Vector<int>& labels, float scale, const Tensor<float>& grad,
                        const Vector<float>& sample_loss, const Vector<int>& correct,
                        bool training) const = 0;
};

// Softmax cross-entropy, fused and numerically stable, with optional label
// smoothing (PyTorch's CrossEntropyLoss(label_smoothing=s)).
class SoftmaxCrossEntropy final : public Loss {
 public:
  explicit SoftmaxCrossEntropy(float label_smoothing = 0.0f);
  const char* name() const override { return "cross_entropy"; }
  void evaluate(const ExecSpace& exec, const Tensor<float>& output, const Vector<int>& labels,
                float scale, const Tensor<float>& grad, const Vector<float>& sample_loss,
                const Vector<int>& correct, bool training) const override;

 private:
  float label_smoothing_;
};

// The loss options.type names (one of loss_types()).
std::unique_ptr<Loss> make_loss(const LossOptions& options);

}  // namespace tessera
