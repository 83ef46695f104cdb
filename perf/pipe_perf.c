/* pipe_perf - the pipeline runner (loomPipeRunnerRun) against the binding simulator
 * (loomPipeSimulate) for the same costs: what the runner itself adds.
 *
 *   loomrun -n 4 pipe_perf [-m MICROBATCHES] [-f US] [-b US] [-w US] [-s BYTES] [-n ITERS]
 *                          [-W WARMUP]
 *
 * Every kind of PARALLEL.md section 6 over the launcher's ranks (p = world size) with m
 * microbatches (2p by default, which every kind takes). The callbacks sleep f, b and w
 * microseconds (2000, 2000 and 1000 by default; the same for every stage, whatever the kind's
 * chunks) and time their own sleeps; stage outputs are BYTES (64 KiB by default). Per kind:
 * the run's time (the median over ITERS of the slowest rank's, after WARMUP unmeasured runs),
 * the simulator's makespan for the requested costs and for the callbacks' measured mean
 * durations (a sleep overshoots its request, by tens of microseconds on a loaded machine), and
 * the runner's overhead per microbatch: (measured - simulated with the measured durations) / m,
 * which is what the sends, receives and the runner's bookkeeping cost beyond the schedule. */
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
  int m, iters, warmup;
  double f_us, b_us, w_us;
  long bytes;
};

/* What the callbacks slept: sums and counts of F, B, W. */
struct slept {
  double sum[3];
  double count[3];
};

struct ctx {
  const struct opts* o;
  struct slept s;
};

static void nap(struct ctx* c, int op, double us) {
  double t0 = pb_now_s();
  struct timespec ts = {(time_t)(us / 1e6), (long)((us - (double)(time_t)(us / 1e6) * 1e6) * 1e3)};
  while (nanosleep(&ts, &ts) != 0) {
  }
  c->s.sum[op] += pb_now_s() - t0;
  c->s.count[op] += 1;
}

static loomResult_t cb_f(void* u, int s, int i, const void* in, void* out, loomStream_t st) {
  (void)s, (void)i, (void)in, (void)out, (void)st;
  struct ctx* c = u;
  nap(c, 0, c->o->f_us);
  return loomSuccess;
}

static loomResult_t cb_b(void* u, int s, int i, const void* go, void* gi, loomStream_t st) {
  (void)s, (void)i, (void)go, (void)gi, (void)st;
  struct ctx* c = u;
  nap(c, 1, c->o->b_us);
  return loomSuccess;
}

static loomResult_t cb_w(void* u, int s, int i, loomStream_t st) {
  (void)s, (void)i, (void)st;
  struct ctx* c = u;
  nap(c, 2, c->o->w_us);
  return loomSuccess;
}

static int parse_opts(int argc, char** argv, struct opts* o) {
  *o = (struct opts){0, 10, 2, 2000, 2000, 1000, 65536};
  int c;
  while ((c = getopt(argc, argv, "m:f:b:w:s:n:W:h")) != -1) {
    switch (c) {
      case 'm':
        o->m = atoi(optarg);
        break;
      case 'f':
        o->f_us = atof(optarg);
        break;
      case 'b':
        o->b_us = atof(optarg);
        break;
      case 'w':
        o->w_us = atof(optarg);
        break;
      case 's':
        o->bytes = atol(optarg);
        break;
      case 'n':
        o->iters = atoi(optarg);
        break;
      case 'W':
        o->warmup = atoi(optarg);
        break;
      default:
        return -1;
    }
  }
  return o->m < 0 || o->iters < 1 || o->warmup < 0 || o->bytes < 1 || o->f_us < 0 || o->b_us < 0 ||
                 o->w_us < 0 || optind != argc
             ? -1
             : 0;
}

/* One run of the runner; the sleeps counted from the first measured run on. */
struct kind_run {
  loomPipeRunner_t runner;
  loomPipeCallbacks cb;
  struct ctx* c;
  int runs, warmup;
};

static loomResult_t kind_run_once(void* arg) {
  struct kind_run* k = arg;
  if (k->runs++ == k->warmup) memset(&k->c->s, 0, sizeof(k->c->s));
  return loomPipeRunnerRun(k->runner, &k->cb, NULL);
}

/* One kind: the median of the slowest rank's run times, and the callbacks' sleeps summed over
 * ranks. */
