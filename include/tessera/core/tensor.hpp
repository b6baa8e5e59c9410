// Tensors: a flat Kokkos::View plus a logical shape (NCHW for images,
// N x features for dense data). The element type is a template parameter so
// reduced precisions can follow without rewriting layers.
#pragma once

#include <tessera/core/error.hpp>
#include <tessera/core/types.hpp>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>

namespace tessera {

class Shape {
 public:
  static constexpr int max_rank = 4;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) {
    TESSERA_REQUIRE(dims.size() <= max_rank,
                    "tessera::Shape: rank " << dims.size() << " exceeds the maximum " << max_rank);
    for (auto d : dims) {
      TESSERA_REQUIRE(d >= 0, "tessera::Shape: negative extent " << d);
      dims_[rank_++] = d;
    }
  }

  int rank() const { return rank_; }
  void set(int i, std::int64_t d) { dims_[i] = d; }
  std::int64_t operator[](int i) const { return dims_[i]; }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  // Elements per leading index: features of a sample when dim 0 is the batch.
  std::int64_t inner() const { return rank_ == 0 ? 1 : (dims_[0] == 0 ? 0 : numel() / dims_[0]); }

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& os, const Shape& s) {
    os << '[';
    for (int i = 0; i < s.rank_; ++i) os << (i ? ", " : "") << s.dims_[i];
    return os << ']';
  }

 private:
  std::array<std::int64_t, max_rank> dims_{};
  int rank_ = 0;
};

// A sample's shape with a batch dimension in front, and the reverse.
inline Shape with_batch(const Shape& sample, std::int64_t batch) {
  TESSERA_REQUIRE(sample.rank() < Shape::max_rank,
                  "tessera::with_batch: sample shape " << sample << " leaves no room for a batch");
  Shape s;
  switch (sample.rank()) {
    case 0:
      s = Shape{batch};
      break;
    case 1:
      s = Shape{batch, sample[0]};
      break;
    case 2:
      s = Shape{batch, sample[0], sample[1]};
      break;
    default:
      s = Shape{batch, sample[0], sample[1], sample[2]};
      break;
  }
  return s;
}

inline Shape drop_batch(const Shape& s) {
  TESSERA_REQUIRE(s.rank() >= 1, "tessera::drop_batch: shape " << s << " has no batch dimension");
  switch (s.rank()) {
    case 1:
      return Shape{};
    case 2:
      return Shape{s[1]};
    case 3:
      return Shape{s[1], s[2]};
    default:
      return Shape{s[1], s[2], s[3]};
  }
}

inline std::string to_string(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

template <class T = float, class Space = MemSpace>
class Tensor {
 public:
  using value_type = T;
  using memory_space = Space;

  Tensor() = default;
  Tensor(const std::string& label, const Shape& shape)
      : data_(Kokkos::view_alloc(label, Kokkos::WithoutInitializing), shape.numel()),
        shape_(shape) {}

  // A tensor over existing memory (a slice of a larger buffer); the caller
  // keeps that memory alive.
  template <class ViewType, class = std::enable_if_t<Kokkos::is_view<ViewType>::value>>
  Tensor(const ViewType& data, const Shape& shape) : data_(data), shape_(shape) {
    TESSERA_REQUIRE(
        static_cast<std::int64_t>(data.size()) >= shape.numel(),
        "tessera::Tensor: view of " << data.size() << " elements cannot hold shape " << shape);
  }

  // The first n entries along dim 0 (a smaller batch in the same memory).
  Tensor leading(std::int64_t n) const {
    TESSERA_REQUIRE(shape_.rank() > 0 && n >= 0 && n <= shape_[0],
                    "tessera::Tensor::leading: " << n << " rows requested of shape " << shape_);
    Shape s = shape_;
    s.set(0, n);
    return Tensor(data_, s);
  }

  const Shape& shape() const { return shape_; }
  // A default-constructed tensor has no shape and no elements.
  std::int64_t numel() const { return shape_.rank() == 0 ? 0 : shape_.numel(); }
  // The elements of this shape (the backing view may be longer).
  Vector<T, Space> flat() const {
    return Kokkos::subview(data_, std::pair<std::int64_t, std::int64_t>(0, numel()));
  }
  T* data() const { return data_.data(); }

  // The tensor as [dim0, inner] rows: batch x features; 0 x 0 when empty.
  UnmanagedMatrix<T, Space> matrix() const {
    if (shape_.rank() == 0) return UnmanagedMatrix<T, Space>(data_.data(), 0, 0);
    return UnmanagedMatrix<T, Space>(data_.data(), shape_[0], shape_.inner());
  }

  // The tensor as rows of its last axis: [everything before, last], e.g. the
  // tokens of a [N, T, C] batch as [N * T, C]; 0 x 0 when empty.
  UnmanagedMatrix<T, Space> last_axis_matrix() const {
    if (shape_.rank() == 0 || numel() == 0) return UnmanagedMatrix<T, Space>(data_.data(), 0, 0);
    const std::int64_t last = shape_[shape_.rank() - 1];
    return UnmanagedMatrix<T, Space>(data_.data(), numel() / last, last);
  }

 private:
  Vector<T, Space> data_;
  Shape shape_;
};

// Bytes a tensor's shape or a view's span covers (none when empty): what a
// layer's buffers hold, summed by bytes_held.
template <class T, class Space>
std::int64_t held_bytes(const Tensor<T, Space>& t) {
  return t.numel() * static_cast<std::int64_t>(sizeof(T));
}
template <class View, class = std::enable_if_t<Kokkos::is_view<View>::value>>
std::int64_t held_bytes(const View& v) {
  return static_cast<std::int64_t>(v.span() * sizeof(typename View::value_type));
}
template <class... Items>
std::int64_t bytes_held(const Items&... items) {
  return (std::int64_t{0} + ... + held_bytes(items));
}

}  // namespace tessera
