// test_kernels.cc - the host reduction kernels and dtype conversions.
//
// Every result is checked against a reference written here independently of
// the library: 8/16-bit formats are decoded from their definition and encoded
// by enumerating every code and picking the nearest, ties to even. Each ISA
// variant must then match the scalar one bit for bit, NaN payloads included.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "loom.h"
// cpu_kernels.h has no extern "C" guards of its own (yet).
extern "C" {
#include "kernels/cpu/cpu_kernels.h"
}
#include "kernels/cpu/reduce_impl.h"  // cpu_div_isa, cpu_mul_scalar_isa

namespace {

// ---- Reference formats ------------------------------------------------------

struct Fmt {
  const char* name;
  int bits, ebits, mbits, bias;
  bool ieee;  // all-ones exponent means inf/NaN; else only all-ones code is NaN (e4m3fn)
};
const Fmt kHalf{"float16", 16, 5, 10, 15, true};
const Fmt kBf16{"bfloat16", 16, 8, 7, 127, true};
const Fmt kE4m3{"float8e4m3", 8, 4, 3, 7, false};
const Fmt kE5m2{"float8e5m2", 8, 5, 2, 15, true};

double ref_decode(const Fmt& f, uint32_t code) {
  uint32_t sign = (code >> (f.bits - 1)) & 1;
  uint32_t e = (code >> f.mbits) & ((1u << f.ebits) - 1);
  uint32_t m = code & ((1u << f.mbits) - 1);
  uint32_t emax = (1u << f.ebits) - 1, mmax = (1u << f.mbits) - 1;
  double v;
  if (f.ieee && e == emax)
    v = m ? NAN : INFINITY;
  else if (!f.ieee && e == emax && m == mmax)
    v = NAN;
  else if (e == 0)
    v = std::ldexp(double(m), 1 - f.bias - f.mbits);
  else
    v = std::ldexp(double((1u << f.mbits) | m), int(e) - f.bias - f.mbits);
  return sign ? -v : v;
}

// Encodes by search over every finite non-negative code, nearest wins and a
// tie goes to the even code. For IEEE-like formats the infinity code sits one
// ulp above the largest finite value, which gives IEEE overflow rounding;
// e4m3fn has no such entry, so it saturates.
class RefEncoder {
 public:
  explicit RefEncoder(const Fmt& f) : f_(f) {
    for (uint32_t c = 0; c < (1u << (f.bits - 1)); c++) {
      double v = ref_decode(f, c);
      if (std::isfinite(v)) vals_.push_back(v), codes_.push_back(c);
    }
    if (f.ieee) {
      vals_.push_back(std::ldexp(1.0, (1 << f.ebits) - 1 - f.bias));
      codes_.push_back(((1u << f.ebits) - 1) << f.mbits);
    }
  }
  // -1 for NaN.
  int64_t encode(double x) const {
    if (std::isnan(x)) return -1;
    uint32_t sign = std::signbit(x) ? 1u << (f_.bits - 1) : 0;
    double a = std::fabs(x);
    size_t i = std::lower_bound(vals_.begin(), vals_.end(), a) - vals_.begin();
    uint32_t c;
    if (i == vals_.size()) {
      c = codes_.back();
    } else if (vals_[i] == a || i == 0) {
      c = codes_[i];
    } else {
      double mid = (vals_[i - 1] + vals_[i]) / 2;  // exact in double
      c = a < mid   ? codes_[i - 1]
          : a > mid ? codes_[i]
                    : (codes_[i] % 2 ? codes_[i - 1] : codes_[i]);
    }
    return sign | c;
  }
  const std::vector<double>& values() const { return vals_; }

