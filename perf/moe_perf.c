/* moe_perf - MoE expert-parallel dispatch and combine (libloom_parallel, PARALLEL.md section 5)
 * against a plain loomAlltoAllv of the same bytes with the same counts, side by side.
 *
 *   loomrun -n 4 moe_perf [-D] [-t TOKENS] [-H HIDDEN] [-k TOPK] [-e EXPERTS] [-d DTYPE]
 *                         [-a ALIGN] [-n ITERS] [-w WARMUP]
 *
 * Every rank routes TOKENS tokens (512) of HIDDEN elements (1024) of DTYPE (bf16; also fp8, f16,
 * f32, f64) to TOPK (8) distinct experts out of EXPERTS (64), uniformly at random (seeded by
 * rank); -D is DeepSeek-V3's shape, -t 4096 -H 7168 -k 8 -e 64 (later flags override it). Variants:
 *   dispatch          loomMoeDispatch: rows packed once in the receivers' order, one message
 *                     per (peer, local expert) segment landing at its final rows
 *   a2av+permute      the other way to get the same layout: the same packing, one
 *                     loomAlltoAllv into a scratch buffer (source-major), then a permutation
 *                     of the (source, expert) blocks into the expert-major layout
 *   a2av              loomAlltoAllv alone of the same bytes with the same counts (the floor)
 *   combine           loomMoeCombine, weighted: rows back, then the per-token sums (not
 *                     for fp8: combine takes float types)
 *   a2av-back         loomAlltoAllv alone of the reverse exchange
 * Dropless (the a2av variants need every routed pair); ALIGN pads each local expert's rows.
 * Bandwidth as DeepEP reports it: bytes of token rows this rank receives (dispatch) or sends
 * back (combine) per second; every row is one (token, expert) pair here, since Loom does not
 * deduplicate tokens per rank. A time is the median over ITERS iterations of the slowest rank,
 * after WARMUP unmeasured ones. Host memory, stream NULL; runs alone too (one rank). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom.h"
#include "loom_parallel.h"
#include "par_bench.h"

struct opts {
  int64_t tokens, hidden, align;
  int topk, experts, iters, warmup;
  loomDataType_t dt;
  size_t es;
};

struct bench {
  const struct opts* o;
  loomComm_t comm;
  int rank, nranks, El;
  loomMoeHandle_t h;
  loomMoeInfo info;
  int64_t* idx; /* [T*K] */
  float* w;     /* [T*K] */
  char *x, *recv, *out, *send, *scratch;
  size_t rb;                        /* bytes of a row */
  size_t *sc, *sd, *rc, *rd;        /* all-to-all-v counts, in elements */
  int64_t *seg, *seg_src, *seg_dst; /* [P*El] rows, source-major and final row */
  int64_t* order;                   /* [pairs] the token of each send row */
};

static int parse_dtype(const char* s, struct opts* o) {
  const struct {
    const char* name;
    loomDataType_t dt;
    size_t es;
  } t[] = {{"bf16", loomBfloat16, 2},
           {"f16", loomFloat16, 2},
           {"f32", loomFloat32, 4},
           {"f64", loomFloat64, 8},
           {"fp8", loomFloat8e4m3, 1}};
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
    if (strcmp(s, t[i].name) == 0) {
      o->dt = t[i].dt;
      o->es = t[i].es;
      return 0;
    }
  return -1;
}

static int parse_opts(int argc, char** argv, struct opts* o) {
  *o = (struct opts){512, 1024, 1, 8, 64, 20, 5, loomBfloat16, 2};
  int c, bad = 0;
  while ((c = getopt(argc, argv, "t:H:k:e:d:a:n:w:Dh")) != -1) {
    switch (c) {
      case 'D':
        o->tokens = 4096, o->hidden = 7168, o->topk = 8, o->experts = 64;
        break;
      case 't':
        o->tokens = atoll(optarg);
        break;
      case 'H':
        o->hidden = atoll(optarg);
        break;
      case 'k':
        o->topk = atoi(optarg);
        break;
      case 'e':
        o->experts = atoi(optarg);
        break;
      case 'd':
        bad |= parse_dtype(optarg, o);
        break;
      case 'a':
        o->align = atoll(optarg);
        break;
      case 'n':
        o->iters = atoi(optarg);
        break;
      case 'w':
        o->warmup = atoi(optarg);
        break;
      default:
        return -1;
    }
  }
  if (bad || o->tokens < 0 || o->hidden < 1 || o->topk < 1 || o->topk > o->experts ||
      o->align < 1 || o->iters < 1 || o->warmup < 0 || optind != argc)
    return -1;
  return 0;
}

