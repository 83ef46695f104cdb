/* block_train - trains a small transformer block (causal attention, then a top-2 MoE layer,
 * each on a residual stream) on host memory with data parallelism x context parallelism, the
 * MoE layer expert parallel over the CP ranks, and prints its loss curve beside the same
 * training on one rank.
 *
 *   loomrun -n 4 build/examples/block_train [-s STEPS]
 *
 * The mesh is dp x cp (cp 2 when the world is even, else 1). Each DP rank trains on its own
 * batch [BATCH, SEQ, HIDDEN]; within a CP group the sequence is split zig-zag (loomCpShard,
 * loomCpPositions) and the attention runs the ring (loomCpAttentionForward/Backward). The CP
 * group doubles as the EP group: each of its ranks owns EXPERTS / cp experts, and every rank's
 * tokens go to their two experts' ranks and back (loomMoeDispatch, loomMoeCombine). Dense
 * parameters (attention, router) are replicated, their gradients summed over all ranks;
 * expert gradients are summed over DP only. The loss is the mean squared error against a
 * fixed random teacher. Rank 0 also trains the unsharded model (all experts), alone, on all
 * DP ranks' batches, with the same calls on a communicator of one rank; the two curves agree
 * to float32 rounding. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"
#include "loom_parallel.h"

enum { SEQ = 32, BATCH = 2, HIDDEN = 32, HEADS = 4, KV_HEADS = 2, HDIM = HIDDEN / HEADS };
enum { FFN = 32, EXPERTS = 8, TOPK = 2, QDIM = HEADS * HDIM, KVDIM = KV_HEADS * HDIM };
/* The flat parameter vector: wq [QDIM, H], wk, wv [KVDIM, H], wo [H, QDIM], wr [E, H], then
 * per local expert w1 [FFN, H], b1 [FFN], w2 [H, FFN], b2 [H]. */
enum { OFF_WK = QDIM * HIDDEN, OFF_WV = OFF_WK + KVDIM * HIDDEN, OFF_WO = OFF_WV + KVDIM * HIDDEN };
enum { OFF_WR = OFF_WO + HIDDEN * QDIM, DENSE = OFF_WR + EXPERTS * HIDDEN };
enum { EXP_B1 = FFN * HIDDEN, EXP_W2 = EXP_B1 + FFN, EXP_B2 = EXP_W2 + HIDDEN * FFN };
enum { EXP_ELEMS = EXP_B2 + HIDDEN };
#define LR 1e-2

