/* moe_rows.c - the rows of the MoE moves (moe.h): tensors as dense rows, the handle's scratch,
 * the exchanges of rows between ranks, and the arithmetic on them.
 *
 * Exchanges are one group of loomSend/loomRecv with a message per (peer, local expert)
 * segment. Why not loomAlltoAllv: the receive layout is expert-major while an all-to-all-v
 * lands rows source-major, so it would need a scratch buffer and a permutation on every
 * receiver. One message per segment lands each segment at its final rows, and per peer the
 * k-th send matches the k-th receive, so the segments stay apart with no tags. Segments of zero
 * rows send nothing (both sides know the counts). perf/moe_perf runs the other design (one
 * all-to-all-v into a source-major buffer, then a permutation) beside it; on host ranks it was
 * not faster, and it costs a copy of every row.
 *
 * Arithmetic: float16 and bfloat16 are widened to float32, and float32 stays float32 (float64
 * in float64); a weight is first converted to that type. Every sum runs in one fixed order
 * (slots k ascending, elements in index order) and is rounded once when stored, which makes
 * the results bitwise the same whatever the EP size or the order messages arrive in. The
 * library builds with -ffp-contract=off, so no multiply-add is fused behind the source's back. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"

/* ---- Rows -------------------------------------------------------------------------------- */

static void rows_shape(const loomTensor* t, struct moe_rows* rows) {
  int64_t e = 1;
  for (int d = 1; d < t->ndim; d++) e *= t->shape[d];
  rows->elems = e;
  rows->rb = (size_t)e * par_dtype_size(t->dtype);
  rows->scratch = NULL;
  rows->base = t->data;
}

loomResult_t moe_rows_in(const struct loomMoeHandle* h, const char* fn, const loomTensor* t,
                         struct moe_rows* rows) {
  rows_shape(t, rows);
  if (par_contiguous(t)) return loomSuccess;
  /* A strided view: packed once, so the moves read plain rows. */
  if ((rows->scratch = par_scratch(h->comm, fn, (size_t)t->shape[0] * rows->rb)) == NULL)
    return loomSystemError;
  par_pack(t, rows->scratch);
  rows->base = rows->scratch;
  return loomSuccess;
}

loomResult_t moe_rows_out(const struct loomMoeHandle* h, const char* fn, const loomTensor* t,
                          struct moe_rows* rows) {
  rows_shape(t, rows);
  if (par_contiguous(t)) return loomSuccess;
  if ((rows->scratch = par_scratch(h->comm, fn, (size_t)t->shape[0] * rows->rb)) == NULL)
    return loomSystemError;
  rows->base = rows->scratch;
  return loomSuccess;
}

void moe_rows_finish(const loomTensor* t, struct moe_rows* rows, int ok) {
  if (rows->scratch != NULL && ok) par_unpack(rows->scratch, t);
  free(rows->scratch);
  rows->scratch = NULL;
}

void moe_zero_padding(const struct loomMoeHandle* h, char* out, size_t rb) {
  for (int j = 0; j < h->El; j++) {
    int64_t lo = h->offsets[j] + h->counts[j], hi = h->offsets[j + 1];
    if (hi > lo && rb > 0) memset(out + lo * rb, 0, (size_t)(hi - lo) * rb);
  }
}

const char* moe_slot_row(const struct loomMoeHandle* h, int64_t s, const char* rows,
                         const char* back, size_t rb) {
  int64_t lo = moe_self_lo(h);
  if (s >= lo && s < moe_self_hi(h)) return rows + h->self_row[s - lo] * rb;
  return back + moe_buf_row(h, s) * rb;
}

double moe_weight_get(const loomTensor* w, int64_t t, int k) {
  int64_t off = t * w->strides[0] + k * w->strides[1];
  if (w->dtype == loomFloat32) return ((const float*)w->data)[off];
  return ((const double*)w->data)[off];
}

void moe_weight_set(const loomTensor* w, int64_t t, int k, double v) {
  int64_t off = t * w->strides[0] + k * w->strides[1];
  if (w->dtype == loomFloat32)
    ((float*)w->data)[off] = (float)v;
  else
    ((double*)w->data)[off] = v;
}

/* ---- Scratch ---------------------------------------------------------------------------- */

struct moe_cache {
  char* p[MOE_SCRATCH_SLOTS];
  size_t n[MOE_SCRATCH_SLOTS];
};