 private:
  Fmt f_;
  std::vector<double> vals_;
  std::vector<uint32_t> codes_;
};

const RefEncoder& ref_encoder(const Fmt& f) {
  static const RefEncoder half(kHalf), bf16(kBf16), e4m3(kE4m3), e5m2(kE5m2);
  return &f == &kHalf ? half : &f == &kBf16 ? bf16 : &f == &kE4m3 ? e4m3 : e5m2;
}

const Fmt* small_fmt(loomDataType_t t) {
  switch (t) {
    case loomFloat16:
      return &kHalf;
    case loomBfloat16:
      return &kBf16;
    case loomFloat8e4m3:
      return &kE4m3;
    case loomFloat8e5m2:
      return &kE5m2;
    default:
      return nullptr;
  }
}

uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
float f32_from(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
uint64_t f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}
double f64_from(uint64_t u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
}

bool is_int(loomDataType_t t) {
  return t <= loomUint64;
}
bool is_signed_int(loomDataType_t t) {
  return t == loomInt8 || t == loomInt32 || t == loomInt64;
}
uint64_t width_mask(loomDataType_t t) {
  size_t n = dtype_size(t);
  return n == 8 ? ~0ull : (1ull << (8 * n)) - 1;
}
int64_t sign_extend(loomDataType_t t, uint64_t v) {
  int shift = 64 - 8 * int(dtype_size(t));
  return int64_t(v << shift) >> shift;
}

// ---- Reference element operations ---------------------------------------------

// What one element must be: its bits, or any NaN.
struct Expect {
  uint64_t bits;
  bool any_nan;
};

float op_f32(loomRedOp_t op, float x, float y) {
  switch (op) {
    case loomProd:
      return x * y;
    case loomMax:
      return x > y ? x : y;
    case loomMin:
      return x < y ? x : y;
    default:
      return x + y;
  }
}
double op_f64(loomRedOp_t op, double x, double y) {
  switch (op) {
    case loomProd:
      return x * y;
    case loomMax:
      return x > y ? x : y;
    case loomMin:
      return x < y ? x : y;
    default:
      return x + y;
  }
}
uint64_t op_int(loomDataType_t t, loomRedOp_t op, uint64_t a, uint64_t b) {
  bool a_gt = is_signed_int(t) ? sign_extend(t, a) > sign_extend(t, b) : a > b;
  bool a_lt = is_signed_int(t) ? sign_extend(t, a) < sign_extend(t, b) : a < b;
  switch (op) {
    case loomProd:
      return (a * b) & width_mask(t);
    case loomMax:
      return a_gt ? a : b;
    case loomMin:
      return a_lt ? a : b;
    default:
      return (a + b) & width_mask(t);
  }
}

// The value of a float-like element as float (float64 excluded).
float to_float(loomDataType_t t, uint64_t v) {
  if (t == loomFloat32) return f32_from(uint32_t(v));
  return float(ref_decode(*small_fmt(t), uint32_t(v)));
}
Expect from_float(loomDataType_t t, float r) {
  if (std::isnan(r)) return {0, true};
  if (t == loomFloat32) return {f32_bits(r), false};
  return {uint64_t(ref_encoder(*small_fmt(t)).encode(r)), false};
}

Expect ref_reduce(loomDataType_t t, loomRedOp_t op, uint64_t a, uint64_t b) {
  if (is_int(t)) return {op_int(t, op, a, b), false};
  if (t == loomFloat64) {
    double r = op_f64(op, f64_from(a), f64_from(b));
    return {f64_bits(r), std::isnan(r)};
  }
  return from_float(t, op_f32(op, to_float(t, a), to_float(t, b)));
}

Expect ref_div(loomDataType_t t, uint64_t a, int d) {
  if (is_signed_int(t)) {
    int64_t x = sign_extend(t, a);
    uint64_t q = d == -1 ? 0 - uint64_t(x) : uint64_t(x / d);
    return {q & width_mask(t), false};
  }
  if (is_int(t)) return {a / uint64_t(d), false};  // tests use d > 0 here
  if (t == loomFloat64) {
    double r = f64_from(a) / double(d);
    return {f64_bits(r), std::isnan(r)};
  }
  return from_float(t, to_float(t, a) / float(d));
}

// ---- Inputs -----------------------------------------------------------------

std::vector<uint64_t> edge_values(loomDataType_t t) {
  switch (t) {
    case loomInt8:
      return {0, 1, 0xff, 0x7f, 0x80};
    case loomUint8:
      return {0, 1, 0xff, 0x80, 0x7f};
    case loomInt32:
    case loomUint32:
      return {0, 1, 0xffffffff, 0x7fffffff, 0x80000000};
    case loomInt64:
    case loomUint64:
      return {0, 1, ~0ull, 0x7fffffffffffffffull, 0x8000000000000000ull};
    case loomFloat16:
      return {0x0000, 0x8000, 0x0001, 0x83ff, 0x0400, 0x7bff, 0xfbff,
              0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe01, 0x7fff, 0x3c00};
    case loomBfloat16:
      return {0x0000, 0x8000, 0x0001, 0x807f, 0x0080, 0x7f7f, 0xff7f,
              0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff, 0x3f80};
    case loomFloat8e4m3:
      return {0x00, 0x80, 0x01, 0x87, 0x08, 0x7e, 0xfe, 0x7f, 0xff, 0x38};
    case loomFloat8e5m2:
      return {0x00, 0x80, 0x01, 0x83, 0x04, 0x7b, 0xfb, 0x7c, 0xfc, 0x7d, 0x7e, 0xff};
    case loomFloat32:
      return {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,
              0x7fc12345, 0x00000001, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x3f800000};
    default:  // float64
      return {0,
              0x8000000000000000ull,
              0x7ff0000000000000ull,
              0xfff0000000000000ull,
              0x7ff8000000000000ull,
              0xfff8000000000000ull,
              0x7ff0000000000001ull,
              0x7ff8000012345678ull,
              1,
              0x800fffffffffffffull,
              0x0010000000000000ull,
              0x7fefffffffffffffull,
              0xffefffffffffffffull,
              0x3ff0000000000000ull};
  }
}

// A mix of edge values, raw random bits (NaNs with random payloads, all
// exponents) and ordinary numbers, so that sums and products mean something.
std::vector<uint64_t> random_values(loomDataType_t t, size_t n, std::mt19937_64& rng) {
  std::vector<uint64_t> edges = edge_values(t), v(n);
  std::uniform_real_distribution<double> real(-8.0, 8.0);
  for (auto& x : v) {
    unsigned kind = rng() % 8;
    double r = real(rng);
    if (kind == 0)
      x = edges[rng() % edges.size()];
    else if (kind < 3 || is_int(t))
      x = rng() & width_mask(t);
    else if (t == loomFloat64)
      x = f64_bits(r);
    else if (t == loomFloat32)
      x = f32_bits(float(r));
    else
      x = uint64_t(ref_encoder(*small_fmt(t)).encode(float(r)));
  }
  return v;
}

// Elements at a byte offset inside guard bytes, to catch stray writes and to
// run the kernels on any alignment.
class Buf {
 public:
  static constexpr size_t kGuard = 64;
  Buf(loomDataType_t t, size_t n, size_t offset)
      : t_(t),
        n_(n),
        off_(kGuard + offset),
        raw_(kGuard * 2 + offset + n * dtype_size(t) + 64, 0xa5) {}
  void* ptr() { return raw_.data() + off_; }
  uint64_t get(size_t i) const {
    uint64_t v = 0;
    memcpy(&v, raw_.data() + off_ + i * dtype_size(t_), dtype_size(t_));
    return v;
  }
  void set(size_t i, uint64_t v) {
    memcpy(raw_.data() + off_ + i * dtype_size(t_), &v, dtype_size(t_));
  }
  void fill(const std::vector<uint64_t>& v) {
    for (size_t i = 0; i < n_; i++) set(i, v[i]);
  }
  bool guards_intact() const {
    size_t end = off_ + n_ * dtype_size(t_);
    for (size_t i = 0; i < raw_.size(); i++)
      if ((i < off_ || i >= end) && raw_[i] != 0xa5) return false;
    return true;
  }

