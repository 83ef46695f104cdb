/* train5d_layers.c - the layers of the train5d example (train5d.c says what it trains):
 * attention under CP and TP, the dense MLP, the MoE under EP, the embedding and the head with
 * the vocab-parallel loss, forward and backward; and small helpers. */
#include "train5d.h"

/* A deterministic value in [-scale, scale) for index i of stream s. */
float rnd(unsigned s, size_t i, float scale) {
  unsigned long long z = (unsigned long long)s * 0x9e3779b97f4a7c15ULL + i * 0xbf58476d1ce4e5b9ULL;
  z ^= z >> 31;
  z *= 0x94d049bb133111ebULL;
  z ^= z >> 29;
  return scale * ((float)(z >> 40) / (float)(1ULL << 24) * 2.0f - 1.0f);
}

float gelu(float v) {
  return 0.5f * v * (1.0f + erff(v / sqrtf(2.0f)));
}
float gelu_grad(float v) {
  return 0.5f * (1.0f + erff(v / sqrtf(2.0f))) +
         v * expf(-0.5f * v * v) / sqrtf(2.0f * (float)M_PI);
}

void* zalloc(size_t n, size_t size) {
  void* p = calloc(n + 1, size); /* + 1: a MoE rank may receive no rows */
  if (p == NULL) {
    fprintf(stderr, "train5d: out of memory\n");
    exit(1);
  }
  return p;
}

loomTensor tensor(void* data, loomDataType_t dtype, int ndim, int64_t a, int64_t b, int64_t c,
                  int64_t d) {
  int64_t shape[4] = {a, b, c, d};
  loomTensor t;
  CHECK(loomTensorMake(data, dtype, ndim, shape, &t));
  return t;
}
loomTensor f32(float* data, int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
  return tensor(data, loomFloat32, ndim, a, b, c, d);
}

/* Row-major C[m x n] = op(A) op(B) + beta C with the library's GEMM (contiguous matrices). */
void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B,
          float beta, float* C) {
  const loomGemm* g = loomGemmDefault();
  CHECK(g->fn(g->ctx, ta, tb, m, n, k, 1.0, A, ta ? m : k, B, tb ? k : n, beta, C, n, loomFloat32,
              NULL));
}

float pos_embed(int64_t pos, int h) {
  return rnd(9, (size_t)pos * HIDDEN + (size_t)h, 0.5f);
}

/* ---- Layers ------------------------------------------------------------------------------- */

void wgrad(struct mbacts* m, loomTensor x, loomTensor dy, loomTensor dw, const loomTensor* db) {
  struct wjob* j = &m->jobs[m->nj++];
  j->x = x, j->dy = dy, j->dw = dw, j->has_db = db != NULL;
  if (db != NULL) j->db = *db;
}

void keep(struct mbacts* m, void* p) {
  m->keep[m->nk++] = p;
}

/* The W pass of a microbatch: every deferred weight gradient, added in B's order. */
void wgrad_run(struct mbacts* m) {
  loomLinearOpts acc = LOOM_LINEAR_OPTS_INIT;
  acc.accumulate = 1;
  for (int i = 0; i < m->nj; i++) {
    struct wjob* j = &m->jobs[i];
    CHECK(loomLinearBackwardWeight(&j->x, &j->dy, &j->dw, j->has_db ? &j->db : NULL, &acc, NULL));
  }
  for (int i = 0; i < m->nk; i++) free(m->keep[i]);
}

loomLinearOpts lin_opts(int sp) {
  loomLinearOpts o = LOOM_LINEAR_OPTS_INIT;
  o.sequenceParallel = sp; /* with tp 1 the gathers and scatters are copies */
  o.seqDim = 1;
  return o;
}

loomAttnOpts attn_opts(void) {
  loomAttnOpts o = LOOM_ATTN_OPTS_INIT;
  o.causal = 1;
  o.layout = loomCpZigzag;
  o.algo = loomCpRing;
  return o;
}

loomTensor mat(const struct pspec* p, int grad) {
  return f32(grad ? p->g : p->p, p->nr == 1 ? 1 : 2, p->nr == 1 ? p->nc : p->nr, p->nc, 0, 0);
}

