/* xent.c - vocab-parallel cross entropy (PARALLEL.md 3.3).
 *
 * Rank r holds the logit columns [v_r, v_r + V_r) of each token. The forward makes exactly two
 * all-reduces over the TP group, whatever the number of tokens: the max of each token's logits,
 * then one fused sum of three numbers per token (sum of exp(z - m), the target logit, which
 * only its owner contributes, and the sum of logits for the smoothing term), packed
 * token-major in one buffer. The loss is
 *   lse - (1-eps)*z_t - (eps/V)*sum_j z_j,   lse = m + log(sum_j exp(z_j - m)),
 * with the whole vocabulary V and the global sum of logits (Megatron-LM uses the local V_r and
 * local mean, which is wrong for tp > 1). The backward needs no communication:
 * dz_j = dloss*(exp(z_j - lse) - q_j), q_j = (1-eps)[j==t] + eps/V.
 *
 * Precision: float16, bfloat16 and float32 logits are computed in float32 (each 16-bit row is
 * widened to float32 first, and the reduced sums travel as float32); float64 logits in
 * float64. Each sum runs over j ascending, so with the core's fixed reduction order the
 * results are bitwise reproducible for the same inputs and rank count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "par.h"

static const char k_fwd[] = "loomVocabParallelCrossEntropyForward";
static const char k_bwd[] = "loomVocabParallelCrossEntropyBackward";

/* One call, its arguments checked. */
struct xe_call {
  const loomTensor *logits, *target, *lse_in, *dloss;
  loomTensor *loss, *lse, *dlogits;
  int nd;         /* leading dims: logits.ndim - 1 */
  int64_t tokens; /* product of the leading extents */
  int64_t vr, v0; /* this rank's columns [v0, v0 + vr) */
  int64_t vocab;  /* V */
  double eps;
  int64_t ignore;
};

/* ---- Access ------------------------------------------------------------------------------ */

/* Element offset of token tok (row-major over the leading shape) in t. */
static int64_t xe_offset(const struct xe_call* c, const loomTensor* t, int64_t tok) {
  int64_t off = 0;
  for (int d = c->nd - 1; d >= 0; d--) {
    int64_t ext = c->logits->shape[d];
    off += (tok % ext) * t->strides[d];
    tok /= ext;
  }
  return off;
}

static int64_t xe_target(const struct xe_call* c, int64_t tok) {
  int64_t off = xe_offset(c, c->target, tok);
  if (c->target->dtype == loomInt32) return ((const int32_t*)c->target->data)[off];
  return ((const int64_t*)c->target->data)[off];
}

/* Whether token tok's target is a class (not ignored, in [0, V)). *t_out gets the target. */
static int xe_counts(const struct xe_call* c, int64_t tok, int64_t* t_out) {
  int64_t t = xe_target(c, tok);
  *t_out = t;
  return t != c->ignore && t >= 0 && t < c->vocab;
}

/* Scalar of a leading-shape float32/float64 tensor. */
static double xe_get(const struct xe_call* c, const loomTensor* t, int64_t tok) {
  int64_t off = xe_offset(c, t, tok);
  if (t->dtype == loomFloat64) return ((const double*)t->data)[off];
  return ((const float*)t->data)[off];
}

static void xe_put(const struct xe_call* c, loomTensor* t, int64_t tok, double v) {
  int64_t off = xe_offset(c, t, tok);
  if (t->dtype == loomFloat64)
    ((double*)t->data)[off] = v;
  else
    ((float*)t->data)[off] = (float)v; /* exact: v came from a float in the float32 path */
}

/* Token tok's logits row as float (float16/bfloat16/float32 logits) or double (float64): the
 * row itself when it already has that type, else widened into scratch. */
static const void* xe_row(const struct xe_call* c, int64_t tok, float* scratch) {
  if (c->vr == 0) return scratch; /* data may be NULL; nothing is read */
  const loomTensor* z = c->logits;
  const char* p = (const char*)z->data + xe_offset(c, z, tok) * (int64_t)par_dtype_size(z->dtype);
  if (z->dtype != loomFloat16 && z->dtype != loomBfloat16) return p;
  const uint16_t* h = (const uint16_t*)p;
  for (int64_t j = 0; j < c->vr; j++)
    scratch[j] = z->dtype == loomBfloat16 ? par_bf16_to_float(h[j]) : par_half_to_float(h[j]);
  return scratch;
}

