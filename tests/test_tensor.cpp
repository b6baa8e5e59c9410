// Shapes and tensors: extents, batch slicing, errors.
#include <tessera/core/tensor.hpp>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

TEST(Shape, ExtentsAndPrinting) {
  const Shape s{8, 1, 28, 28};
  EXPECT_EQ(s.rank(), 4);
  EXPECT_EQ(s.numel(), 8 * 784);
  EXPECT_EQ(s.inner(), 784);
  EXPECT_EQ(to_string(s), "[8, 1, 28, 28]");
  EXPECT_EQ(s, (Shape{8, 1, 28, 28}));
  EXPECT_NE(s, (Shape{8, 784}));
}

TEST(Shape, RejectsNegativeAndTooManyDimensions) {
  EXPECT_THROW((Shape{2, -1}), Error);
  EXPECT_THROW((Shape{1, 2, 3, 4, 5}), Error);
}

TEST(Tensor, LeadingRowsShareMemory) {
  Tensor<float> t("t", Shape{4, 3});
  test::from_host(t.flat(), test::random_values(12, 5));
  const Tensor<float> head = t.leading(2);
  EXPECT_EQ(head.shape(), (Shape{2, 3}));
  EXPECT_EQ(head.data(), t.data());
  EXPECT_EQ(head.matrix().extent(0), 2u);
  EXPECT_EQ(head.matrix().extent(1), 3u);
  const auto all = test::to_host(t.flat());
  const auto first = test::to_host(head.flat());
  ASSERT_EQ(first.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(first[i], all[i]);
  EXPECT_THROW(t.leading(5), Error);
}

TEST(Tensor, EmptyTensorIsAnEmptyMatrix) {
  const Tensor<float> empty;
  EXPECT_EQ(empty.matrix().size(), 0u);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.flat().size(), 0u);
}

}  // namespace
