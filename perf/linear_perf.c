/* linear_perf - the sequence-parallel column-linear forward with its overlap (the input
 * gathered slab by slab around a ring while the GEMM of the slab already here runs) against
 * the same without overlap (all-gather, then one GEMM), side by side in one run.
 *
 *   loomrun -n 4 linear_perf [-s SEQ] [-b BATCH] [-h HIDDEN] [-f FFN] [-t float32|float64]
 *                            [-n ITERS] [-w WARMUP]
 *
 * Megatron's layout: x [SEQ/P, BATCH, HIDDEN] on each rank (SP along dim 0), w [FFN/P, HIDDEN],
 * y [SEQ, BATCH, FFN/P]. Four variants, each timed alone: "gemm" (the forward on the whole
 * gathered input, no communication: the compute), "allgather" (loomAllGatherDim of x: the
 * communication), "serial" (allgather then gemm) and "overlap" (loomColumnLinearForward with
 * sequenceParallel and overlap 1: the ring). achieved = max(gemm, allgather) / overlap: 1.0 is
 * perfect overlap. A time is the median over ITERS iterations of the slowest rank's time. Host
 * memory; set OPENBLAS_NUM_THREADS to choose the GEMM's threads (1 when ranks share few cores). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom.h"
#include "loom_parallel.h"
#include "par_bench.h"

struct cfg {
  int64_t seq, batch, hidden, ffn;
  loomDataType_t dtype;
  int iters, warmup;
};

struct run {
  const struct cfg* c;
  loomComm_t comm;
  int rank, nranks;
  loomTensor x, xfull, w, y;
  loomLinearOpts sp, plain;
};

enum variant { V_GEMM, V_ALLGATHER, V_SERIAL, V_OVERLAP, V_COUNT };
static const char* const variant_names[V_COUNT] = {"gemm", "allgather", "serial", "overlap"};

static loomResult_t variant_run(struct run* r, enum variant v) {
  loomResult_t res = loomSuccess;
  switch (v) {
    case V_GEMM:
      return loomColumnLinearForward(&r->xfull, &r->w, NULL, &r->y, NULL, &r->plain, r->comm, NULL);
    case V_ALLGATHER:
      return loomAllGatherDim(&r->x, &r->xfull, 0, NULL, r->comm, NULL);
    case V_SERIAL:
      res = loomAllGatherDim(&r->x, &r->xfull, 0, NULL, r->comm, NULL);
      if (res == loomSuccess)
        res =
            loomColumnLinearForward(&r->xfull, &r->w, NULL, &r->y, NULL, &r->plain, r->comm, NULL);
      return res;
    default:
      return loomColumnLinearForward(&r->x, &r->w, NULL, &r->y, NULL, &r->sp, r->comm, NULL);
  }
}

/* A variant on r, timed by pb_median. */
struct variant_call {
  struct run* r;
  enum variant v;
};

static loomResult_t variant_call_run(void* arg) {
  struct variant_call* c = arg;
  return variant_run(c->r, c->v);
}

/* The median over iterations of the slowest rank's time, in seconds; < 0 on an error. */
static double variant_time(struct run* r, enum variant v) {
  struct variant_call c = {r, v};
  return pb_time(r->comm, r->rank, "linear_perf", variant_names[v], r->c->warmup, r->c->iters,
                 variant_call_run, &c);
}

static int parse(int argc, char** argv, struct cfg* c) {
  *c = (struct cfg){2048, 1, 1024, 4096, loomFloat32, 10, 3};
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* a = argv[i];
    long long v = atoll(argv[i + 1]);
    if (!strcmp(a, "-s"))
      c->seq = v;
    else if (!strcmp(a, "-b"))
      c->batch = v;
    else if (!strcmp(a, "-h"))
      c->hidden = v;
    else if (!strcmp(a, "-f"))
      c->ffn = v;
    else if (!strcmp(a, "-n"))
      c->iters = (int)v;
    else if (!strcmp(a, "-w"))
      c->warmup = (int)v;
    else if (!strcmp(a, "-t"))
      c->dtype = !strcmp(argv[i + 1], "float64") ? loomFloat64 : loomFloat32;
    else
      return -1;
  }
  if (argc % 2 == 0 || c->seq < 1 || c->batch < 1 || c->hidden < 1 || c->ffn < 1 || c->iters < 1 ||
      c->warmup < 0)
    return -1;
  return 0;
}

