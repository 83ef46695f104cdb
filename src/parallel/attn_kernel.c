/* attn_kernel.c - loomAttnKernelReference (PARALLEL.md section 4, "Block kernel"): attention of
 * one block of queries against one block of keys on host memory, forward and backward.
 *
 * The CP drivers (cp_ring.c, cp_gather.c) call it once per block, so its speed is what makes
 * host context parallelism usable: the products go to loomGemmDefault (CBLAS when the build has
 * one, else a portable loop) over tiles of queries, half inputs are widened to float32 once per
 * block and head, and under the causal mask a tile multiplies only the keys it can see. The
 * arithmetic itself is in attn_tmpl.h, once per accumulation type. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cp.h"

/* Queries per tile: S and dP of a tile are ATTN_TILE x Lk, small enough for the cache at the
 * lengths a host runs, large enough that each GEMM is not dominated by its call. */
#define ATTN_TILE 64

/* A [B, L, H, e] (or lse's [B, H, L]) view: its bytes and strides in elements. */
struct attn_view {
  char* p;
  int64_t s[4];
};

struct attn_blk {
  const char* fn;
  loomDataType_t dt; /* of q, k, v (and out, dout in backward) */
  int64_t B, Lq, Lk, Hq, Hkv, D, Dv, qStart, kStart;
  int causal;
  double scale;
  struct attn_view q, k, v, out, lse, o_in, dout, dq, dk, dv;
};

/* Keys j < attn_keys(i0, m) may be allowed for some query of rows [i0, i0 + m): all of them,
 * or under the causal mask those with kStart + j <= qStart + i0 + m - 1. */
static int64_t attn_keys(const struct attn_blk* a, int64_t i0, int64_t m) {
  if (!a->causal) return a->Lk;
  int64_t n = a->qStart + i0 + m - a->kStart;
  return n < 0 ? 0 : PAR_MIN(n, a->Lk);
}

/* ---- exp over a row ------------------------------------------------------------------------ */

/* e^x in float for the x <= 0 of a softmax (x - max, x - lse): Cephes' expf (x = n ln2 + r,
 * |r| <= ln2/2, a degree-7 polynomial in r, 2^n by the exponent bits), about 1 ulp, 0 below
 * -87. Four at a time with GCC's vector extensions: libm's expf does not vectorize, and it was
 * most of the forward's time. */
typedef float attn_v4f __attribute__((vector_size(16)));
typedef int32_t attn_v4i __attribute__((vector_size(16)));

static inline __attribute__((always_inline)) attn_v4f exp4(attn_v4f x) {
  const attn_v4f lo = {-87.0f, -87.0f, -87.0f, -87.0f};
  attn_v4i small = x < lo;
  attn_v4f xc = (attn_v4f)(((attn_v4i)x & ~small) | ((attn_v4i)lo & small));
  attn_v4i n = __builtin_convertvector(xc * 1.44269504f - 0.5f, attn_v4i);
  attn_v4f fn = __builtin_convertvector(n, attn_v4f);
  attn_v4f r = xc - fn * 0.693359375f + fn * 2.12194440e-4f;
  attn_v4f p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  attn_v4f y = p * r * r + r + 1.0f;
  attn_v4i scale = (n + 127) << 23;
  return (attn_v4f)((attn_v4i)(y * (attn_v4f)scale) & ~small);
}

/* The row's reductions run in four lanes, combined in a fixed order: the same bits every time,
 * and no chain of dependent adds or compares through the whole row. */
static float lanes_sum(attn_v4f v) {
  return (v[0] + v[1]) + (v[2] + v[3]);
}

static float row_max_f(const float* s, int64_t n) {
  float m = s[0];
  int64_t j = 0;
  if (n >= 4) {
    attn_v4f acc;
    memcpy(&acc, s, sizeof acc);
    for (j = 4; j + 4 <= n; j += 4) {
      attn_v4f v;
      memcpy(&v, s + j, sizeof v);
      attn_v4i gt = v > acc;
      acc = (attn_v4f)(((attn_v4i)v & gt) | ((attn_v4i)acc & ~gt));
    }
    m = acc[0];
    for (int l = 1; l < 4; l++) m = acc[l] > m ? acc[l] : m;
  }
  for (; j < n; j++) m = s[j] > m ? s[j] : m;
  return m;
}

