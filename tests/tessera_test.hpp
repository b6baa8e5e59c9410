// Shared test helpers: the execution spaces every unit test runs on, host
// copies of device views, seeded fills, and a finite-difference gradient check.
#pragma once

#include <gtest/gtest.h>
#include <tessera/core/error.hpp>
#include <tessera/core/random.hpp>
#include <tessera/core/types.hpp>
#include <tessera/data/dataset.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

namespace tessera::test {

#if defined(TESSERA_SOURCE_DIR)
// The source tree the tests read (docs, decks, expected skips): the
// environment's TESSERA_SOURCE_DIR where set (test binaries carried to
// another machine, scripts/gpu-validate.sh --bundle), else the tree this
// build was configured from (the tests linking tessera_test_main).
inline std::string source_dir() {
  const char* env = std::getenv("TESSERA_SOURCE_DIR");
  return env && *env ? std::string(env) : std::string(TESSERA_SOURCE_DIR);
}
#endif

// Restores an environment variable as it was when the guard was made.
class EnvironmentGuard {
 public:
  explicit EnvironmentGuard(std::string name) : name_(std::move(name)) {
    const char* value = std::getenv(name_.c_str());
    set_ = value != nullptr;
    if (set_) value_ = value;
  }
  ~EnvironmentGuard() {
    if (set_)
      ::setenv(name_.c_str(), value_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  EnvironmentGuard(const EnvironmentGuard&) = delete;
  EnvironmentGuard& operator=(const EnvironmentGuard&) = delete;

 private:
  std::string name_, value_;
  bool set_ = false;
};

// The default space, plus Serial where it is enabled beside another backend.
#if defined(KOKKOS_ENABLE_SERIAL) &&                                    \
    (defined(KOKKOS_ENABLE_OPENMP) || defined(KOKKOS_ENABLE_THREADS) || \
     defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP))
using ExecSpaces = ::testing::Types<Kokkos::DefaultExecutionSpace, Kokkos::Serial>;
#else
using ExecSpaces = ::testing::Types<Kokkos::DefaultExecutionSpace>;
#endif

template <class V>
std::vector<typename V::non_const_value_type> to_host(const V& v) {
  auto mirror = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<typename V::non_const_value_type> out(v.size());
  // Views here are contiguous (LayoutRight), so element order is row-major.
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = mirror.data()[i];
  return out;
}

template <class V>
void from_host(const V& v, const std::vector<typename V::non_const_value_type>& values) {
  ASSERT_EQ(values.size(), v.size());
  auto mirror = Kokkos::create_mirror_view(Kokkos::HostSpace(), v);
  for (std::size_t i = 0; i < v.size(); ++i) mirror.data()[i] = values[i];
  Kokkos::deep_copy(v, mirror);
}

// f() must throw tessera::Error with `expected` in its message.
inline void expect_error(const std::function<void()>& f, const std::string& expected) {
  try {
    f();
    ADD_FAILURE() << "no tessera::Error; expected: " << expected;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

// The bit patterns of v: compares floats bit for bit (NaNs alike, -0 and
// +0 apart).
inline std::vector<std::uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// Seeded values in [lo, hi).
inline std::vector<float> random_values(std::size_t n, std::uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = lo + (hi - lo) * counter_uniform(seed, 7, i);
  return out;
}

// Central differences of loss() with respect to every element of v, compared
// to analytic[i]. Tolerance: atol + rtol * |analytic|.
template <class V>
void expect_gradient(const char* what, const V& v, const std::vector<float>& analytic,
                     const std::function<double()>& loss, float eps = 1e-2f, double rtol = 2e-3,
                     double atol = 2e-3) {
  std::vector<float> values = to_host(v);
  ASSERT_EQ(values.size(), analytic.size()) << what;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float saved = values[i];
    values[i] = saved + eps;
    from_host(v, values);
    const double up = loss();
    values[i] = saved - eps;
    from_host(v, values);
    const double down = loss();
    values[i] = saved;
    from_host(v, values);
    const double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(analytic[i], numeric, atol + rtol * std::fabs(numeric)) << what << " element " << i;
  }
}

// A device-resident dataset from host samples (row-major, one sample a row).
inline Dataset make_dataset(const Shape& sample_shape, int classes,
                            const std::vector<float>& samples, const std::vector<int>& labels) {
  Dataset d;
  d.sample_shape = sample_shape;
  d.classes = classes;
  const auto n = static_cast<std::int64_t>(labels.size());
  d.samples = Matrix<float>("tessera_test::samples", n, sample_shape.numel());
  d.labels = Vector<int>("tessera_test::labels", n);
  from_host(d.samples, samples);
  from_host(d.labels, labels);
  return d;
}

// 0, 1, ..., n - 1 on the device: an unshuffled order of samples.
inline Vector<std::int64_t> identity_order(std::int64_t n) {
  Vector<std::int64_t> order("tessera_test::order", n);
  std::vector<std::int64_t> host(n);
  for (std::int64_t i = 0; i < n; ++i) host[i] = i;
  from_host(order, host);
  return order;
}

// A token stream counting 0, 1, ..., vocabulary - 1, 0, 1, ... as random
// windows of `positions` tokens, `samples` of them per epoch: every next
// token follows from the current one.
inline Dataset counting_tokens(std::int64_t samples, std::int64_t positions,
                               std::int64_t vocabulary, std::uint64_t seed) {
  std::vector<std::int32_t> tokens(samples * positions + 1);
  const auto offset = static_cast<std::int64_t>(counter_hash(seed, 9, 0) % vocabulary);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<std::int32_t>((static_cast<std::int64_t>(i) + offset) % vocabulary);
  Dataset data = make_token_dataset(tokens, positions, true, "counting tokens");
  data.classes = static_cast<int>(vocabulary);
  return data;
}

// Points in [-1, 1)^2 labelled by `label(x, y)`.
template <class Label>
Dataset plane_dataset(std::int64_t n, std::uint64_t seed, Label label) {
  const auto xy = random_values(2 * n, seed);
  std::vector<int> labels(n);
  for (std::int64_t i = 0; i < n; ++i) labels[i] = label(xy[2 * i], xy[2 * i + 1]) ? 1 : 0;
  return make_dataset(Shape{2}, 2, xy, labels);
}

// Quadrant XOR: not linearly separable, so a hidden layer must work.
inline Dataset xor_dataset(std::int64_t n, std::uint64_t seed) {
  return plane_dataset(n, seed, [](float x, float y) { return (x > 0) != (y > 0); });
}

// A file name in gtest's scratch directory, unique to this process.
inline std::string scratch_path(const std::string& prefix, const std::string& name) {
  return ::testing::TempDir() + prefix + std::to_string(::getpid()) + "_" + name;
}

// `text` with the first `from` replaced by `to`; `from` must occur.
inline std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at == std::string::npos) return text;
  return text.replace(at, from.size(), to);
}

// Records the labels of the parallel_for kernels launched while it lives
// (Kokkos Tools' callback), so that a test can tell which code path ran.
class LaunchedKernels {
 public:
  LaunchedKernels() {
    labels().clear();
    Kokkos::Tools::Experimental::set_begin_parallel_for_callback(
        [](const char* name, std::uint32_t, std::uint64_t*) { labels().emplace_back(name); });
  }
  ~LaunchedKernels() { Kokkos::Tools::Experimental::set_begin_parallel_for_callback(nullptr); }
  LaunchedKernels(const LaunchedKernels&) = delete;
  LaunchedKernels& operator=(const LaunchedKernels&) = delete;

  bool launched(const std::string& label) const {
    return std::find(labels().begin(), labels().end(), label) != labels().end();
  }
  // The distinct labels, in order of first launch, for failure messages.
  std::string list() const {
    std::string out;
    for (std::size_t i = 0; i < labels().size(); ++i)
      if (std::find(labels().begin(), labels().begin() + i, labels()[i]) == labels().begin() + i)
        out += (out.empty() ? "" : ", ") + labels()[i];
    return out;
  }

 private:
  static std::vector<std::string>& labels() {
    static std::vector<std::string> names;
    return names;
  }
};

}  // namespace tessera::test
