// Losses over the fused loss kernels.
#include <tessera/core/profiling.hpp>
#include <tessera/kernels/loss.hpp>
#include <tessera/model/loss.hpp>

namespace tessera {

SoftmaxCrossEntropy::SoftmaxCrossEntropy(float label_smoothing)
    : label_smoothing_(label_smoothing) {
  TESSERA_REQUIRE(
      label_smoothing >= 0 && label_smoothing < 1,
      "tessera::SoftmaxCrossEntropy: label smoothing " << label_smoothing << " must be in [0, 1)");
}

void SoftmaxCrossEntropy::evaluate(const ExecSpace& exec, const Tensor<float>& output,
                                   const Vector<int>& labels, float scale,
                                   const Tensor<float>& grad, const Vector<float>& sample_loss,
                                   const Vector<int>& correct, bool training) const {
  ScopedRegion region("tessera::SoftmaxCrossEntropy::evaluate");
  // One prediction per row of the output's last axis: a sample of a
  // classifier, a token of a sequence model ([N, T, vocabulary]).
  kernels::softmax_cross_entropy(exec, output.last_axis_matrix(), labels, scale,
                                 grad.last_axis_matrix(), sample_loss, correct,
                                 training ? label_smoothing_ : 0.0f);
}

const std::vector<std::string>& loss_types() {
  static const std::vector<std::string> types = {"cross_entropy"};
  return types;
}

std::unique_ptr<Loss> make_loss(const LossOptions& options) {
  if (options.type == "cross_entropy")
    return std::make_unique<SoftmaxCrossEntropy>(options.label_smoothing);
  TESSERA_REQUIRE(false, "tessera::make_loss: unknown loss type '" << options.type
                                                                   << "'; allowed: cross_entropy");
  return nullptr;
}

}  // namespace tessera
