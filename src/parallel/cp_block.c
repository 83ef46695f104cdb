/* cp_block.c - the pieces every CP algorithm uses: the runs of positions a layout gives a rank,
 * dense views and conversions, and the block loop that calls the attention kernel on one
 * contiguous range of queries and one of keys at a time and merges the partial results in the
 * accumulation type (PARALLEL.md section 4). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cp.h"

int cp_segs(loomCpLayout_t layout, int rank, int P, int64_t local, struct cp_seg segs[2]) {
  if (layout == loomCpZigzag) {
    int64_t C = local / 2;
    segs[0] = (struct cp_seg){0, rank * C, C};
    segs[1] = (struct cp_seg){C, (int64_t)(2 * P - 1 - rank) * C, C};
    return 2;
  }
  segs[0] = (struct cp_seg){0, rank * local, local};
  return 1;
}

/* ---- Tensors ----------------------------------------------------------------------------- */

loomTensor cp_dense(void* data, loomDataType_t dt, int64_t e0, int64_t e1, int64_t e2, int64_t e3) {
  static char placeholder;
  loomTensor t;
  memset(&t, 0, sizeof(t));
  int64_t shape[4] = {e0, e1, e2, e3};
  /* data is NULL when scratch ran out: the view is made on a placeholder and
   * its data set to NULL after, so that callers see the missing memory
   * (all_there) and not an unset tensor. */
  loomTensorMake(data ? data : &placeholder, dt, e3 < 0 ? 3 : 4, shape, &t);
  t.data = data;
  return t;
}

loomTensor cp_slice(const loomTensor* t, int dim, int64_t start, int64_t len) {
  loomTensor s = *t;
  s.data = (char*)t->data + start * t->strides[dim] * (int64_t)par_dtype_size(t->dtype);
  s.shape[dim] = len;
  return s;
}

void cp_cast(const loomTensor* src, const loomTensor* dst) {
  if (src->dtype == dst->dtype) {
    par_copy(src, dst);
    return;
  }
  int64_t n = par_numel(src);
  if (n == 0) return;
  int last = src->ndim - 1;
  int64_t idx[LOOM_TENSOR_MAX_DIMS] = {0}, w = last >= 0 ? src->shape[last] : 1;
  for (int64_t r = 0; r < n / w; r++) {
    int64_t so = 0, dof = 0;
    for (int d = 0; d < last; d++) so += idx[d] * src->strides[d], dof += idx[d] * dst->strides[d];
    int64_t sst = last >= 0 ? src->strides[last] : 0, dst_st = last >= 0 ? dst->strides[last] : 0;
    for (int64_t e = 0; e < w; e++)
      par_put(dst->data, dof + e * dst_st, dst->dtype,
              par_get(src->data, so + e * sst, src->dtype));
    for (int d = last - 1; d >= 0; d--) {
      if (++idx[d] < src->shape[d]) break;
      idx[d] = 0;
    }
  }
}

void cp_add(loomDataType_t acc, void* x, const void* y, int64_t n) {
  if (acc == loomFloat64)
    for (int64_t i = 0; i < n; i++) ((double*)x)[i] += ((const double*)y)[i];
  else
    for (int64_t i = 0; i < n; i++) ((float*)x)[i] += ((const float*)y)[i];
}

void cp_zero(loomDataType_t acc, void* x, int64_t n) {
  memset(x, 0, (size_t)n * par_dtype_size(acc));
}

void cp_fill_neg_inf(loomDataType_t acc, void* x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (acc == loomFloat64)
      ((double*)x)[i] = -INFINITY;
    else
      ((float*)x)[i] = -INFINITY;
}

void* cp_alloc(const struct cp_call* c, struct cp_mem* m, size_t bytes) {
  if (m->n == CP_MEM_MAX) {
    par_fail(c->comm, loomInternalError, c->fn, "more than %d scratch pieces", CP_MEM_MAX);
    return NULL;
  }
  void* p = par_scratch(c->comm, c->fn, bytes);
  if (p != NULL) m->p[m->n++] = p;
  return p;
}

void cp_mem_free(struct cp_mem* m) {
  while (m->n > 0) free(m->p[--m->n]);
}

