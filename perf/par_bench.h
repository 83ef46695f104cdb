/* par_bench.h - what libloom_parallel's benchmarks share (zero_perf, linear_perf, cp_attn_perf,
 * moe_perf, pipe_perf): the clock, the communicator of the launcher's ranks, and a variant's
 * time as the median over iterations of the slowest rank's. Header-only, public API only: each
 * benchmark stays one file that builds against an installed Loom. */
#ifndef LOOM_PERF_PAR_BENCH_H
#define LOOM_PERF_PAR_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "loom.h"

static inline double pb_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline int pb_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Under a launcher (loomrun, mpirun, srun, torchrun) its communicator; alone, one rank. */
static inline loomResult_t pb_comm_open(const char* name, loomComm_t* comm) {
  const char* const launched[] = {"LOOM_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
                                  "PMI_SIZE", "SLURM_NTASKS"};
  for (size_t i = 0; i < sizeof(launched) / sizeof(launched[0]); i++) {
    if (getenv(launched[i]) == NULL) continue;
    loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
    cfg.commName = name;
    return loomCommInitFromEnv(comm, &cfg);
  }
  return loomCommInitAll(comm, 1, NULL);
}

/* body(arg) run warmup times unmeasured, then iters times, each run starting together on every
 * rank (a one-element all-reduce) and counting as the slowest rank's time; *median_s is the
 * median of those. body's error, or an all-reduce's, is returned as it came. */
static inline loomResult_t pb_median(loomComm_t comm, int warmup, int iters,
                                     loomResult_t (*body)(void*), void* arg, double* median_s) {
  double* t = calloc((size_t)iters, sizeof(double));
  if (t == NULL) return loomSystemError;
  float sync = 0;
  loomResult_t r = loomSuccess;
  for (int i = 0; i < warmup + iters && r == loomSuccess; i++) {
    r = loomAllReduce(&sync, &sync, 1, loomFloat32, loomSum, comm, NULL);
    double t0 = pb_now_s();
    if (r == loomSuccess) r = body(arg);
    if (i >= warmup) t[i - warmup] = pb_now_s() - t0;
  }
  if (r == loomSuccess) r = loomAllReduce(t, t, (size_t)iters, loomFloat64, loomMax, comm, NULL);
  if (r == loomSuccess) {
    qsort(t, (size_t)iters, sizeof(double), pb_cmp_double);
    *median_s = t[iters / 2];
  }
  free(t);
  return r;
}

/* pb_median in seconds, or < 0 after printing "tool: rank R: what: error (last error)". */
static inline double pb_time(loomComm_t comm, int rank, const char* tool, const char* what,
                             int warmup, int iters, loomResult_t (*body)(void*), void* arg) {
  double med = -1;
  loomResult_t res = pb_median(comm, warmup, iters, body, arg, &med);
  if (res == loomSuccess) return med;
  fprintf(stderr, "%s: rank %d: %s: %s (%s)\n", tool, rank, what, loomGetErrorString(res),
          loomGetLastError(comm));
  return -1;
}

#endif
