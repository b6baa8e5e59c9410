// Losses: fused softmax cross-entropy against a double-precision reference,
// finite-difference gradients, stability for large logits, accuracy counts,
// the GPU's team per sample at every team size (ties and NaNs in the
// arg-max); the same loss over sequences (one prediction per position);
// mean squared error values and gradient.
#include <tessera/kernels/loss.hpp>
#include <tessera/model/loss.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "team_sizes.hpp"
#include "tessera_test.hpp"

namespace {

using namespace tessera;

template <class ExecSpace>
class SoftmaxCrossEntropy : public ::testing::Test {};
TYPED_TEST_SUITE(SoftmaxCrossEntropy, test::ExecSpaces);

template <class ExecSpace>
struct Buffers {
  using Mem = typename ExecSpace::memory_space;
  Buffers(int n, int c)
      : logits("logits", n, c),
        dlogits("dlogits", n, c),
        labels("labels", n),
        loss("loss", n),
        correct("correct", n) {}
  Kokkos::View<float**, Kokkos::LayoutRight, Mem> logits, dlogits;
  Kokkos::View<int*, Mem> labels;
  Kokkos::View<float*, Mem> loss;
  Kokkos::View<int*, Mem> correct;
  double mean_loss(float scale, float smoothing = 0.0f) {
    kernels::softmax_cross_entropy(ExecSpace(), logits, labels, scale, dlogits, loss, correct,
                                   smoothing);
    double sum = 0;
    for (float l : test::to_host(loss)) sum += l;
    return sum / static_cast<double>(labels.extent(0));
  }
};

TYPED_TEST(SoftmaxCrossEntropy, MatchesReferenceAndCountsCorrect) {
  const int n = 6, c = 4;
  Buffers<TypeParam> buf(n, c);
  const auto z = test::random_values(n * c, 41, -3.0f, 3.0f);
  const std::vector<int> labels = {0, 1, 2, 3, 1, 2};
  test::from_host(buf.logits, z);
  test::from_host(buf.labels, labels);
  buf.mean_loss(1.0f / n);
  const auto loss = test::to_host(buf.loss);
  const auto grad = test::to_host(buf.dlogits);
  const auto correct = test::to_host(buf.correct);
  for (int i = 0; i < n; ++i) {
    double max = z[i * c], sum = 0;
    int argmax = 0;
    for (int k = 1; k < c; ++k)
      if (z[i * c + k] > max) max = z[i * c + k], argmax = k;
    for (int k = 0; k < c; ++k) sum += std::exp(double(z[i * c + k]));
    EXPECT_NEAR(loss[i], std::log(sum) - z[i * c + labels[i]], 1e-5) << "sample " << i;
    EXPECT_EQ(correct[i], argmax == labels[i] ? 1 : 0) << "sample " << i;
    for (int k = 0; k < c; ++k) {
      const double p = std::exp(double(z[i * c + k])) / sum;
      EXPECT_NEAR(grad[i * c + k], (p - (k == labels[i])) / n, 1e-6) << i << ", " << k;
    }
  }
}

// An LM head's width (the host's vector loops run whole lanes and a
// tail), with and without label smoothing, against double precision; and
// with dlogits in logits' own memory, the same bits.
TYPED_TEST(SoftmaxCrossEntropy, ManyClassesMatchReferenceAlsoInPlace) {
  const int n = 5, c = 259;
  for (const float smoothing : {0.0f, 0.1f}) {
    Buffers<TypeParam> buf(n, c);
    const auto z = test::random_values(n * c, 43, -6.0f, 6.0f);
    const std::vector<int> labels = {0, 258, 17, 128, 200};
    test::from_host(buf.logits, z);
    test::from_host(buf.labels, labels);
    buf.mean_loss(1.0f / n, smoothing);
    const auto loss = test::to_host(buf.loss);
    const auto grad = test::to_host(buf.dlogits);
    const auto correct = test::to_host(buf.correct);
    const double off = smoothing / c, on = 1.0 - smoothing + off;
    for (int i = 0; i < n; ++i) {
      double max = z[i * c], sum = 0;
      int argmax = 0;
      for (int k = 1; k < c; ++k)
        if (z[i * c + k] > max) max = z[i * c + k], argmax = k;
      for (int k = 0; k < c; ++k) sum += std::exp(double(z[i * c + k]) - max);
      double ref = 0;
      for (int k = 0; k < c; ++k) {
        const double log_p = z[i * c + k] - max - std::log(sum);
        const double target = k == labels[i] ? on : off;
        ref -= target * log_p;
        EXPECT_NEAR(grad[i * c + k], (std::exp(log_p) - target) / n, 1e-7)
            << "smoothing " << smoothing << ", " << i << ", " << k;
      }
      EXPECT_NEAR(loss[i], ref, 1e-5) << "smoothing " << smoothing << ", sample " << i;
      EXPECT_EQ(correct[i], argmax == labels[i] ? 1 : 0) << "sample " << i;
    }
    // In place: the gradient over the logits.
    kernels::softmax_cross_entropy(TypeParam(), buf.logits, buf.labels, 1.0f / n, buf.logits,
                                   buf.loss, buf.correct, smoothing);
    EXPECT_EQ(test::to_host(buf.logits), grad) << "smoothing " << smoothing;
    EXPECT_EQ(test::to_host(buf.loss), loss) << "smoothing " << smoothing;
  }
}

TYPED_TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  const int n = 3, c = 5;
  Buffers<TypeParam> buf(n, c);
  test::from_host(buf.logits, test::random_values(n * c, 42, -2.0f, 2.0f));
  test::from_host(buf.labels, std::vector<int>{4, 0, 2});
  buf.mean_loss(1.0f / n);
  const auto analytic = test::to_host(buf.dlogits);
  test::expect_gradient(
      "dlogits", buf.logits, analytic, [&]() { return buf.mean_loss(1.0f / n); }, 1e-2f, 2e-3,
      1e-4);
}