/* ---- Setup ------------------------------------------------------------------------------- */

static int fail(struct bench* b, const char* what, loomResult_t r) {
  fprintf(stderr, "moe_perf: rank %d: %s failed: %s: %s\n", b->rank, what, loomGetErrorString(r),
          loomGetLastError(b->comm));
  return 1;
}

/* Distinct experts per token by a partial Fisher-Yates shuffle; weights in (0, 1]. */
static void routing_make(struct bench* b) {
  int E = b->o->experts, K = b->o->topk;
  int* perm = malloc((size_t)E * sizeof(int));
  uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(b->rank + 1);
  for (int e = 0; e < E; e++) perm[e] = e;
  for (int64_t t = 0; t < b->o->tokens; t++)
    for (int k = 0; k < K; k++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      int j = k + (int)((s >> 33) % (uint64_t)(E - k)), tmp = perm[k];
      perm[k] = perm[j];
      perm[j] = tmp;
      b->idx[t * K + k] = perm[k];
      b->w[t * K + k] = (float)((s >> 40) % 1000 + 1) / 1000.0f;
    }
  free(perm);
}

/* The a2av variants' counts, from the handle's info and one count exchange of their own (the
 * bench needs the per-(source, expert) blocks the handle keeps to itself). */
static loomResult_t a2av_setup(struct bench* b) {
  int P = b->nranks, El = b->El, K = b->o->topk;
  int64_t* cnt = calloc((size_t)P * El, sizeof(int64_t));
  for (int64_t i = 0; i < b->o->tokens * K; i++) cnt[b->idx[i]]++;
  int64_t pairs = 0, at = 0;
  for (int e = 0; e < P * El; e++) pairs += cnt[e];
  b->order = malloc((size_t)(pairs ? pairs : 1) * sizeof(int64_t));
  for (int e = 0; e < P * El; e++) /* the send order: expert, then token */
    for (int64_t i = 0; i < b->o->tokens * K; i++)
      if (b->idx[i] == e) b->order[at++] = i / K;
  loomResult_t r = loomAlltoAll(cnt, b->seg, (size_t)El, loomInt64, b->comm, NULL);
  free(cnt);
  size_t H = (size_t)b->o->hidden, soff = 0, roff = 0, src = 0;
  for (int q = 0; q < P; q++) {
    b->sc[q] = (size_t)b->info.sendRows[q] * H;
    b->rc[q] = (size_t)b->info.recvRows[q] * H;
    b->sd[q] = soff;
    b->rd[q] = roff;
    soff += b->sc[q];
    roff += b->rc[q];
  }
  for (int q = 0; q < P; q++)
    for (int j = 0; j < El; j++) {
      int64_t before = 0; /* rows of expert j from ranks below q */
      for (int p = 0; p < q; p++) before += b->seg[p * El + j];
      b->seg_src[q * El + j] = (int64_t)src;
      b->seg_dst[q * El + j] = b->info.expertOffsets[j] + before;
      src += (size_t)b->seg[q * El + j];
    }
  return r;
}

