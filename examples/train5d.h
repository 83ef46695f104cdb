/* train5d.h - what the two files of the train5d example share (train5d.c: the mesh, the
 * parameters, the data, the pipeline and main; train5d_layers.c: the layers' forward and
 * backward passes and small helpers). See train5d.c for what the example does. */
#ifndef LOOM_EXAMPLES_TRAIN5D_H
#define LOOM_EXAMPLES_TRAIN5D_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"
#include "loom_parallel.h"

enum { SEQ = 16, MICRO = 2, VOCAB = 64, HIDDEN = 32, HEADS = 4, HDIM = HIDDEN / HEADS };
enum { FFN = 32, EXPERTS = 4, TOPK = 2, LAYERS = 2, MAXMB = 64 };
/* An expert's parameters: w1 [FFN, H], b1 [FFN], w2 [H, FFN], b2 [H]. */
enum { EXP_B1 = FFN * HIDDEN, EXP_W2 = EXP_B1 + FFN, EXP_B2 = EXP_W2 + HIDDEN * FFN };
enum { EXP_ELEMS = EXP_B2 + HIDDEN };
#define LR 3e-3

#define CHECK(call)                                                            \
  do {                                                                         \
    loomResult_t r_ = (call);                                                  \
    if (r_ != loomSuccess) {                                                   \
      fprintf(stderr, "train5d: %s: %s (%s)\n", #call, loomGetErrorString(r_), \
              loomGetLastError(NULL));                                         \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* Gradient classes, by the group a weight's gradient is summed over before ZeRO's dp step. */
enum { C_TP = 0, C_REP = 1, C_EXP = 2, NCLASS = 3 };

struct place {
  int size[loomMeshNumDims], coord[loomMeshNumDims];
  int ep, ep_rank; /* the MoE's EP group: the mesh's ep dim, or cp when folded */
  loomComm_t tp, cp, pp, dp, moe, cls[NCLASS];
};

/* A parameter: rows [r0, r0+nr) x cols [c0, c0+nc) of a full [frows, fcols] matrix whose
 * element (r, c) starts as rnd(seed, r*fcols + c, scale). */
struct pspec {
  unsigned seed;
  int64_t frows, fcols, r0, nr, c0, nc;
  float scale;
  int cls;
  float *p, *g;
};
enum { P_WQ, P_WK, P_WV, P_WO, P_W1, P_B1, P_W2, P_B2, P_WR, P_EXP, NLP };
enum { MAXP = 2 + LAYERS * NLP };

/* The rank's stage of the model, its ZeRO-1 state and its saved activations. */
struct stage {
  const struct place* pl;
  int first, last, l0, l1; /* layers [l0, l1) */
  int tp, tr, sl, st;      /* tp size and rank, cp-local and SP-local sequence lengths */
  int hr, qd, fr, vr, ne;  /* heads, q width, MLP features, vocabulary, experts on this rank */
  int np;
  struct pspec ps[MAXP];
  struct pspec *emb, *wout, *lp[LAYERS][NLP];
  float *params, *grads, *sm, *sv, *sp;
  loomZeroLayout_t zero;
  loomZeroLayoutInfo zi;
  /* the data: microbatch i is replica rep0 + i / MICRO, sequence i % MICRO */
  int m, rep0;
  int64_t pos[SEQ];                         /* global positions of the SP-local tokens */
  int32_t tok[MAXMB][SEQ], tgt[MAXMB][SEQ]; /* SP-local inputs, cp-local targets */
  double loss, norm;
  struct mbacts* acts[MAXMB];
};

/* A microbatch's saved activations of one layer (SP-local tokens st, cp-local tokens sl). */
struct lacts {
  float *xfull, *q, *k, *v, *o, *lse; /* attention */
  float *hfull, *a1, *g;              /* dense MLP */
  float *h1, *logits, *w, *rx, *hh, *act, *y;
  int32_t* idx;
  loomMoeHandle_t moe;
  const int64_t* off; /* [ne + 1] each local expert's first received row */
  int64_t r;          /* MoE rows received */
};
/* A linear layer's weight gradient, deferred from B to W (dw += dy^T x, db += rows of dy). */
struct wjob {
  loomTensor x, dy, dw, db;
  int has_db;
};
enum { MAXJOBS = 4 * LAYERS * 2 + 2, MAXKEEP = 8 * LAYERS + 4 };
struct mbacts {
  struct lacts l[LAYERS];
  float *hx, *logits, *lse; /* the head */
  struct wjob jobs[MAXJOBS];
  void* keep[MAXKEEP]; /* buffers the jobs read, freed after W */
  int nj, nk;
};

/* train5d_layers.c */
float rnd(unsigned s, size_t i, float scale);
float gelu(float v);
float gelu_grad(float v);
void* zalloc(size_t n, size_t size);
loomTensor tensor(void* data, loomDataType_t dtype, int ndim, int64_t a, int64_t b, int64_t c,
                  int64_t d);
loomTensor f32(float* data, int ndim, int64_t a, int64_t b, int64_t c, int64_t d);
void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B,
          float beta, float* C);
float pos_embed(int64_t pos, int h);
void wgrad(struct mbacts* m, loomTensor x, loomTensor dy, loomTensor dw, const loomTensor* db);
void keep(struct mbacts* m, void* p);
void wgrad_run(struct mbacts* m);
loomLinearOpts lin_opts(int sp);
loomAttnOpts attn_opts(void);
loomTensor mat(const struct pspec* p, int grad);
void add_into(float* x, const float* y, size_t n);
void attn_forward(const struct stage* s, int l, struct lacts* a, float* x);
void attn_backward(const struct stage* s, int l, struct mbacts* m, float* dx);
void dense_forward(const struct stage* s, int l, struct lacts* a, float* x);
void dense_backward(const struct stage* s, int l, struct mbacts* m, float* dx);
void router_forward(const float* wr, struct lacts* a, int64_t t);
void experts_forward(const float* ex, int ne, struct lacts* a);
void moe_forward(const struct stage* s, int l, struct lacts* a, float* x);
void experts_backward(const float* ex, float* gex, int ne, const struct lacts* a, const float* dy,
                      float* drx);
void router_backward(const float* wr, float* gwr, const struct lacts* a, int64_t t, const float* dw,
                     float* dh1);
void moe_backward(const struct stage* s, int l, struct mbacts* m, float* dx);
void embed_forward(const struct stage* s, int i, float* x);
void embed_backward(const struct stage* s, int i, const float* dx);
void head_forward(struct stage* s, int i, struct mbacts* a, float* x);
void head_backward(const struct stage* s, int i, struct mbacts* a, float* dx);

#endif
