// Section 3.2 of PARALLEL.md: loomGemmDefault, row-major C = alpha*op(A)*op(B) + beta*C on host
// memory, against a float64 reference over the stored (rounded) inputs.
#include "par_test.h"

namespace {

// Element storage and its float64 value, per dtype.
struct Buf {
  loomDataType_t dt;
  std::vector<unsigned char> bytes;
  Buf(loomDataType_t d, size_t n) : dt(d), bytes(n * size()) {}
  size_t size() const { return dt == loomFloat64 ? 8 : dt == loomFloat32 ? 4 : 2; }
  void* data() { return bytes.data(); }
  double get(size_t i) const;
  void set(size_t i, double v);  // rounded to nearest-even for 16-bit
};

double Buf::get(size_t i) const {
  return partest::load_float(dt, bytes.data() + i * size());
}

void Buf::set(size_t i, double v) {
  partest::store_float(dt, bytes.data() + i * size(), v);
}

const loomDataType_t kDtypes[] = {loomFloat16, loomBfloat16, loomFloat32, loomFloat64};

// Unit roundoff of the accumulation (float32 for all but float64) and of the stored result.
double acc_eps(loomDataType_t dt) {
  return dt == loomFloat64 ? 0x1p-53 : 0x1p-24;
}
double out_eps(loomDataType_t dt) {
  return dt == loomFloat16 ? 0x1p-11 : dt == loomBfloat16 ? 0x1p-8 : acc_eps(dt);
}

struct Case {
  int ta, tb;
  int64_t m, n, k, pad;  // pad: extra elements per row of every operand's leading dimension
  double alpha, beta;
  bool integers;  // small integers: every dtype is exact, so the result is exact too
};

// Runs one GEMM and checks every element of C and that the row padding is untouched.
void check_case(loomDataType_t dt, const Case& c, uint64_t seed) {
  int64_t ar = c.ta ? c.k : c.m, ac = c.ta ? c.m : c.k;
  int64_t br = c.tb ? c.n : c.k, bc = c.tb ? c.k : c.n;
  int64_t lda = ac + c.pad, ldb = bc + c.pad, ldc = c.n + c.pad;
  if (lda < 1) lda = 1;
  if (ldb < 1) ldb = 1;
  if (ldc < 1) ldc = 1;
  Buf A(dt, (size_t)(ar * lda)), B(dt, (size_t)(br * ldb)), C(dt, (size_t)(c.m * ldc));
  auto ra = partest::random_f64(A.bytes.size(), seed),
       rb = partest::random_f64(B.bytes.size(), seed + 1),
       rc = partest::random_f64(C.bytes.size(), seed + 2);
  auto val = [&](double r) { return c.integers ? std::round(r * 4) : r; };
  for (size_t i = 0; i < A.bytes.size() / A.size(); i++) A.set(i, val(ra[i]));
  for (size_t i = 0; i < B.bytes.size() / B.size(); i++) B.set(i, val(rb[i]));
  // beta == 0: C holds NaN everywhere, which must not leak; the padding is NaN in any case.
  for (int64_t i = 0; i < c.m; i++)
    for (int64_t j = 0; j < ldc; j++)
      C.set((size_t)(i * ldc + j), c.beta == 0 || j >= c.n ? NAN : val(rc[(size_t)(i * ldc + j)]));
  Buf C0 = C;
  ASSERT_LOOM_OK(loomGemmDefault()->fn(loomGemmDefault()->ctx, c.ta, c.tb, c.m, c.n, c.k, c.alpha,
                                       A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc, dt,
                                       nullptr));
  for (int64_t i = 0; i < c.m; i++)
    for (int64_t j = 0; j < ldc; j++) {
      size_t e = (size_t)(i * ldc + j);
      if (j >= c.n) {
        EXPECT_TRUE(std::isnan(C.get(e))) << "padding of C touched at " << i << "," << j;
        continue;
      }
      double ref = 0, mag = 0;
      for (int64_t p = 0; p < c.k; p++) {
        double a = A.get((size_t)(c.ta ? p * lda + i : i * lda + p));
        double b = B.get((size_t)(c.tb ? j * ldb + p : p * ldb + j));
        ref += a * b;
        mag += std::fabs(a * b);
      }
      ref *= c.alpha;
      mag *= std::fabs(c.alpha);
      if (c.beta != 0) {
        ref += c.beta * C0.get(e);
        mag += std::fabs(c.beta * C0.get(e));
      }
      double got = C.get(e);
      if (c.integers) {  // exact sums; 16-bit rounds the exact value once
        Buf r(dt, 1);
        r.set(0, ref);
        EXPECT_EQ(got, r.get(0)) << "at " << i << "," << j;
      } else {
        double tol = acc_eps(dt) * mag * (double)(c.k + 2) + out_eps(dt) * std::fabs(ref) + 1e-300;
        EXPECT_LE(std::fabs(got - ref), tol) << "at " << i << "," << j << " ref " << ref;
      }
    }
}

std::string dt_name(loomDataType_t dt) {
  return dt == loomFloat16    ? "f16"
         : dt == loomBfloat16 ? "bf16"
         : dt == loomFloat32  ? "f32"
                              : "f64";
}

TEST(Gemm, DefaultIsNeverNullAndStable) {
  const loomGemm* g = loomGemmDefault();
  ASSERT_NE(g, nullptr);
  EXPECT_NE(g->fn, nullptr);
  EXPECT_EQ(g, loomGemmDefault());
}

TEST(Gemm, EveryTransposeAndDtypeAgainstFloat64) {
  uint64_t seed = 100;
  for (loomDataType_t dt : kDtypes)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int64_t pad : {0, 3}) {
          SCOPED_TRACE(dt_name(dt) + " transA " + std::to_string(ta) + " transB " +
                       std::to_string(tb) + " pad " + std::to_string(pad));
          check_case(dt, {ta, tb, 7, 5, 9, pad, 1.0, 0.0, false}, seed++);
          check_case(dt, {ta, tb, 13, 11, 37, pad, -0.75, 0.5, false}, seed++);
          check_case(dt, {ta, tb, 1, 17, 3, pad, 2.0, -1.0, false}, seed++);
        }
}

