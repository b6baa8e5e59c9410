// Products of 16-bit matrices with float accumulation (kernels/mixed_gemm.hpp):
// every method against a double-precision reference of the same 16-bit
// values, for bf16 and fp16, every transpose combination, shapes with edge
// tiles in both directions and without terms (k = 0), alpha and beta;
// beta = 0 ignores NaN in C; a
// reused workspace; errors that name the shapes.
//
// Tolerance: products of two bf16 or two fp16 values are exact in float,
// so a float accumulation of k terms is off by at most about k float
// roundings of the sum of |terms| (gamma_k = k u, u = 2^-24), plus one
// rounding each for alpha, beta and their sum.
#include <tessera/kernels/mixed_gemm.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tessera_test.hpp"

namespace {

using namespace tessera;
using kernels::MixedGemmMethod;

template <class ExecSpace>
class MixedGemm : public ::testing::Test {};
TYPED_TEST_SUITE(MixedGemm, test::ExecSpaces);

template <class T, class Space>
Kokkos::View<T**, Kokkos::LayoutRight, Space> sixteen_bit_matrix(std::int64_t rows,
                                                                 std::int64_t cols,
                                                                 std::uint64_t seed,
                                                                 std::vector<double>& values) {
  Kokkos::View<T**, Kokkos::LayoutRight, Space> m("m", rows, cols);
  auto host = Kokkos::create_mirror_view(m);
  const std::vector<float> r = test::random_values(rows * cols, seed, -2.0f, 2.0f);
  values.resize(r.size());
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) {
      host(i, j) = T(r[i * cols + j]);
      values[i * cols + j] = static_cast<double>(static_cast<float>(host(i, j)));
    }
  Kokkos::deep_copy(m, host);
  return m;
}

struct Case {
  const char* trans_a;
  const char* trans_b;
  std::int64_t m, n, k;
  float alpha, beta;
};

template <class ExecSpace, class T>
void check_method(MixedGemmMethod method, const Case& c) {
  using Space = typename ExecSpace::memory_space;
  const bool ta = c.trans_a[0] == 'T', tb = c.trans_b[0] == 'T';
  std::vector<double> av, bv;
  const auto a = sixteen_bit_matrix<T, Space>(ta ? c.k : c.m, ta ? c.m : c.k, 11, av);
  const auto b = sixteen_bit_matrix<T, Space>(tb ? c.n : c.k, tb ? c.k : c.n, 12, bv);
  const std::vector<float> c0 = test::random_values(c.m * c.n, 13);
  Matrix<float, Space> out("c", c.m, c.n);
  auto host = Kokkos::create_mirror_view(out);
  for (std::int64_t i = 0; i < c.m * c.n; ++i)
    host.data()[i] = c.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : c0[i];
  Kokkos::deep_copy(out, host);
  kernels::MixedGemmWorkspace<Space> workspace;
  kernels::mixed_gemm(ExecSpace(), c.trans_a, c.trans_b, c.alpha, a, b, c.beta, out, workspace,
                      method);
  Kokkos::deep_copy(host, out);
  const double u = std::ldexp(1.0, -24);
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t j = 0; j < c.n; ++j) {
      double sum = 0, magnitude = 0;
      for (std::int64_t p = 0; p < c.k; ++p) {
        const double x = ta ? av[p * c.m + i] : av[i * c.k + p];
        const double y = tb ? bv[j * c.k + p] : bv[p * c.n + j];
        sum += x * y;
        magnitude += std::fabs(x * y);
      }
      const double prior = c.beta == 0.0f ? 0.0 : c0[i * c.n + j];
      const double expected = c.alpha * sum + c.beta * prior;
      const double bound =
          (c.k + 3) * u * (std::fabs(c.alpha) * magnitude + std::fabs(c.beta * prior)) * 1.01;
      ASSERT_NEAR(host(i, j), expected, bound)
          << kernels::to_string(method) << " op" << c.trans_a << "(A) op" << c.trans_b << "(B), m "
          << c.m << " n " << c.n << " k " << c.k << ", C(" << i << ", " << j << ")";
    }
}

template <class ExecSpace>
std::vector<MixedGemmMethod> methods() {
  std::vector<MixedGemmMethod> all{MixedGemmMethod::automatic, MixedGemmMethod::widen_blas,
                                   MixedGemmMethod::tiled};
  if (kernels::automatic_mixed_gemm_method<ExecSpace>() == MixedGemmMethod::vendor)
    all.push_back(MixedGemmMethod::vendor);
  return all;
}