void add_into(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* x += attention(x) wo^T: q, k, v of the rank's heads from the all-gathered tokens, the ring
 * over cp, the output projection reduce-scattered back to the SP tokens. */
void attn_forward(const struct stage* s, int l, struct lacts* a, float* x) {
  struct pspec* const* p = s->lp[l];
  size_t sl = (size_t)s->sl, qd = (size_t)s->qd;
  a->xfull = zalloc(sl * HIDDEN, sizeof(float));
  float** qkv[3] = {&a->q, &a->k, &a->v};
  for (int i = 0; i < 3; i++) *qkv[i] = zalloc(sl * qd, sizeof(float));
  a->o = zalloc(sl * qd, sizeof(float));
  a->lse = zalloc(sl * (size_t)s->hr, sizeof(float));
  loomLinearOpts sp = lin_opts(1), local = lin_opts(0);
  loomTensor tx = f32(x, 3, 1, s->st, HIDDEN, 0), txf = f32(a->xfull, 3, 1, s->sl, HIDDEN, 0);
  for (int i = 0; i < 3; i++) {
    loomTensor w = mat(p[P_WQ + i], 0), y = f32(*qkv[i], 3, 1, s->sl, s->qd, 0);
    if (i == 0)
      CHECK(loomColumnLinearForward(&tx, &w, NULL, &y, &txf, &sp, s->pl->tp, NULL));
    else /* the tokens are gathered already: a local GEMM */
      CHECK(loomColumnLinearForward(&txf, &w, NULL, &y, NULL, &local, s->pl->tp, NULL));
  }
  loomTensor q = f32(a->q, 4, 1, s->sl, s->hr, HDIM), k = f32(a->k, 4, 1, s->sl, s->hr, HDIM);
  loomTensor v = f32(a->v, 4, 1, s->sl, s->hr, HDIM), o = f32(a->o, 4, 1, s->sl, s->hr, HDIM);
  loomTensor lse = f32(a->lse, 3, 1, s->hr, s->sl, 0);
  loomAttnOpts ao = attn_opts();
  CHECK(loomCpAttentionForward(&q, &k, &v, &o, &lse, &ao, s->pl->cp, NULL));
  float* y = zalloc((size_t)s->st * HIDDEN, sizeof(float));
  loomTensor to = f32(a->o, 3, 1, s->sl, s->qd, 0), wo = mat(p[P_WO], 0);
  loomTensor ty = f32(y, 3, 1, s->st, HIDDEN, 0);
  CHECK(loomRowLinearForward(&to, &wo, NULL, &ty, &sp, s->pl->tp, NULL));
  add_into(x, y, (size_t)s->st * HIDDEN);
  free(y);
}

/* dx (dL/d output, SP tokens) becomes dL/d input; weight gradients added into the stage's. */
void attn_backward(const struct stage* s, int l, struct mbacts* m, float* dx) {
  struct pspec* const* p = s->lp[l];
  struct lacts* a = &m->l[l];
  size_t sl = (size_t)s->sl, qd = (size_t)s->qd, nt = (size_t)s->st * HIDDEN;
  float* dhf = zalloc(sl * HIDDEN, sizeof(float));
  float* dout = zalloc(sl * qd, sizeof(float));
  float* dqkv[3];
  for (int i = 0; i < 3; i++) dqkv[i] = zalloc(sl * qd, sizeof(float));
  float* tmp = zalloc(nt, sizeof(float));
  loomLinearOpts sp = lin_opts(1);
  loomTensor tdh = f32(dx, 3, 1, s->st, HIDDEN, 0), tdhf = f32(dhf, 3, 1, s->sl, HIDDEN, 0);
  loomTensor tdo = f32(dout, 3, 1, s->sl, s->qd, 0), to = f32(a->o, 3, 1, s->sl, s->qd, 0);
  loomTensor wo = mat(p[P_WO], 0), gwo = mat(p[P_WO], 1);
  CHECK(loomRowLinearBackwardInput(&tdh, &wo, &tdo, &tdhf, &sp, s->pl->tp, NULL));
  wgrad(m, to, tdhf, gwo, NULL);
  loomTensor q = f32(a->q, 4, 1, s->sl, s->hr, HDIM), k = f32(a->k, 4, 1, s->sl, s->hr, HDIM);
  loomTensor v = f32(a->v, 4, 1, s->sl, s->hr, HDIM), o = f32(a->o, 4, 1, s->sl, s->hr, HDIM);
  loomTensor lse = f32(a->lse, 3, 1, s->hr, s->sl, 0), d4 = f32(dout, 4, 1, s->sl, s->hr, HDIM);
  loomTensor dq = f32(dqkv[0], 4, 1, s->sl, s->hr, HDIM),
             dk = f32(dqkv[1], 4, 1, s->sl, s->hr, HDIM);
  loomTensor dv = f32(dqkv[2], 4, 1, s->sl, s->hr, HDIM);
  loomAttnOpts ao = attn_opts();
  CHECK(loomCpAttentionBackward(&q, &k, &v, &o, &d4, &lse, &dq, &dk, &dv, &ao, s->pl->cp, NULL));
  loomTensor txf = f32(a->xfull, 3, 1, s->sl, HIDDEN, 0), ttmp = f32(tmp, 3, 1, s->st, HIDDEN, 0);
  for (int i = 0; i < 3; i++) {
    loomTensor d = f32(dqkv[i], 3, 1, s->sl, s->qd, 0);
    loomTensor w = mat(p[P_WQ + i], 0), gw = mat(p[P_WQ + i], 1);
    CHECK(loomColumnLinearBackwardInput(&d, &w, &ttmp, &sp, s->pl->tp, NULL));
    add_into(dx, tmp, nt);
    wgrad(m, txf, d, gw, NULL);
    keep(m, dqkv[i]);
  }
  keep(m, dhf), keep(m, a->xfull), keep(m, a->o);
  free(dout), free(tmp), free(a->q), free(a->k), free(a->v), free(a->lse);
}

/* x += gelu(x w1^T + b1) w2^T + b2, features split over tp (column, then row, under SP). */
void dense_forward(const struct stage* s, int l, struct lacts* a, float* x) {
  struct pspec* const* p = s->lp[l];
  size_t sl = (size_t)s->sl, fr = (size_t)s->fr;
  a->hfull = zalloc(sl * HIDDEN, sizeof(float));
  a->a1 = zalloc(sl * fr, sizeof(float));
  a->g = zalloc(sl * fr, sizeof(float));
  float* y = zalloc((size_t)s->st * HIDDEN, sizeof(float));
  loomLinearOpts sp = lin_opts(1);
  loomTensor tx = f32(x, 3, 1, s->st, HIDDEN, 0), thf = f32(a->hfull, 3, 1, s->sl, HIDDEN, 0);
  loomTensor ta = f32(a->a1, 3, 1, s->sl, s->fr, 0), tg = f32(a->g, 3, 1, s->sl, s->fr, 0);
  loomTensor w1 = mat(p[P_W1], 0), b1 = mat(p[P_B1], 0), w2 = mat(p[P_W2], 0), b2 = mat(p[P_B2], 0);
  loomTensor ty = f32(y, 3, 1, s->st, HIDDEN, 0);
  CHECK(loomColumnLinearForward(&tx, &w1, &b1, &ta, &thf, &sp, s->pl->tp, NULL));
  for (size_t i = 0; i < sl * fr; i++) a->g[i] = gelu(a->a1[i]);
  CHECK(loomRowLinearForward(&tg, &w2, &b2, &ty, &sp, s->pl->tp, NULL));
  add_into(x, y, (size_t)s->st * HIDDEN);
  free(y);
}

void dense_backward(const struct stage* s, int l, struct mbacts* m, float* dx) {
  struct pspec* const* p = s->lp[l];
  struct lacts* a = &m->l[l];
  size_t sl = (size_t)s->sl, fr = (size_t)s->fr, nt = (size_t)s->st * HIDDEN;
  float *dyf = zalloc(sl * HIDDEN, sizeof(float)), *dg = zalloc(sl * fr, sizeof(float));
  float* tmp = zalloc(nt, sizeof(float));
  loomLinearOpts sp = lin_opts(1);
  loomTensor tdx = f32(dx, 3, 1, s->st, HIDDEN, 0), tdyf = f32(dyf, 3, 1, s->sl, HIDDEN, 0);
  loomTensor tdg = f32(dg, 3, 1, s->sl, s->fr, 0), tg = f32(a->g, 3, 1, s->sl, s->fr, 0);
  loomTensor thf = f32(a->hfull, 3, 1, s->sl, HIDDEN, 0), ttmp = f32(tmp, 3, 1, s->st, HIDDEN, 0);
  loomTensor w1 = mat(p[P_W1], 0), w2 = mat(p[P_W2], 0);
  loomTensor gw1 = mat(p[P_W1], 1), gb1 = mat(p[P_B1], 1), gw2 = mat(p[P_W2], 1),
             gb2 = mat(p[P_B2], 1);
  CHECK(loomRowLinearBackwardInput(&tdx, &w2, &tdg, &tdyf, &sp, s->pl->tp, NULL));
  wgrad(m, tg, tdyf, gw2, &gb2);
  for (size_t i = 0; i < sl * fr; i++) dg[i] *= gelu_grad(a->a1[i]);
  CHECK(loomColumnLinearBackwardInput(&tdg, &w1, &ttmp, &sp, s->pl->tp, NULL));
  add_into(dx, tmp, nt);
  wgrad(m, thf, tdg, gw1, &gb1);
  keep(m, dyf), keep(m, dg), keep(m, a->hfull), keep(m, a->g);
  free(tmp), free(a->a1);
}

/* The router on the SP tokens: the two largest logits (the smaller index on a tie), weighted
 * by the softmax over those two. */
void router_forward(const float* wr, struct lacts* a, int64_t t) {
  gemm(0, 1, t, EXPERTS, HIDDEN, a->h1, wr, 0, a->logits);
  for (int64_t i = 0; i < t; i++) {
    const float* l = a->logits + i * EXPERTS;
    int e0 = 0, e1 = -1;
    for (int e = 1; e < EXPERTS; e++)
      if (l[e] > l[e0]) e0 = e;
    for (int e = 0; e < EXPERTS; e++)
      if (e != e0 && (e1 < 0 || l[e] > l[e1])) e1 = e;
    a->idx[i * TOPK] = e0;
    a->idx[i * TOPK + 1] = e1;
    a->w[i * TOPK] = 1.0f / (1.0f + expf(l[e1] - l[e0]));
    a->w[i * TOPK + 1] = 1.0f / (1.0f + expf(l[e0] - l[e1]));
  }
}

/* Each local expert on its received rows: y = gelu(rx w1^T + b1) w2^T + b2. */
void experts_forward(const float* ex, int ne, struct lacts* a) {
  for (int e = 0; e < ne; e++) {
    int64_t r0 = a->off[e], n = a->off[e + 1] - r0;
    if (n == 0) continue;
    const float* ep = ex + (size_t)e * EXP_ELEMS;
    float *hh = a->hh + r0 * FFN, *act = a->act + r0 * FFN, *y = a->y + r0 * HIDDEN;
    for (int64_t i = 0; i < n; i++) memcpy(hh + i * FFN, ep + EXP_B1, FFN * sizeof(float));
    gemm(0, 1, n, FFN, HIDDEN, a->rx + r0 * HIDDEN, ep, 1, hh);
    for (int64_t i = 0; i < n * FFN; i++) act[i] = gelu(hh[i]);
    for (int64_t i = 0; i < n; i++) memcpy(y + i * HIDDEN, ep + EXP_B2, HIDDEN * sizeof(float));
    gemm(0, 1, n, HIDDEN, FFN, act, ep + EXP_W2, 1, y);
  }
}

/* x += MoE(x) on the SP tokens: route, dispatch over the EP group, experts, combine. */
void moe_forward(const struct stage* s, int l, struct lacts* a, float* x) {
  struct pspec* const* p = s->lp[l];
  int64_t t = s->st;
  a->h1 = zalloc((size_t)t * HIDDEN, sizeof(float));
  memcpy(a->h1, x, (size_t)t * HIDDEN * sizeof(float));
  a->logits = zalloc((size_t)t * EXPERTS, sizeof(float));
  a->w = zalloc((size_t)t * TOPK, sizeof(float));
  a->idx = zalloc((size_t)t * TOPK, sizeof(int32_t));
  router_forward(p[P_WR]->p, a, t);
  loomTensor idx = tensor(a->idx, loomInt32, 2, t, TOPK, 0, 0), w = f32(a->w, 2, t, TOPK, 0, 0);
  loomMoeOpts opts = LOOM_MOE_OPTS_INIT;
  opts.numExperts = EXPERTS;
  CHECK(loomMoeLayoutCreate(&idx, &w, &a->moe, &opts, s->pl->moe, NULL));
  loomMoeInfo info;
  CHECK(loomMoeGetInfo(a->moe, &info));
  a->r = info.numRecvRows;
  a->off = info.expertOffsets;
  size_t r = (size_t)a->r;
  a->rx = zalloc(r * HIDDEN, sizeof(float));
  a->hh = zalloc(r * FFN, sizeof(float));
  a->act = zalloc(r * FFN, sizeof(float));
  a->y = zalloc(r * HIDDEN, sizeof(float));
  loomTensor h1 = f32(a->h1, 2, t, HIDDEN, 0, 0), rx = f32(a->rx, 2, a->r, HIDDEN, 0, 0);
  CHECK(loomMoeDispatch(a->moe, &h1, NULL, &rx, NULL, NULL));
  experts_forward(p[P_EXP]->p, s->ne, a);
  loomTensor y = f32(a->y, 2, a->r, HIDDEN, 0, 0), z = f32(x, 2, t, HIDDEN, 0, 0);
  CHECK(loomMoeCombine(a->moe, &y, &w, &z, NULL));
  add_into(x, a->h1, (size_t)t * HIDDEN);
}

/* The experts' backward: weight gradients into gex, drx = dL/d(received rows). */
void experts_backward(const float* ex, float* gex, int ne, const struct lacts* a, const float* dy,
                      float* drx) {
  float* dact = zalloc((size_t)a->r * FFN, sizeof(float));
  for (int e = 0; e < ne; e++) {
    int64_t r0 = a->off[e], n = a->off[e + 1] - r0;
    if (n == 0) continue;
    const float* ep = ex + (size_t)e * EXP_ELEMS;
    float* eg = gex + (size_t)e * EXP_ELEMS;
    const float *dye = dy + r0 * HIDDEN, *hh = a->hh + r0 * FFN;
    float* da = dact + r0 * FFN;
    gemm(1, 0, HIDDEN, FFN, n, dye, a->act + r0 * FFN, 1, eg + EXP_W2);
    for (int64_t i = 0; i < n; i++)
      for (int h = 0; h < HIDDEN; h++) eg[EXP_B2 + h] += dye[i * HIDDEN + h];
    gemm(0, 0, n, FFN, HIDDEN, dye, ep + EXP_W2, 0, da);
    for (int64_t i = 0; i < n * FFN; i++) da[i] *= gelu_grad(hh[i]);
    gemm(1, 0, FFN, HIDDEN, n, da, a->rx + r0 * HIDDEN, 1, eg);
    for (int64_t i = 0; i < n; i++)
      for (int f = 0; f < FFN; f++) eg[EXP_B1 + f] += da[i * FFN + f];
    gemm(0, 0, n, HIDDEN, FFN, da, ep, 0, drx + r0 * HIDDEN);
  }
  free(dact);
}

/* Through the two-way softmax to the chosen logits, then to wr (gwr) and h1 (added to dh1). */
void router_backward(const float* wr, float* gwr, const struct lacts* a, int64_t t, const float* dw,
                     float* dh1) {
  float* dl = zalloc((size_t)t * EXPERTS, sizeof(float));
  for (int64_t i = 0; i < t; i++) {
    const float* w = a->w + i * TOPK;
    float s = w[0] * dw[i * TOPK] + w[1] * dw[i * TOPK + 1];
    for (int k = 0; k < TOPK; k++)
      dl[i * EXPERTS + a->idx[i * TOPK + k]] = w[k] * (dw[i * TOPK + k] - s);
  }
  gemm(1, 0, EXPERTS, HIDDEN, t, dl, a->h1, 1, gwr);
  gemm(0, 0, t, HIDDEN, EXPERTS, dl, wr, 1, dh1);
  free(dl);
}

void moe_backward(const struct stage* s, int l, struct mbacts* m, float* dx) {
  struct pspec* const* p = s->lp[l];
  struct lacts* a = &m->l[l];
  int64_t t = s->st;
  size_t r = (size_t)a->r, nt = (size_t)t * HIDDEN;
  float *dy = zalloc(r * HIDDEN, sizeof(float)), *drx = zalloc(r * HIDDEN, sizeof(float));
  float *dw = zalloc((size_t)t * TOPK, sizeof(float)), *dmoe = zalloc(nt, sizeof(float));
  loomTensor tdz = f32(dx, 2, t, HIDDEN, 0, 0), ty = f32(a->y, 2, a->r, HIDDEN, 0, 0);
  loomTensor tw = f32(a->w, 2, t, TOPK, 0, 0), tdy = f32(dy, 2, a->r, HIDDEN, 0, 0);
  loomTensor tdw = f32(dw, 2, t, TOPK, 0, 0);
  CHECK(loomMoeCombineBackward(a->moe, &tdz, &ty, &tw, &tdy, &tdw, NULL));
  experts_backward(p[P_EXP]->p, p[P_EXP]->g, s->ne, a, dy, drx);
  loomTensor tdrx = f32(drx, 2, a->r, HIDDEN, 0, 0), tdm = f32(dmoe, 2, t, HIDDEN, 0, 0);
  CHECK(loomMoeDispatchBackward(a->moe, &tdrx, NULL, &tdm, NULL, NULL));
  add_into(dx, dmoe, nt); /* the residual's gradient is dx itself */
  router_backward(p[P_WR]->p, p[P_WR]->g, a, t, dw, dx);
  free(dy), free(drx), free(dw), free(dmoe);
  CHECK(loomMoeHandleDestroy(a->moe));
  free(a->h1), free(a->logits), free(a->w), free(a->idx);
  free(a->rx), free(a->hh), free(a->act), free(a->y);
}

/* ---- Embedding, head, loss ---------------------------------------------------------------- */

void embed_forward(const struct stage* s, int i, float* x) {
  for (int t = 0; t < s->st; t++)
    for (int h = 0; h < HIDDEN; h++)
      x[t * HIDDEN + h] = s->emb->p[s->tok[i][t] * HIDDEN + h] + pos_embed(s->pos[t], h);
}

void embed_backward(const struct stage* s, int i, const float* dx) {
  for (int t = 0; t < s->st; t++)
    for (int h = 0; h < HIDDEN; h++) s->emb->g[s->tok[i][t] * HIDDEN + h] += dx[t * HIDDEN + h];
}

/* Logits of the rank's vocabulary slice for all cp-local tokens (column-parallel, SP), then
 * the vocab-parallel cross entropy; tp rank 0 counts the loss (every tp rank has it). */
void head_forward(struct stage* s, int i, struct mbacts* a, float* x) {
  size_t sl = (size_t)s->sl;
  a->hx = zalloc(sl * HIDDEN, sizeof(float));
  a->logits = zalloc(sl * (size_t)s->vr, sizeof(float));
  a->lse = zalloc(sl, sizeof(float));
  float* loss = zalloc(sl, sizeof(float));
  loomLinearOpts sp = lin_opts(1);
  loomTensor tx = f32(x, 3, 1, s->st, HIDDEN, 0), thx = f32(a->hx, 3, 1, s->sl, HIDDEN, 0);
  loomTensor tl = f32(a->logits, 3, 1, s->sl, s->vr, 0), w = mat(s->wout, 0);
  CHECK(loomColumnLinearForward(&tx, &w, NULL, &tl, &thx, &sp, s->pl->tp, NULL));
  loomTensor tgt = tensor((void*)s->tgt[i], loomInt32, 2, 1, s->sl, 0, 0);
  loomTensor tloss = f32(loss, 2, 1, s->sl, 0, 0), tlse = f32(a->lse, 2, 1, s->sl, 0, 0);
  CHECK(loomVocabParallelCrossEntropyForward(&tl, &tgt, &tloss, &tlse, NULL, s->pl->tp, NULL));
  if (s->tr == 0)
    for (size_t j = 0; j < sl; j++) s->loss += loss[j];
  free(loss);
}

/* The loss is the mean over every token of the global batch: dloss = 1 / norm. */
void head_backward(const struct stage* s, int i, struct mbacts* a, float* dx) {
  size_t sl = (size_t)s->sl;
  float *dl = zalloc(sl, sizeof(float)), *dlog = zalloc(sl * (size_t)s->vr, sizeof(float));
  for (size_t j = 0; j < sl; j++) dl[j] = (float)(1.0 / s->norm);
  loomLinearOpts sp = lin_opts(1);
  loomTensor tl = f32(a->logits, 3, 1, s->sl, s->vr, 0), tdl = f32(dl, 2, 1, s->sl, 0, 0);
  loomTensor tgt = tensor((void*)s->tgt[i], loomInt32, 2, 1, s->sl, 0, 0);
  loomTensor tlse = f32(a->lse, 2, 1, s->sl, 0, 0), tdlog = f32(dlog, 3, 1, s->sl, s->vr, 0);
  CHECK(
      loomVocabParallelCrossEntropyBackward(&tl, &tgt, &tlse, &tdl, &tdlog, NULL, s->pl->tp, NULL));
  loomTensor w = mat(s->wout, 0), gw = mat(s->wout, 1), tdx = f32(dx, 3, 1, s->st, HIDDEN, 0);
  loomTensor thx = f32(a->hx, 3, 1, s->sl, HIDDEN, 0);
  CHECK(loomColumnLinearBackwardInput(&tdlog, &w, &tdx, &sp, s->pl->tp, NULL));
  wgrad(a, thx, tdlog, gw, NULL);
  keep(a, dlog), keep(a, a->hx);
  free(dl), free(a->logits), free(a->lse);
}
