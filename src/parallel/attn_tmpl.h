/* attn_tmpl.h - the body of the reference attention kernel for one accumulation type, included
 * by attn_kernel.c twice: REAL float with SUF f (float16, bfloat16, float32 inputs) and REAL
 * double with SUF d (float64). The caller defines REAL, SUF, ACC_DT and LOG, and row_max_f,
 * row_max_d, exp_row_f and exp_row_d.
 *
 * Work is per (batch, query head) and per tile of ATTN_TILE queries: S = c*Q*K^T by GEMM over
 * the keys the tile can see, softmax along whole rows of the block, O = P*V by GEMM. Backward
 * recomputes P from lse and runs the five GEMMs of section 4. Every sum has a fixed order (the
 * GEMM's, then rows, heads and tiles in ascending order), so results repeat bitwise. */

#define ATTN_CAT2(a, b) a##_##b
#define ATTN_CAT(a, b) ATTN_CAT2(a, b)
#define F(name) ATTN_CAT(name, SUF)

struct F(attn_ws) {
  REAL *q, *k, *v, *s, *dp, *o, *dout, *dvec, *lse, *dk, *dv, *dq, *inv;
  void* mem;
};

/* One workspace for the whole call; backward needs whole-head O, dO, dK, dV as well. */
static loomResult_t F(ws_make)(const struct attn_blk* a, int bwd, struct F(attn_ws) * w) {
  int64_t T = PAR_MIN(ATTN_TILE, PAR_MAX(a->Lq, 1)), Lq = a->Lq, Lk = a->Lk;
  int64_t n[13] = {Lq * a->D,
                   Lk * a->D,
                   Lk * a->Dv,
                   T * Lk,
                   bwd ? T * Lk : 0,
                   bwd ? Lq * a->Dv : T * a->Dv,
                   bwd ? Lq * a->Dv : 0,
                   Lq,
                   Lq,
                   bwd ? Lk * a->D : 0,
                   bwd ? Lk * a->Dv : 0,
                   bwd ? T * a->D : 0,
                   T};
  int64_t total = 0;
  for (int i = 0; i < 13; i++) total += n[i] + 8; /* + 8: every piece 64-byte aligned */
  w->mem = par_scratch(NULL, a->fn, (size_t)total * sizeof(REAL));
  if (w->mem == NULL) return loomSystemError;
  REAL** p[13] = {&w->q,    &w->k,   &w->v,  &w->s,  &w->dp, &w->o,  &w->dout,
                  &w->dvec, &w->lse, &w->dk, &w->dv, &w->dq, &w->inv};
  REAL* at = w->mem;
  for (int i = 0; i < 13; i++) {
    *p[i] = at;
    at += (n[i] + 8) / 8 * 8;
  }
  return loomSuccess;
}

/* n elements of dtype dt at p, widened to REAL. */
static void F(load)(const char* p, loomDataType_t dt, REAL* dst, int64_t n) {
  if (dt == loomFloat16)
    for (int64_t i = 0; i < n; i++) dst[i] = (REAL)par_half_to_float(((const uint16_t*)p)[i]);
  else if (dt == loomBfloat16)
    for (int64_t i = 0; i < n; i++) dst[i] = (REAL)par_bf16_to_float(((const uint16_t*)p)[i]);
  else if (dt == loomFloat32)
    for (int64_t i = 0; i < n; i++) dst[i] = (REAL)((const float*)p)[i];
  else
    for (int64_t i = 0; i < n; i++) dst[i] = (REAL)((const double*)p)[i];
}

/* The n rows of width e of head h, batch b, of a [B, L, H, e] view, densely into dst. */
static void F(load_rows)(const struct attn_view* v, loomDataType_t dt, int64_t b, int64_t h,
                         int64_t n, int64_t e, REAL* dst) {
  size_t es = par_dtype_size(dt);
  for (int64_t i = 0; i < n; i++)
    F(load)(v->p + (b * v->s[0] + i * v->s[1] + h * v->s[2]) * (int64_t)es, dt, dst + i * e, e);
}

/* Dense rows back into a [B, L, H, e] view of the accumulation type, from row row0. */
static void F(store_rows)(const REAL* src, const struct attn_view* v, int64_t b, int64_t h,
                          int64_t row0, int64_t n, int64_t e) {
  REAL* base = (REAL*)v->p;
  for (int64_t i = 0; i < n; i++)
    if (e > 0)
      memcpy(base + b * v->s[0] + (row0 + i) * v->s[1] + h * v->s[2], src + i * e,
             (size_t)e * sizeof(REAL));
}

