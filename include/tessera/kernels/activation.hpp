// Element-wise activation kernels. Each activation is a small op with
// value(x) and its derivative given the input x and output y (reads_x and
// reads_y say which of the two it uses: a model may reuse the memory of
// the other once forward is done with it), and the floating-point
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
  static constexpr bool reads_x = false, reads_y = true;
  KOKKOS_INLINE_FUNCTION float value(float x) const { return x > 0.0f ? x : 0.0f; }
  // y > 0 exactly where x > 0 (a NaN x gives y = 0), in every format.
  KOKKOS_INLINE_FUNCTION float derivative(float /*x*/, float y) const {
    return y > 0.0f ? 1.0f : 0.0f;
  }
};

struct LeakyReluOp {
  static constexpr const char* name = "LeakyReLU";
  static constexpr double value_flops = 1, derivative_flops = 0;
  static constexpr bool reads_x = true, reads_y = false;
  float slope = 0.01f;
  KOKKOS_INLINE_FUNCTION float value(float x) const { return x > 0.0f ? x : slope * x; }
  KOKKOS_INLINE_FUNCTION float derivative(float x, float /*y*/) const {
    return x > 0.0f ? 1.0f : slope;
  }
};

// Exact GELU, x * Phi(x), as PyTorch's default (not its tanh
// approximation), with Phi and the density from impl/math.hpp (one
// exponential for both): no library calls, so the loops vectorise.
struct GeluOp {
  static constexpr const char* name = "GELU";
  static constexpr double value_flops = 5, derivative_flops = 10;
  static constexpr bool reads_x = true, reads_y = false;
  KOKKOS_INLINE_FUNCTION float value(float x) const { return x * impl::normal_cdf(x); }
  // Phi(x) + x phi(x), phi(x) = e^(-x^2 / 2) / sqrt(2 pi).
  KOKKOS_INLINE_FUNCTION float derivative(float x, float /*y*/) const {
    const impl::NormalCdf p = impl::normal_cdf_parts(x);
    return p.cdf + x * (0.39894228040143268f * p.gauss);
  }
};

struct TanhOp {
  static constexpr const char* name = "Tanh";
  static constexpr double value_flops = 1, derivative_flops = 2;
  static constexpr bool reads_x = false, reads_y = true;
  KOKKOS_INLINE_FUNCTION float value(float x) const { return compat::tanh(x); }
  KOKKOS_INLINE_FUNCTION float derivative(float /*x*/, float y) const { return 1.0f - y * y; }
};

struct SigmoidOp {
  static constexpr const char* name = "Sigmoid";
  static constexpr double value_flops = 3, derivative_flops = 2;
  static constexpr bool reads_x = false, reads_y = true;
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
  const bool in_place = impl::same_memory(dy, dx);
  impl::for_each_span(
      exec, "tessera::kernels::activation_backward", x.size(), work,
      KOKKOS_LAMBDA(const std::int64_t begin, const std::int64_t end) {
        const Op f = op;
        const T *in = x.data(), *out = y.data();
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

}  // namespace tessera::kernels
