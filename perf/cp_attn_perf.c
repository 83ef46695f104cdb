/* cp_attn_perf - context-parallel attention (PARALLEL.md section 4) on host memory, side by
 * side in one run:
 *
 *   loomrun -n P cp_attn_perf [-s SEQ] [-b BATCH] [-q HQ] [-k HKV] [-d DIM] [-c CAUSAL]
 *                             [-t float32|float64] [-n ITERS] [-w WARMUP]
 *
 * q [B, SEQ/P, HQ, DIM], k and v [B, SEQ/P, HKV, DIM] on each rank. Rows:
 *   compute-fwd, compute-fwdbwd  the ring's kernel calls (every block the local queries meet,
 *                                fully masked ones skipped) with no communication
 *   ring-fwd, ring-fwdbwd        loomCpRing, contiguous and zig-zag layouts
 *   allgather-*, ulysses-*       loomCpAllGatherKv and loomCpUlysses (Ulysses needs HQ and HKV
 *                                divisible by P)
 *   kernel, gemm                 loomAttnKernelReference's forward on one local block (not
 *                                causal) against the two plain GEMMs of its shapes per head
 *                                (S = Q K^T, O = P V) through loomGemmDefault
 * ring/compute near 1.0 means the transfers hide behind the compute. A time is the median over
 * ITERS of the slowest rank's time; GFLOP/s counts 4*B*HQ*Sq*Skv*DIM per forward (halved when
 * causal), 3.5 times that for forward+backward. Set OPENBLAS_NUM_THREADS (1 when ranks share
 * few cores). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom.h"
#include "loom_parallel.h"
#include "par_bench.h"

struct cfg {
  int64_t seq, batch, hq, hkv, dim;
  int causal, iters, warmup;
  loomDataType_t dtype;
};

struct run {
  const struct cfg* c;
  loomComm_t comm;
  int rank, P;
  int64_t L;                                      /* local length */
  loomTensor q, k, v, out, lse, dout, dq, dk, dv; /* the call's tensors */
  loomTensor bo, bl, bdq, bdk, bdv;               /* one block's accumulation-type results */
  void *ga, *gb, *gc;                             /* plain GEMM operands */
  loomAttnOpts o;
};

/* The start positions of rank s's runs (1 contiguous, 2 zig-zag) and their length. */
static int runs(const struct run* r, loomCpLayout_t l, int s, int64_t start[2], int64_t* len) {
  if (l == loomCpZigzag) {
    *len = r->L / 2;
    start[0] = s * *len, start[1] = (2 * r->P - 1 - s) * *len;
    return 2;
  }
  *len = r->L, start[0] = s * r->L;
  return 1;
}

static loomTensor rows(const loomTensor* t, int64_t start, int64_t len) {
  loomTensor s;
  loomTensorSlice(t, 1, start, len, &s);
  return s;
}

/* The ring's kernel calls with the local K/V standing in for every rank's. */
static loomResult_t compute_only(struct run* r, loomCpLayout_t l, int bwd) {
  const loomAttnKernel* k = loomAttnKernelReference();
  int64_t qs[2], ks[2], len;
  int nq = runs(r, l, r->rank, qs, &len);
  double scale = 1.0 / sqrt((double)r->c->dim);
  loomResult_t res = loomSuccess;
  for (int t = 0; t < r->P && res == loomSuccess; t++) {
    int nk = runs(r, l, (r->rank - t + r->P) % r->P, ks, &len);
    for (int a = 0; a < nq && res == loomSuccess; a++)
      for (int b = 0; b < nk && res == loomSuccess; b++) {
        if (r->c->causal && ks[b] > qs[a] + len - 1) continue;
        loomTensor q = rows(&r->q, a * len, len), kk = rows(&r->k, b * len, len),
                   v = rows(&r->v, b * len, len), o = rows(&r->out, a * len, len),
                   d = rows(&r->dout, a * len, len), bo = rows(&r->bo, 0, len),
                   bdq = rows(&r->bdq, 0, len), bdk = rows(&r->bdk, 0, len),
                   bdv = rows(&r->bdv, 0, len), bl = r->bl;
        bl.shape[2] = len;
        res = k->forward(k->ctx, &q, &kk, &v, qs[a], ks[b], r->c->causal, scale, &bo, &bl, NULL);
        if (res == loomSuccess && bwd)
          res = k->backward(k->ctx, &q, &kk, &v, &o, &d, &bl, qs[a], ks[b], r->c->causal, scale,
                            &bdq, &bdk, &bdv, NULL);
      }
  }
  return res;
}

/* The two GEMMs per (batch, head) of one Sq x Skv x D block. */
static loomResult_t gemm_only(struct run* r) {
  const loomGemm* g = loomGemmDefault();
  int64_t L = r->L, D = r->c->dim;
  loomDataType_t acc = r->c->dtype;
  loomResult_t res = loomSuccess;
  for (int64_t i = 0; i < r->c->batch * r->c->hq && res == loomSuccess; i++) {
    res = g->fn(g->ctx, 0, 1, L, L, D, 1.0, r->ga, D, r->gb, D, 0, r->gc, L, acc, NULL);
    if (res == loomSuccess)
      res = g->fn(g->ctx, 0, 0, L, D, L, 1.0, r->gc, L, r->gb, D, 0, r->ga, D, acc, NULL);
  }
  return res;
}

