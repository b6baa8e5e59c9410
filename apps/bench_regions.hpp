// tessera-bench's per-layer and per-kernel times: the layers' from the
// model's layer hooks, the kernels' from Kokkos Tools callbacks.
#pragma once

#include <tessera/kernels/impl/launch.hpp>
#include <tessera/model/model.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench_measure.hpp"

namespace tessera::bench {

// Per-layer and per-kernel times. The model's layer hooks (Model::add_hooks)
// open a layer before its forward or backward and close it once launched;
// inside a layer, every Kokkos kernel, deep copy and KokkosBlas call seen by
// the Kokkos Tools callbacks is a kernel. Each boundary fences the device,
// so asynchronous backends are timed correctly (at the price of the fences:
// this run is separate from the step timing). Each kernel's work comes from
// its launch (kernels/impl/launch.hpp): work items, bytes and FLOPs; a deep
// copy moves its bytes twice (read and written) over one work item per
// 4-byte word.

enum class Pass { forward = 0, backward = 1 };

struct KernelTime {
  double seconds = 0;
  std::int64_t calls = 0;
  // Over the calls: the fewest work items of one launch, the bytes and FLOPs
  // of all, and how many came with their work (the rest launched around
  // launch.hpp: a library's own kernels).
  std::int64_t min_items = 0;
  double bytes = 0, flops = 0;
  std::int64_t described = 0;
  std::string narrow;
};

struct LayerTimes {
  double seconds[2] = {0, 0};
  std::int64_t calls[2] = {0, 0};
  std::map<std::string, KernelTime> kernels[2];
};

class RegionProfiler {
 public:
  static RegionProfiler& instance() {
    static RegionProfiler profiler;
    return profiler;
  }

  void start(tessera::Model& model) {
    layers_.assign(model.layers().size(), LayerTimes{});
    frames_.clear();
    model_ = &model;
    tessera::Model::LayerHooks hooks;
    hooks.before_forward = [this](std::size_t i) { enter(Pass::forward, i); };
    hooks.before_backward = [this](std::size_t i) { enter(Pass::backward, i); };
    hooks.after_forward = hooks.after_backward = [this](std::size_t) { close(); };
    hooks_ = model.add_hooks(std::move(hooks));
    namespace tools = Kokkos::Tools::Experimental;
    tools::set_push_region_callback(&RegionProfiler::push);
    tools::set_pop_region_callback(&RegionProfiler::pop);
    tools::set_begin_parallel_for_callback(&RegionProfiler::begin_kernel);
    tools::set_end_parallel_for_callback(&RegionProfiler::end_kernel);
    tools::set_begin_parallel_reduce_callback(&RegionProfiler::begin_kernel);
    tools::set_end_parallel_reduce_callback(&RegionProfiler::end_kernel);
    tools::set_begin_parallel_scan_callback(&RegionProfiler::begin_kernel);
    tools::set_end_parallel_scan_callback(&RegionProfiler::end_kernel);
    tools::set_begin_deep_copy_callback(&RegionProfiler::begin_copy);
    tools::set_end_deep_copy_callback(&RegionProfiler::end_copy);
  }

  std::vector<LayerTimes> stop() {
    namespace tools = Kokkos::Tools::Experimental;
    tools::set_push_region_callback(nullptr);
    tools::set_pop_region_callback(nullptr);
    tools::set_begin_parallel_for_callback(nullptr);
    tools::set_end_parallel_for_callback(nullptr);
    tools::set_begin_parallel_reduce_callback(nullptr);
    tools::set_end_parallel_reduce_callback(nullptr);
    tools::set_begin_parallel_scan_callback(nullptr);
    tools::set_end_parallel_scan_callback(nullptr);
    tools::set_begin_deep_copy_callback(nullptr);
    tools::set_end_deep_copy_callback(nullptr);
    model_->remove_hooks(hooks_);
    return std::move(layers_);
  }