/* dlogits row of token tok = g (float or double, as the logits' compute type). */
static void xe_store_row(const struct xe_call* c, int64_t tok, const void* g) {
  const loomTensor* d = c->dlogits;
  if (c->vr == 0) return;
  size_t es = par_dtype_size(d->dtype);
  char* p = (char*)d->data + xe_offset(c, d, tok) * (int64_t)es;
  int64_t s = d->strides[c->nd];
  for (int64_t j = 0; j < c->vr; j++) {
    switch (d->dtype) {
      case loomFloat64:
        ((double*)p)[j * s] = ((const double*)g)[j];
        break;
      case loomFloat32:
        ((float*)p)[j * s] = ((const float*)g)[j];
        break;
      case loomBfloat16:
        ((uint16_t*)p)[j * s] = par_float_to_bf16(((const float*)g)[j]);
        break;
      default:
        ((uint16_t*)p)[j * s] = par_float_to_half(((const float*)g)[j]);
    }
  }
}

/* ---- Kernels, once for float and once for double ----------------------------------------- */

/* The local max of each token's logits (-inf with no local columns). */
#define XE_MAX(T, sfx)                                                   \
  static void xe_max_##sfx(const struct xe_call* c, T* mx, float* row) { \
    for (int64_t i = 0; i < c->tokens; i++) {                            \
      const T* z = xe_row(c, i, row);                                    \
      T m = -INFINITY;                                                   \
      for (int64_t j = 0; j < c->vr; j++)                                \
        if (z[j] > m) m = z[j];                                          \
      mx[i] = m;                                                         \
    }                                                                    \
  }

/* s[3i..3i+2] = local (sum of exp(z - m), target logit or 0, sum of z); zeros for a token
 * whose target is ignored or out of range (its result does not depend on them). */
#define XE_SUMS(T, sfx, EXP)                                                          \
  static void xe_sums_##sfx(const struct xe_call* c, const T* mx, T* s, float* row) { \
    for (int64_t i = 0; i < c->tokens; i++) {                                         \
      T* o = s + 3 * i;                                                               \
      int64_t t;                                                                      \
      o[0] = o[1] = o[2] = 0;                                                         \
      if (!xe_counts(c, i, &t)) continue;                                             \
      const T* z = xe_row(c, i, row);                                                 \
      T m = mx[i], se = 0, sz = 0;                                                    \
      for (int64_t j = 0; j < c->vr; j++) {                                           \
        se += EXP(z[j] - m);                                                          \
        sz += z[j];                                                                   \
      }                                                                               \
      o[0] = se;                                                                      \
      o[1] = t >= c->v0 && t - c->v0 < c->vr ? z[t - c->v0] : 0;                      \
      o[2] = sz;                                                                      \
    }                                                                                 \
  }

/* loss and lse from the global max and sums. eps == 0 skips the smoothing term, so that an
 * infinite sum of logits does not turn 0*inf into NaN. */
#define XE_FINISH(T, sfx, LOG)                                                            \
  static void xe_finish_##sfx(const struct xe_call* c, const T* mx, const T* s) {         \
    T keep = (T)(1.0 - c->eps), spread = c->eps > 0 ? (T)(c->eps / (double)c->vocab) : 0; \
    for (int64_t i = 0; i < c->tokens; i++) {                                             \
      int64_t t;                                                                          \
      int counts = xe_counts(c, i, &t);                                                   \
      T lse = mx[i] + LOG(s[3 * i]), loss;                                                \
      if (counts) {                                                                       \
        loss = lse - keep * s[3 * i + 1];                                                 \
        if (c->eps > 0) loss -= spread * s[3 * i + 2];                                    \
      } else {                                                                            \
        loss = t == c->ignore ? 0 : NAN;                                                  \
      }                                                                                   \
      xe_put(c, c->loss, i, loss);                                                        \
      if (c->lse != NULL) xe_put(c, c->lse, i, lse);                                      \
    }                                                                                     \
  }

/* dz_j = dloss*(exp(z_j - lse) - q_j) into out, one row at a time; 0 for an ignored token,
 * NaN for an out-of-range target. */