enum variant {
  V_COMPUTE_F,
  V_COMPUTE_FB,
  V_RING_F,
  V_RING_FB,
  V_RING_ZZ_F,
  V_RING_ZZ_FB,
  V_AG_F,
  V_AG_FB,
  V_UL_F,
  V_UL_FB,
  V_KERNEL,
  V_GEMM,
  V_COUNT
};
static const char* const names[V_COUNT] = {"compute-fwd",    "compute-fwdbwd",   "ring-fwd",
                                           "ring-fwdbwd",    "ring-zz-fwd",      "ring-zz-fwdbwd",
                                           "allgather-fwd",  "allgather-fwdbwd", "ulysses-fwd",
                                           "ulysses-fwdbwd", "kernel",           "gemm"};

static loomResult_t variant_run(struct run* r, enum variant v) {
  loomAttnOpts o = r->o;
  int bwd =
      v == V_COMPUTE_FB || v == V_RING_FB || v == V_RING_ZZ_FB || v == V_AG_FB || v == V_UL_FB;
  o.layout = v == V_RING_ZZ_F || v == V_RING_ZZ_FB ? loomCpZigzag : loomCpContiguous;
  o.algo = v == V_AG_F || v == V_AG_FB   ? loomCpAllGatherKv
           : v == V_UL_F || v == V_UL_FB ? loomCpUlysses
                                         : loomCpRing;
  if (v == V_COMPUTE_F || v == V_COMPUTE_FB) return compute_only(r, loomCpContiguous, bwd);
  if (v == V_GEMM) return gemm_only(r);
  if (v == V_KERNEL) {
    const loomAttnKernel* k = loomAttnKernelReference();
    return k->forward(k->ctx, &r->q, &r->k, &r->v, 0, 0, 0, 1.0 / sqrt((double)r->c->dim), &r->bo,
                      &r->bl, NULL);
  }
  loomResult_t res =
      loomCpAttentionForward(&r->q, &r->k, &r->v, &r->out, &r->lse, &o, r->comm, NULL);
  if (res == loomSuccess && bwd)
    res = loomCpAttentionBackward(&r->q, &r->k, &r->v, &r->out, &r->dout, &r->lse, &r->dq, &r->dk,
                                  &r->dv, &o, r->comm, NULL);
  return res;
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
  return pb_time(r->comm, r->rank, "cp_attn_perf", names[v], r->c->warmup, r->c->iters,
                 variant_call_run, &c);
}

static int parse(int argc, char** argv, struct cfg* c) {
  *c = (struct cfg){4096, 1, 8, 8, 64, 1, 5, 1, loomFloat32};
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* a = argv[i];
    long long v = atoll(argv[i + 1]);
    if (!strcmp(a, "-s"))
      c->seq = v;
    else if (!strcmp(a, "-b"))
      c->batch = v;
    else if (!strcmp(a, "-q"))
      c->hq = v;
    else if (!strcmp(a, "-k"))
      c->hkv = v;
    else if (!strcmp(a, "-d"))
      c->dim = v;
    else if (!strcmp(a, "-c"))
      c->causal = (int)v;
    else if (!strcmp(a, "-n"))
      c->iters = (int)v;
    else if (!strcmp(a, "-w"))
      c->warmup = (int)v;
    else if (!strcmp(a, "-t"))
      c->dtype = !strcmp(argv[i + 1], "float64") ? loomFloat64 : loomFloat32;
    else
      return -1;
  }
  return argc % 2 == 0 || c->seq < 1 || c->batch < 1 || c->hq < 1 || c->hkv < 1 || c->hq % c->hkv ||
                 c->dim < 1 || c->iters < 1 || c->warmup < 0
             ? -1
             : 0;
}

/* A tensor of shape s (3 or 4 dims) over fresh memory, filled with small values. */
static loomTensor tensor(loomDataType_t dt, int nd, int64_t a, int64_t b, int64_t c, int64_t d,
                         unsigned seed) {
  int64_t s[4] = {a, b, c, d}, n = a * b * c * (nd == 4 ? d : 1);
  size_t es = dt == loomFloat64 ? 8 : 4;
  char* p = malloc((size_t)n * es + 64);
  srand(seed);
  for (int64_t i = 0; i < n && p; i++) {
    double x = rand() / (double)RAND_MAX - 0.5;
    if (es == 8)
      ((double*)p)[i] = x;
    else
      ((float*)p)[i] = (float)x;
  }
  loomTensor t;
  loomTensorMake(p, dt, nd, s, &t);
  return t;
}