static loomResult_t F(gemm)(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                            const REAL* A, int64_t lda, const REAL* B, int64_t ldb, double beta,
                            REAL* C, int64_t ldc) {
  const loomGemm* g = loomGemmDefault();
  return g->fn(g->ctx, ta, tb, m, n, k, alpha, A, PAR_MAX(lda, 1), B, PAR_MAX(ldb, 1), beta, C,
               PAR_MAX(ldc, 1), ACC_DT, NULL);
}

/* Row r of a tile: S becomes exp(S - max) over its allowed keys (0 past them); lse and 1/sum. */
static void F(softmax_row)(REAL* s, int64_t kn, int64_t lim, REAL* lse, REAL* inv) {
  if (lim <= 0) {
    memset(s, 0, (size_t)kn * sizeof(REAL));
    *lse = -(REAL)INFINITY;
    *inv = 0;
    return;
  }
  REAL mx = F(row_max)(s, lim), sum = F(exp_row)(s, lim, mx);
  for (int64_t j = lim; j < kn; j++) s[j] = 0;
  *lse = mx + LOG(sum);
  *inv = 1 / sum;
}

static loomResult_t F(fwd_tile)(const struct attn_blk* a, struct F(attn_ws) * w, int64_t b,
                                int64_t h, int64_t i0, int64_t m) {
  int64_t kn = attn_keys(a, i0, m), D = a->D, Dv = a->Dv;
  if (kn > 0) {
    loomResult_t r = F(gemm)(0, 1, m, kn, D, a->scale, w->q + i0 * D, D, w->k, D, 0, w->s, kn);
    for (int64_t i = 0; i < m && r == loomSuccess; i++) F(softmax_row)
    (w->s + i * kn, kn, PAR_MIN(kn, attn_keys(a, i0 + i, 1)), w->lse + i, w->inv + i);
    if (r == loomSuccess) r = F(gemm)(0, 0, m, Dv, kn, 1.0, w->s, kn, w->v, Dv, 0, w->o, Dv);
    if (r != loomSuccess) return r;
    for (int64_t i = 0; i < m; i++)
      for (int64_t e = 0; e < Dv; e++) w->o[i * Dv + e] *= w->inv[i];
  } else {
    memset(w->o, 0, (size_t)(m * Dv) * sizeof(REAL));
    for (int64_t i = 0; i < m; i++) w->lse[i] = -(REAL)INFINITY;
  }
  F(store_rows)(w->o, &a->out, b, h, i0, m, Dv);
  REAL* lse = (REAL*)a->lse.p;
  for (int64_t i = 0; i < m; i++)
    lse[b * a->lse.s[0] + h * a->lse.s[1] + (i0 + i) * a->lse.s[2]] = w->lse[i];
  return loomSuccess;
}

static loomResult_t F(attn_fwd)(const struct attn_blk* a) {
  struct F(attn_ws) w;
  loomResult_t r = F(ws_make)(a, 0, &w);
  int64_t G = a->Hq / a->Hkv;
  for (int64_t b = 0; b < a->B && r == loomSuccess; b++)
    for (int64_t h = 0; h < a->Hq && r == loomSuccess; h++) {
      if (h % G == 0) { /* a new key/value head: its rows once for the group's query heads */
        F(load_rows)(&a->k, a->dt, b, h / G, a->Lk, a->D, w.k);
        F(load_rows)(&a->v, a->dt, b, h / G, a->Lk, a->Dv, w.v);
      }
      F(load_rows)(&a->q, a->dt, b, h, a->Lq, a->D, w.q);
      for (int64_t i0 = 0; i0 < a->Lq && r == loomSuccess; i0 += ATTN_TILE)
        r = F(fwd_tile)(a, &w, b, h, i0, PAR_MIN(ATTN_TILE, a->Lq - i0));
    }
  free(w.mem);
  return r;
}

/* P = exp(S - lse) over the allowed keys (0 elsewhere and on rows with lse = -inf). */
static void F(probs_row)(REAL* s, int64_t kn, int64_t lim, REAL lse) {
  if (!(lse > -(REAL)INFINITY)) lim = 0;
  F(exp_row)(s, lim, lse);
  for (int64_t j = PAR_MAX(lim, 0); j < kn; j++) s[j] = 0;
}

