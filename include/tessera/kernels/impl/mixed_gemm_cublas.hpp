// The vendor method of mixed_gemm.hpp on NVIDIA GPUs: cuBLAS's
// cublasGemmEx with 16-bit inputs and float output and compute, on the
// stream of the caller's Kokkos::Cuda instance. Empty unless
// core/config.hpp's TESSERA_ENABLE_CUBLAS is 1: without the CUDA backend,
// and in CUDA builds configured with -DTessera_ENABLE_CUBLAS=OFF, which
// take the tiled method.
// AMD GPUs have no vendor path: Debian packages no rocBLAS to build against,
// so HIP takes the tiled method.
#pragma once

#include <tessera/core/config.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/gemm_operand.hpp>
#include <tessera/kernels/impl/launch.hpp>

#if TESSERA_ENABLE_CUBLAS
#include <cublas_v2.h>
#endif

#include <type_traits>

namespace tessera::kernels::impl {

#if TESSERA_ENABLE_CUBLAS
template <class T>
constexpr cudaDataType cuda_type() {
  return std::is_same<T, bf16>::value ? CUDA_R_16BF : CUDA_R_16F;
}

// One cuBLAS handle per process, made on first use.
inline cublasHandle_t cublas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    const cublasStatus_t status = cublasCreate(&h);
    TESSERA_REQUIRE(status == CUBLAS_STATUS_SUCCESS,
                    "tessera::kernels::mixed_gemm: cublasCreate failed (status "
                        << static_cast<int>(status) << ")");
    return h;
  }();
  return handle;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
// gets B first, with the transposes as given.
template <class A, class B, class C>
void mixed_gemm_cublas(const Kokkos::Cuda& exec, const char* trans_a, const char* trans_b,
                       float alpha, const A& a, const B& b, float beta, const C& c) {
  using TA = typename A::non_const_value_type;
  using TB = typename B::non_const_value_type;
  const Operand oa = operand(trans_a, a), ob = operand(trans_b, b);
  const cublasHandle_t handle = cublas_handle();
  cublasSetStream(handle, exec.cuda_stream());
  const auto op = [](const char* t) { return t[0] == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T; };
  // Noted as impl::gemm notes a product: M x N items, A and B read, C
  // written (and read where beta is not 0), 2 M N K FLOPs.
  const double bytes = bytes_of<TA>(a.size()) + bytes_of<TB>(b.size()) +
                       bytes_of<float>(c.size()) * (beta == 0.0f ? 1 : 2);
  note_launch(oa.rows * ob.cols,
              Work{bytes, 2.0 * double(oa.rows) * double(ob.cols) * double(oa.cols)},
              instance_of(exec));
  const cublasStatus_t status = cublasGemmEx(
      handle, op(trans_b), op(trans_a), static_cast<int>(ob.cols), static_cast<int>(oa.rows),
      static_cast<int>(oa.cols), &alpha, b.data(), cuda_type<TB>(), static_cast<int>(b.stride(0)),
      a.data(), cuda_type<TA>(), static_cast<int>(a.stride(0)), &beta, c.data(), CUDA_R_32F,
      static_cast<int>(c.stride(0)), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  TESSERA_REQUIRE(status == CUBLAS_STATUS_SUCCESS,
                  "tessera::kernels::mixed_gemm: cublasGemmEx failed (status "
                      << static_cast<int>(status) << ") for op(A) [" << oa.rows << ", " << oa.cols
                      << "], op(B) [" << ob.rows << ", " << ob.cols << "]");
}
#endif

template <class ExecSpace>
constexpr bool has_vendor_mixed_gemm() {
#if TESSERA_ENABLE_CUBLAS
  return std::is_same<ExecSpace, Kokkos::Cuda>::value;
#else
  return false;
#endif
}

}  // namespace tessera::kernels::impl
