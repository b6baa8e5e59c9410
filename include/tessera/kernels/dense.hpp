// Dense (fully connected) layer kernels: y = x W^T + b, with W stored
// [out, in] row-major. Matrix products go to KokkosBlas::gemm (vendor BLAS
// where Kokkos Kernels has one); the bias is a Kokkos kernel. On the host
// spaces whose threads may each call the BLAS (impl/thread_gemm.hpp) the
// float products run in blocks of the output's rows instead, each block's
// bias (or zeros) written and its product added by one thread while the
// block is in its core's cache (impl::gemm_row_blocks).
// Backward accumulates into dx, dW and db. An empty bias (extent 0) means a
// layer without one: no bias is added and no bias gradient computed. The
// bias gradient sums each column in row order on the host; on a GPU a team
// per block of 8 columns sums 128 fixed chunks of the rows and adds them in
// chunk order (impl::dense_bias_gradient_device).
// With 16-bit x, y and a 16-bit copy of W (the overloads taking a
// MixedGemmWorkspace), products sum in float (mixed_gemm) and each output is
// rounded once; b, dW and db stay float.
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/column_sums.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/team.hpp>
#include <tessera/kernels/impl/thread_gemm.hpp>
#include <tessera/kernels/mixed_gemm.hpp>

namespace tessera::kernels {

namespace impl {
template <class X, class W, class B, class Y>
void check_dense_shapes(const char* fn, const X& x, const W& w, const B& b, const Y& y) {
  TESSERA_REQUIRE(x.extent(1) == w.extent(1) && (b.extent(0) == 0 || b.extent(0) == w.extent(0)) &&
                      y.extent(0) == x.extent(0) && y.extent(1) == w.extent(0),
                  fn << ": shape mismatch: x [" << x.extent(0) << ", " << x.extent(1) << "], W ["
                     << w.extent(0) << ", " << w.extent(1) << "], b [" << b.extent(0) << "], y ["
                     << y.extent(0) << ", " << y.extent(1)
                     << "]; expected x [N, in], W [out, in], b [out] or [0] (no bias), y [N, out]");
}

// Backward's operands: those of forward, dW of W's shape, and dx of x's
// unless it is empty (no input gradient).
template <class X, class W, class DY, class DX, class DW, class DB>
void check_dense_backward_shapes(const X& x, const W& w, const DY& dy, const DX& dx, const DW& dw,
                                 const DB& db) {
  const char* fn = "tessera::kernels::dense_backward";
  check_dense_shapes(fn, x, w, db, dy);
  TESSERA_REQUIRE(dw.extent(0) == w.extent(0) && dw.extent(1) == w.extent(1),
                  fn << ": dW [" << dw.extent(0) << ", " << dw.extent(1) << "] differs from W ["
                     << w.extent(0) << ", " << w.extent(1) << "]");
  TESSERA_REQUIRE(dx.size() == 0 || (dx.extent(0) == x.extent(0) && dx.extent(1) == x.extent(1)),
                  fn << ": dx [" << dx.extent(0) << ", " << dx.extent(1) << "] differs from x ["
                     << x.extent(0) << ", " << x.extent(1) << "]");
}

// db += sum_i dy(i, :) on a GPU: a team per block of columns (rank b:
// columns 8 b..) sums fixed chunks of the rows and adds them in chunk
// order (impl/column_sums.hpp). Items: columns x 128 (16384 for 128
// columns of 4096 rows).
template <class DY, class DB>
struct BiasGradientColumns {
  using A = typename DB::non_const_value_type;
  DY dy;
  DB db;
  std::int64_t rows, width;

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member, std::int64_t block) const {
    const std::int64_t first = block * std::int64_t(column_block);
    team_column_sums<A>(
        member, static_cast<A*>(member.team_scratch(0).get_shmem(column_sums_bytes<A>())), rows,
        column_block_width(width, first),
        [&](const std::int64_t i, const int j) { return widen(dy(i, first + j)); },
        [&](const int j, const A sum) { db(first + j) += sum; });
  }
};

// The bias gradient as a part of a launch (impl::parallel_teams), so that
// a layer may launch it beside a kernel of its own; no teams when db is
// empty.
template <class DY, class DB>
TeamPart<BiasGradientColumns<DY, DB>> dense_bias_gradient_part(const DY& dy, const DB& db) {
  using A = typename DB::non_const_value_type;
  const std::int64_t rows = dy.extent(0), width = db.extent(0);
  // dy read, db read and written; each column's rows summed in 128
  // stretches, the stretches added, then the sum added into db.
  const Work work{bytes_of<typename DY::value_type>(rows * width) + 2 * bytes_of<A>(width),
                  double(rows + column_chunks + 1) * double(width),
                  "a team per block of 8 columns: each column sums 128 fixed stretches of the "
                  "rows and adds them in stretch order"};
  return team_part((width + column_block - 1) / column_block, width > 0 ? work : Work{},
                   BiasGradientColumns<DY, DB>{dy, db, rows, width}, column_sums_bytes<A>());
}

template <class ExecSpace, class DY, class DB>
void dense_bias_gradient_device(const ExecSpace& exec, const DY& dy, const DB& db,
                                TeamShape shape = {}) {
  parallel_teams("tessera::kernels::dense_bias_grad_teams", exec,
                 column_sums_shape<ExecSpace>(shape), dense_bias_gradient_part(dy, db));
}

// y(i, :) = b, or 0 where b is empty: the start of y = x W^T + b when the
// product is added onto it (dense_accumulate). A team per row (rank i),
// its threads over the columns.
template <class Y, class B>
struct BroadcastRows {
  Y y;
  B b;
  std::int64_t width;

  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member, std::int64_t i) const {
    using T = typename Y::non_const_value_type;
    const bool with_bias = b.extent(0) > 0;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, width),
                         [&](const std::int64_t j) { y(i, j) = with_bias ? T(b(j)) : T(0); });
  }
};

