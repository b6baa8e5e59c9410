// Products of 16-bit matrices with float accumulation:
//   C = alpha op(A) op(B) + beta C,  A and B in bf16 or fp16, C in float,
// the product that mixed-precision layers take with 16-bit activations and
// weight copies. A product of two bf16 or two fp16 values is exact in float,
// so only the sums round, in float, as in a float gemm. Methods:
//   widen_blas  A and B widened into float workspace, then the float gemm
//               (the vendor BLAS on the host)
//   tiled       Tessera's kernel: tiles of 4 x 8 outputs, each summing its
//               terms in order of k; any backend
//   vendor      cuBLAS's cublasGemmEx (16-bit inputs, float output and
//               compute; impl/mixed_gemm_cublas.hpp); CUDA only
// `automatic` takes vendor on CUDA, widen_blas on the host (faster there:
// docs/precision.md has the measurement) and tiled elsewhere (HIP: Debian
// packages no rocBLAS to build against).
#pragma once

#include <tessera/core/config.hpp>
#include <tessera/core/enum_names.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/impl/gemm_operand.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/mixed_gemm_cublas.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace tessera::kernels {

enum class MixedGemmMethod { automatic, widen_blas, tiled, vendor };

inline constexpr EnumNames<MixedGemmMethod, 4> mixed_gemm_methods{
    "mixed_gemm method",
    {{MixedGemmMethod::automatic, "automatic"},
     {MixedGemmMethod::widen_blas, "widen_blas"},
     {MixedGemmMethod::tiled, "tiled"},
     {MixedGemmMethod::vendor, "vendor"}}};
inline const char* to_string(MixedGemmMethod method) { return mixed_gemm_methods.name(method); }

// Float copies of the operands for widen_blas, and float results that a
// layer rounds to 16 bits (mixed_gemm_result), kept between calls so that a
// training step allocates nothing once the largest product has run. The
// layers of a model share one: they run one at a time.
template <class Space = MemSpace>
struct MixedGemmWorkspace {
  Vector<float, Space> a, b, c;
};

// A float matrix [rows, cols] in workspace.c, which grows to fit: where a
// product with a 16-bit result sums before it is rounded. Valid until the
// next call.
template <class Space>
UnmanagedMatrix<float, Space> mixed_gemm_result(MixedGemmWorkspace<Space>& workspace,
                                                std::int64_t rows, std::int64_t cols) {
  if (static_cast<std::int64_t>(workspace.c.extent(0)) < rows * cols)
    workspace.c = Vector<float, Space>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "tessera::MixedGemmWorkspace::c"),
        rows * cols);
  return UnmanagedMatrix<float, Space>(workspace.c.data(), rows, cols);
}

namespace impl {

constexpr int mixed_tile_rows = 4, mixed_tile_cols = 8;

inline bool valid_trans(const char* trans) {
  return trans != nullptr && (std::strcmp(trans, "N") == 0 || std::strcmp(trans, "T") == 0);
}

template <class A, class B, class C>
void check_mixed_gemm(const char* fn, const char* trans_a, const char* trans_b, const A& a,
                      const B& b, const C& c) {
  TESSERA_REQUIRE(valid_trans(trans_a) && valid_trans(trans_b),
                  fn << ": transA and transB must be \"N\" or \"T\"");
  const Operand oa = operand(trans_a, a), ob = operand(trans_b, b);
  TESSERA_REQUIRE(oa.cols == ob.rows && static_cast<std::int64_t>(c.extent(0)) == oa.rows &&
                      static_cast<std::int64_t>(c.extent(1)) == ob.cols,
                  fn << ": shape mismatch: op" << trans_a << "(A) [" << oa.rows << ", " << oa.cols
                     << "], op" << trans_b << "(B) [" << ob.rows << ", " << ob.cols << "], C ["
                     << c.extent(0) << ", " << c.extent(1)
                     << "]; expected op(A) [m, k], op(B) [k, n], C [m, n]");
  TESSERA_REQUIRE(c.span_is_contiguous() && a.span_is_contiguous() && b.span_is_contiguous(),
                  fn << ": A, B and C must be contiguous row-major matrices");
}

// `from` (a contiguous view) widened into `to`, which grows to fit; the
// float matrix of from's shape over it.
template <class ExecSpace, class M, class Space>
UnmanagedMatrix<const float, Space> widen_into(const ExecSpace& exec, const M& from,
                                               Vector<float, Space>& to, const char* label) {
  const std::int64_t n = from.size();
  if (static_cast<std::int64_t>(to.extent(0)) < n)
    to = Vector<float, Space>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)),
                              n);
  const auto* in = from.data();
  float* out = to.data();
  // from read, its float copy written; conversions only.
  const Work work{bytes_of<typename M::value_type>(n) + bytes_of<float>(n), 0};
  for_each_span(
      exec, "tessera::kernels::mixed_gemm_widen", n, work,
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) out[i] = widen(in[i]);
      });
  return UnmanagedMatrix<const float, Space>(out, from.extent(0), from.extent(1));
}

