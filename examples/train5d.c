/* train5d - trains a tiny transformer language model on host memory with all five mesh dims,
 * DP x PP x CP x TP(+SP) x EP, and prints its loss curve beside the same training on one rank.
 *
 *   loomrun -n 8  build/examples/train5d -p 2 -c 2 -e 2         (pp 2 x cp 2 x ep 2)
 *   loomrun -n 16 build/examples/train5d -d 2 -p 2 -c 2 -t 2 -f  (dp 2 x pp 2 x cp 2 x tp 2,
 *                                                                  experts folded over cp)
 *   options: -d DP -p PP -c CP -t TP -e EP (mesh sizes, product = world; 1 when not given),
 *   -f (the MoE's EP group is the cp group instead of the mesh's ep dim), -z (the zero-bubble
 *   ZB-H1 schedule instead of 1F1B), -s STEPS (10)
 *
 * The model: token embedding (vocabulary 64, hidden 32) plus a fixed positional signal, then
 * two layers, each a causal attention block (4 heads) and an MLP block on a residual stream
 * (layer 0 a dense GeLU MLP, layer 1 a top-2 MoE of 4 experts), then the output projection to
 * the vocabulary and cross entropy against the next token of a fixed synthetic dataset (each
 * sequence follows t' = (5t + k) mod 64 with a per-sequence key k, so attention pays; every
 * step trains on the same batch, so the loss falls smoothly).
 *
 * How each dim is used:
 * - PP: the layers are split over pp ranks (stage 0 also embeds, the last stage also has the
 *   head and the loss), run by the pipeline runner under a 1F1B (or, with -z, ZB-H1)
 *   schedule of M = 2 microbatches, one sequence each. B computes the input gradients and
 *   defers the linear layers' weight gradients (loomLinearBackwardWeight) to W, which ZB-H1
 *   runs later to fill the bubble; the cheap expert, router and embedding gradients are
 *   added in B.
 * - TP + SP: inside attention the heads are split over tp (q, k, v column-parallel, the output
 *   projection row-parallel), the dense MLP's features likewise, and the output projection is
 *   column-parallel over the vocabulary feeding loomVocabParallelCrossEntropy*. Between the
 *   blocks the residual stream is split along the sequence over tp (SP): the column layers
 *   all-gather it, the row layers reduce-scatter back. Embedding, router and experts act on
 *   the rank's SP tokens with replicated weights.
 * - CP: each sequence is split zig-zag over cp (loomCpPositions) and the attention is
 *   loomCpAttentionForward/Backward with the ring.
 * - EP: the MoE layer's experts are split over the EP group (the mesh's ep dim, or with -f
 *   the cp group: Megatron's folding of experts over the attention's ranks), tokens travel by
 *   loomMoeDispatch/Combine. Ranks differing in ep (mesh dim) hold the same dense weights and
 *   different data, like DP.
 * - DP: replicas on different data; ZeRO-1: Adam's state is sharded over dp with loomZero*.
 * Gradient reduction: every weight's gradient is first all-reduced over the other ranks that
 * hold the same weight and see other tokens (TP-split weights over "cp-ep"; weights replicated
 * over tp that act on SP tokens over "tp-cp-ep"; experts over "tp-cp", or "tp-ep" with -f),
 * then reduce-scattered over dp, stepped on the shard and all-gathered (ZeRO-1).
 *
 * Rank 0 also trains the unsharded model, alone (one stage, all experts, every replica's
 * sequences as microbatches), with the same calls on a communicator of one rank; the two
 * curves agree to float32 rounding. */
#include "train5d.h"

/* ---- The rank's place in the mesh --------------------------------------------------------- */