/* s[j] = e^(s[j] - sub) for j < n; returns their sum. */
static float exp_row_f(float* s, int64_t n, float sub) {
  attn_v4f acc = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    attn_v4f v;
    memcpy(&v, s + j, sizeof v);
    v = exp4(v - sub);
    acc += v;
    memcpy(s + j, &v, sizeof v);
  }
  if (j < n) {
    attn_v4f v = {0, 0, 0, 0};
    memcpy(&v, s + j, (size_t)(n - j) * sizeof(float));
    v = exp4(v - sub);
    for (int64_t l = n - j; l < 4; l++) v[l] = 0;
    acc += v;
    memcpy(s + j, &v, (size_t)(n - j) * sizeof(float));
  }
  return lanes_sum(acc);
}

static double row_max_d(const double* s, int64_t n) {
  double m = s[0];
  for (int64_t j = 1; j < n; j++) m = s[j] > m ? s[j] : m;
  return m;
}

static double exp_row_d(double* s, int64_t n, double sub) {
  double sum = 0;
  for (int64_t j = 0; j < n; j++) {
    s[j] = exp(s[j] - sub);
    sum += s[j];
  }
  return sum;
}

#define REAL float
#define SUF f
#define ACC_DT loomFloat32
#define LOG logf
#include "attn_tmpl.h"
#undef REAL
#undef SUF
#undef ACC_DT
#undef LOG

#define REAL double
#define SUF d
#define ACC_DT loomFloat64
#define LOG log
#include "attn_tmpl.h"
#undef REAL
#undef SUF
#undef ACC_DT
#undef LOG

/* ---- Arguments --------------------------------------------------------------------------- */

/* t is a valid [e0, e1, e2, e3] (ndim 4, or 3 with e3 < 0) of dtype dt whose last dim has
 * stride 1; its strides go to v. */
static loomResult_t view_take(const char* fn, const char* name, const loomTensor* t, int out,
                              loomDataType_t dt, const int64_t e[4], struct attn_view* v) {
  loomResult_t r = out ? par_check_out(NULL, fn, name, t) : par_check(NULL, fn, name, t);
  if (r != loomSuccess) return r;
  int nd = e[3] < 0 ? 3 : 4;
  char want[96], got[96];
  int bad = 0;
  loomTensor w = {NULL, dt, nd, {e[0], e[1], e[2], e[3]}, {0}};
  if (t->ndim != nd || !par_shapes_agree(t, &w, -1, &bad))
    return par_err(NULL, fn, "%s is %s but must be %s", name, par_shape_str(t, got, sizeof got),
                   par_shape_str(&w, want, sizeof want));
  if (t->dtype != dt)
    return par_err(NULL, fn, "%s is %s but must be %s", name, par_dtype_name(t->dtype),
                   par_dtype_name(dt));
  if (nd == 4 && t->strides[3] != 1 && t->shape[3] > 1)
    return par_err(NULL, fn, "%s.strides[3] is %lld; the last dim needs stride 1", name,
                   (long long)t->strides[3]);
  v->p = t->data;
  for (int d = 0; d < 4; d++) v->s[d] = d < nd ? t->strides[d] : 0;
  return loomSuccess;
}

/* q, k, v and the block's extents; scale and positions. */
static loomResult_t blk_inputs(struct attn_blk* a, const loomTensor* q, const loomTensor* k,
                               const loomTensor* v) {
  if (q == NULL || k == NULL || v == NULL)
    return par_err(NULL, a->fn, "q (%p), k (%p) and v (%p) must not be NULL", (const void*)q,
                   (const void*)k, (const void*)v);
  loomResult_t r = par_check(NULL, a->fn, "q", q);
  if (r != loomSuccess) return r;
  if (q->ndim != 4 || !par_dtype_is_compute(q->dtype))
    return par_err(NULL, a->fn, "q must be [B, Lq, Hq, D] of a float dtype (ndim %d, %s)", q->ndim,
                   par_dtype_name(q->dtype));
  if (k->ndim != 4 || v->ndim != 4)
    return par_err(NULL, a->fn, "k and v must be [B, Lk, Hkv, D|Dv] (ndim %d, %d)", k->ndim,
                   v->ndim);
  a->dt = q->dtype;
  a->B = q->shape[0], a->Lq = q->shape[1], a->Hq = q->shape[2], a->D = q->shape[3];
  a->Lk = k->shape[1], a->Hkv = k->shape[2], a->Dv = v->shape[3];
  if (a->Hkv < 1 || a->Hq % a->Hkv != 0)
    return par_err(NULL, a->fn, "Hq %% Hkv != 0 (Hq %lld, Hkv %lld)", (long long)a->Hq,
                   (long long)a->Hkv);
  int64_t eq[4] = {a->B, a->Lq, a->Hq, a->D}, ek[4] = {a->B, a->Lk, a->Hkv, a->D},
          ev[4] = {a->B, a->Lk, a->Hkv, a->Dv};
  r = view_take(a->fn, "q", q, 0, a->dt, eq, &a->q);
  if (r == loomSuccess) r = view_take(a->fn, "k", k, 0, a->dt, ek, &a->k);
  if (r == loomSuccess) r = view_take(a->fn, "v", v, 0, a->dt, ev, &a->v);
  return r;
}

