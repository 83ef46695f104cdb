/* mlp_train - trains a small MLP block (column-parallel linear, GeLU, row-parallel linear) on
 * host memory with data parallelism x tensor parallelism with sequence parallelism, and
 * ZeRO-1 (Adam's state sharded over DP), and prints its loss curve beside the same training
 * on one rank.
 *
 *   loomrun -n 8 build/examples/mlp_train [-t TP] [-s STEPS]
 *
 * The mesh is dp x tp (tp 4 by default, or the largest of 4, 2, 1 that divides the world).
 * Each DP rank trains on its own batch of tokens [SEQ, BATCH, HIDDEN]; within a TP group the
 * tokens are split along the sequence (SP) and the hidden layer along its features. The loss
 * is the mean squared error against a fixed random teacher MLP's output. Rank 0 also trains
 * the unsharded model, alone, on all DP ranks' batches, with the same calls on a
 * communicator of one rank; the two curves agree to float32 rounding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"
#include "loom_parallel.h"

enum { SEQ = 16, BATCH = 2, HIDDEN = 32, FFN = 64 };
#define LR 1e-2

#define CHECK(call)                                                              \
  do {                                                                           \
    loomResult_t r_ = (call);                                                    \
    if (r_ != loomSuccess) {                                                     \
      fprintf(stderr, "mlp_train: %s: %s (%s)\n", #call, loomGetErrorString(r_), \
              loomGetLastError(NULL));                                           \
      exit(1);                                                                   \
    }                                                                            \
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

/* One model replica's shard: w1 [F_r, H], b1 [F_r], w2 [H, F_r], b2 [H], all in one flat
 * parameter buffer (and a gradient buffer of the same layout), for ZeRO. */
struct model {
  int tp, tp_rank, fr;
  float *params, *grads;
  float *w1, *b1, *w2, *b2, *gw1, *gb1, *gw2, *gb2;
  loomZeroLayout_t zero;
  loomZeroLayoutInfo zinfo;
  float *shard_m, *shard_v, *shard_p; /* ZeRO-1: Adam's state and the master shard */
  int dp_rank, dp;
};

static void model_init(struct model* m, int tp, int tp_rank, int dp, int dp_rank) {
  m->tp = tp;
  m->tp_rank = tp_rank;
  m->dp = dp;
  m->dp_rank = dp_rank;
  m->fr = FFN / tp;
  int64_t numels[4] = {(int64_t)m->fr * HIDDEN, m->fr, (int64_t)HIDDEN * m->fr, HIDDEN};
  CHECK(loomZeroLayoutCreate(numels, 4, dp, 1024, 4, &m->zero));
  CHECK(loomZeroLayoutGetInfo(m->zero, &m->zinfo));
  m->params = calloc((size_t)m->zinfo.totalElems, sizeof(float));
  m->grads = calloc((size_t)m->zinfo.totalElems, sizeof(float));
  float* p[4];
  float* g[4];
  for (int i = 0; i < 4; i++) {
    p[i] = m->params + m->zinfo.params[i].offset;
    g[i] = m->grads + m->zinfo.params[i].offset;
  }
  m->w1 = p[0], m->b1 = p[1], m->w2 = p[2], m->b2 = p[3];
  m->gw1 = g[0], m->gb1 = g[1], m->gw2 = g[2], m->gb2 = g[3];
  int f0 = tp_rank * m->fr; /* this rank's hidden features of the full model */
  for (int f = 0; f < m->fr; f++) {
    for (int h = 0; h < HIDDEN; h++)
      m->w1[f * HIDDEN + h] = rnd(1, (size_t)(f0 + f) * HIDDEN + h, 0.2f);
    m->b1[f] = rnd(2, (size_t)(f0 + f), 0.1f);
  }
  for (int h = 0; h < HIDDEN; h++) {
    for (int f = 0; f < m->fr; f++) m->w2[h * m->fr + f] = rnd(3, (size_t)h * FFN + f0 + f, 0.2f);
    m->b2[h] = rnd(4, (size_t)h, 0.1f);
  }
  size_t se = (size_t)m->zinfo.shardElems;
  m->shard_m = calloc(se, sizeof(float));
  m->shard_v = calloc(se, sizeof(float));
  m->shard_p = calloc(se, sizeof(float));
  for (int b = 0; b < m->zinfo.numBuckets; b++) { /* the master shard: this rank's slices */
    const loomZeroBucket* k = &m->zinfo.buckets[b];
    int64_t n = k->count / dp;
    memcpy(m->shard_p + k->shardOffset, m->params + k->offset + (int64_t)dp_rank * n,
           (size_t)n * sizeof(float));
  }
}