static int bench_setup(struct bench* b) {
  const struct opts* o = b->o;
  int64_t T = o->tokens, K = o->topk;
  b->idx = malloc((size_t)(T * K + 1) * sizeof(int64_t));
  b->w = malloc((size_t)(T * K + 1) * sizeof(float));
  if (!b->idx || !b->w) return fail(b, "malloc", loomSystemError);
  routing_make(b);
  int64_t shape[2] = {T, K};
  loomTensor ti, tw;
  loomTensorMake(b->idx, loomInt64, 2, shape, &ti);
  loomTensorMake(b->w, loomFloat32, 2, shape, &tw);
  loomMoeOpts mo = LOOM_MOE_OPTS_INIT;
  mo.numExperts = o->experts;
  mo.expertAlignment = o->align;
  loomResult_t r = loomMoeLayoutCreate(&ti, &tw, &b->h, &mo, b->comm, NULL);
  if (r != loomSuccess) return fail(b, "loomMoeLayoutCreate", r);
  loomMoeGetInfo(b->h, &b->info);
  b->El = b->info.numLocalExperts;
  b->rb = (size_t)o->hidden * o->es;
  size_t R = (size_t)b->info.numRecvRows, P = (size_t)b->nranks, pairs = 0;
  for (size_t q = 0; q < P; q++) pairs += (size_t)b->info.sendRows[q];
  b->x = calloc((size_t)T + 1, b->rb);
  b->out = calloc((size_t)T + 1, b->rb);
  b->recv = calloc(R + 1, b->rb);
  b->scratch = calloc(R + 1, b->rb);
  b->send = calloc(pairs + 1, b->rb);
  b->sc = malloc(4 * P * sizeof(size_t));
  b->seg = malloc(3 * P * (size_t)b->El * sizeof(int64_t));
  if (!b->x || !b->out || !b->recv || !b->scratch || !b->send || !b->sc || !b->seg)
    return fail(b, "malloc", loomSystemError);
  b->sd = b->sc + P;
  b->rc = b->sc + 2 * P;
  b->rd = b->sc + 3 * P;
  b->seg_src = b->seg + P * (size_t)b->El;
  b->seg_dst = b->seg + 2 * P * (size_t)b->El;
  r = a2av_setup(b);
  return r == loomSuccess ? 0 : fail(b, "the a2av count exchange", r);
}

/* ---- The variants ------------------------------------------------------------------------ */

static loomTensor rows_tensor(void* data, loomDataType_t dt, int64_t rows, int64_t hidden) {
  int64_t shape[2] = {rows, hidden};
  loomTensor t;
  loomTensorMake(data, dt, 2, shape, &t);
  return t;
}

static loomResult_t run_dispatch(struct bench* b) {
  loomTensor x = rows_tensor(b->x, b->o->dt, b->o->tokens, b->o->hidden);
  loomTensor r = rows_tensor(b->recv, b->o->dt, b->info.numRecvRows, b->o->hidden);
  return loomMoeDispatch(b->h, &x, NULL, &r, NULL, NULL);
}

static loomResult_t run_combine(struct bench* b) {
  loomDataType_t dt = b->o->dt;
  loomTensor y = rows_tensor(b->recv, dt, b->info.numRecvRows, b->o->hidden);
  loomTensor o = rows_tensor(b->out, dt, b->o->tokens, b->o->hidden);
  int64_t shape[2] = {b->o->tokens, b->o->topk};
  loomTensor w;
  loomTensorMake(b->w, loomFloat32, 2, shape, &w);
  return loomMoeCombine(b->h, &y, &w, &o, NULL);
}

static loomResult_t run_a2av(struct bench* b) {
  return loomAlltoAllv(b->send, b->sc, b->sd, b->scratch, b->rc, b->rd, b->o->dt, b->comm, NULL);
}

static loomResult_t run_a2av_back(struct bench* b) {
  return loomAlltoAllv(b->scratch, b->rc, b->rd, b->send, b->sc, b->sd, b->o->dt, b->comm, NULL);
}

static loomResult_t run_a2av_permute(struct bench* b) {
  int64_t pairs = (int64_t)(b->sd[b->nranks - 1] + b->sc[b->nranks - 1]) / b->o->hidden;
  for (int64_t s = 0; s < pairs; s++)
    memcpy(b->send + (size_t)s * b->rb, b->x + (size_t)b->order[s] * b->rb, b->rb);
  loomResult_t r = run_a2av(b);
  for (int j = 0; j < b->El; j++) /* padding rows, then the (source, expert) blocks */
    memset(b->recv + (size_t)(b->info.expertOffsets[j] + b->info.expertCounts[j]) * b->rb, 0,
           (size_t)(b->info.expertOffsets[j + 1] - b->info.expertOffsets[j] -
                    b->info.expertCounts[j]) *
               b->rb);
  for (int q = 0; q < b->nranks * b->El && r == loomSuccess; q++)
    memcpy(b->recv + (size_t)b->seg_dst[q] * b->rb, b->scratch + (size_t)b->seg_src[q] * b->rb,
           (size_t)b->seg[q] * b->rb);
  return r;
}

/* A variant: fn run on b, timed by pb_median. */
struct variant_call {
  struct bench* b;
  loomResult_t (*fn)(struct bench*);
};

static loomResult_t variant_call_run(void* arg) {
  struct variant_call* c = arg;
  return c->fn(c->b);
}

static loomResult_t time_variant(struct bench* b, loomResult_t (*fn)(struct bench*),
                                 double* median_s) {
  struct variant_call c = {b, fn};
  return pb_median(b->comm, b->o->warmup, b->o->iters, variant_call_run, &c, median_s);
}