static void place_create(struct place* pl, loomMesh_t* mesh, loomComm_t world, const int sizes[],
                         int fold) {
  const char* groups[] = {"cp-ep", "tp-cp-ep", "tp-cp", "tp-ep", NULL};
  CHECK(loomMeshCreate(world, sizes, NULL, groups, mesh));
  for (int d = 0; d < loomMeshNumDims; d++) {
    pl->size[d] = sizes[d];
    CHECK(loomMeshGetCoord(*mesh, (loomMeshDim_t)d, &pl->coord[d]));
  }
  CHECK(loomMeshGetComm(*mesh, loomMeshTp, &pl->tp));
  CHECK(loomMeshGetComm(*mesh, loomMeshCp, &pl->cp));
  CHECK(loomMeshGetComm(*mesh, loomMeshPp, &pl->pp));
  CHECK(loomMeshGetComm(*mesh, loomMeshDp, &pl->dp));
  loomMeshDim_t e = fold ? loomMeshCp : loomMeshEp;
  CHECK(loomMeshGetComm(*mesh, e, &pl->moe));
  pl->ep = sizes[e];
  pl->ep_rank = pl->coord[e];
  CHECK(loomMeshGetGroup(*mesh, "cp-ep", &pl->cls[C_TP]));
  CHECK(loomMeshGetGroup(*mesh, "tp-cp-ep", &pl->cls[C_REP]));
  CHECK(loomMeshGetGroup(*mesh, fold ? "tp-ep" : "tp-cp", &pl->cls[C_EXP]));
}

/* One rank alone: every dim 1, every communicator solo. */
static void place_solo(struct place* pl, loomComm_t solo) {
  memset(pl, 0, sizeof *pl);
  for (int d = 0; d < loomMeshNumDims; d++) pl->size[d] = 1;
  pl->ep = 1;
  pl->tp = pl->cp = pl->pp = pl->dp = pl->moe = solo;
  for (int c = 0; c < NCLASS; c++) pl->cls[c] = solo;
}

/* ---- Parameters --------------------------------------------------------------------------- */

static struct pspec* param_add(struct stage* s, unsigned seed, int64_t frows, int64_t fcols,
                               int64_t r0, int64_t nr, int64_t c0, int64_t nc, float scale,
                               int cls) {
  struct pspec* p = &s->ps[s->np++];
  *p = (struct pspec){seed, frows, fcols, r0, nr, c0, nc, scale, cls, NULL, NULL};
  return p;
}

/* Layer l's parameters: q, k, v column-parallel ([heads, H] rows of the rank), the output
 * projection row-parallel, then the dense MLP (column, row) or the MoE (router, experts). */
static void layer_params(struct stage* s, int l) {
  struct pspec** p = s->lp[l];
  unsigned b = 10u + 16u * (unsigned)l;
  int64_t q0 = (int64_t)s->tr * s->qd, f0 = (int64_t)s->tr * s->fr;
  memset(p, 0, sizeof s->lp[l]);
  p[P_WQ] = param_add(s, b, HIDDEN, HIDDEN, q0, s->qd, 0, HIDDEN, 0.3f, C_TP);
  p[P_WK] = param_add(s, b + 1, HIDDEN, HIDDEN, q0, s->qd, 0, HIDDEN, 0.3f, C_TP);
  p[P_WV] = param_add(s, b + 2, HIDDEN, HIDDEN, q0, s->qd, 0, HIDDEN, 0.3f, C_TP);
  p[P_WO] = param_add(s, b + 3, HIDDEN, HIDDEN, 0, HIDDEN, q0, s->qd, 0.3f, C_TP);
  if (l % 2 == 0) {
    p[P_W1] = param_add(s, b + 4, FFN, HIDDEN, f0, s->fr, 0, HIDDEN, 0.3f, C_TP);
    p[P_B1] = param_add(s, b + 5, 1, FFN, 0, 1, f0, s->fr, 0.1f, C_TP);
    p[P_W2] = param_add(s, b + 6, HIDDEN, FFN, 0, HIDDEN, f0, s->fr, 0.3f, C_TP);
    p[P_B2] = param_add(s, b + 7, 1, HIDDEN, 0, 1, 0, HIDDEN, 0.1f, C_TP);
  } else {
    int64_t e0 = (int64_t)s->pl->ep_rank * s->ne;
    p[P_WR] = param_add(s, b + 8, EXPERTS, HIDDEN, 0, EXPERTS, 0, HIDDEN, 0.3f, C_REP);
    p[P_EXP] = param_add(s, b + 9, EXPERTS, EXP_ELEMS, e0, s->ne, 0, EXP_ELEMS, 0.3f, C_EXP);
  }
}