 private:
  loomDataType_t t_;
  size_t n_, off_;
  std::vector<uint8_t> raw_;
};

bool elem_is_nan(loomDataType_t t, uint64_t v) {
  if (is_int(t)) return false;
  if (t == loomFloat64) return std::isnan(f64_from(v));
  return std::isnan(to_float(t, v));
}

std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "0x%llx", (unsigned long long)v);
  return b;
}

// Checks got against expect; returns false (with one failure) at the first
// mismatch so that a broken kernel does not print thousands of lines.
bool expect_matches(loomDataType_t t, const Buf& got, const std::vector<Expect>& want,
                    const std::string& what) {
  for (size_t i = 0; i < want.size(); i++) {
    uint64_t g = got.get(i);
    bool ok = want[i].any_nan ? elem_is_nan(t, g) : g == want[i].bits;
    if (!ok) {
      ADD_FAILURE() << what << ": element " << i << " is " << hex(g) << ", want "
                    << (want[i].any_nan ? std::string("NaN") : hex(want[i].bits));
      return false;
    }
  }
  return true;
}

bool same_bits(const Buf& got, const Buf& ref, size_t n, const std::string& what) {
  for (size_t i = 0; i < n; i++) {
    if (got.get(i) != ref.get(i)) {
      ADD_FAILURE() << what << ": element " << i << " is " << hex(got.get(i)) << ", scalar gives "
                    << hex(ref.get(i));
      return false;
    }
  }
  return true;
}