char* moe_scratch(const struct loomMoeHandle* h, const char* fn, int slot, size_t bytes) {
  struct moe_cache* c = h->cache;
  if (c->p[slot] != NULL && c->n[slot] >= bytes) return c->p[slot];
  free(c->p[slot]);
  c->n[slot] = 0;
  if ((c->p[slot] = par_scratch(h->comm, fn, bytes)) != NULL) c->n[slot] = bytes;
  return c->p[slot];
}

char* moe_buf(const struct loomMoeHandle* h, const char* fn, int slot, size_t rb) {
  return moe_scratch(h, fn, slot, (size_t)moe_buf_rows(h) * rb);
}

loomResult_t moe_cache_make(struct loomMoeHandle* h) {
  return (h->cache = calloc(1, sizeof(*h->cache))) ? loomSuccess : loomSystemError;
}

void moe_cache_free(struct loomMoeHandle* h) {
  if (h->cache == NULL) return;
  for (int i = 0; i < MOE_SCRATCH_SLOTS; i++) free(h->cache->p[i]);
  free(h->cache);
  h->cache = NULL;
}

/* ---- Exchanges: one group of messages, one per (peer, local expert) segment -------------- */

struct msg {
  char* buf;
  size_t bytes;
  int peer, send;
};

/* Adds the (peer, expert) segments that are not empty; per peer, the k-th send matches the
 * peer's k-th receive, and both sides go through the segments in local expert order. */
static int msgs_add(const struct loomMoeHandle* h, struct msg* m, int q, int send, char* base,
                    const int64_t* at, const int64_t* cnt, size_t rb) {
  int n = 0;
  for (int j = 0; j < h->El; j++)
    if (cnt[j] > 0 && rb > 0)
      m[n++] = (struct msg){base + at[j] * rb, (size_t)cnt[j] * rb, q, send};
  return n;
}

static loomResult_t msgs_run(const struct loomMoeHandle* h, const struct msg* m, int n) {
  loomResult_t r = n > 0 ? loomGroupStart() : loomSuccess;
  if (n == 0 || r != loomSuccess) return r;
  for (int i = 0; i < n && r == loomSuccess; i++)
    r = m[i].send ? loomSend(m[i].buf, m[i].bytes, loomUint8, m[i].peer, h->comm, NULL)
                  : loomRecv(m[i].buf, m[i].bytes, loomUint8, m[i].peer, h->comm, NULL);
  loomResult_t end = loomGroupEnd(); /* closes the group even after a failed call */
  return r == loomSuccess ? end : r;
}

/* Forward: (q, j) from buf at its send-order row, into out at recv_at. Reverse: the other way. */
static loomResult_t p2p_exchange(const struct loomMoeHandle* h, const char* fn, int reverse,
                                 char* send_order, char* layout, size_t rb) {
  int El = h->El, n = 0;
  struct msg* m = malloc((size_t)(2 * h->n * El + 1) * sizeof(*m));
  int64_t* at = malloc((size_t)(El + 1) * sizeof(int64_t));
  if (m == NULL || at == NULL) {
    free(m);
    free(at);
    return par_fail(h->comm, loomSystemError, fn, "out of memory for the messages");
  }
  for (int q = 0; q < h->n; q++) {
    if (q == h->rank) continue;
    for (int j = 0; j < El; j++) at[j] = moe_buf_row(h, h->send_off[q * El + j]);
    const int64_t *rat = h->recv_at + q * El, *rcnt = h->recv_cnt + q * El;
    const int64_t* scnt = h->send_cnt + q * El;
    n += msgs_add(h, m + n, q, 1, reverse ? layout : send_order, reverse ? rat : at,
                  reverse ? rcnt : scnt, rb);
    n += msgs_add(h, m + n, q, 0, reverse ? send_order : layout, reverse ? at : rat,
                  reverse ? scnt : rcnt, rb);
  }
  loomResult_t r = msgs_run(h, m, n);
  free(m);
  free(at);
  return r;
}

loomResult_t moe_forward(const struct loomMoeHandle* h, const char* fn, const char* buf, char* out,
                         size_t rb) {
  if (h->n == 1 || rb == 0) return loomSuccess; /* the same on every rank */
  return p2p_exchange(h, fn, 0, (char*)buf, out, rb);
}

loomResult_t moe_reverse(const struct loomMoeHandle* h, const char* fn, const char* rows,
                         char* back, size_t rb) {
  if (h->n == 1 || rb == 0) return loomSuccess;
  return p2p_exchange(h, fn, 1, back, (char*)rows, rb);
}