 private:
  enum class Kind { layer, kernel, other };
  struct Frame {
    Kind kind;
    std::string name;
    Clock::time_point start;
    bool described = false;
    std::int64_t items = 0;
    tessera::kernels::Work work;
  };

  static void push(const char* name) { instance().open(Kind::other, name, true); }
  static void pop() { instance().close(); }
  static void begin_kernel(const char* name, std::uint32_t, std::uint64_t*) {
    instance().open(Kind::kernel, name, false);
  }
  static void end_kernel(std::uint64_t) { instance().close(); }
  static void begin_copy(Kokkos::Tools::SpaceHandle, const char* dst, const void*,
                         Kokkos::Tools::SpaceHandle, const char* src, const void*,
                         std::uint64_t size) {
    tessera::kernels::impl::note_launch(static_cast<std::int64_t>(size / 4),
                                        tessera::kernels::Work{2.0 * double(size), 0});
    instance().open(Kind::kernel, std::string("deep_copy ") + src + " -> " + dst, false);
  }
  static void end_copy() { instance().close(); }

  // The frame of the innermost open layer, or -1.
  int open_layer_frame() const {
    for (int f = static_cast<int>(frames_.size()) - 1; f >= 0; --f)
      if (frames_[f].kind == Kind::layer) return f;
    return -1;
  }

  // Layer `layer`'s forward or backward begins (a layer hook).
  void enter(Pass pass, std::size_t layer) {
    Kokkos::fence();
    pass_ = pass;
    layer_ = static_cast<int>(layer);
    frames_.push_back(Frame{Kind::layer, "", Clock::now()});
  }

  void open(Kind kind, std::string name, bool region) {
    Kokkos::fence();
    if (region && name.rfind("KokkosBlas::", 0) == 0) kind = Kind::kernel;
    // Only the outermost kernel inside a layer is timed (a BLAS call or a
    // deep copy may launch kernels of its own); nested KokkosBlas regions
    // lend the outer one their more specific name ("gemm[TPL_BLAS,float]").
    const int layer = open_layer_frame();
    if (kind == Kind::kernel && layer >= 0) {
      for (std::size_t f = layer + 1; f < frames_.size(); ++f)
        if (frames_[f].kind == Kind::kernel) {
          if (region) frames_[f].name = name;
          kind = Kind::other;
          break;
        }
    }
    Frame frame{kind, std::move(name), Clock::now()};
    // A kernel takes its launch's record (and so leaves none for the next);
    // of the regions only a KokkosBlas call does (impl::gemm's record).
    auto& record = tessera::kernels::impl::last_launch();
    if (record.fresh && (!region || frame.name.rfind("KokkosBlas::", 0) == 0)) {
      record.fresh = false;
      frame.described = kind == Kind::kernel;
      frame.items = record.work_items;
      frame.work = record.work;
    }
    frames_.push_back(std::move(frame));
  }

  void close() {
    Kokkos::fence();
    if (frames_.empty()) return;
    const Frame frame = std::move(frames_.back());
    frames_.pop_back();
    const double seconds = seconds_since(frame.start);
    const int p = static_cast<int>(pass_);
    if (frame.kind == Kind::layer) {
      layers_[layer_].seconds[p] += seconds;
      ++layers_[layer_].calls[p];
    } else if (frame.kind == Kind::kernel && open_layer_frame() >= 0) {
      auto& k = layers_[layer_].kernels[p][frame.name];
      k.seconds += seconds;
      if (frame.described) {
        k.min_items = k.described == 0 ? frame.items : std::min(k.min_items, frame.items);
        k.bytes += frame.work.bytes;
        k.flops += frame.work.flops;
        if (frame.work.narrow != nullptr && k.narrow.empty()) k.narrow = frame.work.narrow;
        ++k.described;
      }
      ++k.calls;
    }
  }

  std::vector<LayerTimes> layers_;
  std::vector<Frame> frames_;
  tessera::Model* model_ = nullptr;
  std::size_t hooks_ = 0;
  Pass pass_ = Pass::forward;
  int layer_ = -1;
};

}  // namespace tessera::bench