template <class ExecSpace, class A, class B, class C>
void mixed_gemm_widen_blas(const ExecSpace& exec, const char* trans_a, const char* trans_b,
                           float alpha, const A& a, const B& b, float beta, const C& c,
                           MixedGemmWorkspace<typename C::memory_space>& ws) {
  const auto wa = widen_into(exec, a, ws.a, "tessera::MixedGemmWorkspace::a");
  const auto wb = widen_into(exec, b, ws.b, "tessera::MixedGemmWorkspace::b");
  impl::gemm(exec, trans_a, trans_b, alpha, wa, wb, beta, c);
}

template <class ExecSpace, class A, class B, class C>
void mixed_gemm_tiled(const ExecSpace& exec, const char* trans_a, const char* trans_b, float alpha,
                      const A& a, const B& b, float beta, const C& c) {
  const Operand oa = operand(trans_a, a), ob = operand(trans_b, b);
  const std::int64_t m = oa.rows, n = ob.cols, k = oa.cols;
  const std::int64_t tiles_n = (n + mixed_tile_cols - 1) / mixed_tile_cols;
  const std::int64_t tiles = (m + mixed_tile_rows - 1) / mixed_tile_rows * tiles_n;
  const auto* pa = a.data();
  const auto* pb = b.data();
  float* pc = c.data();
  const std::int64_t ldc = static_cast<std::int64_t>(c.stride(0));
  // A and B read, C written (and read where beta is not 0); 2 m n k for the
  // sums, then alpha (and beta C) applied to each output.
  const double mn = double(m) * double(n);
  const Work work{bytes_of<typename A::value_type>(a.size()) +
                      bytes_of<typename B::value_type>(b.size()) +
                      bytes_of<float>(m * n) * (beta == 0.0f ? 1 : 2),
                  2.0 * mn * double(k) + (beta == 0.0f ? 1.0 : 3.0) * mn,
                  "a thread per 4 x 8 tile of C: each output sums its k terms in order"};
  parallel_for(
      "tessera::kernels::mixed_gemm_tiled", Kokkos::RangePolicy<ExecSpace>(exec, 0, tiles), work,
      KOKKOS_LAMBDA(const std::int64_t t) {
        const std::int64_t i0 = t / tiles_n * mixed_tile_rows, j0 = t % tiles_n * mixed_tile_cols;
        const std::int64_t rows = m - i0 < mixed_tile_rows ? m - i0 : mixed_tile_rows;
        const std::int64_t cols = n - j0 < mixed_tile_cols ? n - j0 : mixed_tile_cols;
        float acc[mixed_tile_rows][mixed_tile_cols] = {};
        for (std::int64_t p = 0; p < k; ++p) {
          float bp[mixed_tile_cols] = {};
          for (std::int64_t j = 0; j < cols; ++j)
            bp[j] = widen(pb[p * ob.row_step + (j0 + j) * ob.col_step]);
          for (std::int64_t i = 0; i < rows; ++i) {
            const float ai = widen(pa[(i0 + i) * oa.row_step + p * oa.col_step]);
            for (int j = 0; j < mixed_tile_cols; ++j) acc[i][j] += ai * bp[j];
          }
        }
        for (std::int64_t i = 0; i < rows; ++i)
          for (std::int64_t j = 0; j < cols; ++j) {
            float& out = pc[(i0 + i) * ldc + j0 + j];
            // beta = 0 ignores C, NaN included, as BLAS does.
            out = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * out;
          }
      });
}

}  // namespace impl

