// Loss kernels. Each writes one loss value per sample (the caller sums them
// in a fixed order, so totals do not depend on the thread count) and the
// gradient of the batch loss with respect to the model output, scaled by
// grad_scale (1 / global batch size for a mean over samples).
//
// softmax_cross_entropy: fused and numerically stable. It subtracts the row
// maximum before exponentiating and also records whether the arg-max
// matches the label. Label smoothing s (PyTorch's
// CrossEntropyLoss(label_smoothing=s)) trains against a target of
// 1 - s + s / classes on the label and s / classes elsewhere. On the host
// one thread takes a sample: its maximum in lane_max's lanes and its
// exponentials summed in lane_sum's (vector loops, the same for any
// thread count). On a GPU one thread per
// sample would leave it idle and read strided, so a team takes a sample
// (impl::softmax_cross_entropy_teams): maximum, arg-max (a NaN logit wins
// it), sum of exponentials and loss go through impl::team_sum, so the
// results do not depend on the team size or the thread count.
//
// mean_squared_error keeps one thread per sample everywhere: no deck trains
// with it.
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/host_paths.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/math.hpp>
#include <tessera/kernels/impl/team.hpp>
#include <tessera/kernels/impl/team_max.hpp>
#include <tessera/kernels/reduce.hpp>

#include <type_traits>