TYPED_TEST(SoftmaxCrossEntropy, LabelSmoothingMatchesReferenceAndFiniteDifferences) {
  const int n = 4, c = 5;
  const float s = 0.1f;
  Buffers<TypeParam> buf(n, c);
  const auto z = test::random_values(n * c, 43, -3.0f, 3.0f);
  const std::vector<int> labels = {3, 0, 4, 1};
  test::from_host(buf.logits, z);
  test::from_host(buf.labels, labels);
  buf.mean_loss(1.0f / n, s);
  const auto loss = test::to_host(buf.loss);
  const auto grad = test::to_host(buf.dlogits);
  for (int i = 0; i < n; ++i) {
    double sum = 0;
    for (int k = 0; k < c; ++k) sum += std::exp(double(z[i * c + k]));
    double expected = 0;
    for (int k = 0; k < c; ++k) {
      const double log_p = z[i * c + k] - std::log(sum);
      const double target = (k == labels[i] ? 1.0 - s : 0.0) + s / c;
      expected -= target * log_p;
      EXPECT_NEAR(grad[i * c + k], (std::exp(log_p) - target) / n, 1e-6) << i << ", " << k;
    }
    EXPECT_NEAR(loss[i], expected, 1e-5) << "sample " << i;
  }
  test::expect_gradient(
      "dlogits", buf.logits, grad, [&]() { return buf.mean_loss(1.0f / n, s); }, 1e-2f, 2e-3, 1e-4);
  test::expect_error(
      [&] { buf.mean_loss(1.0f, 1.0f); },
      "tessera::kernels::softmax_cross_entropy: label smoothing 1 is outside [0, 1)");
}

TYPED_TEST(SoftmaxCrossEntropy, StableForLargeLogits) {
  Buffers<TypeParam> buf(2, 3);
  test::from_host(buf.logits, std::vector<float>{1000.0f, 0.0f, -1000.0f, 500.0f, 500.0f, 500.0f});
  test::from_host(buf.labels, std::vector<int>{0, 1});
  buf.mean_loss(1.0f);
  const auto loss = test::to_host(buf.loss);
  EXPECT_NEAR(loss[0], 0.0, 1e-6);
  EXPECT_NEAR(loss[1], std::log(3.0), 1e-5);
  for (float g : test::to_host(buf.dlogits)) EXPECT_TRUE(std::isfinite(g));
}

// The GPU's kernel (a team per sample): the same bits at every team size,
// close to the double-precision reference with and without label
// smoothing, for rows shorter than, as long as and longer than team_sum's
// 64 lanes. Row 0 holds its maximum twice and is labelled with the first,
// row 1 the same with the second: ties go to the first. Row 2 holds a NaN,
// which wins the arg-max.
TYPED_TEST(SoftmaxCrossEntropy, TeamsSameBitsForEveryTeamSizeAndCloseToDouble) {
  using E = TypeParam;
  const int n = 5;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const int c : {1, 10, 64, 65, 257})
    for (const float smoothing : {0.0f, 0.1f}) {
      SCOPED_TRACE(std::to_string(c) + " classes, smoothing " + std::to_string(smoothing));
      Buffers<E> buf(n, c);
      auto z = test::random_values(n * c, 44, -3.0f, 3.0f);
      std::vector<int> labels = {0, 0, 0, 0, 0};
      for (int i = 0; i < n; ++i) labels[i] = (7 * i + 3) % c;
      if (c >= 3) {
        z[0 * c + c / 2] = z[0 * c + c - 1] = 5.0f;
        labels[0] = c / 2;
        z[1 * c + c / 2] = z[1 * c + c - 1] = 5.0f;
        labels[1] = c - 1;
        z[2 * c + 1] = nan;
        labels[2] = 1;
      }
      test::from_host(buf.logits, z);
      test::from_host(buf.labels, labels);
      const float scale = 1.0f / n;
      const float off = smoothing / c, on = 1.0f - smoothing + off;
      std::vector<float> first_loss, first_grad;
      std::vector<int> first_correct;
      for (const kernels::TeamShape team : test::team_shapes<E>()) {
        kernels::impl::softmax_cross_entropy_teams(E(), buf.logits, buf.labels, scale, buf.dlogits,
                                                   buf.loss, buf.correct, on, off, team);
        const auto loss = test::to_host(buf.loss), grad = test::to_host(buf.dlogits);
        const auto correct = test::to_host(buf.correct);
        if (!first_loss.empty()) {
          // Bit patterns, so that NaNs compare too.
          EXPECT_EQ(0, std::memcmp(loss.data(), first_loss.data(), loss.size() * sizeof(float)))
              << "team size " << team.size;
          EXPECT_EQ(0, std::memcmp(grad.data(), first_grad.data(), grad.size() * sizeof(float)))
              << "team size " << team.size;
          EXPECT_EQ(correct, first_correct) << "team size " << team.size;
          continue;
        }
        first_loss = loss;
        first_grad = grad;
        first_correct = correct;
        for (int i = 0; i < n; ++i) {
          const float* row = &z[i * c];
          int argmax = 0;
          for (int k = 1; k < c; ++k)
            if (row[k] > row[argmax]) argmax = k;
          if (c >= 3 && i == 2) {
            EXPECT_TRUE(std::isnan(loss[i]));
            EXPECT_EQ(correct[i], 1) << "a NaN wins the arg-max";
            continue;
          }
          EXPECT_EQ(correct[i], argmax == labels[i] ? 1 : 0) << "sample " << i;
          double sum = 0;
          for (int k = 0; k < c; ++k) sum += std::exp(double(row[k]) - row[argmax]);
          double expected = 0;
          for (int k = 0; k < c; ++k) {
            const double log_p = double(row[k]) - row[argmax] - std::log(sum);
            const double target = k == labels[i] ? on : off;
            expected -= target * log_p;
            EXPECT_NEAR(grad[i * c + k], scale * (std::exp(log_p) - target), 1e-6)
                << i << ", " << k;
          }
          EXPECT_NEAR(loss[i], expected, 2e-5) << "sample " << i;
        }
      }
    }
}