/* Adam on this rank's shard (ZeRO-1), then every bucket's parameters all-gathered. */
static void model_step(struct model* m, int step, loomComm_t dp_comm) {
  float* gshard = calloc((size_t)m->zinfo.shardElems + 1, sizeof(float));
  for (int b = 0; b < m->zinfo.numBuckets; b++)
    CHECK(loomZeroReduceScatterBucket(m->zero, b, m->grads + m->zinfo.buckets[b].offset, gshard,
                                      loomFloat32, loomSum, dp_comm, NULL));
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  float c1 = 1.0f - powf(b1, (float)step), c2 = 1.0f - powf(b2, (float)step);
  for (int64_t i = 0; i < m->zinfo.shardElems; i++) {
    m->shard_m[i] = b1 * m->shard_m[i] + (1 - b1) * gshard[i];
    m->shard_v[i] = b2 * m->shard_v[i] + (1 - b2) * gshard[i] * gshard[i];
    m->shard_p[i] -= (float)LR * (m->shard_m[i] / c1) / (sqrtf(m->shard_v[i] / c2) + eps);
  }
  for (int b = 0; b < m->zinfo.numBuckets; b++)
    CHECK(loomZeroAllGatherBucket(m->zero, b, m->shard_p, m->params + m->zinfo.buckets[b].offset,
                                  loomFloat32, dp_comm, NULL));
  free(gshard);
}

static loomTensor tensor(float* data, int ndim, int64_t a, int64_t b, int64_t c) {
  int64_t shape[3] = {a, b, c};
  loomTensor t;
  CHECK(loomTensorMake(data, loomFloat32, ndim, shape, &t));
  return t;
}

/* One step on tokens x/target [seq, BATCH, HIDDEN] (seq: this rank's SP part); returns the
 * rank's sum of squared errors; gradients are those of total / norm. */
static double model_train_step(struct model* m, const float* x, const float* target, int seq,
                               double norm, loomComm_t tp_comm) {
  loomLinearOpts o = LOOM_LINEAR_OPTS_INIT;
  o.sequenceParallel = m->tp > 1;
  int full = seq * m->tp, fr = m->fr;
  size_t nfull = (size_t)full * BATCH, nloc = (size_t)seq * BATCH;
  float* xfull = malloc(nfull * HIDDEN * sizeof(float));
  float* h = malloc(nfull * (size_t)fr * sizeof(float));
  float* a = malloc(nfull * (size_t)fr * sizeof(float));
  float* y = malloc(nloc * HIDDEN * sizeof(float));
  float* dy = malloc(nloc * HIDDEN * sizeof(float));
  float* dyfull = malloc(nfull * HIDDEN * sizeof(float));
  loomTensor tx = tensor((float*)x, 3, seq, BATCH, HIDDEN),
             txf = tensor(xfull, 3, full, BATCH, HIDDEN);
  loomTensor tw1 = tensor(m->w1, 2, fr, HIDDEN, 0), tb1 = tensor(m->b1, 1, fr, 0, 0);
  loomTensor tw2 = tensor(m->w2, 2, HIDDEN, fr, 0), tb2 = tensor(m->b2, 1, HIDDEN, 0, 0);
  loomTensor th = tensor(h, 3, full, BATCH, fr), ta = tensor(a, 3, full, BATCH, fr);
  loomTensor ty = tensor(y, 3, seq, BATCH, HIDDEN), tdy = tensor(dy, 3, seq, BATCH, HIDDEN);
  loomTensor tdyf = tensor(dyfull, 3, full, BATCH, HIDDEN);
  CHECK(loomColumnLinearForward(&tx, &tw1, &tb1, &th, o.sequenceParallel ? &txf : NULL, &o, tp_comm,
                                NULL));
  for (size_t i = 0; i < nfull * (size_t)fr; i++) a[i] = gelu(h[i]);
  CHECK(loomRowLinearForward(&ta, &tw2, &tb2, &ty, &o, tp_comm, NULL));
  double sse = 0;
  for (size_t i = 0; i < nloc * HIDDEN; i++) {
    float e = y[i] - target[i];
    sse += 0.5 * (double)e * e;
    dy[i] = e / (float)norm;
  }
  /* Backward: the row layer, GeLU, the column layer's weights (x needs no gradient). */
  float* da = malloc(nfull * (size_t)fr * sizeof(float));
  loomTensor tda = tensor(da, 3, full, BATCH, fr);
  CHECK(loomRowLinearBackwardInput(&tdy, &tw2, &tda, o.sequenceParallel ? &tdyf : NULL, &o, tp_comm,
                                   NULL));
  loomTensor tgw2 = tensor(m->gw2, 2, HIDDEN, fr, 0), tgb2 = tensor(m->gb2, 1, HIDDEN, 0, 0);
  CHECK(loomLinearBackwardWeight(&ta, o.sequenceParallel ? &tdyf : &tdy, &tgw2, &tgb2, &o, NULL));
  for (size_t i = 0; i < nfull * (size_t)fr; i++) h[i] = da[i] * gelu_grad(h[i]); /* h: dL/dh */
  loomTensor tdh = tensor(h, 3, full, BATCH, fr);
  loomTensor tgw1 = tensor(m->gw1, 2, fr, HIDDEN, 0), tgb1 = tensor(m->gb1, 1, fr, 0, 0);
  CHECK(loomLinearBackwardWeight(o.sequenceParallel ? &txf : &tx, &tdh, &tgw1, &tgb1, &o, NULL));
  free(xfull), free(h), free(a), free(y), free(dy), free(dyfull), free(da);
  return sse;
}