#define CHECK(call)                                                                \
  do {                                                                             \
    loomResult_t r_ = (call);                                                      \
    if (r_ != loomSuccess) {                                                       \
      fprintf(stderr, "block_train: %s: %s (%s)\n", #call, loomGetErrorString(r_), \
              loomGetLastError(NULL));                                             \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

/* A deterministic value in [-scale, scale) for index i of stream s. */
static float rnd(unsigned s, size_t i, float scale) {
  unsigned long long z = (unsigned long long)s * 0x9e3779b97f4a7c15ULL + i * 0xbf58476d1ce4e5b9ULL;
  z ^= z >> 31;
  z *= 0x94d049bb133111ebULL;
  z ^= z >> 29;
  return scale * ((float)(z >> 40) / (float)(1ULL << 24) * 2.0f - 1.0f);
}

static float gelu(float v) {
  return 0.5f * v * (1.0f + erff(v / sqrtf(2.0f)));
}
static float gelu_grad(float v) {
  return 0.5f * (1.0f + erff(v / sqrtf(2.0f))) +
         v * expf(-0.5f * v * v) / sqrtf(2.0f * (float)M_PI);
}

static void* zalloc(size_t n, size_t size) {
  void* p = calloc(n + 1, size); /* + 1: a MoE rank may receive no rows */
  if (p == NULL) {
    fprintf(stderr, "block_train: out of memory\n");
    exit(1);
  }
  return p;
}

static loomTensor tensor(void* data, loomDataType_t dtype, int ndim, int64_t a, int64_t b,
                         int64_t c, int64_t d) {
  int64_t shape[4] = {a, b, c, d};
  loomTensor t;
  CHECK(loomTensorMake(data, dtype, ndim, shape, &t));
  return t;
}

/* Row-major C[m x n] = op(A) op(B) + beta C with the library's GEMM; tb 1: B is used as B^T,
 * ta 1: A as A^T. All our matrices are contiguous, so the leading dims follow. */
static void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B,
                 float beta, float* C) {
  const loomGemm* g = loomGemmDefault();
  CHECK(g->fn(g->ctx, ta, tb, m, n, k, 1.0, A, ta ? m : k, B, tb ? k : n, beta, C, n, loomFloat32,
              NULL));
}

/* One model replica: the dense parameters and experts [e0, e0 + ne) of the full model. */
struct model {
  int e0, ne;
  size_t n;
  float *p, *g, *m, *v; /* parameters, gradients, Adam's moments */
};

static void model_init(struct model* md, int e0, int ne) {
  md->e0 = e0;
  md->ne = ne;
  md->n = DENSE + (size_t)ne * EXP_ELEMS;
  md->p = zalloc(md->n, sizeof(float));
  md->g = zalloc(md->n, sizeof(float));
  md->m = zalloc(md->n, sizeof(float));
  md->v = zalloc(md->n, sizeof(float));
  /* Element i of the full model's vector (all experts) is rnd(1, i): every replica and every
   * expert owner start from the same numbers. */
  for (size_t i = 0; i < DENSE; i++) md->p[i] = rnd(1, i, 0.2f);
  size_t first = DENSE + (size_t)e0 * EXP_ELEMS;
  for (size_t i = DENSE; i < md->n; i++) md->p[i] = rnd(1, first + (i - DENSE), 0.2f);
}

static float* expert_params(const struct model* md, float* base, int local) {
  return base + DENSE + (size_t)local * EXP_ELEMS;
}

/* Adam over the whole vector; gradients already summed over their replicas. */
static void model_step(struct model* md, int step) {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  float c1 = 1.0f - powf(b1, (float)step), c2 = 1.0f - powf(b2, (float)step);
  for (size_t i = 0; i < md->n; i++) {
    md->m[i] = b1 * md->m[i] + (1 - b1) * md->g[i];
    md->v[i] = b2 * md->v[i] + (1 - b2) * md->g[i] * md->g[i];
    md->p[i] -= (float)LR * (md->m[i] / c1) / (sqrtf(md->v[i] / c2) + eps);
  }
}

/* One step's activations; t = nb * sl local tokens, rows in (batch, local position) order. */
struct acts {
  int nb, sl;
  int64_t t, r; /* tokens; MoE rows received */
  float *xin, *q, *k, *v, *o, *lse, *h1, *logits, *w, *z;
  int32_t* idx;
  loomMoeHandle_t moe;
  const int64_t* off; /* [ne + 1] each local expert's first received row */
  float *rx, *hh, *act, *y;
};

static void acts_alloc(struct acts* a, int nb, int sl) {
  memset(a, 0, sizeof *a);
  a->nb = nb;
  a->sl = sl;
  a->t = (int64_t)nb * sl;
  float** bufs[] = {&a->xin, &a->q, &a->k, &a->v, &a->o, &a->lse, &a->h1, &a->logits, &a->w, &a->z};
  const int widths[] = {HIDDEN, QDIM, KVDIM, KVDIM, QDIM, HEADS, HIDDEN, EXPERTS, TOPK, HIDDEN};
  size_t t = (size_t)a->t;
  for (int i = 0; i < 10; i++) *bufs[i] = zalloc(t * (size_t)widths[i], sizeof(float));
  a->idx = zalloc(t * TOPK, sizeof(int32_t));
}

static void acts_free(struct acts* a) {
  CHECK(loomMoeHandleDestroy(a->moe));
  free(a->xin), free(a->q), free(a->k), free(a->v), free(a->o), free(a->lse), free(a->h1);
  free(a->logits), free(a->w), free(a->z), free(a->idx);
  free(a->rx), free(a->hh), free(a->act), free(a->y);
}

static loomAttnOpts attn_opts(void) {
  loomAttnOpts o = LOOM_ATTN_OPTS_INIT;
  o.causal = 1;
  o.layout = loomCpZigzag;
  o.algo = loomCpRing;
  return o;
}

/* A [nb, sl, h, HDIM] view of a buffer of the step's tokens (the attention's layout). */
static loomTensor heads(const struct acts* a, float* data, int h) {
  return tensor(data, loomFloat32, 4, a->nb, a->sl, h, HDIM);
}

/* h1 = xin + attention(xin) wo^T, the attention causal over the whole sequence of the CP
 * group, each rank holding its zig-zag share. */
static void attn_forward(const struct model* md, struct acts* a, loomComm_t cp) {
  int64_t t = a->t;
  gemm(0, 1, t, QDIM, HIDDEN, a->xin, md->p, 0, a->q);
  gemm(0, 1, t, KVDIM, HIDDEN, a->xin, md->p + OFF_WK, 0, a->k);
  gemm(0, 1, t, KVDIM, HIDDEN, a->xin, md->p + OFF_WV, 0, a->v);
  loomTensor q = heads(a, a->q, HEADS), k = heads(a, a->k, KV_HEADS), v = heads(a, a->v, KV_HEADS);
  loomTensor o = heads(a, a->o, HEADS),
             lse = tensor(a->lse, loomFloat32, 3, a->nb, HEADS, a->sl, 0);
  loomAttnOpts opts = attn_opts();
  CHECK(loomCpAttentionForward(&q, &k, &v, &o, &lse, &opts, cp, NULL));
  memcpy(a->h1, a->xin, (size_t)t * HIDDEN * sizeof(float));
  gemm(0, 1, t, HIDDEN, QDIM, a->o, md->p + OFF_WO, 1, a->h1);
}

/* The router: the two largest logits (the smaller expert index on a tie), weighted by the
 * softmax over those two. */
static void router_forward(const struct model* md, struct acts* a) {
  gemm(0, 1, a->t, EXPERTS, HIDDEN, a->h1, md->p + OFF_WR, 0, a->logits);
  for (int64_t i = 0; i < a->t; i++) {
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
static void experts_forward(const struct model* md, struct acts* a) {
  for (int e = 0; e < md->ne; e++) {
    int64_t r0 = a->off[e], n = a->off[e + 1] - r0;
    if (n == 0) continue;
    const float* ep = expert_params(md, md->p, e);
    float *hh = a->hh + r0 * FFN, *act = a->act + r0 * FFN, *y = a->y + r0 * HIDDEN;
    for (int64_t i = 0; i < n; i++) memcpy(hh + i * FFN, ep + EXP_B1, FFN * sizeof(float));
    gemm(0, 1, n, FFN, HIDDEN, a->rx + r0 * HIDDEN, ep, 1, hh);
    for (int64_t i = 0; i < n * FFN; i++) act[i] = gelu(hh[i]);
    for (int64_t i = 0; i < n; i++) memcpy(y + i * HIDDEN, ep + EXP_B2, HIDDEN * sizeof(float));
    gemm(0, 1, n, HIDDEN, FFN, act, ep + EXP_W2, 1, y);
  }
}

/* z = h1 + MoE(h1): route, send each token to its two experts' ranks, run them, bring the
 * results back weighted. Dropless, so routing does not depend on how tokens are split. */
static void moe_forward(const struct model* md, struct acts* a, loomComm_t ep) {
  router_forward(md, a);
  loomTensor idx = tensor(a->idx, loomInt32, 2, a->t, TOPK, 0, 0);
  loomTensor w = tensor(a->w, loomFloat32, 2, a->t, TOPK, 0, 0);
  loomMoeOpts opts = LOOM_MOE_OPTS_INIT;
  opts.numExperts = EXPERTS;
  CHECK(loomMoeLayoutCreate(&idx, &w, &a->moe, &opts, ep, NULL));
  loomMoeInfo info;
  CHECK(loomMoeGetInfo(a->moe, &info));
  a->r = info.numRecvRows;
  a->off = info.expertOffsets;
  size_t r = (size_t)a->r;
  a->rx = zalloc(r * HIDDEN, sizeof(float));
  a->hh = zalloc(r * FFN, sizeof(float));
  a->act = zalloc(r * FFN, sizeof(float));
  a->y = zalloc(r * HIDDEN, sizeof(float));
  loomTensor h1 = tensor(a->h1, loomFloat32, 2, a->t, HIDDEN, 0, 0);
  loomTensor rx = tensor(a->rx, loomFloat32, 2, a->r, HIDDEN, 0, 0);
  CHECK(loomMoeDispatch(a->moe, &h1, NULL, &rx, NULL, NULL));
  experts_forward(md, a);
  loomTensor y = tensor(a->y, loomFloat32, 2, a->r, HIDDEN, 0, 0);
  loomTensor z = tensor(a->z, loomFloat32, 2, a->t, HIDDEN, 0, 0);
  CHECK(loomMoeCombine(a->moe, &y, &w, &z, NULL));
  for (int64_t i = 0; i < a->t * HIDDEN; i++) a->z[i] += a->h1[i];
}

/* The experts' backward: weight gradients into md->g, drx = dL/d(received rows). */
static void experts_backward(struct model* md, const struct acts* a, const float* dy, float* drx) {
  float* dact = zalloc((size_t)a->r * FFN, sizeof(float));
  for (int e = 0; e < md->ne; e++) {
    int64_t r0 = a->off[e], n = a->off[e + 1] - r0;
    if (n == 0) continue;
    const float* ep = expert_params(md, md->p, e);
    float* eg = expert_params(md, md->g, e);
    const float *dye = dy + r0 * HIDDEN, *hh = a->hh + r0 * FFN;
    float* da = dact + r0 * FFN;
    gemm(1, 0, HIDDEN, FFN, n, dye, a->act + r0 * FFN, 1, eg + EXP_W2);
    for (int64_t i = 0; i < n; i++)
      for (int h = 0; h < HIDDEN; h++) eg[EXP_B2 + h] += dye[i * HIDDEN + h];
    gemm(0, 0, n, FFN, HIDDEN, dye, ep + EXP_W2, 0, da);
    for (int64_t i = 0; i < n * FFN; i++) da[i] *= gelu_grad(hh[i]); /* da: dL/dhh */
    gemm(1, 0, FFN, HIDDEN, n, da, a->rx + r0 * HIDDEN, 1, eg);
    for (int64_t i = 0; i < n; i++)
      for (int f = 0; f < FFN; f++) eg[EXP_B1 + f] += da[i * FFN + f];
    gemm(0, 0, n, HIDDEN, FFN, da, ep, 0, drx + r0 * HIDDEN);
  }
  free(dact);
}

/* The router's backward from dL/d(top-2 weights): through the two-way softmax to the two
 * chosen logits, then to wr (into md->g) and to h1 (added into dh1). */
static void router_backward(struct model* md, const struct acts* a, const float* dw, float* dh1) {
  float* dl = zalloc((size_t)a->t * EXPERTS, sizeof(float));
  for (int64_t i = 0; i < a->t; i++) {
    const float* w = a->w + i * TOPK;
    float s = w[0] * dw[i * TOPK] + w[1] * dw[i * TOPK + 1];
    for (int k = 0; k < TOPK; k++)
      dl[i * EXPERTS + a->idx[i * TOPK + k]] = w[k] * (dw[i * TOPK + k] - s);
  }
  gemm(1, 0, EXPERTS, HIDDEN, a->t, dl, a->h1, 1, md->g + OFF_WR);
  gemm(0, 0, a->t, HIDDEN, EXPERTS, dl, md->p + OFF_WR, 1, dh1);
  free(dl);
}

/* From dz = dL/dz to dh1 = dL/dh1: the residual, the experts through the combine and the
 * dispatch, and the router through the combine weights. */
static void moe_backward(struct model* md, const struct acts* a, const float* dz, float* dh1) {
  size_t r = (size_t)a->r, t = (size_t)a->t;
  float* dy = zalloc(r * HIDDEN, sizeof(float));
  float* drx = zalloc(r * HIDDEN, sizeof(float));
  float* dw = zalloc(t * TOPK, sizeof(float));
  float* dmoe = zalloc(t * HIDDEN, sizeof(float));
  loomTensor tdz = tensor((float*)dz, loomFloat32, 2, a->t, HIDDEN, 0, 0);
  loomTensor ty = tensor(a->y, loomFloat32, 2, a->r, HIDDEN, 0, 0);
  loomTensor tw = tensor(a->w, loomFloat32, 2, a->t, TOPK, 0, 0);
  loomTensor tdy = tensor(dy, loomFloat32, 2, a->r, HIDDEN, 0, 0);
  loomTensor tdw = tensor(dw, loomFloat32, 2, a->t, TOPK, 0, 0);
  CHECK(loomMoeCombineBackward(a->moe, &tdz, &ty, &tw, &tdy, &tdw, NULL));
  experts_backward(md, a, dy, drx);
  loomTensor tdrx = tensor(drx, loomFloat32, 2, a->r, HIDDEN, 0, 0);
  loomTensor tdm = tensor(dmoe, loomFloat32, 2, a->t, HIDDEN, 0, 0);
  CHECK(loomMoeDispatchBackward(a->moe, &tdrx, NULL, &tdm, NULL, NULL));
  for (size_t i = 0; i < t * HIDDEN; i++) dh1[i] = dz[i] + dmoe[i];
  router_backward(md, a, dw, dh1);
  free(dy), free(drx), free(dw), free(dmoe);
}

/* From dh1 to the attention's weight gradients (xin, the input, needs none). */
static void attn_backward(struct model* md, const struct acts* a, const float* dh1, loomComm_t cp) {
  size_t t = (size_t)a->t;
  float* dout = zalloc(t * QDIM, sizeof(float));
  float* dq = zalloc(t * QDIM, sizeof(float));
  float* dk = zalloc(t * KVDIM, sizeof(float));
  float* dv = zalloc(t * KVDIM, sizeof(float));
  gemm(1, 0, HIDDEN, QDIM, a->t, dh1, a->o, 1, md->g + OFF_WO);
  gemm(0, 0, a->t, QDIM, HIDDEN, dh1, md->p + OFF_WO, 0, dout);
  loomTensor q = heads(a, a->q, HEADS), k = heads(a, a->k, KV_HEADS), v = heads(a, a->v, KV_HEADS);
  loomTensor o = heads(a, a->o, HEADS),
             lse = tensor(a->lse, loomFloat32, 3, a->nb, HEADS, a->sl, 0);
  loomTensor tdo = heads(a, dout, HEADS), tdq = heads(a, dq, HEADS);
  loomTensor tdk = heads(a, dk, KV_HEADS), tdv = heads(a, dv, KV_HEADS);
  loomAttnOpts opts = attn_opts();
  CHECK(loomCpAttentionBackward(&q, &k, &v, &o, &tdo, &lse, &tdq, &tdk, &tdv, &opts, cp, NULL));
  gemm(1, 0, QDIM, HIDDEN, a->t, dq, a->xin, 1, md->g);
  gemm(1, 0, KVDIM, HIDDEN, a->t, dk, a->xin, 1, md->g + OFF_WK);
  gemm(1, 0, KVDIM, HIDDEN, a->t, dv, a->xin, 1, md->g + OFF_WV);
  free(dout), free(dq), free(dk), free(dv);
}

/* A fixed positional signal, added to the inputs by global position. */
static float pos_embed(int64_t pos, int h) {
  return rnd(9, (size_t)pos * HIDDEN + (size_t)h, 0.3f);
}

/* One step on x/target [nb, sl, HIDDEN] whose tokens sit at global positions pos[sl] of their
 * sequences; returns the rank's sum of squared errors / 2; gradients (into md->g, zeroed
 * first) are those of the global total / norm. cp is both the CP and the EP group. */
static double model_train_step(struct model* md, const float* x, const int64_t* pos,
                               const float* target, int nb, int sl, double norm, loomComm_t cp) {
  struct acts a;
  acts_alloc(&a, nb, sl);
  for (int64_t i = 0; i < a.t; i++)
    for (int h = 0; h < HIDDEN; h++)
      a.xin[i * HIDDEN + h] = x[i * HIDDEN + h] + pos_embed(pos[i % sl], h);
  attn_forward(md, &a, cp);
  moe_forward(md, &a, cp);
  size_t nt = (size_t)a.t * HIDDEN;
  float* dz = zalloc(nt, sizeof(float));
  float* dh1 = zalloc(nt, sizeof(float));
  double sse = 0;
  for (size_t i = 0; i < nt; i++) {
    float e = a.z[i] - target[i];
    sse += 0.5 * (double)e * e;
    dz[i] = e / (float)norm;
  }
  memset(md->g, 0, md->n * sizeof(float));
  moe_backward(md, &a, dz, dh1);
  attn_backward(md, &a, dh1, cp);
  free(dz), free(dh1);
  acts_free(&a);
  return sse;
}

/* DP rank d's batch: inputs and the teacher's targets, full sequences [BATCH, SEQ, HIDDEN].
 * The teacher mixes each token with the mean of its prefix, so the attention has work. */
static void batch_make(int step, int d, float* x, float* target) {
  unsigned s = 100u + (unsigned)(step * 64 + d);
  for (size_t i = 0; i < (size_t)BATCH * SEQ * HIDDEN; i++) x[i] = rnd(s, i, 1.0f);
  for (int b = 0; b < BATCH; b++) {
    float mean[HIDDEN] = {0};
    for (int p = 0; p < SEQ; p++) {
      const float* xt = x + ((size_t)b * SEQ + p) * HIDDEN;
      for (int h = 0; h < HIDDEN; h++) mean[h] += (xt[h] - mean[h]) / (float)(p + 1);
      for (int o = 0; o < HIDDEN; o++) {
        float acc = 0;
        for (int h = 0; h < HIDDEN; h++)
          acc += rnd(7, (size_t)o * HIDDEN + h, 0.3f) * xt[h] +
                 rnd(8, (size_t)o * HIDDEN + h, 0.6f) * mean[h];
        target[((size_t)b * SEQ + p) * HIDDEN + o] = tanhf(acc);
      }
    }
  }
}

/* Dense gradients (replicated on every rank) summed over all ranks; expert gradients (each
 * expert owned by one rank of its CP/EP group) summed over DP. The loss is already divided by
 * the global element count, so sums are the right averages. */
static void grads_reduce(struct model* md, loomComm_t all, loomComm_t dp) {
  CHECK(loomAllReduce(md->g, md->g, DENSE, loomFloat32, loomSum, all, NULL));
  CHECK(loomAllReduce(md->g + DENSE, md->g + DENSE, md->n - DENSE, loomFloat32, loomSum, dp, NULL));
}

/* The rank's zig-zag share of a DP batch's sequences: [BATCH, SEQ, H] -> [BATCH, SEQ/cp, H]. */
static void shard_make(float* full, float* local, int cp_rank, int cp) {
  loomTensor f = tensor(full, loomFloat32, 3, BATCH, SEQ, HIDDEN, 0);
  loomTensor l = tensor(local, loomFloat32, 3, BATCH, SEQ / cp, HIDDEN, 0);
  CHECK(loomCpShard(&f, 1, loomCpZigzag, cp_rank, cp, &l, NULL));
}

/* The rank's place: dp x cp with cp fastest, so a CP group is two consecutive ranks; the
 * flattened group "cp-dp" is all ranks, for the dense gradients. The MoE layer reuses the CP
 * communicator as its EP group (experts folded over the attention's ranks), so the mesh's
 * own ep dim stays 1. */
struct layout {
  int dp, cp, dp_rank, cp_rank;
  loomMesh_t mesh;
  loomComm_t cp_comm, dp_comm, all_comm;
};

static void layout_create(struct layout* l, loomComm_t world, int n) {
  l->cp = n % 2 == 0 ? 2 : 1;
  l->dp = n / l->cp;
  int sizes[loomMeshNumDims] = {l->dp, 1, l->cp, 1, 1};
  const char* groups[] = {"cp-dp", NULL};
  CHECK(loomMeshCreate(world, sizes, "cp-dp", groups, &l->mesh));
  CHECK(loomMeshGetComm(l->mesh, loomMeshCp, &l->cp_comm));
  CHECK(loomMeshGetComm(l->mesh, loomMeshDp, &l->dp_comm));
  CHECK(loomMeshGetGroup(l->mesh, "cp-dp", &l->all_comm));
  CHECK(loomMeshGetCoord(l->mesh, loomMeshCp, &l->cp_rank));
  CHECK(loomMeshGetCoord(l->mesh, loomMeshDp, &l->dp_rank));
}

/* One step of the parallel model on this rank's share of its DP batch; returns the global
 * loss (sum of squared errors / 2 over all ranks). */
static double parallel_step(struct model* md, const struct layout* l, int step, double norm,
                            loomComm_t world) {
  size_t tok = (size_t)SEQ * BATCH * HIDDEN;
  float *x = zalloc(tok, sizeof(float)), *tgt = zalloc(tok, sizeof(float));
  float *lx = zalloc(tok, sizeof(float)), *lt = zalloc(tok, sizeof(float));
  int64_t pos[SEQ];
  CHECK(loomCpPositions(SEQ, loomCpZigzag, l->cp_rank, l->cp, pos));
  batch_make(step, l->dp_rank, x, tgt);
  shard_make(x, lx, l->cp_rank, l->cp);
  shard_make(tgt, lt, l->cp_rank, l->cp);
  double sse = model_train_step(md, lx, pos, lt, BATCH, SEQ / l->cp, norm, l->cp_comm), total;
  CHECK(loomAllReduce(&sse, &total, 1, loomFloat64, loomSum, world, NULL));
  grads_reduce(md, l->all_comm, l->dp_comm);
  model_step(md, step);
  free(x), free(tgt), free(lx), free(lt);
  return total;
}

/* The same step of the unsharded model on one rank: every DP rank's batch, stacked along the
 * batch [dp*BATCH, SEQ, HIDDEN], all experts, solo as the CP and EP group of one rank. */
static double reference_step(struct model* md, int dp, int step, double norm, loomComm_t solo) {
  size_t tok = (size_t)SEQ * BATCH * HIDDEN;
  float *x = zalloc(tok * (size_t)dp, sizeof(float)),
        *tgt = zalloc(tok * (size_t)dp, sizeof(float));
  int64_t pos[SEQ];
  CHECK(loomCpPositions(SEQ, loomCpZigzag, 0, 1, pos));
  for (int d = 0; d < dp; d++) batch_make(step, d, x + (size_t)d * tok, tgt + (size_t)d * tok);
  double sse = model_train_step(md, x, pos, tgt, dp * BATCH, SEQ, norm, solo);
  model_step(md, step);
  free(x), free(tgt);
  return sse;
}

static void model_free(struct model* md) {
  free(md->p), free(md->g), free(md->m), free(md->v);
}

int main(int argc, char** argv) {
  int steps = 20;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "-s")) steps = atoi(argv[i + 1]);
  loomComm_t world;
  CHECK(loomCommInitFromEnv(&world, NULL));
  int rank, n;
  CHECK(loomCommUserRank(world, &rank));
  CHECK(loomCommCount(world, &n));
  if (steps < 1) {
    if (rank == 0) fprintf(stderr, "block_train: steps %d, below 1\n", steps);
    return 2;
  }
  struct layout l;
  layout_create(&l, world, n);
  /* The single-rank reference: rank 0 alone. */
  loomComm_t solo = NULL;
  CHECK(loomCommSplit(world, rank == 0 ? 0 : LOOM_SPLIT_NOCOLOR, 0, &solo, NULL));
  struct model par, ref;
  model_init(&par, l.cp_rank * (EXPERTS / l.cp), EXPERTS / l.cp);
  if (solo != NULL) model_init(&ref, 0, EXPERTS);
  double norm = (double)SEQ * BATCH * HIDDEN * l.dp;
  if (rank == 0)
    printf(
        "# block_train: %d ranks = dp %d x cp %d (zig-zag ring attention), MoE EP %d over the cp "
        "ranks (%d experts, top-%d); Adam; MSE per element\n"
        "# step  loss(dp x cp)  loss(1 rank)  relative difference\n",
        n, l.dp, l.cp, l.cp, EXPERTS, TOPK);
  for (int step = 1; step <= steps; step++) {
    double total = parallel_step(&par, &l, step, norm, world);
    if (solo == NULL) continue;
    double rsse = reference_step(&ref, l.dp, step, norm, solo);
    printf("%6d  %13.7f  %12.7f  %.2e\n", step, total / norm, rsse / norm,
           fabs(total - rsse) / rsse);
    fflush(stdout);
  }
  model_free(&par);
  if (solo != NULL) model_free(&ref), loomCommDestroy(solo);
  loomMeshDestroy(l.mesh);
  loomCommDestroy(world);
  return 0;
}