const std::vector<Case> cases = {
    {"N", "N", 7, 13, 19, 1.0f, 0.0f}, {"N", "T", 9, 8, 33, 0.5f, 1.5f},
    {"T", "N", 4, 17, 5, -2.0f, 1.0f}, {"T", "T", 11, 3, 64, 1.0f, -0.25f},
    {"N", "N", 1, 1, 1, 1.0f, 0.0f},   {"N", "T", 33, 40, 128, 1.0f, 0.0f},
    {"N", "N", 3, 5, 0, 1.0f, 2.0f},   {"T", "N", 3, 5, 0, 1.0f, 0.0f},
};

TYPED_TEST(MixedGemm, EveryMethodMatchesTheReferenceInBf16) {
  for (const MixedGemmMethod method : methods<TypeParam>())
    for (const Case& c : cases) check_method<TypeParam, bf16>(method, c);
}

TYPED_TEST(MixedGemm, EveryMethodMatchesTheReferenceInFp16) {
  for (const MixedGemmMethod method : methods<TypeParam>())
    for (const Case& c : cases) check_method<TypeParam, fp16>(method, c);
}

// A workspace sized by a large product serves a smaller one, and the other
// way round it grows.
TYPED_TEST(MixedGemm, WorkspaceIsReusedAcrossShapes) {
  for (const Case& c : {Case{"N", "N", 20, 24, 30, 1.0f, 0.0f}, Case{"N", "T", 3, 5, 7, 1.0f, 0.0f},
                        Case{"T", "N", 40, 9, 50, 1.0f, 0.0f}})
    check_method<TypeParam, bf16>(MixedGemmMethod::widen_blas, c);
}

// Without rounding, the methods agree exactly: small integers times powers
// of two are exact in bf16, their products and sums exact in float.
TYPED_TEST(MixedGemm, ExactInputsGiveExactResults) {
  using Space = typename TypeParam::memory_space;
  const std::int64_t m = 6, n = 10, k = 12;
  Kokkos::View<bf16**, Kokkos::LayoutRight, Space> a("a", m, k), b("b", k, n);
  auto ha = Kokkos::create_mirror_view(a);
  auto hb = Kokkos::create_mirror_view(b);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t p = 0; p < k; ++p) ha(i, p) = bf16(static_cast<float>((i + 2 * p) % 7 - 3));
  for (std::int64_t p = 0; p < k; ++p)
    for (std::int64_t j = 0; j < n; ++j) hb(p, j) = bf16(0.25f * static_cast<float>((p * j) % 5));
  Kokkos::deep_copy(a, ha);
  Kokkos::deep_copy(b, hb);
  for (const MixedGemmMethod method : methods<TypeParam>()) {
    Matrix<float, Space> c("c", m, n);
    kernels::MixedGemmWorkspace<Space> workspace;
    kernels::mixed_gemm(TypeParam(), "N", "N", 1.0f, a, b, 0.0f, c, workspace, method);
    const std::vector<float> got = test::to_host(c);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        float expected = 0;
        for (std::int64_t p = 0; p < k; ++p)
          expected += static_cast<float>(ha(i, p)) * static_cast<float>(hb(p, j));
        ASSERT_EQ(got[i * n + j], expected)
            << kernels::to_string(method) << " C(" << i << ", " << j << ")";
      }
  }
}

TYPED_TEST(MixedGemm, ErrorsNameTheShapes) {
  using Space = typename TypeParam::memory_space;
  Kokkos::View<fp16**, Kokkos::LayoutRight, Space> a("a", 4, 5), b("b", 6, 3);
  Matrix<float, Space> c("c", 4, 3);
  kernels::MixedGemmWorkspace<Space> workspace;
  test::expect_error(
      [&] { kernels::mixed_gemm(TypeParam(), "N", "N", 1.0f, a, b, 0.0f, c, workspace); },
      "tessera::kernels::mixed_gemm: shape mismatch: opN(A) [4, 5], opN(B) [6, 3], C [4, 3]");
  test::expect_error(
      [&] { kernels::mixed_gemm(TypeParam(), "C", "N", 1.0f, a, b, 0.0f, c, workspace); },
      "transA and transB must be \"N\" or \"T\"");
  if (kernels::automatic_mixed_gemm_method<TypeParam>() != MixedGemmMethod::vendor)
    test::expect_error(
        [&] {
          kernels::mixed_gemm(TypeParam(), "N", "T", 1.0f, a, a, 0.0f,
                              Matrix<float, Space>("c", 4, 4), workspace, MixedGemmMethod::vendor);
        },
        "method vendor needs the CUDA backend");
}

}  // namespace