static int setup(struct run* r, const struct cfg* c) {
  size_t es = c->dtype == loomFloat64 ? 8 : 4;
  int P = r->nranks;
  if (c->seq % P || c->ffn % P) {
    if (r->rank == 0) fprintf(stderr, "linear_perf: SEQ and FFN must divide by %d ranks\n", P);
    return -1;
  }
  int64_t sx[3] = {c->seq / P, c->batch, c->hidden}, sf[3] = {c->seq, c->batch, c->hidden};
  int64_t sw[2] = {c->ffn / P, c->hidden}, sy[3] = {c->seq, c->batch, c->ffn / P};
  size_t nx = (size_t)(sx[0] * sx[1] * sx[2]), nf = nx * (size_t)P;
  size_t nw = (size_t)(sw[0] * sw[1]), ny = (size_t)(sy[0] * sy[1] * sy[2]);
  char* x = malloc(nx * es);
  char* xf = malloc(nf * es);
  char* w = malloc(nw * es);
  char* y = malloc(ny * es);
  if (!x || !xf || !w || !y) return -1;
  srand(1 + r->rank);
  for (size_t i = 0; i < nx; i++) {
    double v = rand() / (double)RAND_MAX - 0.5;
    if (es == 8)
      ((double*)x)[i] = v;
    else
      ((float*)x)[i] = (float)v;
  }
  for (size_t i = 0; i < nw; i++) {
    double v = rand() / (double)RAND_MAX - 0.5;
    if (es == 8)
      ((double*)w)[i] = v;
    else
      ((float*)w)[i] = (float)v;
  }
  memset(xf, 0, nf * es);
  loomTensorMake(x, c->dtype, 3, sx, &r->x);
  loomTensorMake(xf, c->dtype, 3, sf, &r->xfull);
  loomTensorMake(w, c->dtype, 2, sw, &r->w);
  loomTensorMake(y, c->dtype, 3, sy, &r->y);
  loomLinearOpts def = LOOM_LINEAR_OPTS_INIT;
  r->plain = def;
  r->sp = def;
  r->sp.sequenceParallel = 1;
  r->sp.seqDim = 0;
  r->sp.overlap = 1;
  return 0;
}

int main(int argc, char** argv) {
  struct cfg c;
  if (parse(argc, argv, &c) != 0) {
    fprintf(stderr,
            "usage: loomrun -n P linear_perf [-s SEQ] [-b BATCH] [-h HIDDEN] [-f FFN] "
            "[-t float32|float64] [-n ITERS] [-w WARMUP]\n");
    return 2;
  }
  struct run r = {.c = &c};
  loomResult_t res = loomCommInitFromEnv(&r.comm, NULL);
  if (res != loomSuccess) {
    fprintf(stderr, "linear_perf: init: %s (%s)\n", loomGetErrorString(res),
            loomGetLastError(NULL));
    return 1;
  }
  loomCommUserRank(r.comm, &r.rank);
  loomCommCount(r.comm, &r.nranks);
  if (setup(&r, &c) != 0) return 1;
  double t[V_COUNT];
  for (int v = 0; v < V_COUNT; v++)
    if ((t[v] = variant_time(&r, (enum variant)v)) < 0) return 1;
  if (r.rank == 0) {
    double flops =
        2.0 * (double)c.seq * (double)c.batch * (double)c.hidden * (double)(c.ffn / r.nranks);
    printf("# linear_perf: tp %d, x [%lld/%d, %lld, %lld] %s, w [%lld/%d, %lld], %d iterations\n",
           r.nranks, (long long)c.seq, r.nranks, (long long)c.batch, (long long)c.hidden,
           c.dtype == loomFloat64 ? "float64" : "float32", (long long)c.ffn, r.nranks,
           (long long)c.hidden, c.iters);
    printf("# %-10s %12s %12s\n", "variant", "time(ms)", "GFLOP/s");
    for (int v = 0; v < V_COUNT; v++)
      printf("  %-10s %12.3f %12.2f\n", variant_names[v], t[v] * 1e3,
             v == V_ALLGATHER ? 0.0 : flops / t[v] / 1e9);
    double bound = t[V_GEMM] > t[V_ALLGATHER] ? t[V_GEMM] : t[V_ALLGATHER];
    printf("# achieved max(gemm, allgather)/overlap = %.3f; serial/overlap = %.3f\n",
           bound / t[V_OVERLAP], t[V_SERIAL] / t[V_OVERLAP]);
  }
  loomCommDestroy(r.comm);
  return 0;
}