// The method `automatic` stands for on ExecSpace.
template <class ExecSpace>
constexpr MixedGemmMethod automatic_mixed_gemm_method() {
  return impl::has_vendor_mixed_gemm<ExecSpace>() ? MixedGemmMethod::vendor
         : impl::runs_on_host<ExecSpace>          ? MixedGemmMethod::widen_blas
                                                  : MixedGemmMethod::tiled;
}

// C = alpha op(A) op(B) + beta C with A and B row-major [*, *] views of bf16
// or fp16 and C a row-major float view; op is "N" (as stored) or "T"
// (transposed). beta = 0 ignores C's values. `workspace` serves widen_blas.
template <class ExecSpace, class A, class B, class C>
void mixed_gemm(const ExecSpace& exec, const char* trans_a, const char* trans_b, float alpha,
                const A& a, const B& b, float beta, const C& c,
                MixedGemmWorkspace<typename C::memory_space>& workspace,
                MixedGemmMethod method = MixedGemmMethod::automatic) {
  using TA = typename A::non_const_value_type;
  using TB = typename B::non_const_value_type;
  static_assert(std::is_same<accumulator_t<TA>, float>::value &&
                    std::is_same<accumulator_t<TB>, float>::value &&
                    std::is_same<typename C::non_const_value_type, float>::value,
                "tessera::kernels::mixed_gemm: A and B hold bf16, fp16 (or float), C float");
  ScopedRegion region("tessera::kernels::mixed_gemm");
  constexpr const char* fn = "tessera::kernels::mixed_gemm";
  impl::check_mixed_gemm(fn, trans_a, trans_b, a, b, c);
  if (method == MixedGemmMethod::automatic) method = automatic_mixed_gemm_method<ExecSpace>();
  if (c.size() == 0) return;
  if (impl::operand(trans_a, a).cols == 0) {  // no terms: C = beta C, the same for every method
    float* pc = c.data();
    // C written (and read and scaled where beta is not 0).
    const std::int64_t n = c.size();
    const Work work{bytes_of<float>(n) * (beta == 0.0f ? 1 : 2), beta == 0.0f ? 0.0 : double(n)};
    impl::for_each_span(
        exec, "tessera::kernels::mixed_gemm_scale", n, work,
        KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) pc[i] = beta == 0.0f ? 0.0f : beta * pc[i];
        });
    return;
  }
  switch (method) {
    case MixedGemmMethod::widen_blas:
      impl::mixed_gemm_widen_blas(exec, trans_a, trans_b, alpha, a, b, beta, c, workspace);
      return;
    case MixedGemmMethod::tiled:
      impl::mixed_gemm_tiled(exec, trans_a, trans_b, alpha, a, b, beta, c);
      return;
    case MixedGemmMethod::vendor:
#if TESSERA_ENABLE_CUBLAS
      if constexpr (impl::has_vendor_mixed_gemm<ExecSpace>() && std::is_same<TA, TB>::value &&
                    !std::is_same<TA, float>::value) {
        impl::mixed_gemm_cublas(exec, trans_a, trans_b, alpha, a, b, beta, c);
        return;
      }
#endif
      throw Error(std::string(fn) +
                  ": method vendor needs the CUDA backend with cuBLAS (Tessera_ENABLE_CUBLAS) "
                  "and A and B of one 16-bit type; "
                  "use automatic, widen_blas or tiled");
    case MixedGemmMethod::automatic:
      break;
  }
}

}  // namespace tessera::kernels