static loomResult_t F(bwd_tile)(const struct attn_blk* a, struct F(attn_ws) * w, int64_t b,
                                int64_t h, int64_t i0, int64_t m) {
  int64_t kn = attn_keys(a, i0, m), D = a->D, Dv = a->Dv;
  if (kn == 0) {
    memset(w->dq, 0, (size_t)(m * D) * sizeof(REAL));
    F(store_rows)(w->dq, &a->dq, b, h, i0, m, D);
    return loomSuccess;
  }
  const REAL *q = w->q + i0 * D, *dout = w->dout + i0 * Dv;
  loomResult_t r = F(gemm)(0, 1, m, kn, D, a->scale, q, D, w->k, D, 0, w->s, kn);
  for (int64_t i = 0; i < m && r == loomSuccess; i++)
    F(probs_row)(w->s + i * kn, kn, PAR_MIN(kn, attn_keys(a, i0 + i, 1)), w->lse[i0 + i]);
  if (r == loomSuccess) r = F(gemm)(1, 0, kn, Dv, m, 1.0, w->s, kn, dout, Dv, 1, w->dv, Dv);
  if (r == loomSuccess) r = F(gemm)(0, 1, m, kn, Dv, 1.0, dout, Dv, w->v, Dv, 0, w->dp, kn);
  if (r != loomSuccess) return r;
  for (int64_t i = 0; i < m; i++) /* dS = P * (dP - D_i), over S's storage */
    for (int64_t j = 0; j < kn; j++) w->s[i * kn + j] *= w->dp[i * kn + j] - w->dvec[i0 + i];
  r = F(gemm)(0, 0, m, D, kn, a->scale, w->s, kn, w->k, D, 0, w->dq, D);
  if (r == loomSuccess) r = F(gemm)(1, 0, kn, D, m, a->scale, w->s, kn, q, D, 1, w->dk, D);
  if (r == loomSuccess) F(store_rows)(w->dq, &a->dq, b, h, i0, m, D);
  return r;
}

/* The rows of query head h: q, out, dout, lse and D_i = <dout_i, out_i>. */
static void F(bwd_head)(const struct attn_blk* a, struct F(attn_ws) * w, int64_t b, int64_t h) {
  int64_t Dv = a->Dv;
  F(load_rows)(&a->q, a->dt, b, h, a->Lq, a->D, w->q);
  F(load_rows)(&a->o_in, a->dt, b, h, a->Lq, Dv, w->o);
  F(load_rows)(&a->dout, a->dt, b, h, a->Lq, Dv, w->dout);
  const REAL* lse = (const REAL*)a->lse.p;
  for (int64_t i = 0; i < a->Lq; i++) {
    w->lse[i] = lse[b * a->lse.s[0] + h * a->lse.s[1] + i * a->lse.s[2]];
    REAL d = 0;
    for (int64_t e = 0; e < Dv; e++) d += w->dout[i * Dv + e] * w->o[i * Dv + e];
    w->dvec[i] = d;
  }
}

static loomResult_t F(attn_bwd)(const struct attn_blk* a) {
  struct F(attn_ws) w;
  loomResult_t r = F(ws_make)(a, 1, &w);
  int64_t G = a->Hq / a->Hkv, Lk = a->Lk;
  for (int64_t b = 0; b < a->B && r == loomSuccess; b++)
    for (int64_t g = 0; g < a->Hkv && r == loomSuccess; g++) {
      F(load_rows)(&a->k, a->dt, b, g, Lk, a->D, w.k);
      F(load_rows)(&a->v, a->dt, b, g, Lk, a->Dv, w.v);
      memset(w.dk, 0, (size_t)(Lk * a->D) * sizeof(REAL));
      memset(w.dv, 0, (size_t)(Lk * a->Dv) * sizeof(REAL));
      for (int64_t h = g * G; h < (g + 1) * G && r == loomSuccess; h++) {
        F(bwd_head)(a, &w, b, h);
        for (int64_t i0 = 0; i0 < a->Lq && r == loomSuccess; i0 += ATTN_TILE)
          r = F(bwd_tile)(a, &w, b, h, i0, PAR_MIN(ATTN_TILE, a->Lq - i0));
      }
      F(store_rows)(w.dk, &a->dk, b, g, 0, Lk, a->D);
      F(store_rows)(w.dv, &a->dv, b, g, 0, Lk, a->Dv);
    }
  free(w.mem);
  return r;
}

#undef F
#undef ATTN_CAT
#undef ATTN_CAT2