// A language model's output [N, T, vocabulary]: one prediction per token,
// each the cross-entropy of its own row, the gradient of the scaled sum.
TEST(SequenceCrossEntropy, OnePredictionPerPosition) {
  const std::int64_t n = 2, t = 3, v = 5;
  Tensor<float> logits("logits", Shape{n, t, v}), grad("grad", Shape{n, t, v});
  Vector<int> labels("labels", n * t), correct("correct", n * t);
  Vector<float> loss("loss", n * t);
  const auto z = test::random_values(n * t * v, 43, -3.0f, 3.0f);
  const std::vector<int> y = {4, 0, 2, 1, 1, 3};
  test::from_host(logits.flat(), z);
  test::from_host(labels, y);
  const tessera::SoftmaxCrossEntropy ce;
  const float scale = 1.0f / static_cast<float>(n * t);
  const auto mean = [&]() {
    ce.evaluate(ExecSpace(), logits, labels, scale, grad, loss, correct, true);
    double sum = 0;
    for (float l : test::to_host(loss)) sum += l;
    return sum * scale;
  };
  mean();
  const auto l = test::to_host(loss);
  for (std::int64_t r = 0; r < n * t; ++r) {
    double sum = 0;
    for (std::int64_t k = 0; k < v; ++k) sum += std::exp(double(z[r * v + k]));
    EXPECT_NEAR(l[r], std::log(sum) - z[r * v + y[r]], 1e-5) << "prediction " << r;
  }
  const auto analytic = test::to_host(grad.flat());
  test::expect_gradient("dlogits", logits.flat(), analytic, mean, 1e-2f, 2e-3, 1e-4);
}

template <class ExecSpace>
class MeanSquaredError : public ::testing::Test {};
TYPED_TEST_SUITE(MeanSquaredError, test::ExecSpaces);

TYPED_TEST(MeanSquaredError, ValuesAndGradient) {
  using Mem = typename TypeParam::memory_space;
  const int n = 3, f = 4;
  Kokkos::View<float**, Kokkos::LayoutRight, Mem> pred("pred", n, f), target("target", n, f),
      grad("grad", n, f);
  Kokkos::View<float*, Mem> loss("loss", n);
  const auto p = test::random_values(n * f, 91), t = test::random_values(n * f, 92);
  test::from_host(pred, p);
  test::from_host(target, t);
  const auto mean_loss = [&]() {
    kernels::mean_squared_error(TypeParam(), pred, target, 1.0f / n, grad, loss);
    double sum = 0;
    for (float l : test::to_host(loss)) sum += l;
    return sum / n;
  };
  double reference = 0;
  for (int i = 0; i < n * f; ++i) reference += double(p[i] - t[i]) * (p[i] - t[i]);
  EXPECT_NEAR(mean_loss(), reference / (n * f), 1e-6);
  const auto l = test::to_host(loss);
  for (int i = 0; i < n; ++i) {
    double sample = 0;
    for (int k = 0; k < f; ++k)
      sample += double(p[i * f + k] - t[i * f + k]) * (p[i * f + k] - t[i * f + k]);
    EXPECT_NEAR(l[i], sample / f, 1e-6) << "sample " << i;
  }
  test::expect_gradient("dpred", pred, test::to_host(grad), mean_loss, 1e-2f, 2e-3, 1e-5);
}

}  // namespace