/* The flat buffers in class order (each class one contiguous range), the ZeRO layout over dp,
 * the initial values and the master shard. */
static void stage_alloc_params(struct stage* s) {
  int64_t numels[MAXP];
  struct pspec* order[MAXP];
  int n = 0;
  for (int c = 0; c < NCLASS; c++)
    for (int i = 0; i < s->np; i++)
      if (s->ps[i].cls == c) order[n] = &s->ps[i], numels[n] = s->ps[i].nr * s->ps[i].nc, n++;
  int dp = s->pl->size[loomMeshDp], dr = s->pl->coord[loomMeshDp];
  CHECK(loomZeroLayoutCreate(numels, n, dp, 4096, 4, &s->zero));
  CHECK(loomZeroLayoutGetInfo(s->zero, &s->zi));
  s->params = zalloc((size_t)s->zi.totalElems, sizeof(float));
  s->grads = zalloc((size_t)s->zi.totalElems, sizeof(float));
  for (int i = 0; i < n; i++) {
    struct pspec* p = order[i];
    p->p = s->params + s->zi.params[i].offset;
    p->g = s->grads + s->zi.params[i].offset;
    for (int64_t r = 0; r < p->nr; r++)
      for (int64_t c = 0; c < p->nc; c++)
        p->p[r * p->nc + c] = rnd(p->seed, (size_t)((p->r0 + r) * p->fcols + p->c0 + c), p->scale);
  }
  size_t se = (size_t)s->zi.shardElems;
  s->sm = zalloc(se, sizeof(float));
  s->sv = zalloc(se, sizeof(float));
  s->sp = zalloc(se, sizeof(float));
  for (int b = 0; b < s->zi.numBuckets; b++) {
    const loomZeroBucket* k = &s->zi.buckets[b];
    int64_t cnt = k->count / dp;
    memcpy(s->sp + k->shardOffset, s->params + k->offset + (int64_t)dr * cnt,
           (size_t)cnt * sizeof(float));
  }
}

static void stage_init(struct stage* s, const struct place* pl, int layers_per_stage) {
  memset(s, 0, sizeof *s);
  s->pl = pl;
  int pr = pl->coord[loomMeshPp];
  s->first = pr == 0;
  s->last = pr == pl->size[loomMeshPp] - 1;
  s->l0 = pr * layers_per_stage;
  s->l1 = s->l0 + layers_per_stage;
  s->tp = pl->size[loomMeshTp];
  s->tr = pl->coord[loomMeshTp];
  s->sl = SEQ / pl->size[loomMeshCp];
  s->st = s->sl / s->tp;
  s->hr = HEADS / s->tp;
  s->qd = s->hr * HDIM;
  s->fr = FFN / s->tp;
  s->vr = VOCAB / s->tp;
  s->ne = EXPERTS / pl->ep;
  if (s->first) s->emb = param_add(s, 1, VOCAB, HIDDEN, 0, VOCAB, 0, HIDDEN, 1.0f, C_REP);
  for (int l = s->l0; l < s->l1; l++) layer_params(s, l);
  if (s->last)
    s->wout = param_add(s, 2, VOCAB, HIDDEN, (int64_t)s->tr * s->vr, s->vr, 0, HIDDEN, 0.3f, C_TP);
  stage_alloc_params(s);
}

/* The gradients summed over their class groups, then ZeRO-1 over dp: reduce-scatter, Adam on
 * the shard, all-gather. */
