// test_dev_elem.cc - the device kernels' element operations
// (src/kernels/cuda/dev_elem.h), compiled here for the host, give the bits
// the host kernels give, NaN payloads included: every pair of codes for the
// 8-bit types, and edge values plus random bit patterns (NaNs with payloads,
// signalling NaNs, infinities, subnormals, signed zeros) for the others. On
// a GPU, tests/gpu/gpu_kernels.c checks that the kernels built from the same
// header agree with the host kernels too.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "loom.h"
extern "C" {
#include "kernels/cpu/cpu_kernels.h"
}
#include "kernels/cpu/reduce_impl.h"  // cpu_*_isa
#include "kernels/cuda/dev_elem.h"

namespace {

const loomRedOp_t kOps[] = {loomSum, loomProd, loomMax, loomMin};

template <typename S>
S ld(const std::vector<uint8_t>& v, size_t i) {
  S x;
  memcpy(&x, v.data() + i * sizeof x, sizeof x);
  return x;
}
template <typename S>
void st(std::vector<uint8_t>& v, size_t i, S x) {
  memcpy(v.data() + i * sizeof x, &x, sizeof x);
}

// dst[i] = a[i] op b[i] through dev_elem.h, element by element.
template <typename S>
void apply(S (*f)(S, S), std::vector<uint8_t>& d, const std::vector<uint8_t>& a,
           const std::vector<uint8_t>& b, size_t n) {
  for (size_t i = 0; i < n; i++) st<S>(d, i, f(ld<S>(a, i), ld<S>(b, i)));
}
template <typename S>
void apply_div(S (*f)(S, int), std::vector<uint8_t>& d, const std::vector<uint8_t>& a, size_t n,
               int div) {
  for (size_t i = 0; i < n; i++) st<S>(d, i, f(ld<S>(a, i), div));
}

// The device's functions for type t. Integer sums and products wrap in the
// unsigned type of the width, as the host kernels' do.
#define CASE_INT(T, U, S, u, s)                               \
  case T:                                                     \
    if (op == 0) return apply<U>(dev_##u##_sum, d, a, b, n);  \
    if (op == 1) return apply<U>(dev_##u##_prod, d, a, b, n); \
    return apply<S>(op == 2 ? dev_##s##_max : dev_##s##_min, d, a, b, n);
#define CASE_FLOAT(T, S, s)                                                          \
  case T: {                                                                          \
    S (*f[4])(S, S) = {dev_##s##_sum, dev_##s##_prod, dev_##s##_max, dev_##s##_min}; \
    return apply<S>(f[op], d, a, b, n);                                              \
  }
void dev_reduce(loomDataType_t t, int op, std::vector<uint8_t>& d, const std::vector<uint8_t>& a,
                const std::vector<uint8_t>& b, size_t n) {
  switch (t) {
    CASE_INT(loomInt8, uint8_t, int8_t, u8, i8)
    CASE_INT(loomUint8, uint8_t, uint8_t, u8, u8)
    CASE_INT(loomInt32, uint32_t, int32_t, u32, i32)
    CASE_INT(loomUint32, uint32_t, uint32_t, u32, u32)
    CASE_INT(loomInt64, uint64_t, int64_t, u64, i64)
    CASE_INT(loomUint64, uint64_t, uint64_t, u64, u64)
    CASE_FLOAT(loomFloat16, uint16_t, half)
    CASE_FLOAT(loomBfloat16, uint16_t, bf16)
    CASE_FLOAT(loomFloat8e4m3, uint8_t, fp8e4m3)
    CASE_FLOAT(loomFloat8e5m2, uint8_t, fp8e5m2)
    CASE_FLOAT(loomFloat32, float, f32)
    CASE_FLOAT(loomFloat64, double, f64)
    default:
      FAIL() << "type " << int(t);
  }
}
#undef CASE_INT
#undef CASE_FLOAT

void dev_div(loomDataType_t t, std::vector<uint8_t>& d, const std::vector<uint8_t>& a, size_t n,
             int div) {
  switch (t) {
    case loomInt8:
      apply_div<int8_t>(dev_i8_div, d, a, n, div);
      return;
    case loomUint8:
      apply_div<uint8_t>(dev_u8_div, d, a, n, div);
      return;
    case loomInt32:
      apply_div<int32_t>(dev_i32_div, d, a, n, div);
      return;
    case loomUint32:
      apply_div<uint32_t>(dev_u32_div, d, a, n, div);
      return;
    case loomInt64:
      apply_div<int64_t>(dev_i64_div, d, a, n, div);
      return;
    case loomUint64:
      apply_div<uint64_t>(dev_u64_div, d, a, n, div);
      return;
    case loomFloat16:
      apply_div<uint16_t>(dev_half_div, d, a, n, div);
      return;
    case loomBfloat16:
      apply_div<uint16_t>(dev_bf16_div, d, a, n, div);
      return;
    case loomFloat8e4m3:
      apply_div<uint8_t>(dev_fp8e4m3_div, d, a, n, div);
      return;
    case loomFloat8e5m2:
      apply_div<uint8_t>(dev_fp8e5m2_div, d, a, n, div);
      return;
    case loomFloat32:
      apply_div<float>(dev_f32_div, d, a, n, div);
      return;
    case loomFloat64:
      apply_div<double>(dev_f64_div, d, a, n, div);
      return;
    default:
      FAIL() << "type " << int(t);
  }
}

// Operand pairs: for 1-byte types every pair of codes; otherwise edge values
// against each other and random bit patterns.
struct Pairs {
  std::vector<uint8_t> a, b;
  size_t n = 0;
};
Pairs make_pairs(loomDataType_t t, std::mt19937_64& rng) {
  const size_t es = dtype_size(t);
  Pairs p;
  std::vector<uint64_t> xs, ys;
  if (es == 1) {
    for (uint64_t x = 0; x < 256; x++)
      for (uint64_t y = 0; y < 256; y++) xs.push_back(x), ys.push_back(y);
  } else {
    std::vector<uint64_t> edge = {0, 1, 2, 3};
    const int bits = int(es * 8);
    const uint64_t top = uint64_t(1) << (bits - 1);
    const uint64_t all = bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
    for (uint64_t v : {top, top | 1, all, all - 1, top - 1, top - 2}) edge.push_back(v);
    if (t == loomFloat16)
      edge.insert(edge.end(), {0x7c00, 0xfc00, 0x7c01, 0x7e00, 0xfe12, 0x3c00, 0x03ff, 0x7bff});
    if (t == loomBfloat16)
      edge.insert(edge.end(), {0x7f80, 0xff80, 0x7f81, 0x7fc0, 0xffc3, 0x3f80, 0x007f, 0x7f7f});
    if (t == loomFloat32)
      edge.insert(edge.end(), {0x7f800000, 0xff800000, 0x7f800001, 0x7fc00000, 0xffc12345,
                               0x3f800000, 0x007fffff, 0x7f7fffff, 0x00000001});
    if (t == loomFloat64)
      edge.insert(edge.end(), {0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff0000000000001ull,
                               0x7ff8000000000000ull, 0xfff8000000001234ull, 0x3ff0000000000000ull,
                               0x000fffffffffffffull, 0x0000000000000001ull});
    for (uint64_t x : edge)
      for (uint64_t y : edge) xs.push_back(x), ys.push_back(y);
    for (int i = 0; i < 20000; i++) xs.push_back(rng() & all), ys.push_back(rng() & all);
  }
  p.n = xs.size();
  p.a.resize(p.n * es);
  p.b.resize(p.n * es);
  for (size_t i = 0; i < p.n; i++) {
    memcpy(p.a.data() + i * es, &xs[i], es);  // little-endian: the low bytes
    memcpy(p.b.data() + i * es, &ys[i], es);
  }
  return p;
}

std::string first_diff(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                       const Pairs& p, size_t es) {
  for (size_t i = 0; i < p.n; i++)
    if (memcmp(got.data() + i * es, want.data() + i * es, es) != 0) {
      uint64_t g = 0, w = 0, x = 0, y = 0;
      memcpy(&g, got.data() + i * es, es);
      memcpy(&w, want.data() + i * es, es);
      memcpy(&x, p.a.data() + i * es, es);
      memcpy(&y, p.b.data() + i * es, es);
      char buf[160];
      snprintf(buf, sizeof buf, "element %zu: operands 0x%llx, 0x%llx: device 0x%llx, host 0x%llx",
               i, (unsigned long long)x, (unsigned long long)y, (unsigned long long)g,
               (unsigned long long)w);
      return buf;
    }
  return "";
}

class DevElem : public ::testing::TestWithParam<loomDataType_t> {
 protected:
  std::mt19937_64 rng_{42};
};

TEST_P(DevElem, ReduceGivesTheHostKernelsBits) {
  const loomDataType_t t = GetParam();
  const size_t es = dtype_size(t);
  Pairs p = make_pairs(t, rng_);
  for (int op = 0; op < 4; op++) {
    std::vector<uint8_t> host(p.n * es), dev(p.n * es);
    cpu_reduce_isa(CPU_ISA_SCALAR, t, kOps[op], host.data(), p.a.data(), p.b.data(), p.n);
    dev_reduce(t, op, dev, p.a, p.b, p.n);
    EXPECT_EQ(first_diff(dev, host, p, es), "") << dtype_name(t) << " " << redop_name(kOps[op]);
    // The vector kernels agree with the scalar ones (test_kernels.cc), and so with these.
    cpu_reduce(t, kOps[op], host.data(), p.a.data(), p.b.data(), p.n);
    EXPECT_EQ(first_diff(dev, host, p, es), "") << dtype_name(t) << " " << redop_name(kOps[op])
                                                << " (" << cpu_isa_name(cpu_isa_active()) << ")";
  }
}

TEST_P(DevElem, DivGivesTheHostKernelsBits) {
  const loomDataType_t t = GetParam();
  const size_t es = dtype_size(t);
  Pairs p = make_pairs(t, rng_);
  const bool is_unsigned = t == loomUint8 || t == loomUint32 || t == loomUint64;
  for (int d : {1, 2, 3, 7, 8, 64, 1000003, -1, -3}) {
    if (d < 0 && is_unsigned) continue;  // the host kernels' contract: nranks > 0 there
    std::vector<uint8_t> host(p.n * es), dev(p.n * es);
    cpu_div_isa(CPU_ISA_SCALAR, t, host.data(), p.a.data(), p.n, d);
    dev_div(t, dev, p.a, p.n, d);
    EXPECT_EQ(first_diff(dev, host, p, es), "") << dtype_name(t) << " / " << d;
  }
}

// PreMulSum's multiply is the product with the scalar as the second operand.
TEST_P(DevElem, MulScalarIsTheProductByTheScalar) {
  const loomDataType_t t = GetParam();
  const size_t es = dtype_size(t);
  Pairs p = make_pairs(t, rng_);
  for (size_t k : {size_t(0), size_t(3), p.n / 2, p.n - 1}) {
    std::vector<uint8_t> host(p.n * es), dev(p.n * es), ks(p.n * es);
    for (size_t i = 0; i < p.n; i++) memcpy(ks.data() + i * es, p.b.data() + k * es, es);
    cpu_mul_scalar_isa(CPU_ISA_SCALAR, t, host.data(), p.a.data(), p.n, p.b.data() + k * es);
    dev_reduce(t, 1, dev, p.a, ks, p.n);
    EXPECT_EQ(first_diff(dev, host, p, es), "") << dtype_name(t) << " scalar #" << k;
  }
}

std::vector<loomDataType_t> all_types() {
  std::vector<loomDataType_t> v;
  for (int t = 0; t < loomNumTypes; t++) v.push_back(loomDataType_t(t));
  return v;
}
INSTANTIATE_TEST_SUITE_P(AllTypes, DevElem, ::testing::ValuesIn(all_types()),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

}  // namespace

extern "C" {
#include "core/checks.h"
#include "kernels/cuda/cuda_kernels.h"
}

// Where the kernels cannot run (no nvcc at build time, no driver, no device),
// every entry point refuses with the reason, and touches nothing.
TEST(DeviceKernels, RefuseWithTheReasonWhereTheyCannotRun) {
  const char* why = nullptr;
  if (cuda_kernels_usable(&why))
    GTEST_SKIP() << "a GPU is here: tests/gpu/gpu_kernels runs the kernels";
  ASSERT_NE(why, nullptr);
  std::string reason = why;
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, d[4] = {0, 0, 0, 0};
  EXPECT_EQ(cuda_reduce(loomFloat32, loomSum, d, a, b, 4, nullptr), loomInvalidUsage);
  EXPECT_NE(std::string(err_thread_last()).find(reason), std::string::npos) << err_thread_last();
  EXPECT_EQ(cuda_div(loomFloat32, d, a, 4, 2, nullptr), loomInvalidUsage);
  EXPECT_EQ(cuda_mul_scalar(loomFloat32, d, a, 4, b, 0, nullptr), loomInvalidUsage);
  EXPECT_EQ(cuda_copy(d, a, sizeof a, nullptr), loomInvalidUsage);
  for (float x : d) EXPECT_EQ(x, 0.0f);
  // Bad arguments are named before anything else.
  EXPECT_EQ(cuda_reduce(loomDataType_t(99), loomSum, d, a, b, 4, nullptr), loomInvalidArgument);
  EXPECT_NE(std::string(err_thread_last()).find("datatype 99"), std::string::npos);
  EXPECT_EQ(cuda_div(loomFloat32, d, a, 4, 0, nullptr), loomInvalidArgument);
  // A count of zero enqueues nothing, and so cannot fail.
  EXPECT_EQ(cuda_reduce(loomFloat32, loomMax, d, a, b, 0, nullptr), loomSuccess);
}

TEST(DeviceKernels, BuiltWhenTheFeatureListSaysSo) {
  EXPECT_EQ(cuda_kernels_built(),
            std::string(LOOM_FEATURES_TEXT).find("cuda") != std::string::npos);
}