#define XE_GRAD(T, sfx, EXP)                                                              \
  static void xe_grad_##sfx(const struct xe_call* c, float* row, T* out) {                \
    T keep = (T)(1.0 - c->eps), spread = c->eps > 0 ? (T)(c->eps / (double)c->vocab) : 0; \
    for (int64_t i = 0; i < c->tokens; i++) {                                             \
      int64_t t;                                                                          \
      if (!xe_counts(c, i, &t)) {                                                         \
        T v = t == c->ignore ? 0 : NAN;                                                   \
        for (int64_t j = 0; j < c->vr; j++) out[j] = v;                                   \
      } else {                                                                            \
        const T* z = xe_row(c, i, row);                                                   \
        T g = c->dloss ? (T)xe_get(c, c->dloss, i) : 1, l = (T)xe_get(c, c->lse_in, i);   \
        for (int64_t j = 0; j < c->vr; j++) out[j] = g * (EXP(z[j] - l) - spread);        \
        if (t >= c->v0 && t - c->v0 < c->vr) {                                            \
          int64_t j = t - c->v0;                                                          \
          out[j] = g * (EXP(z[j] - l) - (spread + keep));                                 \
        }                                                                                 \
      }                                                                                   \
      xe_store_row(c, i, out);                                                            \
    }                                                                                     \
  }

XE_MAX(float, f)
XE_MAX(double, d)
XE_SUMS(float, f, expf)
XE_SUMS(double, d, exp)
XE_FINISH(float, f, logf)
XE_FINISH(double, d, log)
XE_GRAD(float, f, expf)
XE_GRAD(double, d, exp)

/* ---- Arguments --------------------------------------------------------------------------- */

/* opts (NULL: defaults), logits and target; fills c's shape, vocabulary and options. */
static loomResult_t xe_check_inputs(loomComm_t comm, const char* fn, const loomTensor* logits,
                                    const loomTensor* target, const loomCrossEntropyOpts* opts,
                                    struct xe_call* c) {
  loomCrossEntropyOpts o = LOOM_CROSS_ENTROPY_OPTS_INIT;
  if (opts != NULL) o = *opts;
  if (!(o.labelSmoothing >= 0 && o.labelSmoothing < 1))
    return par_err(comm, fn, "opts->labelSmoothing is %g, outside [0, 1)", o.labelSmoothing);
  loomResult_t r = par_check(comm, fn, "logits", logits);
  if (r != loomSuccess) return r;
  if (!par_dtype_is_compute(logits->dtype))
    return par_err(comm, fn, "logits.dtype is %s; takes float16, bfloat16, float32, float64",
                   par_dtype_name(logits->dtype));
  if (logits->ndim < 1) return par_err(comm, fn, "logits.ndim is 0; needs [..., V_r]");
  int nd = logits->ndim - 1;
  if (logits->shape[nd] > 1 && logits->strides[nd] != 1)
    return par_err(comm, fn, "logits.strides[%d] (the last dim) is %lld; must be 1", nd,
                   (long long)logits->strides[nd]);
  r = par_check(comm, fn, "target", target);
  if (r != loomSuccess) return r;
  if (target->dtype != loomInt32 && target->dtype != loomInt64)
    return par_err(comm, fn, "target.dtype is %s; takes int32 or int64",
                   par_dtype_name(target->dtype));
  c->logits = logits;
  c->target = target;
  c->nd = nd;
  c->vr = logits->shape[nd];
  c->eps = o.labelSmoothing;
  c->ignore = o.ignoreIndex;
  c->tokens = 1;
  for (int d = 0; d < nd; d++) /* V_r may be 0, so logits' numel does not bound this */
    if (__builtin_mul_overflow(c->tokens, logits->shape[d], &c->tokens))
      return par_err(comm, fn, "logits has more than 2^63 tokens");
  return loomSuccess;
}

/* The vocabulary: V and this rank's first column. */
static loomResult_t xe_check_vocab(loomComm_t comm, const char* fn, const int64_t* splits, int rank,
                                   int n, struct xe_call* c) {
  if (splits == NULL) { /* equal V_r on every rank (not checkable without communication) */
    if (__builtin_mul_overflow(c->vr, (int64_t)n, &c->vocab))
      return par_err(comm, fn, "V_r %lld times %d ranks overflows", (long long)c->vr, n);
    c->v0 = c->vr * rank;
    return loomSuccess;
  }
  int64_t sum = 0;
  for (int q = 0; q < n; q++) {
    if (splits[q] < 0)
      return par_err(comm, fn, "opts->vocabSplits[%d] is %lld, below 0", q, (long long)splits[q]);
    if (q == rank) c->v0 = sum;
    if (__builtin_add_overflow(sum, splits[q], &sum))
      return par_err(comm, fn, "opts->vocabSplits sum past 2^63");
  }
  if (splits[rank] != c->vr)
    return par_err(comm, fn,
                   "opts->vocabSplits[%d] is %lld but this rank's logits.shape[%d] (V_r) is %lld",
                   rank, (long long)splits[rank], c->nd, (long long)c->vr);
  c->vocab = sum;
  return loomSuccess;
}