static void stage_update(struct stage* s, int step) {
  for (int c = 0; c < NCLASS; c++) {
    int64_t lo = -1, hi = 0;
    for (int i = 0; i < s->np; i++) {
      int64_t off = s->ps[i].g - s->grads, end = off + s->ps[i].nr * s->ps[i].nc;
      if (s->ps[i].cls != c) continue;
      if (lo < 0 || off < lo) lo = off;
      if (end > hi) hi = end;
    }
    if (lo >= 0)
      CHECK(loomAllReduce(s->grads + lo, s->grads + lo, (size_t)(hi - lo), loomFloat32, loomSum,
                          s->pl->cls[c], NULL));
  }
  float* gshard = zalloc((size_t)s->zi.shardElems, sizeof(float));
  for (int b = 0; b < s->zi.numBuckets; b++)
    CHECK(loomZeroReduceScatterBucket(s->zero, b, s->grads + s->zi.buckets[b].offset, gshard,
                                      loomFloat32, loomSum, s->pl->dp, NULL));
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  float c1 = 1.0f - powf(b1, (float)step), c2 = 1.0f - powf(b2, (float)step);
  for (int64_t i = 0; i < s->zi.shardElems; i++) {
    s->sm[i] = b1 * s->sm[i] + (1 - b1) * gshard[i];
    s->sv[i] = b2 * s->sv[i] + (1 - b2) * gshard[i] * gshard[i];
    s->sp[i] -= (float)LR * (s->sm[i] / c1) / (sqrtf(s->sv[i] / c2) + eps);
  }
  for (int b = 0; b < s->zi.numBuckets; b++)
    CHECK(loomZeroAllGatherBucket(s->zero, b, s->sp, s->params + s->zi.buckets[b].offset,
                                  loomFloat32, s->pl->dp, NULL));
  free(gshard);
}

static void stage_free(struct stage* s) {
  CHECK(loomZeroLayoutDestroy(s->zero));
  free(s->params), free(s->grads), free(s->sm), free(s->sv), free(s->sp);
}

/* ---- Data --------------------------------------------------------------------------------- */

/* Sequence id of the fixed dataset: SEQ + 1 tokens, t' = (5t + k) mod V, k the key. */
static void sequence_make(unsigned id, int32_t out[SEQ + 1]) {
  int k = 1 + 2 * (int)(id % 4u);
  out[0] = (int32_t)((rnd(3, id, 1.0f) + 1.0f) * 0.5f * VOCAB) % VOCAB;
  for (int p = 0; p < SEQ; p++) out[p + 1] = (5 * out[p] + k) % VOCAB;
}

/* The microbatches (the same every step): the rank's SP-local input tokens and cp-local targets. */
static void stage_data(struct stage* s) {
  int cp = s->pl->size[loomMeshCp], cr = s->pl->coord[loomMeshCp];
  int64_t cpos[SEQ];
  CHECK(loomCpPositions(SEQ, loomCpZigzag, cr, cp, cpos));
  for (int t = 0; t < s->st; t++) s->pos[t] = cpos[s->tr * s->st + t];
  for (int i = 0; i < s->m; i++) {
    int rep = s->rep0 + i / MICRO;
    unsigned id = (unsigned)(rep * MICRO + i % MICRO);
    int32_t seq[SEQ + 1];
    sequence_make(id, seq);
    for (int t = 0; t < s->st; t++) s->tok[i][t] = seq[s->pos[t]];
    for (int j = 0; j < s->sl; j++) s->tgt[i][j] = seq[cpos[j] + 1];
  }
}

/* ---- The pipeline callbacks --------------------------------------------------------------- */

static loomResult_t cb_forward(void* user, int stage, int i, const void* input, void* output,
                               loomStream_t stream) {
  struct stage* s = user;
  size_t nt = (size_t)s->st * HIDDEN;
  float* x = zalloc(nt, sizeof(float));
  struct mbacts* a = s->acts[i] = zalloc(1, sizeof *a);
  if (s->first)
    embed_forward(s, i, x);
  else
    memcpy(x, input, nt * sizeof(float));
  for (int l = s->l0; l < s->l1; l++) {
    attn_forward(s, l, &a->l[l], x);
    if (l % 2 == 0)
      dense_forward(s, l, &a->l[l], x);
    else
      moe_forward(s, l, &a->l[l], x);
  }
  if (s->last)
    head_forward(s, i, a, x);
  else
    memcpy(output, x, nt * sizeof(float));
  free(x);
  return loomSuccess;
}

