// Element-wise activation kernels. Each activation is a small op with
// value(x) and its derivative given the input x and output y (reads_x and
// reads_y say which of the two it uses: a model may reuse the memory of
// the other once forward is done with it; keeps_derivative, that forward
// keeps the derivative for backward instead), and the floating-point
// operations of each (an erf or exp counted as one); one
// forward and one backward kernel serve them all, for float, bf16 and fp16
// values (computed in float, each result rounded once).
#pragma once

#include <tessera/core/compat.hpp>
#include <tessera/core/error.hpp>
#include <tessera/core/precision.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>
#include <tessera/kernels/impl/elementwise.hpp>
#include <tessera/kernels/impl/math.hpp>

namespace tessera::kernels {

struct ReluOp {
  static constexpr const char* name = "ReLU";
  static constexpr double value_flops = 0, derivative_flops = 0;
  static constexpr bool reads_x = false, reads_y = true, keeps_derivative = false;
  KOKKOS_INLINE_FUNCTION float value(float x) const { return x > 0.0f ? x : 0.0f; }
  // y > 0 exactly where x > 0 (a NaN x gives y = 0), in every format.
  KOKKOS_INLINE_FUNCTION float derivative(float /*x*/, float y) const {
    return y > 0.0f ? 1.0f : 0.0f;
  }
};

struct LeakyReluOp {
  static constexpr const char* name = "LeakyReLU";
  static constexpr double value_flops = 1, derivative_flops = 0;
  static constexpr bool reads_x = true, reads_y = false, keeps_derivative = false;
  float slope = 0.01f;
  KOKKOS_INLINE_FUNCTION float value(float x) const { return x > 0.0f ? x : slope * x; }
  KOKKOS_INLINE_FUNCTION float derivative(float x, float /*y*/) const {
    return x > 0.0f ? 1.0f : slope;
  }
};

// Exact GELU, x * Phi(x), as PyTorch's default (not its tanh
// approximation), with Phi and the density from impl/math.hpp (one
// exponential for both): no library calls, so the loops vectorise. Its
// derivative comes with its value for a few operations more, so forward
// keeps it (keeps_derivative: value_and_derivative, the same bits as
// value and derivative) and backward reads it in place of x.
struct GeluOp {
  static constexpr const char* name = "GELU";
  static constexpr double value_flops = 5, derivative_flops = 10;
  static constexpr bool reads_x = true, reads_y = false, keeps_derivative = true;
  KOKKOS_INLINE_FUNCTION float value(float x) const { return x * impl::normal_cdf(x); }
  // x Phi(x), and into d its derivative Phi(x) + x phi(x), phi(x) =
  // e^(-x^2 / 2) / sqrt(2 pi).
  KOKKOS_INLINE_FUNCTION float value_and_derivative(float x, float& d) const {
    const impl::NormalCdf p = impl::normal_cdf_parts(x);
    d = p.cdf + x * (0.39894228040143268f * p.gauss);
    return x * p.cdf;
  }
  KOKKOS_INLINE_FUNCTION float derivative(float x, float /*y*/) const {
    float d = 0.0f;
    value_and_derivative(x, d);
    return d;
  }
};

struct TanhOp {
  static constexpr const char* name = "Tanh";
  static constexpr double value_flops = 1, derivative_flops = 2;
  static constexpr bool reads_x = false, reads_y = true, keeps_derivative = false;
  KOKKOS_INLINE_FUNCTION float value(float x) const { return compat::tanh(x); }
  KOKKOS_INLINE_FUNCTION float derivative(float /*x*/, float y) const { return 1.0f - y * y; }
};

struct SigmoidOp {
  static constexpr const char* name = "Sigmoid";
  static constexpr double value_flops = 3, derivative_flops = 2;
  static constexpr bool reads_x = false, reads_y = true, keeps_derivative = false;
  // exp of a non-positive argument only, so large |x| cannot overflow.
  KOKKOS_INLINE_FUNCTION float value(float x) const {
    if (x >= 0.0f) return 1.0f / (1.0f + compat::exp(-x));
    const float e = compat::exp(x);
    return e / (1.0f + e);
  }
  KOKKOS_INLINE_FUNCTION float derivative(float /*x*/, float y) const { return y * (1.0f - y); }
};

template <class Op, class ExecSpace, class X, class Y>
void activation_forward(const ExecSpace& exec, const Op& op, const X& x, const Y& y) {
  ScopedRegion region("tessera::kernels::activation_forward");
  using T = typename Y::non_const_value_type;
  TESSERA_REQUIRE(x.size() == y.size(), "tessera::kernels::activation_forward<"
                                            << Op::name << ">: x has " << x.size()
                                            << " elements, y has " << y.size());
  // x read, y written.
  const Work work{bytes_of<typename X::value_type>(x.size()) + bytes_of<T>(y.size()),
                  Op::value_flops * double(x.size())};
  impl::for_each_span(
      exec, "tessera::kernels::activation_forward", x.size(), work,
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        const Op f = op;  // a local copy: stores through out cannot change it
        const T* in = x.data();
        T* out = y.data();
        for (std::int64_t i = begin; i < end; ++i) out[i] = narrow<T>(f.value(widen(in[i])));
      });
}