// ---- Conversions --------------------------------------------------------------

struct Codec {
  const Fmt* fmt;
  float (*decode)(uint32_t);
  uint32_t (*encode)(float);
};
const Codec kCodecs[] = {
    {&kHalf, [](uint32_t c) { return half_to_float(uint16_t(c)); },
     [](float f) { return uint32_t(float_to_half(f)); }},
    {&kBf16, [](uint32_t c) { return bf16_to_float(uint16_t(c)); },
     [](float f) { return uint32_t(float_to_bf16(f)); }},
    {&kE4m3, [](uint32_t c) { return fp8e4m3_to_float(uint8_t(c)); },
     [](float f) { return uint32_t(float_to_fp8e4m3(f)); }},
    {&kE5m2, [](uint32_t c) { return fp8e5m2_to_float(uint8_t(c)); },
     [](float f) { return uint32_t(float_to_fp8e5m2(f)); }},
};

class Convert : public ::testing::TestWithParam<Codec> {};

TEST_P(Convert, EveryCodeDecodesAndRoundTrips) {
  const Codec& c = GetParam();
  for (uint32_t code = 0; code < (1u << c.fmt->bits); code++) {
    double want = ref_decode(*c.fmt, code);
    float got = c.decode(code);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << hex(code);
      ASSERT_TRUE(std::isnan(ref_decode(*c.fmt, c.encode(got)))) << hex(code);
      continue;
    }
    ASSERT_EQ(double(got), want) << hex(code);
    ASSERT_EQ(std::signbit(got), std::signbit(want)) << hex(code);
    ASSERT_EQ(c.encode(got), code) << hex(code);
  }
}

// Every midpoint between neighbouring codes (the ties) and the floats on
// either side of it, then random bit patterns over the whole float range.
TEST_P(Convert, EncodeMatchesEnumeration) {
  const Codec& c = GetParam();
  const RefEncoder& ref = ref_encoder(*c.fmt);
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           INFINITY,
                           -INFINITY,
                           NAN,
                           -NAN,
                           f32_from(0x7f800001),
                           f32_from(1),
                           f32_from(0x807fffff),
                           FLT_MAX,
                           -FLT_MAX,
                           FLT_MIN};
  const std::vector<double>& v = ref.values();
  for (size_t i = 1; i < v.size(); i++) {
    float mid = float((v[i - 1] + v[i]) / 2);
    ASSERT_EQ(double(mid), (v[i - 1] + v[i]) / 2) << "a midpoint must be a float";
    for (float m : {mid, -mid}) {
      xs.push_back(m);
      xs.push_back(std::nextafter(m, INFINITY));
      xs.push_back(std::nextafter(m, -INFINITY));
    }
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1000000; i++) xs.push_back(f32_from(uint32_t(rng())));
  for (float x : xs) {
    int64_t want = ref.encode(x);
    uint32_t got = c.encode(x);
    if (want < 0)
      ASSERT_TRUE(std::isnan(ref_decode(*c.fmt, got))) << x;
    else
      ASSERT_EQ(got, uint32_t(want)) << "x=" << x << " bits " << hex(f32_bits(x));
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Convert, ::testing::ValuesIn(kCodecs),
                         [](const auto& p) { return std::string(p.param.fmt->name); });