/* B: the input gradients; the linear layers' weight gradients are left to W. */
static loomResult_t cb_backward(void* user, int stage, int i, const void* gradOutput,
                                void* gradInput, loomStream_t stream) {
  struct stage* s = user;
  size_t nt = (size_t)s->st * HIDDEN;
  float* dx = zalloc(nt, sizeof(float));
  struct mbacts* a = s->acts[i];
  if (s->last)
    head_backward(s, i, a, dx);
  else
    memcpy(dx, gradOutput, nt * sizeof(float));
  for (int l = s->l1 - 1; l >= s->l0; l--) {
    if (l % 2 == 0)
      dense_backward(s, l, a, dx);
    else
      moe_backward(s, l, a, dx);
    attn_backward(s, l, a, dx);
  }
  if (s->first)
    embed_backward(s, i, dx);
  else
    memcpy(gradInput, dx, nt * sizeof(float));
  free(dx);
  return loomSuccess;
}

/* W: the linear layers' weight gradients (the expert, router and embedding gradients, which
 * are cheap, were added in B). */
static loomResult_t cb_weight(void* user, int stage, int i, loomStream_t stream) {
  struct stage* s = user;
  wgrad_run(s->acts[i]);
  free(s->acts[i]);
  s->acts[i] = NULL;
  return loomSuccess;
}

/* One training step of the stage under its runner; returns the rank's share of the loss sum. */
static double stage_step(struct stage* s, loomPipeRunner_t runner, int step) {
  memset(s->grads, 0, (size_t)s->zi.totalElems * sizeof(float));
  s->loss = 0;
  loomPipeCallbacks cb = {cb_forward, cb_backward, cb_weight, s};
  CHECK(loomPipeRunnerRun(runner, &cb, NULL));
  stage_update(s, step);
  return s->loss;
}

/* A runner of m microbatches over pp (p stages, one per rank). */
static void runner_create(struct stage* s, loomPipeKind_t kind, int p, loomPipeSchedule_t* sched,
                          loomPipeRunner_t* runner) {
  size_t act[1] = {(size_t)s->st * HIDDEN * sizeof(float)};
  CHECK(loomPipeScheduleCreate(kind, p, s->m, 1, sched));
  CHECK(loomPipeRunnerCreate(*sched, act, runner, s->pl->pp));
}

/* ---- Main --------------------------------------------------------------------------------- */

static int parse(int argc, char** argv, int sizes[], int* fold, int* zb, int* steps) {
  const char* keys = "dpcte";
  for (int d = 0; d < loomMeshNumDims; d++) sizes[d] = 1;
  for (int i = 1; i < argc; i++) {
    const char* k = argv[i][0] == '-' ? strchr(keys, argv[i][1]) : NULL;
    if (!strcmp(argv[i], "-f"))
      *fold = 1;
    else if (!strcmp(argv[i], "-z"))
      *zb = 1;
    else if (!strcmp(argv[i], "-s") && i + 1 < argc)
      *steps = atoi(argv[++i]);
    else if (k != NULL && argv[i][1] != 0 && argv[i][2] == 0 && i + 1 < argc)
      sizes[k - keys] = atoi(argv[++i]); /* keys are in loomMeshDim_t order */
    else
      return 0;
  }
  return 1;
}

/* The sizes this model allows: whole layers per stage, whole heads, features, vocabulary and
 * SP tokens per tp rank, a zig-zag CP split, whole experts per EP rank, and the single-rank
 * run's microbatches (every replica's) within MAXMB. */
static int sizes_ok(const int sz[], int fold, int n) {
  int prod = 1;
  for (int d = 0; d < loomMeshNumDims; d++) prod *= sz[d] >= 1 ? sz[d] : 0;
  if (prod != n) return 0;
  int ep = fold ? sz[loomMeshCp] : sz[loomMeshEp], sl = SEQ / sz[loomMeshCp];
  return LAYERS % sz[loomMeshPp] == 0 && SEQ % (2 * sz[loomMeshCp]) == 0 &&
         sl % sz[loomMeshTp] == 0 && HEADS % sz[loomMeshTp] == 0 && FFN % sz[loomMeshTp] == 0 &&
         VOCAB % sz[loomMeshTp] == 0 && EXPERTS % ep == 0 &&
         sz[loomMeshDp] * sz[loomMeshEp] * MICRO <= MAXMB && (!fold || sz[loomMeshEp] == 1);
}

