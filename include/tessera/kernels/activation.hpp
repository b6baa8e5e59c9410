// Element-wise activation kernels. Each activation is a small functor with
// value(x) and derivative expressed through the forward output or input;
// one forward and one backward kernel serve them all.
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/types.hpp>

namespace tessera::kernels {

struct ReluOp {
  static constexpr const char* name = "relu";
  template <class T>
  KOKKOS_INLINE_FUNCTION static T value(T x) { return x > T(0) ? x : T(0); }
  // d/dx given input x and output y.
  template <class T>
  KOKKOS_INLINE_FUNCTION static T derivative(T x, T /*y*/) { return x > T(0) ? T(1) : T(0); }
};

template <class Op, class ExecSpace, class X, class Y>
void activation_forward(const ExecSpace& exec, const X& x, const Y& y) {
  ScopedRegion region(std::string("tessera::kernels::activation_forward::") + Op::name);
  TESSERA_REQUIRE(x.size() == y.size(), "tessera::kernels::activation_forward<" << Op::name
                                            << ">: x has " << x.size() << " elements, y has "
                                            << y.size());
  Kokkos::parallel_for(
      "tessera::kernels::activation_forward",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, x.size()),
      KOKKOS_LAMBDA(const std::size_t i) { y(i) = Op::value(x(i)); });
}

// dx = dy * f'(x)
template <class Op, class ExecSpace, class X, class Y, class DY, class DX>
void activation_backward(const ExecSpace& exec, const X& x, const Y& y, const DY& dy,
                         const DX& dx) {
  ScopedRegion region(std::string("tessera::kernels::activation_backward::") + Op::name);
  TESSERA_REQUIRE(x.size() == y.size() && x.size() == dy.size() && x.size() == dx.size(),
                  "tessera::kernels::activation_backward<" << Op::name << ">: sizes x " << x.size()
                      << ", y " << y.size() << ", dy " << dy.size() << ", dx " << dx.size()
                      << " must agree");
  Kokkos::parallel_for(
      "tessera::kernels::activation_backward",
      Kokkos::RangePolicy<ExecSpace>(exec, 0, x.size()),
      KOKKOS_LAMBDA(const std::size_t i) { dx(i) = dy(i) * Op::derivative(x(i), y(i)); });
}

}  // namespace tessera::kernels