static loomDataType_t acc_of(loomDataType_t dt) {
  return dt == loomFloat64 ? loomFloat64 : loomFloat32;
}

/* ---- The kernel -------------------------------------------------------------------------- */

static loomResult_t attn_forward(void* ctx, const loomTensor* q, const loomTensor* k,
                                 const loomTensor* v, int64_t qStart, int64_t kStart, int causal,
                                 double scale, loomTensor* out, loomTensor* lse,
                                 loomStream_t stream) {
  (void)ctx;
  struct attn_blk a = {.fn = "loomAttnKernelReference.forward"};
  loomResult_t r = blk_inputs(&a, q, k, v);
  if (r != loomSuccess) return r;
  loomDataType_t acc = acc_of(a.dt);
  int64_t eo[4] = {a.B, a.Lq, a.Hq, a.Dv}, el[4] = {a.B, a.Hq, a.Lq, -1};
  if (out == NULL || lse == NULL) return par_err(NULL, a.fn, "out and lse must not be NULL");
  r = view_take(a.fn, "out", out, 1, acc, eo, &a.out);
  if (r == loomSuccess) r = view_take(a.fn, "lse", lse, 1, acc, el, &a.lse);
  if (r != loomSuccess) return r;
  a.qStart = qStart, a.kStart = kStart, a.causal = causal != 0, a.scale = scale;
  r = par_enter(NULL, a.fn, stream);
  if (r != loomSuccess) return r;
  return a.dt == loomFloat64 ? attn_fwd_d(&a) : attn_fwd_f(&a);
}

static loomResult_t attn_backward(void* ctx, const loomTensor* q, const loomTensor* k,
                                  const loomTensor* v, const loomTensor* out,
                                  const loomTensor* dout, const loomTensor* lse, int64_t qStart,
                                  int64_t kStart, int causal, double scale, loomTensor* dq,
                                  loomTensor* dk, loomTensor* dv, loomStream_t stream) {
  (void)ctx;
  struct attn_blk a = {.fn = "loomAttnKernelReference.backward"};
  loomResult_t r = blk_inputs(&a, q, k, v);
  if (r != loomSuccess) return r;
  if (out == NULL || dout == NULL || lse == NULL || dq == NULL || dk == NULL || dv == NULL)
    return par_err(NULL, a.fn, "out, dout, lse, dq, dk and dv must not be NULL");
  loomDataType_t acc = acc_of(a.dt);
  int64_t eo[4] = {a.B, a.Lq, a.Hq, a.Dv}, el[4] = {a.B, a.Hq, a.Lq, -1};
  int64_t eq[4] = {a.B, a.Lq, a.Hq, a.D}, ek[4] = {a.B, a.Lk, a.Hkv, a.D},
          ev[4] = {a.B, a.Lk, a.Hkv, a.Dv};
  r = view_take(a.fn, "out", out, 0, a.dt, eo, &a.o_in);
  if (r == loomSuccess) r = view_take(a.fn, "dout", dout, 0, a.dt, eo, &a.dout);
  if (r == loomSuccess) r = view_take(a.fn, "lse", lse, 0, acc, el, &a.lse);
  if (r == loomSuccess) r = view_take(a.fn, "dq", dq, 1, acc, eq, &a.dq);
  if (r == loomSuccess) r = view_take(a.fn, "dk", dk, 1, acc, ek, &a.dk);
  if (r == loomSuccess) r = view_take(a.fn, "dv", dv, 1, acc, ev, &a.dv);
  if (r != loomSuccess) return r;
  a.qStart = qStart, a.kStart = kStart, a.causal = causal != 0, a.scale = scale;
  r = par_enter(NULL, a.fn, stream);
  if (r != loomSuccess) return r;
  return a.dt == loomFloat64 ? attn_bwd_d(&a) : attn_bwd_f(&a);
}

const loomAttnKernel* loomAttnKernelReference(void) {
  static const loomAttnKernel k = {attn_forward, attn_backward, NULL};
  return &k;
}