int main(int argc, char** argv) {
  int sizes[loomMeshNumDims], fold = 0, zb = 0, steps = 10;
  loomComm_t world;
  CHECK(loomCommInitFromEnv(&world, NULL));
  int rank, n;
  CHECK(loomCommUserRank(world, &rank));
  CHECK(loomCommCount(world, &n));
  if (!parse(argc, argv, sizes, &fold, &zb, &steps) || steps < 1 || !sizes_ok(sizes, fold, n)) {
    if (rank == 0)
      fprintf(stderr,
              "train5d: usage: [-d DP] [-p PP] [-c CP] [-t TP] [-e EP] [-f] [-z] [-s STEPS]; "
              "sizes must multiply to %d ranks and divide the model\n",
              n);
    return 2;
  }
  struct place pl;
  loomMesh_t mesh;
  place_create(&pl, &mesh, world, sizes, fold);
  int pp = sizes[loomMeshPp], replicas = sizes[loomMeshDp] * sizes[loomMeshEp];
  struct stage par;
  stage_init(&par, &pl, LAYERS / pp);
  par.m = MICRO;
  par.rep0 = pl.coord[loomMeshDp] * sizes[loomMeshEp] + pl.coord[loomMeshEp];
  par.norm = (double)replicas * MICRO * SEQ;
  loomPipeSchedule_t sched, rsched = NULL;
  loomPipeRunner_t runner, rrunner = NULL;
  loomPipeKind_t kind = zb ? loomPipeZBH1 : loomPipe1F1B;
  stage_data(&par);
  runner_create(&par, kind, pp, &sched, &runner);
  /* The single-rank reference: rank 0 alone, one stage, every replica's microbatches. */
  loomComm_t solo = NULL;
  CHECK(loomCommSplit(world, rank == 0 ? 0 : LOOM_SPLIT_NOCOLOR, 0, &solo, NULL));
  struct place rpl;
  struct stage ref;
  if (solo != NULL) {
    place_solo(&rpl, solo);
    stage_init(&ref, &rpl, LAYERS);
    ref.m = replicas * MICRO;
    ref.rep0 = 0;
    ref.norm = par.norm;
    stage_data(&ref);
    runner_create(&ref, kind, 1, &rsched, &rrunner);
    printf(
        "# train5d: %d ranks = dp %d x pp %d x cp %d x tp %d (SP) x ep %d; MoE EP group %s "
        "(%d); %s, %d microbatches; ZeRO-1 Adam; cross entropy per token\n"
        "# step  loss(5-D)  loss(1 rank)  relative difference\n",
        n, sizes[loomMeshDp], pp, sizes[loomMeshCp], sizes[loomMeshTp], sizes[loomMeshEp],
        fold ? "cp" : "ep", pl.ep, zb ? "ZB-H1" : "1F1B", MICRO);
  }
  for (int step = 1; step <= steps; step++) {
    double part = stage_step(&par, runner, step), total;
    CHECK(loomAllReduce(&part, &total, 1, loomFloat64, loomSum, world, NULL));
    if (solo == NULL) continue;
    double rl = stage_step(&ref, rrunner, step);
    printf("%6d  %9.7f  %12.7f  %.2e\n", step, total / par.norm, rl / par.norm,
           fabs(total - rl) / rl);
    fflush(stdout);
  }
  CHECK(loomPipeRunnerDestroy(runner));
  CHECK(loomPipeScheduleDestroy(sched));
  stage_free(&par);
  if (solo != NULL) {
    CHECK(loomPipeRunnerDestroy(rrunner));
    CHECK(loomPipeScheduleDestroy(rsched));
    stage_free(&ref);
    loomCommDestroy(solo);
  }
  loomMeshDestroy(mesh);
  loomCommDestroy(world);
  return 0;
}