TEST(Gemm, IntegersAreExactAndSixteenBitRoundsOnce) {
  uint64_t seed = 500;
  for (loomDataType_t dt : kDtypes)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        SCOPED_TRACE(dt_name(dt) + " transA " + std::to_string(ta) + " transB " +
                     std::to_string(tb));
        check_case(dt, {ta, tb, 6, 9, 40, 2, 0.375, 0.0, true}, seed++);
        check_case(dt, {ta, tb, 6, 9, 40, 1, 0.375, -1.5, true}, seed++);
      }
}

TEST(Gemm, BetaZeroIgnoresNaNInC) {
  // Covered for every element by check_case (beta 0 fills C with NaN); here a larger shape
  // that takes OpenBLAS's blocked path rather than its small-matrix one.
  for (loomDataType_t dt : kDtypes) {
    SCOPED_TRACE(dt_name(dt));
    check_case(dt, {0, 1, 70, 65, 90, 1, 1.0, 0.0, false}, 900 + dt);
    check_case(dt, {1, 0, 65, 70, 33, 0, 1.0, 0.0, false}, 950 + dt);
  }
}

TEST(Gemm, ZeroExtents) {
  for (loomDataType_t dt : kDtypes) {
    SCOPED_TRACE(dt_name(dt));
    Buf A(dt, 64), B(dt, 64), C(dt, 64);
    for (size_t i = 0; i < 64; i++) {
      A.set(i, NAN);  // never read when k, m or n is 0 or alpha is 0
      B.set(i, NAN);
      C.set(i, (double)i);
    }
    const loomGemm* g = loomGemmDefault();
    Buf C0 = C;
    // m == 0 or n == 0: nothing to do, nothing touched; A, B and C may be NULL.
    ASSERT_LOOM_OK(
        g->fn(g->ctx, 0, 0, 0, 4, 3, 1.0, nullptr, 3, nullptr, 4, 0.0, nullptr, 4, dt, nullptr));
    ASSERT_LOOM_OK(
        g->fn(g->ctx, 0, 1, 4, 0, 3, 1.0, A.data(), 3, nullptr, 3, 0.0, C.data(), 1, dt, nullptr));
    EXPECT_EQ(C.bytes, C0.bytes);
    // k == 0: C = beta*C (A and B not read, may be NULL).
    ASSERT_LOOM_OK(
        g->fn(g->ctx, 0, 0, 4, 5, 0, 1.0, nullptr, 1, nullptr, 5, 2.0, C.data(), 6, dt, nullptr));
    for (int64_t i = 0; i < 4; i++)
      for (int64_t j = 0; j < 6; j++) {
        size_t e = (size_t)(i * 6 + j);
        EXPECT_EQ(C.get(e), j < 5 ? 2.0 * C0.get(e) : C0.get(e)) << i << "," << j;
      }
    // k == 0, beta == 0: zeros, even over NaN.
    for (size_t i = 0; i < 64; i++) C.set(i, NAN);
    ASSERT_LOOM_OK(
        g->fn(g->ctx, 1, 1, 4, 5, 0, 1.0, nullptr, 4, nullptr, 1, 0.0, C.data(), 5, dt, nullptr));
    for (size_t e = 0; e < 20; e++) EXPECT_EQ(C.get(e), 0.0) << e;
    EXPECT_TRUE(std::isnan(C.get(20)));
    // alpha == 0: C = beta*C, the NaN in A and B not read (BLAS's convention).
    for (size_t i = 0; i < 64; i++) C.set(i, 1.0);
    ASSERT_LOOM_OK(
        g->fn(g->ctx, 0, 0, 3, 3, 3, 0.0, A.data(), 3, B.data(), 3, 0.5, C.data(), 3, dt, nullptr));
    for (size_t e = 0; e < 9; e++) EXPECT_EQ(C.get(e), 0.5) << e;
  }
}

