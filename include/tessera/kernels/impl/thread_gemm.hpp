// The host BLAS's gemm called by each thread of a parallel region on its
// own part of a product (thread_sgemm: a BLAS whose calls then run on the
// calling thread): the spaces where that is possible, the row-major call,
// and products computed as blocks of C's rows (gemm_row_blocks), each
// block by one thread with what comes before it (a bias written into the
// rows, or zeros) while the block is in that core's cache.
#pragma once

#include <tessera/core/host_paths.hpp>
#include <tessera/core/machine.hpp>
#include <tessera/kernels/impl/launch.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>

namespace tessera::kernels::impl {

// The spaces whose threads may each call thread_sgemm(): OpenMP's threads
// (inside a parallel region the BLAS runs on the calling thread) and
// Serial's one (outside any, the BLAS may use its own threads).
template <class ExecSpace>
constexpr bool thread_gemm_space_v = host_fast_paths_v<ExecSpace> &&
                                     (
#ifdef KOKKOS_ENABLE_OPENMP
                                         std::is_same<ExecSpace, Kokkos::OpenMP>::value ||
#endif
#ifdef KOKKOS_ENABLE_SERIAL
                                         std::is_same<ExecSpace, Kokkos::Serial>::value ||
#endif
                                         false);

// Row-major C = op(A) op(B) + beta C on the calling thread; `gemm` is
// column-major, so it computes C^T = op(B)^T op(A)^T.
inline void thread_gemm(HostSgemm* gemm, char trans_a, char trans_b, std::int64_t m, std::int64_t n,
                        std::int64_t k, const float* a, std::int64_t lda, const float* b,
                        std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  const int m_ = static_cast<int>(m), n_ = static_cast<int>(n), k_ = static_cast<int>(k);
  const int lda_ = static_cast<int>(lda), ldb_ = static_cast<int>(ldb);
  const int ldc_ = static_cast<int>(ldc);
  const float one = 1;
  gemm(&trans_b, &trans_a, &n_, &m_, &k_, &one, b, &ldb_, a, &lda_, &beta, c, &ldc_);
}

// How gemm_row_blocks cuts C's m rows among `threads` threads: blocks of
// at most max_rows rows (multiples of 16, the vector kernels' column
// unroll in the BLAS's column-major view), as many on every thread. On
// the tiny GPT's products ([4096, 128] x [128, 512] and its kind, 2
// threads of a Zen 2 core pair) against one call on the BLAS's own
// threads after a separate pass for the bias: the Dense layers' forward
// and backward 1.10 to 1.20 times as fast in the step, the tied head's
// 1.55 (its zeros were the BLAS's own pass for beta = 0). In a harness
// with the caches flushed between calls, blocks of 32 rows were 4 to 16 %
// slower than 256 (the BLAS packs B again for every block), and blocks of
// 128 rows or one block a thread up to 10 % slower.
struct RowBlocks {
  static constexpr std::int64_t max_rows = 256, align = 16;
  std::int64_t rows = 0, count = 0;
  RowBlocks(std::int64_t m, std::int64_t threads) {
    if (m <= 0) return;
    const std::int64_t per_thread = max_rows * threads;
    const std::int64_t wanted = threads * ((m + per_thread - 1) / per_thread);
    rows = ((m + wanted - 1) / wanted + align - 1) / align * align;
    count = (m + rows - 1) / rows;
  }
};

// Whether gemm_row_blocks runs a product of these operands on exec's
// space: one whose threads may each call the BLAS, with such a BLAS
// (thread_sgemm), float operands whose rows are contiguous.
template <class ExecSpace, class AView, class BView, class CView>
constexpr bool row_block_operands_v = thread_gemm_space_v<ExecSpace>&&
    std::is_same<typename AView::non_const_value_type, float>::value&&
        std::is_same<typename BView::non_const_value_type, float>::value&&
            std::is_same<typename CView::non_const_value_type, float>::value;

// Row-major C = op(A) op(B) + C after first(begin, end) has run on C's rows
// [begin, end) (writing a bias into them, zeros, or nothing), in blocks of
// C's rows (RowBlocks), each block's rows prepared and multiplied by the
// thread that takes it: a block of C stays in that core's cache from the
// first write to the last add. transA/transB: "N" or "T". Returns false,
// having done nothing, where it cannot run (no such space or BLAS, an empty
// extent, or rows that are not contiguous): the caller then runs the
// product itself.
// The bits of a block's outputs are the BLAS's on that block alone, the
// same in every run on the same thread count.
template <class ExecSpace, class AView, class BView, class CView, class First>
bool gemm_row_blocks(const char* label, const ExecSpace& exec, const char transA[],
                     const char transB[], const AView& A, const BView& B, const CView& C,
                     const First& first) {
  if constexpr (row_block_operands_v<ExecSpace, AView, BView, CView>) {
    HostSgemm* const gemm = thread_sgemm();
    const char ta = transA[0], tb = transB[0];
    const std::int64_t m = C.extent(0), n = C.extent(1);
    const std::int64_t k = ta == 'N' ? A.extent(1) : A.extent(0);
    if (gemm == nullptr || m == 0 || n == 0 || k == 0 || A.stride(1) != 1 || B.stride(1) != 1 ||
        C.stride(1) != 1)
      return false;
    const std::int64_t lda = A.stride(0), ldb = B.stride(0), ldc = C.stride(0);
    const RowBlocks blocks(m, exec.concurrency());
    const float* const a = A.data();
    const float* const b = B.data();
    float* const c = C.data();
    // A, B read; C read (what first leaves) and written: the traffic of
    // impl::gemm with beta = 1.
    const Work work{
        bytes_of<float>(A.size()) + bytes_of<float>(B.size()) + 2 * bytes_of<float>(C.size()),
        2.0 * double(m) * double(n) * double(k),
        "host schedule: a block of C's rows a task, multiplied on its thread"};
    parallel_for(label, Kokkos::RangePolicy<ExecSpace>(exec, 0, blocks.count), work,
                 [=](const std::int64_t block) {
                   const std::int64_t begin = block * blocks.rows;
                   const std::int64_t end = begin + blocks.rows < m ? begin + blocks.rows : m;
                   first(begin, end);
                   // Rows [begin, end) of op(A): rows of A, or columns of A^T.
                   const float* const a_rows = ta == 'N' ? a + begin * lda : a + begin;
                   thread_gemm(gemm, ta, tb, end - begin, n, k, a_rows, lda, b, ldb, 1.0f,
                               c + begin * ldc, ldc);
                 });
    return true;
  } else {
    (void)label, (void)exec, (void)transA, (void)transB, (void)A, (void)B, (void)C, (void)first;
    return false;
  }
}

}  // namespace tessera::kernels::impl
