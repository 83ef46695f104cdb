/* gemm.c - loomGemmDefault (PARALLEL.md 3.2): the host GEMM the linear layers use when
 * opts->gemm is NULL. Row-major C[m x n] = alpha*op(A)*op(B) + beta*C.
 *
 * float32 and float64 go to cblas_sgemm/cblas_dgemm when the build found a CBLAS
 * (LOOM_PAR_CBLAS), else to a portable loop. float16 and bfloat16 are widened into float32
 * scratch, multiplied in float32 and rounded once per element of C (nearest-even), so a 16-bit
 * GEMM is the float32 GEMM of its widened inputs.
 *
 * Determinism: the portable loop sums every element of C over k in ascending order. OpenBLAS
 * splits its threads over m and n, never over k, so for one machine and thread setting it too
 * gives the same bits for the same inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef LOOM_PAR_CBLAS
#include <cblas.h>
#endif

#include "par.h"

static const char k_fn[] = "loomGemmDefault";

/* ---- Arguments --------------------------------------------------------------------------- */

/* One operand: rows x cols stored row-major with leading dimension ld; read says whether the
 * GEMM reads it (none is read when m or n is 0, nor A and B when k is 0), else it may be NULL. */
static loomResult_t operand_check(const char* name, const void* p, int64_t rows, int64_t cols,
                                  int64_t ld, const char* ld_name, int read) {
  if (ld < cols || ld < 1)
    return par_err(NULL, k_fn, "%s is %lld but %s is stored %lld x %lld (row-major): needs >= %lld",
                   ld_name, (long long)ld, name, (long long)rows, (long long)cols,
                   (long long)PAR_MAX(cols, 1));
  if (p == NULL && read)
    return par_err(NULL, k_fn, "%s is NULL but is %lld x %lld", name, (long long)rows,
                   (long long)cols);
  return loomSuccess;
}

static loomResult_t gemm_check(int transA, int transB, int64_t m, int64_t n, int64_t k,
                               const void* A, int64_t lda, const void* B, int64_t ldb, void* C,
                               int64_t ldc, loomDataType_t dtype) {
  if (!par_dtype_is_compute(dtype))
    return par_err(NULL, k_fn, "dtype is %s (%d); takes float16, bfloat16, float32, float64",
                   par_dtype_name(dtype), (int)dtype);
  if (m < 0 || n < 0 || k < 0)
    return par_err(NULL, k_fn, "m, n, k are %lld, %lld, %lld; each must be >= 0", (long long)m,
                   (long long)n, (long long)k);
  int c_read = m > 0 && n > 0, ab_read = c_read && k > 0;
  loomResult_t r = operand_check("A", A, transA ? k : m, transA ? m : k, lda, "lda", ab_read);
  if (r == loomSuccess)
    r = operand_check("B", B, transB ? n : k, transB ? k : n, ldb, "ldb", ab_read);
  if (r == loomSuccess) r = operand_check("C", C, m, n, ldc, "ldc", c_read);
  return r;
}

/* ---- Kernels ----------------------------------------------------------------------------- */

/* sgemm_host/dgemm_host: the float32 and float64 GEMMs on valid arguments with m, n, k > 0. */
#ifdef LOOM_PAR_CBLAS
static loomResult_t sgemm_host(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                               const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                               float* C, int64_t ldc) {
  /* beta == 0: OpenBLAS stores zeros without reading C (tests/parallel/test_gemm.cc checks). */
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              (blasint)m, (blasint)n, (blasint)k, alpha, A, (blasint)lda, B, (blasint)ldb, beta, C,
              (blasint)ldc);
  return loomSuccess;
}

static loomResult_t dgemm_host(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                               const double* A, int64_t lda, const double* B, int64_t ldb,
                               double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              (blasint)m, (blasint)n, (blasint)k, alpha, A, (blasint)lda, B, (blasint)ldb, beta, C,
              (blasint)ldc);
  return loomSuccess;
}
#else
/* The portable loop, one row of C at a time: acc[j] gathers sum_p a(i,p)*b(p,j) with p
 * ascending, which fixes every element's summation order (float for float32, double for
 * float64). */