namespace tessera::kernels {

namespace impl {
// softmax_cross_entropy's work on either path: logits and labels read,
// the gradient, the losses and the hits written. 8 operations a logit (its
// exponential 3, log p 2, gradient 3), 2 a term of the loss (every class
// with label smoothing, the label's alone without) and a logarithm a sample.
template <class Logits, class Labels, class DLogits, class Loss, class Correct>
Work softmax_cross_entropy_work(const Logits& logits, const Labels&, const DLogits&, const Loss&,
                                const Correct&, typename DLogits::const_value_type off_target,
                                const char* narrow_reason = nullptr) {
  const std::int64_t n = logits.extent(0), classes = logits.extent(1);
  const std::int64_t terms = off_target != 0 ? classes : 1;
  return Work{bytes_of<typename Logits::non_const_value_type>(n * classes) +
                  bytes_of<typename Labels::non_const_value_type>(n) +
                  bytes_of<typename DLogits::non_const_value_type>(n * classes) +
                  bytes_of<typename Loss::non_const_value_type>(n) +
                  bytes_of<typename Correct::non_const_value_type>(n),
              double(n) * double(8 * classes + 2 * terms + 1), narrow_reason};
}

// One sample's softmax cross-entropy on the host, over a row of contiguous
// floats: the loss into loss, the gradient (scaled) into d, the first
// index of the largest logit returned. The scalars are locals (a store
// through d may otherwise alias a lambda's captures, and every loop stays
// scalar). The maximum in lane_max's lanes, then its first index; the
// exponentials without library calls (their arguments are <= 0), summed
// in lane_sum's lanes and order. With expf, one running maximum and one
// running sum, an LM head's 256 classes a row were scalar calls. d may be
// lg's memory: each class's logit is read before its gradient is written,
// the label's before any.
KOKKOS_INLINE_FUNCTION int cross_entropy_row(const float* lg, float* d, int classes, int label,
                                             float scale, float on, float off, float& loss) {
  const float max_logit = lane_max(lg, classes);
  int argmax = 0;
  while (argmax < classes && !(lg[argmax] == max_logit)) ++argmax;
  if (argmax == classes) argmax = 0;  // a NaN first logit
  const float sum = lane_sum_of<float>(
      classes, [&](std::int64_t c) { return exp_nonpositive(lg[c] - max_logit); });
  const float shift = max_logit + compat::log(sum);
  const bool labelled = label >= 0 && label < classes;
  const float label_log_p = labelled ? lg[label] - shift : 0.0f;
  loss = 0.0f;
  if (off == 0.0f)
    loss = labelled ? -on * label_log_p : 0.0f;
  else
    for (int k = 0; k < classes; ++k) loss -= (k == label ? on : off) * (lg[k] - shift);
  if (d == lg)
    for (int k = 0; k < classes; ++k) d[k] = scale * (exp_nonpositive(d[k] - shift) - off);
  else
    for (int k = 0; k < classes; ++k) d[k] = scale * (exp_nonpositive(lg[k] - shift) - off);
  if (labelled) d[label] = scale * (exp_nonpositive(label_log_p) - on);
  return argmax;
}

// softmax_cross_entropy on a GPU: a team per sample (row of logits), targets
// already made. Work items: samples x team size (4096 teams for the tiny
// GPT's 32 x 128 tokens), one launch.
template <class ExecSpace, class Logits, class Labels, class DLogits, class Loss, class Correct>
void softmax_cross_entropy_teams(const ExecSpace& exec, const Logits& logits, const Labels& labels,
                                 typename DLogits::const_value_type grad_scale,
                                 const DLogits& dlogits, const Loss& sample_loss,
                                 const Correct& sample_correct,
                                 typename DLogits::const_value_type on_target,
                                 typename DLogits::const_value_type off_target,
                                 TeamShape shape = {}) {
  using T = typename DLogits::non_const_value_type;
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const std::int64_t classes = logits.extent(1);
  parallel_for(
      "tessera::kernels::softmax_cross_entropy_teams",
      team_policy(exec, logits.extent(0), shape, team_sum_bytes<MaxAt<T>>() + team_sum_bytes<T>()),
      softmax_cross_entropy_work(logits, labels, dlogits, sample_loss, sample_correct, off_target),
      KOKKOS_LAMBDA(const Member& member) {
        MaxAt<T>* max_lanes = team_lanes_scratch<MaxAt<T>>(member);
        T* sum_lanes = team_lanes_scratch<T>(member);
        const std::int64_t i = member.league_rank();
        const std::int64_t label = static_cast<std::int64_t>(labels(i));
        const MaxAt<T> max =
            team_sum<MaxAt<T>>(member, max_lanes, classes, [&](const std::int64_t c) {
              return MaxAt<T>{logits(i, c), c};
            });
        const T sum = team_sum<T>(member, sum_lanes, classes, [&](const std::int64_t c) {
          return compat::exp(logits(i, c) - max.value);
        });
        const T log_sum = compat::log(sum);
        // - sum over classes of target * log p; each term writes its gradient.
        const T loss = team_sum<T>(member, sum_lanes, classes, [&](const std::int64_t c) {
          const T log_p = logits(i, c) - max.value - log_sum;
          const T target = c == label ? on_target : off_target;
          dlogits(i, c) = grad_scale * (compat::exp(log_p) - target);
          return target != T(0) ? -target * log_p : T(0);
        });
        Kokkos::single(Kokkos::PerTeam(member), [&] {
          sample_loss(i) = loss;
          sample_correct(i) = max.at == label ? 1 : 0;
        });
      });
}
}  // namespace impl

template <class ExecSpace, class Logits, class Labels, class DLogits, class Loss, class Correct>
void softmax_cross_entropy(const ExecSpace& exec, const Logits& logits, const Labels& labels,
                           typename DLogits::const_value_type grad_scale, const DLogits& dlogits,
                           const Loss& sample_loss, const Correct& sample_correct,
                           typename DLogits::const_value_type label_smoothing = 0) {
  ScopedRegion region("tessera::kernels::softmax_cross_entropy");
  const int n = static_cast<int>(logits.extent(0));
  const int classes = static_cast<int>(logits.extent(1));
  TESSERA_REQUIRE(labels.extent(0) == logits.extent(0) && dlogits.extent(0) == logits.extent(0) &&
                      dlogits.extent(1) == logits.extent(1) &&
                      sample_loss.extent(0) >= logits.extent(0) &&
                      sample_correct.extent(0) >= logits.extent(0),
                  "tessera::kernels::softmax_cross_entropy: logits ["
                      << n << ", " << classes << "], labels [" << labels.extent(0) << "], dlogits ["
                      << dlogits.extent(0) << ", " << dlogits.extent(1) << "], per-sample outputs ["
                      << sample_loss.extent(0) << "], [" << sample_correct.extent(0)
                      << "]; expected labels [N], dlogits like logits, outputs of at least N");
  TESSERA_REQUIRE(label_smoothing >= 0 && label_smoothing < 1,
                  "tessera::kernels::softmax_cross_entropy: label smoothing "
                      << label_smoothing << " is outside [0, 1)");
  using T = typename DLogits::non_const_value_type;
  // The target puts 1 - s on the label and s / classes on every class.
  const T off_target = label_smoothing / static_cast<T>(classes);
  const T on_target = T(1) - label_smoothing + off_target;
  if constexpr (!host_fast_paths_v<ExecSpace>) {
    impl::softmax_cross_entropy_teams(exec, logits, labels, grad_scale, dlogits, sample_loss,
                                      sample_correct, on_target, off_target);
  } else {
    static_assert(std::is_same<T, float>::value &&
                      std::is_same<typename Logits::non_const_value_type, float>::value &&
                      std::is_same<typename Logits::array_layout, Kokkos::LayoutRight>::value &&
                      std::is_same<typename DLogits::array_layout, Kokkos::LayoutRight>::value,
                  "tessera::kernels::softmax_cross_entropy: the host path takes float logits and "
                  "dlogits in LayoutRight rows (a row's classes contiguous)");
    impl::parallel_for(
        "tessera::kernels::softmax_cross_entropy", Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
        impl::softmax_cross_entropy_work(logits, labels, dlogits, sample_loss, sample_correct,
                                         off_target,
                                         "host schedule: one task per sample walks its classes"),
        KOKKOS_LAMBDA(const int i) {
          const int label = static_cast<int>(labels(i));
          float loss = 0;
          const int argmax = impl::cross_entropy_row(&logits(i, 0), &dlogits(i, 0), classes, label,
                                                     grad_scale, on_target, off_target, loss);
          sample_loss(i) = loss;
          sample_correct(i) = (argmax == label) ? 1 : 0;
        });
  }
}

// Mean squared error: sample loss = mean over features of (p - t)^2, as
// PyTorch's MSELoss(reduction="mean") once averaged over samples.
template <class ExecSpace, class Pred, class Target, class DPred, class Loss>
void mean_squared_error(const ExecSpace& exec, const Pred& pred, const Target& target,
                        typename DPred::const_value_type grad_scale, const DPred& dpred,
                        const Loss& sample_loss) {
  ScopedRegion region("tessera::kernels::mean_squared_error");
  const int n = static_cast<int>(pred.extent(0));
  const int features = static_cast<int>(pred.extent(1));
  TESSERA_REQUIRE(
      target.extent(0) == pred.extent(0) && target.extent(1) == pred.extent(1) &&
          dpred.extent(0) == pred.extent(0) && dpred.extent(1) == pred.extent(1) &&
          sample_loss.extent(0) >= pred.extent(0),
      "tessera::kernels::mean_squared_error: predictions ["
          << n << ", " << features << "], targets [" << target.extent(0) << ", " << target.extent(1)
          << "], gradient [" << dpred.extent(0) << ", " << dpred.extent(1) << "], per-sample loss ["
          << sample_loss.extent(0)
          << "]; expected targets and gradient like the predictions, loss of at least N");
  using T = typename DPred::non_const_value_type;
  const T inv_features = T(1) / static_cast<T>(features);
  // Predictions and targets read, the gradient and the losses written; 6
  // operations an element (difference 1, its square added 2, gradient 3)
  // and the mean a sample.
  const Work work{bytes_of<typename Pred::non_const_value_type>(std::int64_t(n) * features) +
                      bytes_of<typename Target::non_const_value_type>(std::int64_t(n) * features) +
                      bytes_of<T>(std::int64_t(n) * features) +
                      bytes_of<typename Loss::non_const_value_type>(n),
                  (6.0 * double(features) + 1) * double(n)};
  impl::parallel_for(
      "tessera::kernels::mean_squared_error", Kokkos::RangePolicy<ExecSpace>(exec, 0, n), work,
      KOKKOS_LAMBDA(const int i) {
        T sum = 0;
        for (int f = 0; f < features; ++f) {
          const T diff = pred(i, f) - target(i, f);
          sum += diff * diff;
          dpred(i, f) = grad_scale * T(2) * diff * inv_features;
        }
        sample_loss(i) = sum * inv_features;
      });
}

}  // namespace tessera::kernels