// y(i, :) = b for every row, as a part of a launch (impl::parallel_teams).
template <class Y, class B>
TeamPart<BroadcastRows<Y, B>> broadcast_rows_part(const Y& y, const B& b) {
  const std::int64_t rows = y.extent(0), width = y.extent(1);
  // b read, y written.
  const Work work{bytes_of<typename Y::value_type>(rows * width) +
                      bytes_of<typename B::value_type>(b.extent(0)),
                  0};
  return team_part(rows, work, BroadcastRows<Y, B>{y, b, width});
}

// y(i, :) = b, or 0 where b is empty, a span of a row (columns [begin,
// end) of row i) or whole rows (operator(): rows [begin, end), what comes
// before a product added onto y in a block of gemm_row_blocks, on the
// block's thread, in its cache). Through pointers, as the products leave
// y: the loops vectorise.
template <class Y, class B>
struct FillRows {
  Y y;
  B b;
  KOKKOS_INLINE_FUNCTION void span(const std::int64_t i, const std::int64_t begin,
                                   const std::int64_t end) const {
    using T = typename Y::non_const_value_type;
    T* row = &y(i, 0);
    if (b.extent(0) > 0) {
      const auto* bias = b.data();
      for (std::int64_t j = begin; j < end; ++j) row[j] = T(bias[j]);
    } else {
      for (std::int64_t j = begin; j < end; ++j) row[j] = T(0);
    }
  }
  void operator()(const std::int64_t begin, const std::int64_t end) const {
    for (std::int64_t i = begin; i < end; ++i) span(i, 0, y.extent(1));
  }
};

// y(i, :) = b for every row, or 0 where b is empty: the host path, a task
// per span of a row. The launch is named for what it writes.
template <class ExecSpace, class Y, class B>
void broadcast_rows(const ExecSpace& exec, const Y& y, const B& b) {
  using T = typename Y::non_const_value_type;
  const std::int64_t rows = y.extent(0), width = y.extent(1);
  const Work work{bytes_of<T>(rows * width) + bytes_of<typename B::value_type>(b.extent(0)), 0};
  const FillRows<Y, B> fill{y, b};
  for_each_row_span(
      exec,
      b.extent(0) > 0 ? "tessera::kernels::dense_broadcast_bias"
                      : "tessera::kernels::dense_zero_rows",
      rows, width, work,
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t begin, const std::int64_t end) {
        fill.span(i, begin, end);
      });
}