/* A tensor of the leading shape (loss, lse, dloss) with dtype want; out: the output rule. */
static loomResult_t xe_check_lead(loomComm_t comm, const char* fn, const char* name,
                                  const loomTensor* t, loomDataType_t want, int out,
                                  const struct xe_call* c) {
  loomResult_t r = out ? par_check_out(comm, fn, name, t) : par_check(comm, fn, name, t);
  if (r != loomSuccess) return r;
  if (t->dtype != want)
    return par_err(comm, fn, "%s.dtype is %s but %s logits need %s", name, par_dtype_name(t->dtype),
                   par_dtype_name(c->logits->dtype), par_dtype_name(want));
  int bad = -1;
  loomTensor lead = *c->logits;
  lead.ndim = c->nd;
  if (!par_shapes_agree(t, &lead, -1, &bad)) {
    char a[160], b[160];
    return par_err(comm, fn, "%s has shape %s but logits' leading shape is %s", name,
                   par_shape_str(t, a, sizeof(a)), par_shape_str(&lead, b, sizeof(b)));
  }
  return loomSuccess;
}

static loomDataType_t xe_scalar_dtype(const struct xe_call* c) {
  return c->logits->dtype == loomFloat64 ? loomFloat64 : loomFloat32;
}

/* Everything but the comm, common to both directions. */
static loomResult_t xe_check(loomComm_t comm, const char* fn, const loomTensor* logits,
                             const loomTensor* target, const loomCrossEntropyOpts* opts, int rank,
                             int n, struct xe_call* c) {
  memset(c, 0, sizeof(*c));
  loomResult_t r = xe_check_inputs(comm, fn, logits, target, opts, c);
  if (r == loomSuccess) r = xe_check_vocab(comm, fn, opts ? opts->vocabSplits : NULL, rank, n, c);
  if (r != loomSuccess) return r;
  int bad = -1;
  loomTensor lead = *logits;
  lead.ndim = c->nd;
  if (!par_shapes_agree(target, &lead, -1, &bad)) {
    char a[160], b[160];
    return par_err(comm, fn, "target has shape %s but logits' leading shape is %s",
                   par_shape_str(target, a, sizeof(a)), par_shape_str(&lead, b, sizeof(b)));
  }
  return loomSuccess;
}

/* out must not overlap any input given (NULL ones skipped). */
static loomResult_t xe_apart(loomComm_t comm, const char* fn, const char* name,
                             const loomTensor* out, const char* const names[],
                             const loomTensor* const ins[], int nin) {
  for (int i = 0; i < nin; i++)
    if (ins[i] != NULL && par_overlap(out, ins[i]))
      return par_err(comm, fn, "%s overlaps %s", name, names[i]);
  return loomSuccess;
}

/* ---- Forward ----------------------------------------------------------------------------- */

/* Max, then the fused sum: exactly two all-reduces (none without tokens, which every rank
 * sees alike since target is the same on every rank). */
static loomResult_t xe_forward_run(const struct xe_call* c, loomComm_t tp) {
  if (c->tokens == 0) return loomSuccess;
  int dbl = c->logits->dtype == loomFloat64;
  size_t es = dbl ? sizeof(double) : sizeof(float), n = (size_t)c->tokens;
  char* buf = par_scratch(tp, k_fwd, 4 * n * es + (dbl ? 0 : (size_t)c->vr * sizeof(float)));
  if (buf == NULL) return loomSystemError;
  void *mx = buf, *s = buf + n * es;
  float* row = (float*)(buf + 4 * n * es);
  loomDataType_t dt = dbl ? loomFloat64 : loomFloat32;
  if (dbl)
    xe_max_d(c, mx, row);
  else
    xe_max_f(c, mx, row);
  loomResult_t r = loomAllReduce(mx, mx, n, dt, loomMax, tp, NULL);
  if (r == loomSuccess) {
    if (dbl)
      xe_sums_d(c, mx, s, row);
    else
      xe_sums_f(c, mx, s, row);
    r = loomAllReduce(s, s, 3 * n, dt, loomSum, tp, NULL);
  }
  if (r == loomSuccess) {
    if (dbl)
      xe_finish_d(c, mx, s);
    else
      xe_finish_f(c, mx, s);
  }
  free(buf);
  return r;
}

