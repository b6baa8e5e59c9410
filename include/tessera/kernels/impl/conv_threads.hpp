// ConvSchedule::threads: each host thread takes whole blocks of samples
// and lowers, multiplies with a one-thread BLAS gemm (thread_sgemm) and
// folds back each alone, so that a block's columns stay in that core's
// cache. The OpenMP and Serial spaces only (thread_gemm_space_v); on any
// other space these functions only report that.
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/machine.hpp>
#include <tessera/kernels/impl/conv_lowering.hpp>
#include <tessera/kernels/impl/launch.hpp>
#include <tessera/kernels/impl/thread_gemm.hpp>

#include <cstdint>
#include <type_traits>

namespace tessera::kernels::impl {

// The one-thread gemm for ConvSchedule::threads on exec, after checking
// that exec is an OpenMP or Serial space, that there is such a gemm and
// that the scratch holds a block for each thread.
template <class ExecSpace, class Scratch>
HostSgemm* check_threads(const char* fn, const ExecSpace& exec, const Conv2dGeometry& g,
                         const Scratch& scratch, std::int64_t threads) {
  HostSgemm* const gemm = thread_gemm_space_v<ExecSpace> ? thread_sgemm() : nullptr;
  TESSERA_REQUIRE(gemm != nullptr,
                  fn << ": ConvSchedule::threads needs the OpenMP or Serial execution space and a "
                        "BLAS whose gemm runs on its calling thread inside a parallel region "
                        "(thread_sgemm); "
                     << ExecSpace::name() << " with this BLAS has none: use "
                     << "conv2d_schedule(exec) to choose the schedule");
  const std::int64_t needed = g.thread_scratch_size(threads);
  TESSERA_REQUIRE(static_cast<std::int64_t>(scratch.size()) >= needed,
                  fn << ": scratch of " << scratch.size() << " floats is below the " << needed
                     << " of ConvSchedule::threads on " << threads
                     << " threads (Conv2dGeometry::thread_scratch_size(" << threads << "))");
  (void)exec;
  return gemm;
}

// Samples [first, first + count) of block `block` in ConvSchedule::threads.
struct ThreadBlock {
  std::int64_t first, count;
  ThreadBlock(const Conv2dGeometry& g, std::int64_t block) {
    const std::int64_t samples = g.thread_block_samples();
    first = block * samples;
    count = g.batch - first < samples ? g.batch - first : samples;
  }
};

// The scratch of ConvSchedule::threads, ::winograd and ::direct on
// `threads` threads, laid out as Conv2dGeometry::thread_scratch_size counts
// it: the rows' sums for the bias gradient, the groups' partials, the
// transformed weights (Winograd's or the direct schedule's: the forward's,
// then the input gradient's), then one slot per thread.
struct ThreadScratch {
  float* row_sums;
  float* partials;
  float* slots;
  float* forward_weights;
  float* gradient_weights;
  float* direct_gradient_weights;
  std::int64_t slot_size;
  ThreadScratch(const Conv2dGeometry& g, float* scratch, std::int64_t threads)
      : row_sums(scratch),
        partials(scratch + g.batch * g.out_channels),
        slots(scratch + g.thread_scratch_fixed(threads)),
        forward_weights(slots - g.transformed_weights_size()),
        gradient_weights(forward_weights + g.winograd_weights_size() / 2),
        direct_gradient_weights(forward_weights + g.taps() * g.in_channels *
                                                      Conv2dGeometry::lanes_up(g.out_channels)),
        slot_size(g.thread_slot_size()) {}
  // Thread `id`'s slot (Conv2dGeometry::thread_slot_size floats).
  float* slot(int id) const { return slots + id * slot_size; }
};

// Backward's groups in waves of at most `threads` groups, one a thread
// (Conv2dGeometry::partials_held): a group of the first wave writes the
// partial of its index; a group of a later wave the partial one past its
// index in the wave, since partial 0 then holds the sum of the waves
// before, to which each wave's partials are added in group order.
struct PartialWaves {
  std::int64_t groups, per_wave;
  PartialWaves(std::int64_t groups, std::int64_t threads)
      : groups(groups), per_wave(threads < 1 ? 1 : threads) {}
  std::int64_t count() const { return (groups + per_wave - 1) / per_wave; }
  std::int64_t first(std::int64_t wave) const { return wave * per_wave; }
  std::int64_t end(std::int64_t wave) const {
    return first(wave) + per_wave < groups ? first(wave) + per_wave : groups;
  }
  // The partial `group` of `wave` writes.
  std::int64_t slot(std::int64_t wave, std::int64_t group) const {
    return group - first(wave) + (wave > 0 ? 1 : 0);
  }
  // The partials [first_slot, end_slot) a wave adds, in group order, to
  // the sum of the waves before (to 0 in the first wave, whose partial 0 is
  // its first group's).
  std::int64_t first_slot(std::int64_t wave) const { return wave > 0 ? 1 : 0; }
  std::int64_t end_slot(std::int64_t wave) const { return slot(wave, end(wave) - 1) + 1; }
  // A share of a whole pass's work for one wave's launch.
  Work share(const Work& whole, std::int64_t wave) const {
    const double part = double(end(wave) - first(wave)) / double(groups > 0 ? groups : 1);
    return Work{whole.bytes * part, whole.flops * part, whole.narrow};
  }
};

// body(slot, group, id) for every group of `waves` on the thread holding
// token id `id`, writing partial `slot`, a wave at a time; after_wave(wave)
// (adding the wave's partials) before the next. work: the whole pass's.
template <class ExecSpace, class Body, class AfterWave>
void run_waves(const ExecSpace& exec, const char* label, const PartialWaves& waves,
               const Kokkos::Experimental::UniqueToken<ExecSpace>& token, const Work& work,
               const Body& body, const AfterWave& after_wave) {
  for (std::int64_t wave = 0; wave < waves.count(); ++wave) {
    parallel_for(label,
                 Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(
                     exec, waves.first(wave), waves.end(wave)),
                 waves.share(work, wave), [=](const std::int64_t group) {
                   const int id = token.acquire();
                   body(waves.slot(wave, group), group, id);
                   token.release(id);
                 });
    after_wave(wave);
  }
}

// body(first, count, id) for each block of `samples` consecutive samples
// of `batch` (the last may be shorter), a task a block taken as threads
// come free, on the thread holding token id `id`. work: the whole pass's.
template <class ExecSpace, class Body>
void run_sample_blocks(const ExecSpace& exec, const char* label, std::int64_t batch,
                       std::int64_t samples,
                       const Kokkos::Experimental::UniqueToken<ExecSpace>& token, const Work& work,
                       const Body& body) {
  parallel_for(label,
               Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(
                   exec, 0, (batch + samples - 1) / samples),
               work, [=](const std::int64_t block) {
                 const int id = token.acquire();
                 const std::int64_t first = block * samples;
                 body(first, batch - first < samples ? batch - first : samples, id);
                 token.release(id);
               });
}

// The FLOPs of the lowered products of g's whole batch: out x patch x
// (batch * P), as the forward, the weight gradient and the input gradient
// each take them.
inline double lowered_product_flops(const Conv2dGeometry& g) {
  return 2.0 * double(g.out_channels) * double(g.patch()) * double(g.batch * g.positions());
}

// y = conv(x, W) + b, ConvSchedule::threads: each block of samples is
// lowered, multiplied and stored by the thread that takes it.
template <class ExecSpace, class X, class W, class B, class Y, class Scratch>
void conv2d_forward_threads(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                            const B& b, const Y& y, const Scratch& scratch) {
  if constexpr (thread_gemm_space_v<ExecSpace>) {
    Kokkos::Experimental::UniqueToken<ExecSpace> token(exec);
    HostSgemm* const gemm =
        check_threads("tessera::kernels::conv2d_forward", exec, g, scratch, token.size());
    const std::int64_t k = g.patch(), positions = g.positions();
    const std::int64_t out = g.out_channels, lda = w.stride(0);
    const ThreadScratch ts(g, scratch.data(), token.size());
    // x, W and b read, y written; the product and an add of the bias (a
    // zero one too) an output.
    const Work work{
        bytes_of<typename X::value_type>(g.input_size()) +
            bytes_of<typename W::value_type>(w.size()) +
            bytes_of<typename B::value_type>(b.extent(0)) +
            bytes_of<typename Y::value_type>(g.output_size()),
        lowered_product_flops(g) + double(g.output_size()),
        "host schedule: one block of samples per task, lowered and multiplied on its thread"};
    parallel_for("tessera::kernels::conv2d_forward_threads",
                 Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(
                     exec, 0, g.thread_blocks()),
                 work, [=](const std::int64_t block) {
                   const int id = token.acquire();
                   const ThreadBlock s(g, block);
                   const std::int64_t n = s.count * positions;
                   float* const col = ts.slot(id);
                   float* const product = col + k * n;
                   lower_samples(g, x, s.first, s.count, col, n);
                   thread_gemm(gemm, 'N', 'N', out, n, k, w.data(), lda, col, n, 0, product, n);
                   for (std::int64_t r = 0; r < s.count * out; ++r) {
                     const std::int64_t c = r % out;
                     move_row(product + c * n + (r / out) * positions,
                              y.data() + (s.first * out + r) * positions,
                              b.extent(0) > 0 ? float(b(c)) : 0.0f, positions, Transfer::to_nchw);
                   }
                   token.release(id);
                 });
  } else {
    check_threads("tessera::kernels::conv2d_forward", exec, g, scratch, 1);
    (void)x, (void)w, (void)b, (void)y;
  }
}

// The layout of a partial of ConvSchedule::threads: dW's own, `rows` rows
// (output channels) of `length` entries (the patch), entry l of row o
// being dW(o, l).
struct PartialsLikeDw {
  std::int64_t rows, length;
  explicit PartialsLikeDw(const Conv2dGeometry& g) : rows(g.out_channels), length(g.patch()) {}
  std::int64_t entries(std::int64_t /*row*/) const { return length; }
  void of_dw(std::int64_t row, std::int64_t l, std::int64_t& o, std::int64_t& k) const {
    o = row;
    k = l;
  }
};

// The dW partials of wave `wave` (each `layout.rows` rows of
// `layout.length` floats; the first layout.entries(row) of a row are dW
// entries, layout.of_dw(row, l, o, k) says which) added, in group order,
// to the sum of the waves before (to 0 in the first, partial 0 its first
// group's); after the last wave the sum added into dW. A task a row.
template <class ExecSpace, class DW, class Layout>
void add_thread_partials(const ExecSpace& exec, const Conv2dGeometry& g, const PartialWaves& waves,
                         std::int64_t wave, float* partials, const DW& dw, const Layout& layout) {
  const std::int64_t length = layout.length, size = layout.rows * length;
  const std::int64_t dw_size = g.out_channels * g.patch();
  const std::int64_t from = waves.first_slot(wave), to = waves.end_slot(wave);
  const bool into_dw = wave + 1 == waves.count();
  // The partials read, dW read and written; an add a partial's element
  // and one into dW (a wave's share).
  const Work sums{
      bytes_of<float>(waves.groups * size) + 2 * bytes_of<typename DW::value_type>(dw_size),
      double(waves.groups) * double(size) + double(dw_size),
      "host schedule: the partials of a host schedule, a row a task, on the host only"};
  parallel_for("tessera::kernels::conv2d_weight_grad",
               Kokkos::RangePolicy<ExecSpace>(exec, 0, layout.rows), waves.share(sums, wave),
               [=](const std::int64_t row) {
                 float* const sum = partials + row * length;
                 // The first wave starts from 0 (0 + partial 0), a later one
                 // from the waves before, held in partial 0.
                 if (from == 0)
                   for (std::int64_t l = 0; l < length; ++l) sum[l] = 0.0f + sum[l];
                 for (std::int64_t slot = 1; slot < to; ++slot)
                   add_row(sum, partials + slot * size + row * length, static_cast<int>(length), 1);
                 if (!into_dw) return;
                 for (std::int64_t l = 0; l < layout.entries(row); ++l) {
                   std::int64_t o, k;
                   layout.of_dw(row, l, o, k);
                   dw(o, k) += sum[l];
                 }
               });
}

// dW += dy * cols(x)^T, db += sums of dy, dx += col2im(W^T dy) (when dx is
// not empty), ConvSchedule::threads: each group of blocks (one task) sums
// its dW into a partial of its own; the partials are added in group order
// (the groups in waves of as many as the threads: PartialWaves).
template <class ExecSpace, class X, class W, class DY, class DX, class DW, class DB, class Scratch>
void conv2d_backward_threads(const ExecSpace& exec, const Conv2dGeometry& g, const X& x, const W& w,
                             const DY& dy, const DX& dx, const DW& dw, const DB& db,
                             const Scratch& scratch) {
  if constexpr (thread_gemm_space_v<ExecSpace>) {
    Kokkos::Experimental::UniqueToken<ExecSpace> token(exec);
    HostSgemm* const gemm =
        check_threads("tessera::kernels::conv2d_backward", exec, g, scratch, token.size());
    const std::int64_t k = g.patch(), positions = g.positions(), plane = g.input_positions();
    const std::int64_t in = g.in_channels, out = g.out_channels, lda = w.stride(0);
    const bool with_dx = dx.size() > 0, with_db = db.extent(0) > 0;
    const ThreadScratch ts(g, scratch.data(), token.size());
    float *const row_sums = ts.row_sums, *const partials = ts.partials;
    const std::int64_t blocks = g.thread_blocks(), per_group = g.thread_group_blocks();
    const std::int64_t groups = g.thread_groups();
    // x and dy read, the groups' dW partials written, and with db the rows'
    // sums (an add an element of dy); with dx, W read, dx read and written,
    // the input gradient's product and an add a tap of its fold.
    const double taps = double(g.patch()) * double(g.batch * positions);
    const Work work{
        bytes_of<typename X::value_type>(g.input_size()) +
            bytes_of<typename DY::value_type>(g.output_size()) + bytes_of<float>(groups * out * k) +
            (with_db ? bytes_of<float>(g.batch * out) : 0) +
            (with_dx ? bytes_of<typename W::value_type>(w.size()) +
                           2 * bytes_of<typename DX::value_type>(g.input_size())
                     : 0),
        lowered_product_flops(g) + (with_db ? double(g.output_size()) : 0) +
            (with_dx ? lowered_product_flops(g) + taps : 0),
        "host schedule: one group of blocks per task, its dW partial summed in block order"};
    const PartialWaves waves(groups, token.size());
    const auto group_body = [=](std::int64_t slot, std::int64_t group, int id) {
      float* const partial = partials + slot * out * k;
      const std::int64_t last = (group + 1) * per_group < blocks ? (group + 1) * per_group : blocks;
      for (std::int64_t block = group * per_group; block < last; ++block) {
        const ThreadBlock s(g, block);
        const std::int64_t n = s.count * positions;
        float* const col = ts.slot(id);
        float* const grad = col + k * n;
        lower_samples(g, x, s.first, s.count, col, n);
        for (std::int64_t r = 0; r < s.count * out; ++r)
          move_row(grad + (r % out) * n + (r / out) * positions,
                   dy.data() + (s.first * out + r) * positions, 0.0f, positions,
                   Transfer::from_nchw, with_db ? row_sums + s.first * out + r : nullptr);
        const float beta = block == group * per_group ? 0.0f : 1.0f;
        thread_gemm(gemm, 'N', 'T', out, k, n, grad, n, col, n, beta, partial, k);
        if (!with_dx) continue;
        thread_gemm(gemm, 'T', 'N', k, n, out, w.data(), lda, grad, n, 0, col, n);
        for (std::int64_t r = 0; r < s.count * in; ++r)
          fold_plane(dx.data() + (s.first * in + r) * plane, col + (r / in) * positions, r % in,
                     g.rows, g.cols, n);
      }
    };
    run_waves(exec, "tessera::kernels::conv2d_backward_threads", waves, token, work, group_body,
              [&](std::int64_t wave) {
                add_thread_partials(exec, g, waves, wave, partials, dw, PartialsLikeDw(g));
              });
    if (with_db) add_bias_gradient(exec, row_sums, g.batch, out, db);
  } else {
    check_threads("tessera::kernels::conv2d_backward", exec, g, scratch, 1);
    (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)db;
  }
}

}  // namespace tessera::kernels::impl