// Anchors written by hand, so that the test and the library cannot share one
// misreading of a format.
TEST(ConvertAnchors, OverflowAndSaturation) {
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);  // tie with the smallest subnormal
  EXPECT_EQ(float_to_half(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(float_to_bf16(f32_from(0x7f7fffff)), 0x7f80);
  EXPECT_EQ(float_to_bf16(f32_from(0x00018000)), 0x0002);  // subnormals are kept
  EXPECT_EQ(float_to_fp8e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_fp8e4m3(464.0f), 0x7e);
  EXPECT_EQ(float_to_fp8e4m3(1e9f), 0x7e);
  EXPECT_EQ(float_to_fp8e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(float_to_fp8e4m3(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(fp8e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(float_to_fp8e5m2(57344.0f), 0x7b);
  EXPECT_EQ(float_to_fp8e5m2(61440.0f), 0x7c);  // tie rounds to even: infinity
  EXPECT_EQ(fp8e5m2_to_float(0x01), 0x1p-16f);
}

// The kernels use F16C for float16 where the CPU has it and C elsewhere; both
// must agree on every bit, NaN payloads included.
__attribute__((target("f16c"))) uint32_t hw_half_to_float_bits(uint16_t h) {
  return f32_bits(_cvtsh_ss(h));
}
__attribute__((target("f16c"))) uint16_t hw_float_to_half(float f) {
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

TEST(ConvertAnchors, HalfMatchesF16C) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this cpu has no F16C";
  for (uint32_t h = 0; h < 0x10000; h++)
    ASSERT_EQ(f32_bits(half_to_float(uint16_t(h))), hw_half_to_float_bits(uint16_t(h))) << hex(h);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 1000000; i++) {
    float x = f32_from(uint32_t(rng()));
    if (i % 4 == 0) x = f32_from((uint32_t(rng()) & 0x807fffff) | 0x7f800001);  // NaN payloads
    ASSERT_EQ(float_to_half(x), hw_float_to_half(x)) << hex(f32_bits(x));
  }
}

// ---- Kernels ------------------------------------------------------------------

const loomRedOp_t kOps[] = {loomSum, loomProd, loomMax, loomMin, loomAvg};
const size_t kCounts[] = {0, 1, 7, 31, 1000, 4099};
struct Offsets {
  size_t dst, a, b;
};
const Offsets kOffsets[] = {{0, 0, 0}, {1, 3, 5}, {8, 16, 24}, {2, 0, 4}};
enum Alias { kSeparate, kDstIsA, kDstIsB };

struct KernelCase {
  loomDataType_t t;
  cpu_isa isa;
};

class Kernels : public ::testing::TestWithParam<KernelCase> {
 protected:
  void SetUp() override {
    if (!cpu_isa_supported(GetParam().isa))
      GTEST_SKIP() << "this cpu cannot run the " << cpu_isa_name(GetParam().isa) << " kernels";
  }
  std::mt19937_64 rng_{1234};
};

TEST_P(Kernels, ReduceMatchesReferenceAndScalar) {
  const loomDataType_t t = GetParam().t;
  const cpu_isa isa = GetParam().isa;
  for (loomRedOp_t op : kOps)
    for (size_t n : kCounts)
      for (const Offsets& off : kOffsets)
        for (Alias alias : {kSeparate, kDstIsA, kDstIsB}) {
          std::string what = std::string(dtype_name(t)) + " " + redop_name(op) + " " +
                             cpu_isa_name(isa) + " n=" + std::to_string(n) + " offsets " +
                             std::to_string(off.dst) + "/" + std::to_string(off.a) + "/" +
                             std::to_string(off.b) + " alias " + std::to_string(alias);
          std::vector<uint64_t> va = random_values(t, n, rng_), vb = random_values(t, n, rng_);
          Buf a(t, n, off.a), b(t, n, off.b), d(t, n, off.dst), sa(t, n, 0), sb(t, n, 0),
              sd(t, n, 0);
          a.fill(va), b.fill(vb), sa.fill(va), sb.fill(vb);
          Buf& dst = alias == kDstIsA ? a : alias == kDstIsB ? b : d;
          cpu_reduce_isa(isa, t, op, dst.ptr(), a.ptr(), b.ptr(), n);
          cpu_reduce_isa(CPU_ISA_SCALAR, t, op, sd.ptr(), sa.ptr(), sb.ptr(), n);
          std::vector<Expect> want(n);
          for (size_t i = 0; i < n; i++) want[i] = ref_reduce(t, op, va[i], vb[i]);
          ASSERT_TRUE(expect_matches(t, sd, want, "scalar vs reference, " + what));
          ASSERT_TRUE(same_bits(dst, sd, n, what));
          ASSERT_TRUE(a.guards_intact() && b.guards_intact() && d.guards_intact()) << what;
        }
}

TEST_P(Kernels, DivMatchesReferenceAndScalar) {
  const loomDataType_t t = GetParam().t;
  const cpu_isa isa = GetParam().isa;
  std::vector<int> divisors = {1, 2, 3, 7, 8, 1000003};
  if (is_signed_int(t) || !is_int(t)) divisors.insert(divisors.end(), {-1, -3});
  for (int d : divisors)
    for (size_t n : kCounts) {
      std::string what = std::string(dtype_name(t)) + " / " + std::to_string(d) + " " +
                         cpu_isa_name(isa) + " n=" + std::to_string(n);
      std::vector<uint64_t> v = random_values(t, n, rng_);
      Buf src(t, n, 3), dst(t, n, 1), ref(t, n, 0);
      src.fill(v);
      cpu_div_isa(isa, t, dst.ptr(), src.ptr(), n, d);
      cpu_div_isa(CPU_ISA_SCALAR, t, ref.ptr(), src.ptr(), n, d);
      std::vector<Expect> want(n);
      for (size_t i = 0; i < n; i++) want[i] = ref_div(t, v[i], d);
      ASSERT_TRUE(expect_matches(t, ref, want, "scalar vs reference, " + what));
      ASSERT_TRUE(same_bits(dst, ref, n, what));
      cpu_div_isa(isa, t, src.ptr(), src.ptr(), n, d);  // in place
      ASSERT_TRUE(same_bits(src, ref, n, what + " in place"));
      ASSERT_TRUE(src.guards_intact() && dst.guards_intact()) << what;
    }
}

TEST_P(Kernels, MulScalarMatchesReferenceAndScalar) {
  const loomDataType_t t = GetParam().t;
  const cpu_isa isa = GetParam().isa;
  std::vector<uint64_t> scalars = edge_values(t);
  for (uint64_t s : random_values(t, 6, rng_)) scalars.push_back(s);
  for (uint64_t s : scalars)
    for (size_t n : kCounts) {
      std::string what = std::string(dtype_name(t)) + " * " + hex(s) + " " + cpu_isa_name(isa) +
                         " n=" + std::to_string(n);
      std::vector<uint64_t> v = random_values(t, n, rng_);
      Buf src(t, n, 5), dst(t, n, 2), ref(t, n, 0), k(t, 1, 1);
      src.fill(v);
      k.set(0, s);
      cpu_mul_scalar_isa(isa, t, dst.ptr(), src.ptr(), n, k.ptr());
      cpu_mul_scalar_isa(CPU_ISA_SCALAR, t, ref.ptr(), src.ptr(), n, k.ptr());
      std::vector<Expect> want(n);
      for (size_t i = 0; i < n; i++) want[i] = ref_reduce(t, loomProd, v[i], s);
      ASSERT_TRUE(expect_matches(t, ref, want, "scalar vs reference, " + what));
      ASSERT_TRUE(same_bits(dst, ref, n, what));
      ASSERT_TRUE(src.guards_intact() && dst.guards_intact()) << what;
    }
}

std::vector<KernelCase> all_cases() {
  std::vector<KernelCase> v;
  for (int t = 0; t < loomNumTypes; t++)
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) v.push_back({loomDataType_t(t), cpu_isa(isa)});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, Kernels, ::testing::ValuesIn(all_cases()), [](const auto& p) {
  return std::string(dtype_name(p.param.t)) + "_" + cpu_isa_name(p.param.isa);
});

// ---- Dispatch and names ---------------------------------------------------------

TEST(Dispatch, ActiveIsaIsSupported) {
  EXPECT_TRUE(cpu_isa_supported(CPU_ISA_SCALAR));
  EXPECT_TRUE(cpu_isa_supported(cpu_isa_active()));
  EXPECT_STREQ(cpu_isa_name(CPU_ISA_SCALAR), "scalar");
  EXPECT_STREQ(cpu_isa_name(CPU_ISA_AVX2), "avx2");
  EXPECT_STREQ(cpu_isa_name(CPU_ISA_AVX512), "avx512");
}

TEST(Dispatch, PublicEntryPointsUseTheActiveIsa) {
  std::mt19937_64 rng(5);
  const size_t n = 1000;
  std::vector<uint64_t> va = random_values(loomFloat16, n, rng),
                        vb = random_values(loomFloat16, n, rng);
  Buf a(loomFloat16, n, 0), b(loomFloat16, n, 0), d(loomFloat16, n, 0), r(loomFloat16, n, 0);
  a.fill(va), b.fill(vb);
  cpu_reduce(loomFloat16, loomAvg, d.ptr(), a.ptr(), b.ptr(), n);
  cpu_reduce_isa(cpu_isa_active(), loomFloat16, loomSum, r.ptr(), a.ptr(), b.ptr(), n);
  EXPECT_TRUE(same_bits(d, r, n, "avg reduces as sum"));
  cpu_div(loomFloat16, d.ptr(), a.ptr(), n, 3);
  cpu_div_isa(cpu_isa_active(), loomFloat16, r.ptr(), a.ptr(), n, 3);
  EXPECT_TRUE(same_bits(d, r, n, "div"));
  cpu_mul_scalar(loomFloat16, d.ptr(), a.ptr(), n, b.ptr());
  cpu_mul_scalar_isa(cpu_isa_active(), loomFloat16, r.ptr(), a.ptr(), n, b.ptr());
  EXPECT_TRUE(same_bits(d, r, n, "mul_scalar"));
}

TEST(Dispatch, CallerBugsDoNothing) {
  int32_t a[4] = {1, 2, 3, 4}, d[4] = {9, 9, 9, 9};
  cpu_reduce(loomDataType_t(99), loomSum, d, a, a, 4);
  cpu_reduce(loomInt32, loomRedOp_t(17), d, a, a, 4);
  cpu_reduce(loomInt32, loomSum, nullptr, nullptr, nullptr, 0);
  cpu_div(loomInt32, d, a, 4, 0);  // integer division by zero must not trap
  cpu_mul_scalar(loomDataType_t(-1), d, a, 4, a);
  for (int v : d) EXPECT_EQ(v, 9);
  float f[2] = {1.0f, -1.0f};
  cpu_div(loomFloat32, f, f, 2, 0);  // floats follow IEEE
  EXPECT_EQ(f[0], INFINITY);
  EXPECT_EQ(f[1], -INFINITY);
}

TEST(Dtype, SizesAndNames) {
  const size_t sizes[loomNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  for (int t = 0; t < loomNumTypes; t++) EXPECT_EQ(dtype_size(loomDataType_t(t)), sizes[t]);
  EXPECT_EQ(dtype_size(loomNumTypes), 0u);
  EXPECT_STREQ(dtype_name(loomFloat32), "float32");
  EXPECT_STREQ(dtype_name(loomBfloat16), "bfloat16");
  EXPECT_STREQ(dtype_name(loomFloat8e4m3), "float8e4m3");
  EXPECT_STREQ(dtype_name(loomDataType_t(-3)), "unknown");
  EXPECT_STREQ(redop_name(loomSum), "sum");
  EXPECT_STREQ(redop_name(loomAvg), "avg");
  EXPECT_STREQ(redop_name(loomNumOps), "premulsum");
}

// cpu_copy equals memcpy at every distance between the buffers modulo a page (those that take its
// own loop, 1..31, and those that go to memcpy), at sizes around its thresholds, and writes
// nothing outside the destination.
TEST(CpuCopy, EqualsMemcpyAtEveryDistanceAndSize) {
  const size_t sizes[] = {0,         1,     255,        256,        2047,   2048,      2049,
                          4096 + 17, 65536, 131072 + 5, 524288 - 1, 524288, 524288 + 3};
  const size_t pad = 4096, big = 524288 + 3;
  std::vector<unsigned char> src(big + 2 * pad), dst(big + 3 * pad);
  std::mt19937 rng(7);
  for (auto& b : src) b = (unsigned char)rng();
  // Page-aligned bases inside the vectors, so the distance modulo 4 KiB is exactly d.
  auto page = [](unsigned char* p) {
    return (unsigned char*)(((uintptr_t)p + 4095) & ~(uintptr_t)4095);
  };
  unsigned char* s0 = page(src.data());
  unsigned char* d0 = page(dst.data()) + 64;  // room before it, to see stray writes
  for (size_t d = 0; d <= 64; d++) {
    for (size_t n : sizes) {
      std::fill(dst.begin(), dst.end(), 0xA5);
      cpu_copy(d0 + d, s0, n);
      ASSERT_EQ(memcmp(d0 + d, s0, n), 0) << "distance " << d << ", " << n << " bytes";
      for (unsigned char* p = dst.data(); p < d0 + d; p++)
        ASSERT_EQ(*p, 0xA5) << "wrote before the destination, distance " << d << ", " << n;
      for (unsigned char* p = d0 + d + n; p < dst.data() + dst.size(); p++)
        ASSERT_EQ(*p, 0xA5) << "wrote past the destination, distance " << d << ", " << n;
    }
  }
}

}  // namespace