/* ---- Main -------------------------------------------------------------------------------- */

static double layout_time(struct bench* b) {
  int64_t shape[2] = {b->o->tokens, b->o->topk};
  loomTensor ti;
  loomTensorMake(b->idx, loomInt64, 2, shape, &ti);
  loomMoeOpts mo = LOOM_MOE_OPTS_INIT;
  mo.numExperts = b->o->experts;
  mo.expertAlignment = b->o->align;
  double best = 1e30;
  for (int i = 0; i < 5; i++) {
    loomMoeHandle_t h = NULL;
    double t0 = pb_now_s();
    if (loomMoeLayoutCreate(&ti, NULL, &h, &mo, b->comm, NULL) != loomSuccess) return -1;
    double t = pb_now_s() - t0;
    best = t < best ? t : best;
    loomMoeHandleDestroy(h);
  }
  return best;
}

static int bench_run(struct bench* b) {
  struct {
    const char* name;
    loomResult_t (*fn)(struct bench*);
    int back;
  } v[] = {{"dispatch", run_dispatch, 0},
           {"a2av+permute", run_a2av_permute, 0},
           {"a2av", run_a2av, 0},
           {"combine", run_combine, 1},
           {"a2av-back", run_a2av_back, 1}};
  int nv = b->o->dt == loomFloat8e4m3 ? 3 : 5; /* fp8: dispatch only */
  double t[5] = {0}, lt = layout_time(b);
  for (int i = 0; i < nv; i++) {
    loomResult_t r = time_variant(b, v[i].fn, &t[i]);
    if (r != loomSuccess) return fail(b, v[i].name, r);
  }
  int64_t rows = 0, all = 0; /* the pairs received, padding excluded */
  for (int j = 0; j < b->El; j++) rows += b->info.expertCounts[j];
  loomAllReduce(&rows, &all, 1, loomInt64, loomSum, b->comm, NULL);
  if (b->rank != 0) return 0;
  double bytes = (double)all / b->nranks * (double)b->rb; /* per rank, on average */
  printf("# moe_perf: %d ranks, %lld tokens x %lld hidden, top-%d of %d experts, %zu-byte rows\n",
         b->nranks, (long long)b->o->tokens, (long long)b->o->hidden, b->o->topk, b->o->experts,
         b->rb);
  printf("# layout create (count exchange included), best of 5: %.3f ms\n", lt * 1e3);
  printf("#  %-14s %10s %9s %12s\n", "variant", "time(ms)", "GB/s", "vs a2av");
  for (int i = 0; i < 5; i++) {
    if (t[i] <= 0) continue;
    double base = v[i].back ? t[4] : t[2];
    printf("   %-14s %10.3f %9.2f %12.3f\n", v[i].name, t[i] * 1e3, bytes / t[i] / 1e9,
           base > 0 ? t[i] / base : 0.0);
  }
  return 0;
}

int main(int argc, char** argv) {
  struct opts o;
  if (parse_opts(argc, argv, &o) != 0) {
    fprintf(stderr,
            "usage: moe_perf [-D (4096 x 7168, top-8 of 64)] [-t TOKENS (512)] [-H HIDDEN (1024)]\n"
            "                [-k TOPK (8)] [-e EXPERTS (64)] [-d bf16|f16|f32|f64|fp8 (bf16)]\n"
            "                [-a ALIGN (1)] [-n ITERS (20)] [-w WARMUP (5)]\n");
    return 2;
  }
  struct bench b = {.o = &o};
  loomResult_t r = pb_comm_open("moe_perf", &b.comm);
  if (r != loomSuccess) return fail(&b, "opening the communicator", r);
  loomCommUserRank(b.comm, &b.rank);
  loomCommCount(b.comm, &b.nranks);
  int rc = bench_setup(&b);
  if (rc == 0) rc = bench_run(&b);
  if (rc == 0 && (r = loomCommFinalize(b.comm)) != loomSuccess)
    rc = fail(&b, "loomCommFinalize", r);
  loomMoeHandleDestroy(b.h);
  free(b.idx);
  free(b.w);
  free(b.x);
  free(b.out);
  free(b.recv);
  free(b.scratch);
  free(b.send);
  free(b.sc);
  free(b.seg);
  free(b.order);
  loomCommDestroy(b.comm);
  return rc;
}