loomResult_t loomVocabParallelCrossEntropyForward(const loomTensor* logits,
                                                  const loomTensor* target, loomTensor* loss,
                                                  loomTensor* lse, const loomCrossEntropyOpts* opts,
                                                  loomComm_t tp, loomStream_t stream) {
  int rank, n;
  struct xe_call c;
  loomResult_t r = par_comm(tp, k_fwd, "tp", &rank, &n);
  if (r == loomSuccess) r = xe_check(tp, k_fwd, logits, target, opts, rank, n, &c);
  if (r == loomSuccess) r = xe_check_lead(tp, k_fwd, "loss", loss, xe_scalar_dtype(&c), 1, &c);
  if (r == loomSuccess && lse != NULL)
    r = xe_check_lead(tp, k_fwd, "lse", lse, xe_scalar_dtype(&c), 1, &c);
  static const char* const names[] = {"logits", "target", "lse"};
  const loomTensor* const ins[] = {logits, target, lse};
  if (r == loomSuccess) r = xe_apart(tp, k_fwd, "loss", loss, names, ins, 3);
  if (r == loomSuccess && lse != NULL) r = xe_apart(tp, k_fwd, "lse", lse, names, ins, 2);
  if (r != loomSuccess) return r;
  c.loss = loss;
  c.lse = lse;
  r = par_enter(tp, k_fwd, stream);
  if (r != loomSuccess) return r;
  return xe_forward_run(&c, tp);
}

/* ---- Backward ---------------------------------------------------------------------------- */

static loomResult_t xe_backward_check(loomComm_t tp, const loomTensor* lse, const loomTensor* dloss,
                                      loomTensor* dlogits, const struct xe_call* c) {
  loomDataType_t sdt = xe_scalar_dtype(c);
  loomResult_t r = xe_check_lead(tp, k_bwd, "lse", lse, sdt, 0, c);
  if (r == loomSuccess && dloss != NULL) r = xe_check_lead(tp, k_bwd, "dloss", dloss, sdt, 0, c);
  if (r == loomSuccess) r = par_check_out(tp, k_bwd, "dlogits", dlogits);
  if (r != loomSuccess) return r;
  const loomTensor* z = c->logits;
  int bad = -1;
  if (dlogits->dtype != z->dtype)
    return par_err(tp, k_bwd, "dlogits.dtype is %s but logits.dtype is %s",
                   par_dtype_name(dlogits->dtype), par_dtype_name(z->dtype));
  if (!par_shapes_agree(dlogits, z, -1, &bad)) {
    char a[160], b[160];
    return par_err(tp, k_bwd, "dlogits has shape %s but logits has %s",
                   par_shape_str(dlogits, a, sizeof(a)), par_shape_str(z, b, sizeof(b)));
  }
  if (par_overlap(dlogits, z) && !par_same_view(dlogits, z))
    return par_err(tp, k_bwd, "dlogits overlaps logits without being the same view (in place)");
  static const char* const names[] = {"target", "lse", "dloss"};
  const loomTensor* const ins[] = {c->target, lse, dloss};
  return xe_apart(tp, k_bwd, "dlogits", dlogits, names, ins, 3);
}

loomResult_t loomVocabParallelCrossEntropyBackward(const loomTensor* logits,
                                                   const loomTensor* target, const loomTensor* lse,
                                                   const loomTensor* dloss, loomTensor* dlogits,
                                                   const loomCrossEntropyOpts* opts, loomComm_t tp,
                                                   loomStream_t stream) {
  int rank, n;
  struct xe_call c;
  loomResult_t r = par_comm(tp, k_bwd, "tp", &rank, &n);
  if (r == loomSuccess) r = xe_check(tp, k_bwd, logits, target, opts, rank, n, &c);
  if (r == loomSuccess) r = xe_backward_check(tp, lse, dloss, dlogits, &c);
  if (r != loomSuccess) return r;
  c.lse_in = lse;
  c.dloss = dloss;
  c.dlogits = dlogits;
  r = par_enter(tp, k_bwd, stream);
  if (r != loomSuccess || c.tokens == 0) return r;
  int dbl = logits->dtype == loomFloat64;
  size_t es = dbl ? sizeof(double) : sizeof(float);
  /* The row (widened 16-bit logits) and its gradient, kept apart so that in place works. */
  char* buf = par_scratch(tp, k_bwd, (size_t)c.vr * (es + sizeof(float)));
  if (buf == NULL) return loomSystemError;
  void* out = buf;
  float* row = (float*)(buf + (size_t)c.vr * es);
  if (dbl)
    xe_grad_d(&c, row, out);
  else
    xe_grad_f(&c, row, out);
  free(buf);
  return loomSuccess;
}