/* ---- Arithmetic ---------------------------------------------------------------------------- */

/* The element loops below are independent across elements, so vectorizing them changes no
 * result; the build's -O2 does not, hence O3 here as the core's reduction kernels do, and
 * fp-contract=off restated so that no multiply-add is fused. */
#pragma GCC push_options
#pragma GCC optimize("O3", "fp-contract=off")

size_t moe_acc_size(loomDataType_t dt) {
  return dt == loomFloat64 ? 8 : 4;
}

/* acc += w*x or += x over one row of 16-bit floats; cvt widens one element. */
#define MOE_ADD16(cvt)                                              \
  do {                                                              \
    const uint16_t* restrict p = (const uint16_t*)row;              \
    if (weighted)                                                   \
      for (int64_t i = 0; i < n; i++) a[i] = a[i] + wf * cvt(p[i]); \
    else                                                            \
      for (int64_t i = 0; i < n; i++) a[i] = a[i] + cvt(p[i]);      \
  } while (0)

void moe_acc_add(void* acc, const char* row, loomDataType_t dt, int64_t n, int weighted, double w) {
  if (dt == loomFloat64) {
    double* restrict a = acc;
    const double* restrict p = (const double*)row;
    if (weighted)
      for (int64_t i = 0; i < n; i++) a[i] = a[i] + w * p[i];
    else
      for (int64_t i = 0; i < n; i++) a[i] = a[i] + p[i];
    return;
  }
  float* restrict a = acc;
  float wf = (float)w;
  if (dt == loomFloat16) {
    MOE_ADD16(par_half_to_float);
  } else if (dt == loomBfloat16) {
    MOE_ADD16(par_bf16_to_float);
  } else {
    const float* restrict p = (const float*)row;
    if (weighted)
      for (int64_t i = 0; i < n; i++) a[i] = a[i] + wf * p[i];
    else
      for (int64_t i = 0; i < n; i++) a[i] = a[i] + p[i];
  }
}

void moe_acc_store(const void* acc, char* dst, loomDataType_t dt, int64_t n) {
  if (n == 0) return;
  if (dt == loomFloat64 || dt == loomFloat32) {
    memcpy(dst, acc, (size_t)n * moe_acc_size(dt));
    return;
  }
  const float* a = acc;
  uint16_t* d = (uint16_t*)dst;
  if (dt == loomFloat16)
    for (int64_t i = 0; i < n; i++) d[i] = par_float_to_half(a[i]);
  else
    for (int64_t i = 0; i < n; i++) d[i] = par_float_to_bf16(a[i]);
}

void moe_row_scale(const char* src, char* dst, loomDataType_t dt, int64_t n, double w) {
  float wf = (float)w;
  const uint16_t* s16 = (const uint16_t*)src;
  uint16_t* d16 = (uint16_t*)dst;
  switch (dt) {
    case loomFloat64:
      for (int64_t i = 0; i < n; i++) ((double*)dst)[i] = w * ((const double*)src)[i];
      break;
    case loomFloat32:
      for (int64_t i = 0; i < n; i++) ((float*)dst)[i] = wf * ((const float*)src)[i];
      break;
    case loomFloat16:
      for (int64_t i = 0; i < n; i++) d16[i] = par_float_to_half(wf * par_half_to_float(s16[i]));
      break;
    default:
      for (int64_t i = 0; i < n; i++) d16[i] = par_float_to_bf16(wf * par_bf16_to_float(s16[i]));
  }
}

double moe_row_dot(const char* a, const char* b, loomDataType_t dt, int64_t n) {
  if (dt == loomFloat64) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s = s + ((const double*)a)[i] * ((const double*)b)[i];
    return s;
  }
  float s = 0;
  const uint16_t *a16 = (const uint16_t*)a, *b16 = (const uint16_t*)b;
  if (dt == loomFloat32)
    for (int64_t i = 0; i < n; i++) s = s + ((const float*)a)[i] * ((const float*)b)[i];
  else if (dt == loomFloat16)
    for (int64_t i = 0; i < n; i++) s = s + par_half_to_float(a16[i]) * par_half_to_float(b16[i]);
  else
    for (int64_t i = 0; i < n; i++) s = s + par_bf16_to_float(a16[i]) * par_bf16_to_float(b16[i]);
  return s;
}

#pragma GCC pop_options
