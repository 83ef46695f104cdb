// Section 1 of PARALLEL.md: loomTensor, its contiguity, element count and slices.
#include "par_test.h"

namespace {

using partest::make;

TEST(Tensor, MakeIsRowMajorAndContiguous) {
  std::vector<float> v(2 * 3 * 4);
  loomTensor t = make(v, loomFloat32, {2, 3, 4});
  EXPECT_EQ(t.ndim, 3);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_EQ(t.strides[0], 12);
  int c = -1;
  ASSERT_LOOM_OK(loomTensorIsContiguous(&t, &c));
  EXPECT_EQ(c, 1);
  int64_t n = -1;
  ASSERT_LOOM_OK(loomTensorNumel(&t, &n));
  EXPECT_EQ(n, 24);
}

TEST(Tensor, ZeroExtentsAndScalars) {
  std::vector<double> v(1);
  loomTensor s = make(v, loomFloat64, {});
  int64_t n = -1;
  ASSERT_LOOM_OK(loomTensorNumel(&s, &n));
  EXPECT_EQ(n, 1) << "ndim 0 is one element";
  // An extent of 0: strides use max(extent, 1), no elements, contiguous, data may be NULL.
  int64_t shape[3] = {3, 0, 5};
  loomTensor e;
  ASSERT_LOOM_OK(loomTensorMake(nullptr, loomFloat32, 3, shape, &e));
  EXPECT_EQ(e.strides[1], 5);
  EXPECT_EQ(e.strides[0], 5);
  ASSERT_LOOM_OK(loomTensorNumel(&e, &n));
  EXPECT_EQ(n, 0);
  int c = 0;
  ASSERT_LOOM_OK(loomTensorIsContiguous(&e, &c));
  EXPECT_EQ(c, 1);
}

TEST(Tensor, SliceIsAViewAndMostSlicesAreNotContiguous) {
  std::vector<int32_t> v(4 * 6);
  for (size_t i = 0; i < v.size(); i++) v[i] = (int32_t)i;
  loomTensor t = make(v, loomInt32, {4, 6});
  loomTensor s;
  ASSERT_LOOM_OK(loomTensorSlice(&t, 1, 2, 3, &s));
  EXPECT_EQ(s.shape[1], 3);
  EXPECT_EQ(s.data, (void*)(v.data() + 2));
  EXPECT_EQ(((int32_t*)s.data)[1 * s.strides[0] + 2 * s.strides[1]], 1 * 6 + 4);
  int c = 1;
  ASSERT_LOOM_OK(loomTensorIsContiguous(&s, &c));
  EXPECT_EQ(c, 0);
  // Rows of the outer dim stay contiguous; a dim of extent 1 is ignored.
  ASSERT_LOOM_OK(loomTensorSlice(&t, 0, 1, 2, &s));
  ASSERT_LOOM_OK(loomTensorIsContiguous(&s, &c));
  EXPECT_EQ(c, 1);
  ASSERT_LOOM_OK(loomTensorSlice(&t, 1, 5, 1, &s));
  loomTensor one;
  ASSERT_LOOM_OK(loomTensorSlice(&s, 0, 2, 1, &one));
  ASSERT_LOOM_OK(loomTensorIsContiguous(&one, &c));
  EXPECT_EQ(c, 1);
  // In place: slice may be the tensor itself.
  loomTensor same = t;
  ASSERT_LOOM_OK(loomTensorSlice(&same, 0, 3, 1, &same));
  EXPECT_EQ(same.shape[0], 1);
  EXPECT_EQ(same.data, (void*)(v.data() + 18));
  // A permuted view is not contiguous.
  loomTensor p = t;
  std::swap(p.shape[0], p.shape[1]);
  std::swap(p.strides[0], p.strides[1]);
  ASSERT_LOOM_OK(loomTensorIsContiguous(&p, &c));
  EXPECT_EQ(c, 0);
}

TEST(TensorArgs, MisuseNamesTheArgument) {
  std::vector<float> v(8);
  int64_t shape[2] = {2, 4};
  loomTensor t;
  std::vector<unsigned char> none;
  EXPECT_MISUSE(loomTensorMake(v.data(), loomFloat32, 9, shape, &t), nullptr, "loomTensorMake",
                none, "ndim", "9");
  EXPECT_MISUSE(loomTensorMake(v.data(), loomFloat32, 2, nullptr, &t), nullptr, "loomTensorMake",
                none, "shape");
  int64_t neg[2] = {2, -4};
  EXPECT_MISUSE(loomTensorMake(v.data(), loomFloat32, 2, neg, &t), nullptr, "loomTensorMake", none,
                "shape[1]", "-4");
  EXPECT_MISUSE(loomTensorMake(nullptr, loomFloat32, 2, shape, &t), nullptr, "loomTensorMake", none,
                "data is NULL", "8");
  EXPECT_MISUSE(loomTensorMake(v.data(), (loomDataType_t)42, 2, shape, &t), nullptr,
                "loomTensorMake", none, "dtype", "42");
  t = partest::make(v, loomFloat32, {2, 4});
  loomTensor s;
  EXPECT_MISUSE(loomTensorSlice(&t, 2, 0, 1, &s), nullptr, "loomTensorSlice", none, "dim", "2");
  EXPECT_MISUSE(loomTensorSlice(&t, 1, 3, 2, &s), nullptr, "loomTensorSlice", none, "start 3",
                "length 2", "4");
  EXPECT_MISUSE(loomTensorSlice(&t, 1, -1, 1, &s), nullptr, "loomTensorSlice", none, "-1");
  loomTensor bad = t;
  bad.strides[0] = -1;
  int c;
  EXPECT_MISUSE(loomTensorIsContiguous(&bad, &c), nullptr, "loomTensorIsContiguous", none,
                "strides[0]", "-1");
  EXPECT_MISUSE(loomTensorNumel(&t, nullptr), nullptr, "loomTensorNumel", none, "numel");
  EXPECT_MISUSE(loomTensorNumel(nullptr, nullptr), nullptr, "loomTensorNumel", none, "NULL");
}

}  // namespace