// Nothing before the product: it is added onto C as C is.
struct KeepRows {
  void operator()(std::int64_t, std::int64_t) const {}
};

// dW += dy^T x and dx = dy W + dx_scale dx (dx empty: none): the products
// of dense_backward and dense_backward_products, shapes checked by them.
template <class ExecSpace, class X, class W, class DY, class DX, class DW>
void dense_gradient_products(const ExecSpace& exec, const X& x, const W& w, const DY& dy,
                             const DX& dx, const DW& dw, float dx_scale) {
  using T = typename DW::non_const_value_type;
  if (!gemm_row_blocks("tessera::kernels::dense_weight_grad_rows", exec, "T", "N", dy, x, dw,
                       KeepRows{}))
    gemm(exec, "T", "N", T(1), dy, x, T(1), dw);
  if (dx.size() == 0) return;
  if (dx_scale == 0.0f || dx_scale == 1.0f) {
    const Kokkos::View<float*, typename DX::memory_space> none;
    const bool done = dx_scale == 0.0f
                          ? gemm_row_blocks("tessera::kernels::dense_input_grad_rows", exec, "N",
                                            "N", dy, w, dx, FillRows<DX, decltype(none)>{dx, none})
                          : gemm_row_blocks("tessera::kernels::dense_input_grad_rows", exec, "N",
                                            "N", dy, w, dx, KeepRows{});
    if (done) return;
  }
  if constexpr (host_fast_paths_v<ExecSpace>) {
    // dx written: zeroed by a kernel of Tessera's and the product added
    // onto it, the same bits as the BLAS's beta = 0 (0 + sum), whose own
    // zeroing pass is the slower on the host (OpenBLAS's sgemm_beta: the
    // tiny GPT's proj input gradient, [4096, 128] x [128, 512], 2.88
    // against 3.05 ms).
    if (dx_scale == 0.0f) {
      const Kokkos::View<float*, typename DX::memory_space> none;
      broadcast_rows(exec, dx, none);
      dx_scale = 1.0f;
    }
  }
  gemm(exec, "N", "N", T(1), dy, w, T(dx_scale), dx);
}

// db += sum_i dy(i, :), in float for 16-bit dy.
template <class ExecSpace, class DY, class DB>
void dense_bias_gradient(const ExecSpace& exec, const DY& dy, const DB& db) {
  if constexpr (!host_fast_paths_v<ExecSpace>) {
    dense_bias_gradient_device(exec, dy, db);
  } else {
    using T = typename DB::non_const_value_type;
    // Each output feature sums its column over the rows in order, so the
    // result does not depend on the thread count. A host thread takes a
    // tile of 64 features and walks the rows once, reading 256 contiguous
    // bytes of each (one strided column at a time ran at a few GB/s, and
    // spans of 8192 features left the second thread idle below 8192
    // features).
    constexpr std::int64_t tile = 64;
    const std::int64_t n = dy.extent(0), width = db.extent(0);
    // dy read, db read and written; an add an element of dy and one into db.
    const Work work{bytes_of<typename DY::value_type>(n * width) + 2 * bytes_of<T>(width),
                    double(n + 1) * double(width),
                    "host schedule: a task per 64 columns, each column summed in row order"};
    impl::for_each_span(
        exec, "tessera::kernels::dense_bias_grad", db.extent(0), work,
        KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
          T sum[tile] = {};
          const std::int64_t width = end - begin;
          for (std::int64_t i = 0; i < n; ++i) {
            const auto* row = &dy(i, begin);
            if (width == tile)
              for (std::int64_t t = 0; t < tile; ++t) sum[t] += widen(row[t]);
            else
              for (std::int64_t t = 0; t < width; ++t) sum[t] += widen(row[t]);
          }
          for (std::int64_t t = 0; t < width; ++t) db(begin + t) += sum[t];
        },
        tile);
  }
}
}  // namespace impl