static loomResult_t time_kind(const struct opts* o, loomPipeSchedule_t sched, int S,
                              loomComm_t comm, double* median_s, struct slept* all) {
  size_t* act = malloc(sizeof(size_t) * (size_t)(S > 1 ? S - 1 : 1));
  if (!act) return loomSystemError;
  for (int s = 0; s + 1 < S; s++) act[s] = (size_t)o->bytes;
  struct ctx c = {o, {{0}, {0}}};
  struct kind_run k = {NULL, {cb_f, cb_b, cb_w, &c}, &c, 0, o->warmup};
  loomResult_t r = loomPipeRunnerCreate(sched, act, &k.runner, comm);
  if (r == loomSuccess) r = pb_median(comm, o->warmup, o->iters, kind_run_once, &k, median_s);
  if (k.runner) loomPipeRunnerDestroy(k.runner);
  if (r == loomSuccess) r = loomAllReduce(&c.s, all, 6, loomFloat64, loomSum, comm, NULL);
  free(act);
  return r;
}

static const struct {
  loomPipeKind_t kind;
  const char* name;
  int v;
} KINDS[] = {{loomPipeAFAB, "AFAB", 1},
             {loomPipe1F1B, "1F1B", 1},
             {loomPipeInterleaved1F1B, "interleaved", 2},
             {loomPipeZBH1, "ZB-H1", 1},
             {loomPipeZBV, "ZB-V", 2},
             {loomPipeDualPipeV, "DualPipeV", 2}};

static double sim_ms(loomPipeSchedule_t sched, double f, double b, double w) {
  loomPipeCosts c = {f, b, w, 0};
  loomPipeStats st = {0, 0};
  if (loomPipeSimulate(sched, &c, &st, NULL, NULL) != loomSuccess) return -1;
  return st.makespan * 1e3;
}

static int bench_kind(const struct opts* o, int k, int p, int rank, loomComm_t comm) {
  int m = o->m > 0 ? o->m : 2 * p;
  loomPipeSchedule_t sched = NULL;
  if (loomPipeScheduleCreate(KINDS[k].kind, p, m, KINDS[k].v, &sched) != loomSuccess) {
    if (rank == 0) printf("%-12s %s\n", KINDS[k].name, loomGetLastError(NULL));
    return 0;
  }
  double med = 0;
  struct slept all;
  loomResult_t r = time_kind(o, sched, p * KINDS[k].v, comm, &med, &all);
  if (r != loomSuccess) {
    fprintf(stderr, "pipe_perf: rank %d: %s: %s: %s\n", rank, KINDS[k].name, loomGetErrorString(r),
            loomGetLastError(comm));
    loomPipeScheduleDestroy(sched);
    return 1;
  }
  double mean[3];
  for (int i = 0; i < 3; i++) mean[i] = all.count[i] > 0 ? all.sum[i] / all.count[i] : 0;
  double want = sim_ms(sched, o->f_us * 1e-6, o->b_us * 1e-6, o->w_us * 1e-6);
  double got = sim_ms(sched, mean[0], mean[1], mean[2]);
  if (rank == 0)
    printf("%-12s %3d %10.2f %12.2f %12.2f %9.3f %14.1f %6.0f %6.0f %6.0f\n", KINDS[k].name, m,
           med * 1e3, want, got, med * 1e3 / got, (med * 1e3 - got) * 1e3 / m, mean[0] * 1e6,
           mean[1] * 1e6, mean[2] * 1e6);
  loomPipeScheduleDestroy(sched);
  return 0;
}

int main(int argc, char** argv) {
  struct opts o;
  if (parse_opts(argc, argv, &o) != 0) {
    fprintf(stderr,
            "usage: pipe_perf [-m MICROBATCHES] [-f US] [-b US] [-w US] [-s BYTES] "
            "[-n ITERS] [-W WARMUP]\n");
    return 2;
  }
  loomComm_t comm = NULL;
  loomResult_t r = pb_comm_open("pipe_perf", &comm);
  if (r != loomSuccess) {
    fprintf(stderr, "pipe_perf: %s: %s\n", loomGetErrorString(r), loomGetLastError(NULL));
    return 1;
  }
  int rank = 0, p = 1;
  loomCommUserRank(comm, &rank);
  loomCommCount(comm, &p);
  if (rank == 0) {
    printf(
        "# pipe_perf: p %d, callbacks sleep f %.0f b %.0f w %.0f us, stage outputs %ld "
        "bytes, median of %d runs after %d\n",
        p, o.f_us, o.b_us, o.w_us, o.bytes, o.iters, o.warmup);
    printf("# %-10s %3s %10s %12s %12s %9s %14s %6s %6s %6s\n", "kind", "m", "run (ms)", "sim (ms)",
           "sim* (ms)", "run/sim*", "over/mb (us)", "f us", "b us", "w us");
    printf(
        "# sim: the simulator with the requested sleeps; sim*: with the callbacks' measured "
        "mean durations (the last three columns)\n");
  }
  int bad = 0;
  for (size_t k = 0; k < sizeof(KINDS) / sizeof(KINDS[0]) && !bad; k++)
    bad = bench_kind(&o, (int)k, p, rank, comm);
  loomCommDestroy(comm);
  return bad;
}