/* ---- Merging ----------------------------------------------------------------------------- */

/* The partial (o2, l2) of one row into (o1, l1), in the stated log-sigmoid form:
 * lse = l1 - logsigmoid(l1 - l2), out = o1 - sigmoid(l2 - l1) * (o1 - o2). A block with
 * lse = -inf adds nothing; into an empty row the block is taken as it is. */
static void merge_row_d(double* o1, double* l1, const double* o2, double l2, int64_t n) {
  if (l2 == -INFINITY) return;
  if (*l1 == -INFINITY) {
    memcpy(o1, o2, (size_t)n * sizeof *o1);
    *l1 = l2;
    return;
  }
  double x = *l1 - l2, ls = x < 0 ? x - log1p(exp(x)) : -log1p(exp(-x));
  double sg = 1 / (1 + exp(x)); /* sigmoid(l2 - l1) */
  for (int64_t e = 0; e < n; e++) o1[e] -= sg * (o1[e] - o2[e]);
  *l1 -= ls;
}

static void merge_row_f(float* o1, float* l1, const float* o2, float l2, int64_t n) {
  if (l2 == -INFINITY) return;
  if (*l1 == -INFINITY) {
    memcpy(o1, o2, (size_t)n * sizeof *o1);
    *l1 = l2;
    return;
  }
  float x = *l1 - l2, ls = x < 0 ? x - log1pf(expf(x)) : -log1pf(expf(-x));
  float sg = 1 / (1 + expf(x));
  for (int64_t e = 0; e < n; e++) o1[e] -= sg * (o1[e] - o2[e]);
  *l1 -= ls;
}

/* A block of Lq rows (dense [B, Lq, Hq, Dv] and [B, Hq, Lq]) into rows loc.. of the
 * accumulators. */
static void merge_block(const struct cp_call* c, const void* ob, const void* lb, int64_t Lq,
                        void* oacc, void* lacc, int64_t loc) {
  int64_t Hq = c->Hq, Dv = c->Dv;
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t i = 0; i < Lq; i++)
      for (int64_t h = 0; h < Hq; h++) {
        int64_t o1 = ((b * c->Sq + loc + i) * Hq + h) * Dv, o2 = ((b * Lq + i) * Hq + h) * Dv;
        int64_t l1 = (b * Hq + h) * c->Sq + loc + i, l2 = (b * Hq + h) * Lq + i;
        if (c->acc == loomFloat64)
          merge_row_d((double*)oacc + o1, (double*)lacc + l1, (const double*)ob + o2,
                      ((const double*)lb)[l2], Dv);
        else
          merge_row_f((float*)oacc + o1, (float*)lacc + l1, (const float*)ob + o2,
                      ((const float*)lb)[l2], Dv);
      }
}

/* ---- Blocks ------------------------------------------------------------------------------ */

loomResult_t cp_blk_ws_make(const struct cp_call* c, int bwd, int64_t lk, struct cp_blk_ws* w) {
  int64_t n[5] = {c->B * c->Sq * c->Hq * c->Dv, c->B * c->Hq * c->Sq,
                  bwd ? c->B * c->Sq * c->Hq * c->D : 0, bwd ? c->B * lk * c->Hkv * c->D : 0,
                  bwd ? c->B * lk * c->Hkv * c->Dv : 0};
  size_t off[6] = {0};
  for (int i = 0; i < 5; i++) off[i + 1] = off[i] + ((size_t)n[i] * c->as + 63) / 64 * 64;
  w->mem = par_scratch(c->comm, c->fn, off[5]);
  if (w->mem == NULL) return loomSystemError;
  void** p[5] = {&w->out, &w->lse, &w->dq, &w->dk, &w->dv};
  for (int i = 0; i < 5; i++) *p[i] = (char*)w->mem + off[i];
  return loomSuccess;
}

/* The keys of run ks that queries of run qs may see: 0 when the pair is fully masked, else the
 * run's length, cut after the last query's position when causal. */