// With a bias, y starts as b in every row and the product is added onto it
// (the BLAS's beta = 1): one pass writes y before the product, where a
// bias added after it would read and write y again, after the BLAS's own
// pass that zeroes y for beta = 0 (OpenBLAS's sgemm_beta; the fc layer of
// the tiny GPT, [4096, 128] x [128, 512]: 2.94 against 3.19 ms). Each
// output is b + x W^T, rounded once, when the BLAS sums the whole inner
// dimension in registers before adding onto y.
template <class ExecSpace, class X, class W, class B, class Y>
void dense_forward(const ExecSpace& exec, const X& x, const W& w, const B& b, const Y& y) {
  ScopedRegion region("tessera::kernels::dense_forward");
  impl::check_dense_shapes("tessera::kernels::dense_forward", x, w, b, y);
  using T = typename Y::non_const_value_type;
  if (impl::gemm_row_blocks("tessera::kernels::dense_forward_rows", exec, "N", "T", x, w, y,
                            impl::FillRows<Y, B>{y, b}))
    return;
  if (b.extent(0) == 0) {
    impl::gemm(exec, "N", "T", T(1), x, w, T(0), y);
    return;
  }
  impl::broadcast_rows(exec, y, b);
  impl::gemm(exec, "N", "T", T(1), x, w, T(1), y);
}

template <class X, class W, class B, class Y>
void dense_forward(const X& x, const W& w, const B& b, const Y& y) {
  dense_forward(typename Y::execution_space(), x, w, b, y);
}

// y += x W^T: a dense layer's product onto an output that already holds
// its bias (e.g. written by impl::broadcast_rows_part in another kernel's
// launch), one launch where dense_forward takes two.
template <class ExecSpace, class X, class W, class Y>
void dense_accumulate(const ExecSpace& exec, const X& x, const W& w, const Y& y) {
  ScopedRegion region("tessera::kernels::dense_accumulate");
  const Kokkos::View<float*, typename Y::memory_space> none;
  impl::check_dense_shapes("tessera::kernels::dense_accumulate", x, w, none, y);
  using T = typename Y::non_const_value_type;
  if (impl::gemm_row_blocks("tessera::kernels::dense_accumulate_rows", exec, "N", "T", x, w, y,
                            impl::KeepRows{}))
    return;
  impl::gemm(exec, "N", "T", T(1), x, w, T(1), y);
}

// dW += dy^T x and dx = dy W + dx_scale dx (dx_scale 0: dx written, its
// old values never read; 1: accumulated), without the bias gradient: for a
// layer that launches that beside a kernel of its own
// (impl::dense_bias_gradient_part). dx may be empty.
template <class ExecSpace, class X, class W, class DY, class DX, class DW>
void dense_backward_products(const ExecSpace& exec, const X& x, const W& w, const DY& dy,
                             const DX& dx, const DW& dw, float dx_scale) {
  ScopedRegion region("tessera::kernels::dense_backward_products");
  const Kokkos::View<float*, typename DW::memory_space> none;
  impl::check_dense_backward_shapes(x, w, dy, dx, dw, none);
  impl::dense_gradient_products(exec, x, w, dy, dx, dw, dx_scale);
}

// dx += dy W; dW += dy^T x; db += sum_i dy(i, :). dx may be empty (first
// layer). With write_dx, dx = dy W: its old values are never read (the
// bits of adding into a zeroed dx).
template <class ExecSpace, class X, class W, class DY, class DX, class DW, class DB>
void dense_backward(const ExecSpace& exec, const X& x, const W& w, const DY& dy, const DX& dx,
                    const DW& dw, const DB& db, bool write_dx = false) {
  ScopedRegion region("tessera::kernels::dense_backward");
  impl::check_dense_backward_shapes(x, w, dy, dx, dw, db);
  impl::dense_gradient_products(exec, x, w, dy, dx, dw, write_dx ? 0.0f : 1.0f);
  impl::dense_bias_gradient(exec, dy, db);
}

// db += sum_i dy(i, :) alone: dense_backward's bias gradient, for a layer
// that takes the products apart (dense_backward_products).
template <class ExecSpace, class DY, class DB>
void dense_bias_gradient(const ExecSpace& exec, const DY& dy, const DB& db) {
  ScopedRegion region("tessera::kernels::dense_bias_gradient");
  if (db.extent(0) > 0) impl::dense_bias_gradient(exec, dy, db);
}