static int setup(struct run* r, const struct cfg* c) {
  int P = r->P;
  if (c->seq % (2 * P)) {
    if (r->rank == 0) fprintf(stderr, "cp_attn_perf: SEQ must divide by 2P = %d\n", 2 * P);
    return -1;
  }
  int64_t B = c->batch, L = c->seq / P, D = c->dim;
  loomDataType_t dt = c->dtype;
  unsigned s = 7u * (unsigned)r->rank;
  r->L = L;
  r->q = tensor(dt, 4, B, L, c->hq, D, s + 1), r->k = tensor(dt, 4, B, L, c->hkv, D, s + 2);
  r->v = tensor(dt, 4, B, L, c->hkv, D, s + 3), r->dout = tensor(dt, 4, B, L, c->hq, D, s + 4);
  r->out = tensor(dt, 4, B, L, c->hq, D, s + 5), r->lse = tensor(dt, 3, B, c->hq, L, 0, s + 6);
  r->dq = tensor(dt, 4, B, L, c->hq, D, 0), r->dk = tensor(dt, 4, B, L, c->hkv, D, 0);
  r->dv = tensor(dt, 4, B, L, c->hkv, D, 0), r->bo = tensor(dt, 4, B, L, c->hq, D, 0);
  r->bl = tensor(dt, 3, B, c->hq, L, 0, 0), r->bdq = tensor(dt, 4, B, L, c->hq, D, 0);
  r->bdk = tensor(dt, 4, B, L, c->hkv, D, 0), r->bdv = tensor(dt, 4, B, L, c->hkv, D, 0);
  size_t es = dt == loomFloat64 ? 8 : 4;
  r->ga = calloc((size_t)(L * D), es), r->gb = calloc((size_t)(L * D), es);
  r->gc = calloc((size_t)(L * L), es);
  loomAttnOpts o = LOOM_ATTN_OPTS_INIT;
  o.causal = c->causal;
  r->o = o;
  return r->q.data && r->dv.data && r->bdv.data && r->ga && r->gb && r->gc ? 0 : -1;
}

static void report(const struct run* r, const double* t) {
  const struct cfg* c = r->c;
  double full = 4.0 * (double)(c->batch * c->hq) * (double)r->L * (double)c->seq * (double)c->dim;
  double fwd = c->causal ? full / 2 : full, block = full / r->P;
  printf(
      "# cp_attn_perf: cp %d, B %lld, S %lld (local %lld), Hq %lld, Hkv %lld, D %lld, %s, "
      "%s, %d iterations\n",
      r->P, (long long)c->batch, (long long)c->seq, (long long)r->L, (long long)c->hq,
      (long long)c->hkv, (long long)c->dim, c->dtype == loomFloat64 ? "float64" : "float32",
      c->causal ? "causal" : "not causal", c->iters);
  printf("# %-18s %12s %12s\n", "variant", "time(ms)", "GFLOP/s");
  for (int v = 0; v < V_COUNT; v++) {
    if (t[v] < 0) {
      printf("  %-18s %12s %12s\n", names[v], "n/a", "n/a");
      continue;
    }
    int fb =
        v == V_COMPUTE_FB || v == V_RING_FB || v == V_RING_ZZ_FB || v == V_AG_FB || v == V_UL_FB;
    double f = v >= V_KERNEL ? block : fb ? 3.5 * fwd : fwd;
    printf("  %-18s %12.3f %12.2f\n", names[v], t[v] * 1e3, f / t[v] / 1e9);
  }
  printf(
      "# ring/compute: fwd %.3f, fwdbwd %.3f; zig-zag/contiguous ring: fwd %.3f, fwdbwd %.3f; "
      "kernel/gemm %.3f\n",
      t[V_RING_F] / t[V_COMPUTE_F], t[V_RING_FB] / t[V_COMPUTE_FB], t[V_RING_ZZ_F] / t[V_RING_F],
      t[V_RING_ZZ_FB] / t[V_RING_FB], t[V_KERNEL] / t[V_GEMM]);
}

int main(int argc, char** argv) {
  struct cfg c;
  if (parse(argc, argv, &c) != 0) {
    fprintf(stderr,
            "usage: loomrun -n P cp_attn_perf [-s SEQ] [-b BATCH] [-q HQ] [-k HKV] [-d DIM] "
            "[-c CAUSAL] [-t float32|float64] [-n ITERS] [-w WARMUP]\n");
    return 2;
  }
  struct run r = {.c = &c};
  loomResult_t res = loomCommInitFromEnv(&r.comm, NULL);
  if (res != loomSuccess) {
    fprintf(stderr, "cp_attn_perf: init: %s (%s)\n", loomGetErrorString(res),
            loomGetLastError(NULL));
    return 1;
  }
  loomCommUserRank(r.comm, &r.rank);
  loomCommCount(r.comm, &r.P);
  if (setup(&r, &c) != 0) return 1;
  double t[V_COUNT];
  for (int v = 0; v < V_COUNT; v++) {
    int ulysses = v == V_UL_F || v == V_UL_FB;
    t[v] = ulysses && (c.hq % r.P || c.hkv % r.P) ? -1 : variant_time(&r, (enum variant)v);
    if (t[v] < 0 && !ulysses) return 1;
  }
  if (r.rank == 0) report(&r, t);
  loomCommDestroy(r.comm);
  return 0;
}