#define PAR_GEMM_LOOP(name, T)                                                                   \
  static loomResult_t name(int ta, int tb, int64_t m, int64_t n, int64_t k, T alpha, const T* A, \
                           int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {    \
    T* acc = par_scratch(NULL, k_fn, (size_t)n * sizeof(T));                                     \
    if (acc == NULL) return loomSystemError;                                                     \
    for (int64_t i = 0; i < m; i++) {                                                            \
      for (int64_t j = 0; j < n; j++) acc[j] = 0;                                                \
      for (int64_t p = 0; p < k; p++) {                                                          \
        T a = ta ? A[p * lda + i] : A[i * lda + p];                                              \
        if (tb)                                                                                  \
          for (int64_t j = 0; j < n; j++) acc[j] += a * B[j * ldb + p];                          \
        else                                                                                     \
          for (int64_t j = 0; j < n; j++) acc[j] += a * B[p * ldb + j];                          \
      }                                                                                          \
      T* c = C + i * ldc;                                                                        \
      if (beta == 0) /* C is not read: garbage (NaN) in it must not leak */                      \
        for (int64_t j = 0; j < n; j++) c[j] = alpha * acc[j];                                   \
      else                                                                                       \
        for (int64_t j = 0; j < n; j++) c[j] = alpha * acc[j] + beta * c[j];                     \
    }                                                                                            \
    free(acc);                                                                                   \
    return loomSuccess;                                                                          \
  }
PAR_GEMM_LOOP(sgemm_host, float)
PAR_GEMM_LOOP(dgemm_host, double)
#undef PAR_GEMM_LOOP
#endif

/* ---- 16-bit through float32 -------------------------------------------------------------- */

static void widen(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, int bf16,
                  float* dst) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      uint16_t h = src[i * ld + j];
      dst[i * cols + j] = bf16 ? par_bf16_to_float(h) : par_half_to_float(h);
    }
}

static void narrow(const float* src, int64_t rows, int64_t cols, int bf16, uint16_t* dst,
                   int64_t ld) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      float f = src[i * cols + j];
      dst[i * ld + j] = bf16 ? par_float_to_bf16(f) : par_float_to_half(f);
    }
}

/* A and B widened densely (leading dimension = their column count, at least 1), C too when
 * beta reads it; one float32 GEMM; C rounded once. */
static loomResult_t gemm_half(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                              const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
                              double beta, uint16_t* C, int64_t ldc, int bf16) {
  int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  size_t na = (size_t)(m * k), nb = (size_t)(k * n), nc = (size_t)(m * n);
  float* buf = par_scratch(NULL, k_fn, (na + nb + nc) * sizeof(float));
  if (buf == NULL) return loomSystemError;
  float *a = buf, *b = a + na, *c = b + nb;
  widen(A, ar, ac, lda, bf16, a);
  widen(B, br, bc, ldb, bf16, b);
  if (beta != 0) widen(C, m, n, ldc, bf16, c);
  loomResult_t r = sgemm_host(ta, tb, m, n, k, (float)alpha, a, PAR_MAX(ac, 1), b, PAR_MAX(bc, 1),
                              (float)beta, c, PAR_MAX(n, 1));
  if (r == loomSuccess) narrow(c, m, n, bf16, C, ldc);
  free(buf);
  return r;
}

/* k == 0 or alpha == 0: C = beta*C without touching A and B (BLAS's convention); beta == 0
 * stores zeros so that garbage in C does not leak. */
static void gemm_scale(int64_t m, int64_t n, double beta, void* C, int64_t ldc, loomDataType_t dt) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      int64_t e = i * ldc + j;
      if (dt == loomFloat64) {
        double* c = C;
        c[e] = beta == 0 ? 0.0 : beta * c[e];
      } else if (dt == loomFloat32) {
        float* c = C;
        c[e] = beta == 0 ? 0.0f : (float)beta * c[e];
      } else {
        uint16_t* c = C;
        int bf = dt == loomBfloat16;
        float v = bf ? par_bf16_to_float(c[e]) : par_half_to_float(c[e]);
        v = beta == 0 ? 0.0f : (float)beta * v;
        c[e] = bf ? par_float_to_bf16(v) : par_float_to_half(v);
      }
    }
}

/* ---- The default GEMM -------------------------------------------------------------------- */

static loomResult_t gemm_default(void* ctx, int transA, int transB, int64_t m, int64_t n, int64_t k,
                                 double alpha, const void* A, int64_t lda, const void* B,
                                 int64_t ldb, double beta, void* C, int64_t ldc,
                                 loomDataType_t dtype, loomStream_t stream) {
  (void)ctx;
  loomResult_t r = gemm_check(transA, transB, m, n, k, A, lda, B, ldb, C, ldc, dtype);
  if (r != loomSuccess) return r;
#ifdef LOOM_PAR_CBLAS
  /* CBLAS takes int extents; past them a row-major GEMM would silently wrap. */
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
      ldc > INT32_MAX)
    return par_err(NULL, k_fn, "an extent or leading dimension is past 2^31 - 1 (CBLAS's int)");
#endif
  /* Host memory only: a host stream is synchronized (the GEMM is ordered after its work), a
   * CUDA stream refused. */
  r = par_enter(NULL, k_fn, stream);
  if (r != loomSuccess) return r;
  if (m == 0 || n == 0) return loomSuccess;
  int ta = transA != 0, tb = transB != 0;
  if (k == 0 || alpha == 0) {
    gemm_scale(m, n, beta, C, ldc, dtype);
    return loomSuccess;
  }
  if (dtype == loomFloat16 || dtype == loomBfloat16)
    return gemm_half(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, dtype == loomBfloat16);
  if (dtype == loomFloat64) return dgemm_host(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  return sgemm_host(ta, tb, m, n, k, (float)alpha, A, lda, B, ldb, (float)beta, C, ldc);
}

const loomGemm* loomGemmDefault(void) {
  static const loomGemm g = {gemm_default, NULL};
  return &g;
}