namespace impl {
// The derivative forward kept (activation_forward_keeping), read as the
// backward loops' x.
struct KeptDerivative {
  KOKKOS_INLINE_FUNCTION float derivative(float kept, float /*y*/) const { return kept; }
};

// dx += dy * f.derivative(x, y); dx = 0 + dy * f.derivative(x, y) when dx
// is dy's memory (same_memory) or add is false (dx then not read): the
// loops of activation_backward and activation_backward_kept.
template <class Op, class ExecSpace, class X, class Y, class DY, class DX>
void activation_backward_loops(const ExecSpace& exec, const char* label, const Work& work,
                               const Op& op, const X& x, const Y& y, const DY& dy, const DX& dx,
                               bool add) {
  using T = typename DX::non_const_value_type;
  const bool in_place = same_memory(dy, dx);
  for_each_span(
      exec, label, x.size(), work, KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        const Op f = op;
        const auto* in = x.data();
        const auto* out = y.data();
        const auto* grad_out = dy.data();
        T* grad_in = dx.data();
        // In place through one pointer: with two to the same memory the
        // compiler's overlap check sends the loop down its scalar version
        // (GELU's backward ran 10 times slower).
        if (in_place)
          for (std::int64_t i = begin; i < end; ++i)
            grad_in[i] =
                narrow<T>(0.0f + widen(grad_in[i]) * f.derivative(widen(in[i]), widen(out[i])));
        else if (!add)
          for (std::int64_t i = begin; i < end; ++i)
            grad_in[i] =
                narrow<T>(0.0f + widen(grad_out[i]) * f.derivative(widen(in[i]), widen(out[i])));
        else
          for (std::int64_t i = begin; i < end; ++i)
            grad_in[i] = narrow<T>(widen(grad_in[i]) +
                                   widen(grad_out[i]) * f.derivative(widen(in[i]), widen(out[i])));
      });
}
}  // namespace impl

// dx += dy * f'(x); dx = 0 + dy * f'(x) when dx is dy's memory
// (impl::same_memory) or add is false (dx then not read).
template <class Op, class ExecSpace, class X, class Y, class DY, class DX>
void activation_backward(const ExecSpace& exec, const Op& op, const X& x, const Y& y, const DY& dy,
                         const DX& dx, bool add = true) {
  ScopedRegion region("tessera::kernels::activation_backward");
  using T = typename DX::non_const_value_type;
  TESSERA_REQUIRE(x.size() == y.size() && x.size() == dy.size() && x.size() == dx.size(),
                  "tessera::kernels::activation_backward<"
                      << Op::name << ">: sizes x " << x.size() << ", y " << y.size() << ", dy "
                      << dy.size() << ", dx " << dx.size() << " must agree");
  // x, y and dy read, dx read (when added to) and written; a multiply-add
  // beside f'.
  const Work work{
      bytes_of<typename X::value_type>(x.size()) + bytes_of<typename Y::value_type>(y.size()) +
          bytes_of<typename DY::value_type>(dy.size()) + (add ? 2 : 1) * bytes_of<T>(dx.size()),
      (Op::derivative_flops + 2) * double(x.size())};
  impl::activation_backward_loops(exec, "tessera::kernels::activation_backward", work, op, x, y, dy,
                                  dx, add);
}

// y = f(x), and f'(x) into kept (float, whatever x's format) for
// activation_backward_kept: for an op whose derivative comes with its value
// (Op::keeps_derivative), backward then reads kept and dy, not x. kept holds
// at least x's elements.
template <class Op, class ExecSpace, class X, class Y, class K>
void activation_forward_keeping(const ExecSpace& exec, const Op& op, const X& x, const Y& y,
                                const K& kept) {
  static_assert(Op::keeps_derivative,
                "tessera::kernels::activation_forward_keeping: an op with value_and_derivative");
  ScopedRegion region("tessera::kernels::activation_forward");
  using T = typename Y::non_const_value_type;
  TESSERA_REQUIRE(x.size() == y.size() && kept.size() >= x.size(),
                  "tessera::kernels::activation_forward_keeping<"
                      << Op::name << ">: x has " << x.size() << " elements, y " << y.size()
                      << ", the kept derivative " << kept.size() << " (at least x's)");
  // x read, y and the derivative written.
  const Work work{bytes_of<typename X::value_type>(x.size()) + bytes_of<T>(y.size()) +
                      bytes_of<float>(x.size()),
                  (Op::value_flops + Op::derivative_flops) * double(x.size())};
  impl::for_each_span(
      exec, "tessera::kernels::activation_forward_keeping", x.size(), work,
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        const Op f = op;
        const T* in = x.data();
        T* out = y.data();
        float* d = kept.data();
        for (std::int64_t i = begin; i < end; ++i)
          out[i] = narrow<T>(f.value_and_derivative(widen(in[i]), d[i]));
      });
}

// dx += dy * kept, or dx = 0 + dy * kept (as activation_backward), with the
// derivative activation_forward_keeping kept: its first dy.size() values.
template <class ExecSpace, class K, class DY, class DX>
void activation_backward_kept(const ExecSpace& exec, const K& kept, const DY& dy, const DX& dx,
                              bool add = true) {
  ScopedRegion region("tessera::kernels::activation_backward");
  using T = typename DX::non_const_value_type;
  TESSERA_REQUIRE(kept.size() >= dy.size() && dy.size() == dx.size(),
                  "tessera::kernels::activation_backward_kept: sizes kept "
                      << kept.size() << ", dy " << dy.size() << ", dx " << dx.size()
                      << ": dy and dx must agree, kept hold at least as many");
  const auto g = Kokkos::subview(kept, std::make_pair(std::int64_t(0), std::int64_t(dy.size())));
  // The derivative and dy read, dx read (when added to) and written; a
  // multiply-add.
  const Work work{bytes_of<float>(dy.size()) + bytes_of<typename DY::value_type>(dy.size()) +
                      (add ? 2 : 1) * bytes_of<T>(dx.size()),
                  2 * double(dy.size())};
  impl::activation_backward_loops(exec, "tessera::kernels::activation_backward_kept", work,
                                  impl::KeptDerivative{}, g, g, dy, dx, add);
}

}  // namespace tessera::kernels