TEST(Gemm, DeterministicAndHostStream) {
  for (loomDataType_t dt : kDtypes) {
    SCOPED_TRACE(dt_name(dt));
    const int64_t m = 33, n = 29, k = 71;
    Buf A(dt, m * k), B(dt, n * k), C1(dt, m * n), C2(dt, m * n);
    auto r = partest::random_f64(m * k + n * k, 77);
    for (int64_t i = 0; i < m * k; i++) A.set(i, r[i] * 10);
    for (int64_t i = 0; i < n * k; i++) B.set(i, r[m * k + i]);
    const loomGemm* g = loomGemmDefault();
    ASSERT_LOOM_OK(g->fn(g->ctx, 0, 1, m, n, k, 1.0, A.data(), k, B.data(), k, 0.0, C1.data(), n,
                         dt, nullptr));
    loomStream_t s = nullptr;
    ASSERT_LOOM_OK(loomStreamCreate(&s));
    ASSERT_LOOM_OK(
        g->fn(g->ctx, 0, 1, m, n, k, 1.0, A.data(), k, B.data(), k, 0.0, C2.data(), n, dt, s));
    ASSERT_LOOM_OK(loomStreamSynchronize(s));
    ASSERT_LOOM_OK(loomStreamDestroy(s));
    EXPECT_EQ(C1.bytes, C2.bytes) << "the same inputs gave other bits";
  }
}

TEST(GemmArgs, MisuseNamesTheArgument) {
  const loomGemm* g = loomGemmDefault();
  std::vector<float> A(64, 1.0f), B(64, 1.0f), C(64, 7.0f);
  auto call = [&](int ta, int tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                  int64_t ldc, loomDataType_t dt, const void* a, const void* b) {
    return g->fn(g->ctx, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, C.data(), ldc, dt, nullptr);
  };
  const char* fn = "loomGemmDefault";
  const float* a = A.data();
  const float* b = B.data();
  EXPECT_MISUSE(call(0, 0, 2, 2, 2, 2, 2, 2, loomInt32, a, b), nullptr, fn, partest::bytes_of(C),
                "dtype", "int32");
  EXPECT_MISUSE(call(0, 0, 2, 2, 2, 2, 2, 2, loomFloat8e4m3, a, b), nullptr, fn,
                partest::bytes_of(C), "dtype");
  EXPECT_MISUSE(call(0, 0, -1, 2, 2, 2, 2, 2, loomFloat32, a, b), nullptr, fn, partest::bytes_of(C),
                "-1");
  EXPECT_MISUSE(call(0, 0, 2, -2, 2, 2, 2, 2, loomFloat32, a, b), nullptr, fn, partest::bytes_of(C),
                "-2");
  EXPECT_MISUSE(call(0, 0, 2, 2, -3, 2, 2, 2, loomFloat32, a, b), nullptr, fn, partest::bytes_of(C),
                "-3");
  // A is m x k = 3 x 4 (lda >= 4); transposed it is stored k x m = 4 x 3 (lda >= 3).
  EXPECT_MISUSE(call(0, 0, 3, 2, 4, 3, 2, 2, loomFloat32, a, b), nullptr, fn, partest::bytes_of(C),
                "lda", "3");
  EXPECT_MISUSE(call(1, 0, 3, 2, 4, 2, 2, 2, loomFloat32, a, b), nullptr, fn, partest::bytes_of(C),
                "lda", "2");
  // B is k x n = 4 x 2 (ldb >= 2); transposed it is stored n x k = 2 x 4 (ldb >= 4).
  EXPECT_MISUSE(call(0, 0, 3, 2, 4, 4, 1, 2, loomFloat32, a, b), nullptr, fn, partest::bytes_of(C),
                "ldb");
  EXPECT_MISUSE(call(0, 1, 3, 2, 4, 4, 3, 2, loomFloat32, a, b), nullptr, fn, partest::bytes_of(C),
                "ldb");
  EXPECT_MISUSE(call(0, 0, 3, 5, 4, 4, 5, 4, loomFloat32, a, b), nullptr, fn, partest::bytes_of(C),
                "ldc");
  EXPECT_MISUSE(call(0, 0, 3, 2, 4, 4, 2, 0, loomFloat32, a, b), nullptr, fn, partest::bytes_of(C),
                "ldc");
  EXPECT_MISUSE(call(0, 0, 3, 2, 4, 4, 2, 2, loomFloat32, nullptr, b), nullptr, fn,
                partest::bytes_of(C), "A is NULL");
  EXPECT_MISUSE(call(0, 0, 3, 2, 4, 4, 2, 2, loomFloat32, a, nullptr), nullptr, fn,
                partest::bytes_of(C), "B is NULL");
  // A valid call after the misuses works.
  ASSERT_LOOM_OK(call(0, 0, 3, 2, 4, 4, 2, 2, loomFloat32, a, b));
  EXPECT_EQ(C[0], 4.0f);
}

}  // namespace