/* The batch of DP rank d: inputs and the teacher's targets, [SEQ, BATCH, HIDDEN]. */
static void batch_make(int step, int d, float* x, float* target) {
  for (int t = 0; t < SEQ * BATCH; t++) {
    unsigned s = 100u + (unsigned)(step * 64 + d);
    for (int h = 0; h < HIDDEN; h++) x[t * HIDDEN + h] = rnd(s, (size_t)t * HIDDEN + h, 1.0f);
    for (int o = 0; o < HIDDEN; o++) { /* teacher: tanh of a fixed linear map */
      float acc = 0;
      for (int h = 0; h < HIDDEN; h++)
        acc += rnd(7, (size_t)o * HIDDEN + h, 0.3f) * x[t * HIDDEN + h];
      target[t * HIDDEN + o] = tanhf(acc);
    }
  }
}

int main(int argc, char** argv) {
  int tp = 0, steps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-t"))
      tp = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-s"))
      steps = atoi(argv[i + 1]);
  }
  loomComm_t world;
  CHECK(loomCommInitFromEnv(&world, NULL));
  int rank, n;
  CHECK(loomCommUserRank(world, &rank));
  CHECK(loomCommCount(world, &n));
  if (tp == 0) tp = n % 4 == 0 ? 4 : n % 2 == 0 ? 2 : 1;
  if (tp < 1 || n % tp || SEQ % tp || FFN % tp || steps < 1) {
    if (rank == 0)
      fprintf(stderr, "mlp_train: tp %d does not divide %d ranks, %d, %d\n", tp, n, SEQ, FFN);
    return 2;
  }
  int dp = n / tp;
  int sizes[loomMeshNumDims] = {dp, 1, 1, tp, 1};
  loomMesh_t mesh;
  CHECK(loomMeshCreate(world, sizes, "tp-dp", NULL, &mesh));
  loomComm_t tp_comm, dp_comm;
  int tp_rank, dp_rank;
  CHECK(loomMeshGetComm(mesh, loomMeshTp, &tp_comm));
  CHECK(loomMeshGetComm(mesh, loomMeshDp, &dp_comm));
  CHECK(loomMeshGetCoord(mesh, loomMeshTp, &tp_rank));
  CHECK(loomMeshGetCoord(mesh, loomMeshDp, &dp_rank));
  /* The single-rank reference: rank 0 alone, the whole model, every DP rank's batch. */
  loomComm_t solo = NULL;
  CHECK(loomCommSplit(world, rank == 0 ? 0 : LOOM_SPLIT_NOCOLOR, 0, &solo, NULL));
  struct model par, ref;
  model_init(&par, tp, tp_rank, dp, dp_rank);
  if (solo != NULL) model_init(&ref, 1, 0, 1, 0);
  size_t tok = (size_t)SEQ * BATCH * HIDDEN, part = tok / (size_t)tp;
  float* x = malloc(tok * sizeof(float));
  float* tgt = malloc(tok * sizeof(float));
  float* rx = malloc(tok * (size_t)dp * sizeof(float));
  float* rt = malloc(tok * (size_t)dp * sizeof(float));
  double norm = (double)tok * dp;
  if (rank == 0)
    printf(
        "# mlp_train: %d ranks = dp %d x tp %d (SP), ZeRO-1 Adam; MSE per element\n"
        "# step  loss(dp x tp)  loss(1 rank)  relative difference\n",
        n, dp, tp);
  for (int step = 1; step <= steps; step++) {
    batch_make(step, dp_rank, x, tgt);
    double sse = model_train_step(&par, x + (size_t)tp_rank * part, tgt + (size_t)tp_rank * part,
                                  SEQ / tp, norm, tp_comm);
    double total;
    CHECK(loomAllReduce(&sse, &total, 1, loomFloat64, loomSum, world, NULL));
    model_step(&par, step, dp_comm);
    if (solo != NULL) {
      /* Every DP rank's batch, stacked along the sequence: [dp*SEQ, BATCH, HIDDEN]. The loss
       * and the gradients are sums over tokens, so their order does not matter. */
      for (int d = 0; d < dp; d++) batch_make(step, d, rx + (size_t)d * tok, rt + (size_t)d * tok);
      double rsse = model_train_step(&ref, rx, rt, dp * SEQ, norm, solo);
      model_step(&ref, step, solo);
      printf("%6d  %13.7f  %12.7f  %.2e\n", step, total / norm, rsse / norm,
             fabs(total - rsse) / rsse);
    }
  }
  loomMeshDestroy(mesh);
  if (solo != NULL) loomCommDestroy(solo);
  loomCommDestroy(world);
  return 0;
}