// y = x W^T + b with x, W and y in bf16 or fp16: the product sums in float
// into workspace, and each output is rounded once, after its bias.
template <class ExecSpace, class X, class W, class B, class Y, class Space>
void dense_forward(const ExecSpace& exec, const X& x, const W& w, const B& b, const Y& y,
                   MixedGemmWorkspace<Space>& workspace) {
  ScopedRegion region("tessera::kernels::dense_forward");
  impl::check_dense_shapes("tessera::kernels::dense_forward", x, w, b, y);
  using T = typename Y::non_const_value_type;
  static_assert(is_storage16_v<T>, "tessera::kernels::dense_forward: 16-bit x, W and y");
  const auto c = mixed_gemm_result(workspace, y.extent(0), y.extent(1));
  mixed_gemm(exec, "N", "T", 1.0f, x, w, 0.0f, c, workspace);
  const bool has_bias = b.extent(0) > 0;
  // The float sums and b read, y written; an add an element with a bias.
  const std::int64_t elements = y.extent(0) * y.extent(1);
  const Work work{bytes_of<float>(elements) + bytes_of<typename B::value_type>(b.extent(0)) +
                      bytes_of<T>(elements),
                  has_bias ? double(elements) : 0};
  impl::for_each_row_span(
      exec, "tessera::kernels::dense_bias_round", y.extent(0), y.extent(1), work,
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t begin, const std::int64_t end) {
        T* row = &y(i, 0);
        const float* sums = &c(i, 0);
        if (has_bias)
          for (std::int64_t j = begin; j < end; ++j) row[j] = narrow<T>(sums[j] + b(j));
        else
          for (std::int64_t j = begin; j < end; ++j) row[j] = narrow<T>(sums[j]);
      });
}

// dx += dy W, dW += dy^T x, db += sum_i dy(i, :) with x, W, dy and dx in bf16
// or fp16 and dW, db float: the products sum in float, and dx is rounded
// once per element. With write_dx, dx = dy W, its old values never read.
template <class ExecSpace, class X, class W, class DY, class DX, class DW, class DB, class Space>
void dense_backward(const ExecSpace& exec, const X& x, const W& w, const DY& dy, const DX& dx,
                    const DW& dw, const DB& db, MixedGemmWorkspace<Space>& workspace,
                    bool write_dx = false) {
  ScopedRegion region("tessera::kernels::dense_backward");
  impl::check_dense_backward_shapes(x, w, dy, dx, dw, db);
  using T = typename DX::non_const_value_type;
  static_assert(is_storage16_v<T>, "tessera::kernels::dense_backward: 16-bit x, W, dy and dx");
  mixed_gemm(exec, "T", "N", 1.0f, dy, x, 1.0f, dw, workspace);
  if (dx.size() > 0) {
    const auto c = mixed_gemm_result(workspace, dx.extent(0), dx.extent(1));
    mixed_gemm(exec, "N", "N", 1.0f, dy, w, 0.0f, c, workspace);
    // The float sums read, dx written (and read and added to unless
    // write_dx); an add an element.
    const std::int64_t elements = dx.extent(0) * dx.extent(1);
    const Work work{bytes_of<float>(elements) + (write_dx ? 1 : 2) * bytes_of<T>(elements),
                    write_dx ? 0.0 : double(elements)};
    impl::for_each_row_span(
        exec, "tessera::kernels::dense_input_grad_round", dx.extent(0), dx.extent(1), work,
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t begin, const std::int64_t end) {
          T* row = &dx(i, 0);
          const float* sums = &c(i, 0);
          if (write_dx)
            for (std::int64_t j = begin; j < end; ++j) row[j] = narrow<T>(0.0f + sums[j]);
          else
            for (std::int64_t j = begin; j < end; ++j) row[j] = narrow<T>(widen(row[j]) + sums[j]);
        });
  }
  impl::dense_bias_gradient(exec, dy, db);
}

template <class X, class W, class DY, class DX, class DW, class DB>
void dense_backward(const X& x, const W& w, const DY& dy, const DX& dx, const DW& dw,
                    const DB& db) {
  dense_backward(typename DW::execution_space(), x, w, dy, dx, dw, db);
}

}  // namespace tessera::kernels