static int64_t pair_keys(const struct cp_call* c, const struct cp_seg* qs,
                         const struct cp_seg* ks) {
  if (qs->len == 0 || ks->len == 0) return 0;
  if (!c->causal) return ks->len;
  int64_t n = qs->pos + qs->len - ks->pos;
  return n <= 0 ? 0 : PAR_MIN(n, ks->len);
}

loomResult_t cp_blocks_forward(const struct cp_call* c, const loomTensor* q,
                               const struct cp_seg* qs, int nq, const loomTensor* k,
                               const loomTensor* v, const struct cp_seg* ks, int nk, void* oacc,
                               void* lacc, struct cp_blk_ws* w) {
  for (int a = 0; a < nq; a++)
    for (int b = 0; b < nk; b++) {
      int64_t Lq = qs[a].len, Lk = pair_keys(c, &qs[a], &ks[b]);
      if (Lk == 0) continue;
      loomTensor qv = cp_slice(q, 1, qs[a].loc, Lq), kv = cp_slice(k, 1, ks[b].loc, Lk),
                 vv = cp_slice(v, 1, ks[b].loc, Lk);
      loomTensor ob = cp_dense(w->out, c->acc, c->B, Lq, c->Hq, c->Dv),
                 lb = cp_dense(w->lse, c->acc, c->B, c->Hq, Lq, -1);
      loomResult_t r = c->kern->forward(c->kern->ctx, &qv, &kv, &vv, qs[a].pos, ks[b].pos,
                                        c->causal, c->scale, &ob, &lb, NULL);
      if (r != loomSuccess) return r;
      merge_block(c, w->out, w->lse, Lq, oacc, lacc, qs[a].loc);
    }
  return loomSuccess;
}

/* rows [loc, loc + n) of each batch of dense acc-type x [B, L, inner] += dense y [B, n, inner] */
static void add_rows(const struct cp_call* c, void* x, int64_t L, int64_t loc, const void* y,
                     int64_t n, int64_t inner) {
  for (int64_t b = 0; b < c->B; b++)
    cp_add(c->acc, (char*)x + (size_t)((b * L + loc) * inner) * c->as,
           (const char*)y + (size_t)(b * n * inner) * c->as, n * inner);
}

loomResult_t cp_blocks_backward(const struct cp_call* c, const struct cp_io* io,
                                const struct cp_seg* qs, int nq, const loomTensor* k,
                                const loomTensor* v, const struct cp_seg* ks, int nk, void* dqacc,
                                void* dkacc, void* dvacc, struct cp_blk_ws* w) {
  int64_t Lfull = k->shape[1];
  for (int a = 0; a < nq; a++)
    for (int b = 0; b < nk; b++) {
      int64_t Lq = qs[a].len, Lk = pair_keys(c, &qs[a], &ks[b]), ql = qs[a].loc, kl = ks[b].loc;
      if (Lk == 0) continue;
      loomTensor qv = cp_slice(io->q, 1, ql, Lq), ov = cp_slice(io->out, 1, ql, Lq),
                 dov = cp_slice(io->dout, 1, ql, Lq), lv = cp_slice(io->lse, 2, ql, Lq),
                 kv = cp_slice(k, 1, kl, Lk), vv = cp_slice(v, 1, kl, Lk);
      loomTensor dqb = cp_dense(w->dq, c->acc, c->B, Lq, c->Hq, c->D),
                 dkb = cp_dense(w->dk, c->acc, c->B, Lk, c->Hkv, c->D),
                 dvb = cp_dense(w->dv, c->acc, c->B, Lk, c->Hkv, c->Dv);
      loomResult_t r = c->kern->backward(c->kern->ctx, &qv, &kv, &vv, &ov, &dov, &lv, qs[a].pos,
                                         ks[b].pos, c->causal, c->scale, &dqb, &dkb, &dvb, NULL);
      if (r != loomSuccess) return r;
      add_rows(c, dqacc, c->Sq, ql, w->dq, Lq, c->Hq * c->D);
      add_rows(c, dkacc, Lfull, kl, w->dk, Lk, c->Hkv * c->D);
      add_rows(c, dvacc, Lfull, kl, w->dv, Lk, c->Hkv * c->Dv);
    }
  return loomSuccess;
}
