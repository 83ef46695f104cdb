/* calibrate.c - the constants of the cost model: measured on this host at
 * first use (about 1.6 seconds) and cached under the user's cache directory, or
 * read from LOOM_TUNING_FILE. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/debug.h"
#include "core/params.h"
#include "core/util.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_lines.h"
#include "topo/topo.h"
#include "topo/tune.h"

#define CAL_BYTES (16u << 20)  /* the largest point */
#define CAL_SLICE (256u << 10) /* LOOM_SLICE_SIZE's default */
#define CAL_SLOTS 4
#define CMA_PIECE (4u << 20)    /* as peer.c's cma_read */
#define CMA_BOUNCE (256u << 10) /* as peer.c's tp_peer_read: its bounce buffer */

static struct tune_consts consts_now;
static pthread_once_t consts_once = PTHREAD_ONCE_INIT;

size_t tune_cal_bytes(int point) {
  return (size_t)TUNE_CAL_FIRST << (2 * point);
}

/* ---- The bandwidths, measured as the plans move bytes ----
 *
 * Two threads stand for two ranks, each with a buffer of the point's size,
 * doing at once what two ranks of a plan do at once: sending its buffer to
 * the other through a FIFO of slices (the ring's and pairwise's steps: copy
 * in, copy out, the two directions sharing the memory system), reading the
 * other's buffer by process_vm_readv (the direct plans between processes,
 * both ranks reading each other), reading it a bounce buffer at a time and
 * folding each piece into its own (how one-shot and two-shot reduce what
 * they read: the read and the fold share the caches, and together ran at a
 * third to a half of what the read alone measured, on a machine where adding
 * the two figures made two-shot the tuner's choice at 2-3x the ring's time),
 * or reducing. A single thread's memcpy of a large buffer, what this
 * measured before, is not what a plan sees: two ranks copying at once, or
 * reading by cross-memory attach at once, share the caches and the memory
 * bus, and buffers that fit a cache copy several times faster than those
 * that do not. */

enum cal_kind { CAL_FIFO, CAL_CMA, CAL_REDUCE, CAL_CMA_REDUCE, CAL_KINDS };

/* Each kind's table in k, and its key in a tuning file (key@bytes). */
static const char* const table_keys[CAL_KINDS] = {"copy_gbps@", "cma_gbps@", "reduce_gbps@",
                                                  "cma_reduce_gbps@"};
static void tables_of(struct tune_consts* k, double* t[CAL_KINDS]) {
  t[CAL_FIFO] = k->copy_at;
  t[CAL_CMA] = k->cma_at;
  t[CAL_REDUCE] = k->reduce_at;
  t[CAL_CMA_REDUCE] = k->cma_reduce_at;
}

/* Every table of k zeroed (a tuning file without them, or no calibration). */
static void tables_clear(struct tune_consts* k) {
  double* t[CAL_KINDS];
  tables_of(k, t);
  for (int kind = 0; kind < CAL_KINDS; kind++) memset(t[kind], 0, sizeof(double) * TUNE_CAL_POINTS);
}

struct cal_fifo {
  char* slot[CAL_SLOTS];
  _Atomic uint64_t head, tail; /* slices written, slices read */
};

#define CAL_REPS_MAX 32
/* Runs before those that count: the first run of a pair of fresh threads on a virtual
 * machine's idle cores took milliseconds, and the next few were slower than the rest. */
#define CAL_WARM 2
/* Runs that count, at least: the best of three large ones read half of what the same pair
 * copied a few runs later. */
#define CAL_REPS_MIN 6
/* A run counts as undisturbed when each thread was on a core for at least
 * this much of it (its CPU time over the run's wall time). */
#define CAL_ON_CORE 0.85
/* How long a disturbed calibration's figures stay in the cache (consts_measure). */
#define CAL_DISTURBED_TTL_S 600

struct cal_pair {
  pthread_barrier_t bar;
  enum cal_kind kind;
  size_t bytes;
  int spin; /* cores for both: spin; else yield while waiting */
  int reps; /* runs, the best undisturbed one of which counts */
  char* src[2];
  char* dst[2];
  char* bounce[2];
  struct cal_fifo fifo[2];                    /* fifo[i]: thread i's sends */
  double wall_ns[2][CAL_REPS_MAX + CAL_WARM]; /* each thread's time of each run */
  double cpu_ns[2][CAL_REPS_MAX + CAL_WARM];  /* ... and how much of it the thread ran */
  int last_disturbed;                         /* the last measurement had no undisturbed run */
  _Atomic int failed;
  _Atomic int arrived[2]; /* runs each thread has reached the start of (cal_start) */
  size_t piece;           /* the piece of the buffers the next measurement starts at */
};

/* One poll that found nothing to do. idle counts them since the last that
 * did: a short spin (where spin allows), then the core goes to whoever else
 * wants it (with more threads than cores, as when every rank of a job
 * calibrates at once on a fresh machine, the peer this one waits for may be
 * waiting for the core). */
#define CAL_SPIN 2000
static void poll_pause(int* idle, int spin) {
  if (spin && ++*idle < CAL_SPIN)
    cpu_relax();
  else
    sched_yield();
}

/* One look of a wait of the calibration's: 1 once ready; 0 when it gave up, because
 * nothing was ready for a second here (never on a live machine: the partner is a thread of
 * this process) or because the partner gave up (*failed, which this sets too, so the
 * partner's next wait returns at once); -1: not yet, look again. No wait here is without a
 * deadline. since is 0 before the first look of a wait. */
static int cal_wait(_Atomic int* failed, int ready, int* idle, uint64_t* since, int spin) {
  if (ready) {
    *idle = 0;
    *since = 0;
    return 1;
  }
  /* The spin reads no clock: a look a few times dearer makes the spin as many times
   * longer, and where the pair shares a CPU every wait spins it out before it yields. */
  if (spin && *idle < CAL_SPIN) {
    poll_pause(idle, spin);
    return -1;
  }
  if (atomic_load_explicit(failed, memory_order_relaxed)) return 0;
  uint64_t now = time_now_ns();
  if (*since == 0) *since = now;
  if (now - *since > 1000000000ull) {
    atomic_store(failed, 1);
    return 0;
  }
  poll_pause(idle, spin);
  return -1;
}

/* Sends src[me] through fifo[me] while receiving the peer's from
 * fifo[peer] into dst[me], a slice at a time, as a step of a plan does. */
static void cal_fifo_run(struct cal_pair* cp, int me, size_t at) {
  struct cal_fifo *out = &cp->fifo[me], *in = &cp->fifo[1 - me];
  const char* src = cp->src[me] + at;
  char* dst = cp->dst[me] + at;
  size_t total = cp->bytes, sent = 0, got = 0;
  uint64_t s = 0, r = 0, since = 0;
  int idle = 0;
  while (sent < total || got < total) {
    int moved = 0;
    if (sent < total && s - atomic_load_explicit(&out->tail, memory_order_acquire) < CAL_SLOTS) {
      size_t n = LOOM_MIN(total - sent, (size_t)CAL_SLICE);
      memcpy(out->slot[s % CAL_SLOTS], src + sent, n);
      sent += n;
      atomic_store_explicit(&out->head, ++s, memory_order_release);
      moved = 1;
    }
    if (got < total && atomic_load_explicit(&in->head, memory_order_acquire) > r) {
      size_t n = LOOM_MIN(total - got, (size_t)CAL_SLICE);
      memcpy(dst + got, in->slot[r % CAL_SLOTS], n);
      got += n;
      atomic_store_explicit(&in->tail, ++r, memory_order_release);
      moved = 1;
    }
    if (cal_wait(&cp->failed, moved, &idle, &since, cp->spin) == 0) return;
  }
}

static int cal_cma_run(struct cal_pair* cp, int me, size_t at) {
  for (size_t off = at; off < at + cp->bytes; off += CMA_PIECE) {
    size_t n = LOOM_MIN(at + cp->bytes - off, (size_t)CMA_PIECE);
    struct iovec l = {cp->dst[me] + off, n}, rm = {cp->src[1 - me] + off, n};
    if (process_vm_readv(getpid(), &l, 1, &rm, 1, 0) != (ssize_t)n) return -1;
  }
  return 0;
}

/* dst[me] += the peer's src, read a bounce buffer at a time. */
static int cal_cma_reduce_run(struct cal_pair* cp, int me, size_t at) {
  for (size_t off = at; off < at + cp->bytes; off += CMA_BOUNCE) {
    size_t n = LOOM_MIN(at + cp->bytes - off, (size_t)CMA_BOUNCE);
    struct iovec l = {cp->bounce[me], n}, rm = {cp->src[1 - me] + off, n};
    if (process_vm_readv(getpid(), &l, 1, &rm, 1, 0) != (ssize_t)n) return -1;
    cpu_reduce(loomFloat32, loomSum, cp->dst[me] + off, cp->bounce[me], cp->dst[me] + off,
               n / sizeof(float));
  }
  return 0;
}

/* This thread's time on a core. */
static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Both threads start run rep together, spinning (where each has a core) up to a
 * millisecond: the barrier before it wakes the second thread through the kernel, tens of
 * microseconds later on a virtual machine, and a run of a small point timed from there
 * measured the wake-up as much as the copies. */
static void cal_start(struct cal_pair* cp, int me, int rep) {
  atomic_store_explicit(&cp->arrived[me], rep + 1, memory_order_release);
  uint64_t since = 0;
  while (cp->spin && atomic_load_explicit(&cp->arrived[1 - me], memory_order_acquire) <= rep) {
    cpu_relax();
    uint64_t now = time_now_ns();
    if (since == 0) since = now;
    if (now - since > 1000000ull) break;
  }
}

static void cal_side(struct cal_pair* cp, int me) {
  /* Each run takes the next piece of the buffers, as the perf tools (and
   * nccl-tests) move theirs from call to call: data that the last run left
   * in cache would flatter every way of moving it, a copy by the kernel most.
   * The pieces go on from one measurement to the next (piece): started again
   * at the first for each, the runs of a point found in cache what the
   * measurements before them had touched, the four buffers being twice the
   * last-level cache here, and a read by cross-memory attach of data out of
   * cache took three times as long as of data in it. */
  size_t pieces = LOOM_MAX((size_t)CAL_BYTES / cp->bytes, (size_t)1);
  for (int rep = 0; rep < cp->reps; rep++) {
    size_t at = cp->bytes * ((cp->piece + (size_t)rep) % pieces);
    pthread_barrier_wait(&cp->bar);
    cal_start(cp, me, rep);
    uint64_t c0 = thread_cpu_ns(), t0 = time_now_ns();
    if (cp->kind == CAL_FIFO) cal_fifo_run(cp, me, at);
    if (cp->kind == CAL_CMA && cal_cma_run(cp, me, at) != 0) atomic_store(&cp->failed, 1);
    if (cp->kind == CAL_CMA_REDUCE && cal_cma_reduce_run(cp, me, at) != 0)
      atomic_store(&cp->failed, 1);
    if (cp->kind == CAL_REDUCE)
      cpu_reduce(loomFloat32, loomSum, cp->dst[me] + at, cp->src[me] + at, cp->dst[me] + at,
                 cp->bytes / sizeof(float));
    cp->wall_ns[me][rep] = (double)(time_now_ns() - t0);
    cp->cpu_ns[me][rep] = (double)(thread_cpu_ns() - c0);
    pthread_barrier_wait(&cp->bar);
    if (me == 0)
      for (int i = 0; i < 2; i++) {
        atomic_store(&cp->fifo[i].head, 0);
        atomic_store(&cp->fifo[i].tail, 0);
      }
    pthread_barrier_wait(&cp->bar);
  }
}

static void* cal_peer(void* arg) {
  cal_side(arg, 1);
  return NULL;
}

/* The best run's time, the slower thread's: among the runs in which both
 * threads held their cores (where each has one: spin), else among all of
 * them, and then the measurement counts as disturbed. A busy machine slows
 * runs down, never speeds one up, but when it is busy throughout (a build
 * on every core) every run is slow, and the best of them is no figure of
 * this machine: cached, it would steer every later job (a tuner that chose
 * two-shot at half the ring's bandwidth, issue 19). */
static double cal_best_ns(struct cal_pair* cp) {
  double best = 0, best_any = 0;
  for (int rep = CAL_WARM; rep < cp->reps; rep++) {
    double dt = LOOM_MAX(cp->wall_ns[0][rep], cp->wall_ns[1][rep]);
    int on_core = 1;
    for (int i = 0; i < 2; i++) on_core &= cp->cpu_ns[i][rep] >= CAL_ON_CORE * cp->wall_ns[i][rep];
    if (rep == CAL_WARM || dt < best_any) best_any = dt;
    if ((on_core || !cp->spin) && (best == 0 || dt < best)) best = dt;
  }
  cp->last_disturbed = best <= 0;
  return best > 0 ? best : best_any;
}

/* GB/s per thread of one kind at one size (cal_best_ns); 0 when the kind
 * cannot run here (cross-memory attach not allowed). */
static double cal_measure(struct cal_pair* cp, enum cal_kind kind, size_t bytes) {
  cp->kind = kind;
  cp->bytes = bytes;
  atomic_store(&cp->failed, 0);
  atomic_store(&cp->arrived[0], 0);
  atomic_store(&cp->arrived[1], 0);
  /* Small sizes take microseconds, and one preemption spoils a run: more
   * runs of them, about 4 MiB per thread in all. */
  cp->reps = CAL_WARM + (int)LOOM_MIN((size_t)CAL_REPS_MAX,
                                      LOOM_MAX((size_t)CAL_REPS_MIN, (size_t)(4u << 20) / bytes));
  pthread_t t;
  if (pthread_barrier_init(&cp->bar, NULL, 2) != 0) return 0;
  if (pthread_create(&t, NULL, cal_peer, cp) != 0) {
    pthread_barrier_destroy(&cp->bar);
    return 0;
  }
  cal_side(cp, 0);
  pthread_join(t, NULL);
  pthread_barrier_destroy(&cp->bar);
  cp->piece += (size_t)cp->reps;
  if (atomic_load(&cp->failed)) return 0;
  double ns = cal_best_ns(cp);
  return ns <= 0 ? 0 : (double)bytes / ns;
}

/* Keeps both threads copying for CAL_WARM_MS before anything is timed. On the virtual
 * machines Loom runs on, two threads that start on idle cores copied through a FIFO at
 * 3-6 GB/s for their first few milliseconds and at 9-15 GB/s after 20-100 ms of work
 * (docs/PERFORMANCE.md, "Calibration on cold cores"); a plan in a job runs on busy
 * cores, and a calibration timed cold priced every copy at a third of what the ring then
 * moved, and chose reads by cross-memory attach (which the warm-up barely changes) where
 * the ring took half their time. */
#define CAL_WARM_MS 60
/* Passes over the whole table, each point's best undisturbed figure kept. A host may move a
 * VM's two vCPUs between cores close together and cores far apart, each state lasting
 * seconds (DESIGN.md, "Limit: a calibration sees the cores in one state"): a FIFO's
 * figure in the far state is a half to a third of the near one, a read by cross-memory
 * attach barely moves, and one pass in the far state priced the FIFO plans at twice
 * their time in a job and chose two-shot at twice the ring's. Three passes, a third of a
 * second apart, span about a second and a half. */
#define CAL_PASSES 3
#define CAL_PASS_GAP_MS 300
struct cal_warm {
  char *src, *dst;
  uint64_t until;
};

static void cal_warm_side(const struct cal_warm* w) {
  while (time_now_ns() < w->until) memcpy(w->dst, w->src, CAL_SLICE);
}

static void* cal_warm_peer(void* arg) {
  cal_warm_side(arg);
  return NULL;
}

static void cal_warm_up(struct cal_pair* cp) {
  struct cal_warm w[2];
  uint64_t until = time_now_ns() + CAL_WARM_MS * 1000000ull;
  for (int i = 0; i < 2; i++) w[i] = (struct cal_warm){cp->src[i], cp->dst[i], until};
  pthread_t t;
  int peer = cp->spin && pthread_create(&t, NULL, cal_warm_peer, &w[1]) == 0;
  cal_warm_side(&w[0]);
  if (peer) pthread_join(t, NULL);
}

/* A new figure v of a point (d: it was disturbed) against the one kept (*t, *dist): an
 * undisturbed figure replaces a disturbed one; otherwise the larger stays. */
static void cal_keep(double* t, int* dist, double v, int d) {
  if (*dist && !d)
    *t = v;
  else if (*dist == d)
    *t = LOOM_MAX(*t, v);
  *dist &= d;
}

/* Fills the tables of out; 0, or -1 when memory ran short. */
static int cal_bandwidths(struct tune_consts* out) {
  struct cal_pair* cp = calloc(1, sizeof(*cp));
  int rc = cp ? 0 : -1;
  for (int i = 0; cp && i < 2; i++) {
    cp->src[i] = malloc(CAL_BYTES);
    cp->dst[i] = malloc(CAL_BYTES);
    cp->bounce[i] = malloc(CMA_BOUNCE);
    if (!cp->src[i] || !cp->dst[i] || !cp->bounce[i]) rc = -1;
    if (rc == 0) {
      memset(cp->src[i], 1 + i, CAL_BYTES);
      memset(cp->dst[i], 0, CAL_BYTES);
      memset(cp->bounce[i], 0, CMA_BOUNCE);
    }
    for (int s = 0; s < CAL_SLOTS; s++) {
      cp->fifo[i].slot[s] = malloc(CAL_SLICE);
      if (!cp->fifo[i].slot[s])
        rc = -1;
      else
        memset(cp->fifo[i].slot[s], 0, CAL_SLICE);
    }
  }
  if (rc == 0) {
    cp->spin = cpus_online() >= 2;
    double* tables[CAL_KINDS];
    tables_of(out, tables);
    int dist[CAL_KINDS][TUNE_CAL_POINTS];
    /* Passes in which a point had no undisturbed run. Three passes give load that lasts
     * three times the chances to spare one run of every point, and a point counts as
     * disturbed when most of its passes were (load that lasts through the calibration), or
     * when none of its measurements had an undisturbed run. */
    int pass_dist[CAL_KINDS][TUNE_CAL_POINTS] = {{0}};
    for (int pass = 0; pass < CAL_PASSES; pass++) {
      if (pass > 0) usleep(CAL_PASS_GAP_MS * 1000);
      cal_warm_up(cp);
      for (int p = 0; p < TUNE_CAL_POINTS; p++)
        for (int kind = 0; kind < CAL_KINDS; kind++) {
          double v = cal_measure(cp, (enum cal_kind)kind, tune_cal_bytes(p));
          pass_dist[kind][p] += cp->last_disturbed;
          if (pass == 0) {
            tables[kind][p] = v;
            dist[kind][p] = cp->last_disturbed;
          } else {
            cal_keep(&tables[kind][p], &dist[kind][p], v, cp->last_disturbed);
          }
        }
    }
    /* A bandwidth falls as buffers outgrow the caches, never by half from
     * one point to the next larger: a point far below its larger
     * neighbour (or the largest far below its smaller one) was disturbed
     * (a preempted thread stalls the other), and is measured again; so is
     * one that had no undisturbed run, once (under load that lasts, every
     * point has none). An undisturbed figure replaces a disturbed one;
     * otherwise the larger stays. */
    out->disturbed = 0;
    for (int kind = 0; kind < CAL_KINDS; kind++)
      for (int p = 0; p < TUNE_CAL_POINTS; p++) {
        for (int again = 0; again < 4; again++) {
          double* t = tables[kind];
          int low = p + 1 < TUNE_CAL_POINTS ? t[p] < 0.6 * t[p + 1] : t[p] < 0.3 * t[p - 1];
          if (!low && !(dist[kind][p] && again == 0)) break;
          double v = cal_measure(cp, (enum cal_kind)kind, tune_cal_bytes(p));
          cal_keep(&t[p], &dist[kind][p], v, cp->last_disturbed);
        }
        out->disturbed += dist[kind][p] || 2 * pass_dist[kind][p] > CAL_PASSES;
      }
    /* A FIFO run that gave up (cal_wait) measured nothing: the built-in figures. */
    for (int p = 0; p < TUNE_CAL_POINTS; p++)
      if (out->copy_at[p] <= 0 || out->reduce_at[p] <= 0) rc = -1;
    /* Cross-memory attach either works at every size or not at all. */
    for (int p = 0; p < TUNE_CAL_POINTS; p++)
      if (out->cma_at[p] <= 0 || out->cma_reduce_at[p] <= 0)
        for (int q = 0; q < TUNE_CAL_POINTS; q++) out->cma_at[q] = out->cma_reduce_at[q] = 0;
  }
  for (int i = 0; cp && i < 2; i++) {
    free(cp->src[i]);
    free(cp->dst[i]);
    free(cp->bounce[i]);
    for (int s = 0; s < CAL_SLOTS; s++) free(cp->fifo[i].slot[s]);
  }
  free(cp);
  return rc;
}

/* The best time of one small process_vm_readv, in microseconds; 0 when
 * the call is not allowed. */
static double cma_us_measure(void) {
  char a[64] = {1}, b[64];
  double best = -1;
  for (int r = 0; r < 200; r++) {
    struct iovec l = {b, sizeof(b)}, rm = {a, sizeof(a)};
    uint64_t t0 = time_now_ns();
    if (process_vm_readv(getpid(), &l, 1, &rm, 1, 0) != (ssize_t)sizeof(a)) return 0;
    double dt = (double)(time_now_ns() - t0) / 1e3;
    if (best < 0 || dt < best) best = dt;
  }
  return best;
}

/* Half a round trip between two threads signalling through shared memory,
 * as two ranks' steps do. */
struct pingpong {
  _Atomic uint32_t turn;
  int rounds;
  _Atomic int failed; /* a wait gave up (cal_wait) */
  int spin;           /* 0: every look that finds nothing yields (poll_pause) */
  int cpu;            /* >= 0: the pong thread runs on this CPU alone */
};

/* Waits for the turn to reach want: 1, or 0 when the pair gave up. */
static int turn_wait(struct pingpong* pp, uint32_t want) {
  int idle = 0, w;
  uint64_t since = 0;
  while ((w = cal_wait(&pp->failed, atomic_load_explicit(&pp->turn, memory_order_acquire) == want,
                       &idle, &since, pp->spin)) < 0) {
  }
  return w;
}

/* This thread on cpu alone (the previous mask into old, when old is not NULL): 0, or -1. */
static int pin_to(int cpu, cpu_set_t* old) {
  if (old != NULL && pthread_getaffinity_np(pthread_self(), sizeof(*old), old) != 0) return -1;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0 ? 0 : -1;
}

static void* pong_main(void* arg) {
  struct pingpong* pp = arg;
  if (pp->cpu >= 0 && pin_to(pp->cpu, NULL) != 0) atomic_store(&pp->failed, 1);
  for (int i = 0; i < pp->rounds; i++) {
    if (!turn_wait(pp, (uint32_t)(2 * i + 1))) break;
    atomic_store_explicit(&pp->turn, (uint32_t)(2 * i + 2), memory_order_release);
  }
  return NULL;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* The median of many short batches' averages: a busy machine preempts
 * some round trips (a whole time slice each, which swamps the batch it
 * falls in), never speeds one up. Two threads on two cores, spinning a
 * while before they yield, as two ranks that have a core each; or (cpu >= 0)
 * both on that one CPU, yielding at once, as ranks that outnumber the cores
 * (the executor's spin is 0 then): each turn is a hand-off of the core.
 * Returns 0 when it cannot measure. */
static double pingpong_step_us(int cpu) {
  enum { BATCHES = 25 };
  double half_rt[BATCHES];
  int done = 0;
  struct pingpong pp = {0, 40 * BATCHES, 0, cpu < 0, cpu};
  pthread_t t;
  if (pthread_create(&t, NULL, pong_main, &pp) != 0) return 0;
  for (int b = 0; b < BATCHES; b++) {
    uint64_t t0 = time_now_ns();
    int ok = 1;
    for (int i = 40 * b; ok && i < 40 * (b + 1); i++) {
      atomic_store_explicit(&pp.turn, (uint32_t)(2 * i + 1), memory_order_release);
      ok = turn_wait(&pp, (uint32_t)(2 * i + 2));
    }
    if (!ok) break;
    half_rt[done++] = (double)(time_now_ns() - t0) / 1e3 / 40 / 2;
  }
  pthread_join(t, NULL);
  if (done < BATCHES) return 0; /* a wait gave up */
  qsort(half_rt, (size_t)done, sizeof(half_rt[0]), cmp_double);
  /* A step also posts, tests and retires its transfers: a few hand-offs. */
  return 4 * half_rt[done / 2] + 1.0;
}

static double step_us_measure(void) {
  if (cpus_online() < 2) return 30.0; /* a futex hand-off, not a spin */
  double us = pingpong_step_us(-1);
  return us > 0 ? us : 5.0; /* the built-in figure */
}

/* A step between two ranks on one CPU (tune_consts.handoff_us): this thread and
 * its partner on the CPU it runs on, its own mask given back after. 0 when it cannot
 * be measured (one CPU: step_us is that already; pinning not allowed). */
static double handoff_us_measure(void) {
  if (cpus_online() < 2) return 0;
  int cpu = sched_getcpu();
  cpu_set_t old;
  if (cpu < 0 || pin_to(cpu, &old) != 0) return 0;
  double us = pingpong_step_us(cpu);
  pthread_setaffinity_np(pthread_self(), sizeof(old), &old);
  return us;
}

/* Low-latency lines: two threads each put n bytes into their lines and read
 * the other's, call after call (two areas each, in turn: a thread puts call
 * i + 2 only after it read the other's call i + 1, which the other put after
 * reading call i), with the transport's own code; the same exchange of 64
 * bytes through a FIFO of two slots (copy in, head; copy out, tail: what a
 * step of a FIFO plan does) for comparison. The median of batches' time a
 * call. The rate is what the extra bytes of 8 KiB cost; the step fraction
 * is the lines' call at 64 bytes over the FIFO's, which scales the model's
 * step (a step of a plan costs more than this bare exchange, but the same
 * for both). Zeros when it cannot be measured (one CPU: the pair would hand
 * the core over every call, which is the step's cost, not the lines'). */
#define CAL_LINES_BIG (8u << 10)
#define CAL_LINES_SMALL 64u
struct cal_lines {
  _Atomic uint64_t* area[2][2];          /* [thread][area] */
  char* slot[2][2];                      /* the FIFO's: [thread][slot] */
  _Alignas(64) _Atomic uint64_t head[2]; /* calls thread i put in its FIFO */
  _Alignas(64) _Atomic uint64_t tail[2]; /* calls of thread i's FIFO read */
  char* src[2];
  char* dst[2];
  uint64_t seq; /* of the first call of a run */
  size_t bytes;
  int calls;
  int fifo;           /* this run goes through the FIFO */
  _Atomic int failed; /* a wait gave up: the figures are not measured */
  pthread_barrier_t bar;
};

/* One look of a wait of the exchange (cal_wait). */
static int cal_lines_wait(struct cal_lines* cl, int ready, int* idle, uint64_t* since) {
  return cal_wait(&cl->failed, ready, idle, since, 1);
}

static void cal_lines_side(struct cal_lines* cl, int me) {
  int idle = 0, w;
  uint64_t since = 0;
  for (int i = 0; i < cl->calls; i++) {
    uint64_t seq = cl->seq + (uint64_t)i;
    if (cl->fifo) {
      while ((w = cal_lines_wait(
                  cl, seq - atomic_load_explicit(&cl->tail[me], memory_order_acquire) <= 2, &idle,
                  &since)) < 0) {
      }
      if (!w) return;
      memcpy(cl->slot[me][seq % 2], cl->src[me], cl->bytes);
      atomic_store_explicit(&cl->head[me], seq, memory_order_release);
      while ((w = cal_lines_wait(
                  cl, atomic_load_explicit(&cl->head[1 - me], memory_order_acquire) >= seq, &idle,
                  &since)) < 0) {
      }
      if (!w) return;
      memcpy(cl->dst[me], cl->slot[1 - me][seq % 2], cl->bytes);
      atomic_store_explicit(&cl->tail[1 - me], seq, memory_order_release);
      continue;
    }
    cpu_lines_put(cl->area[me][seq % 2], seq, 0, cl->src[me], cl->bytes);
    size_t checked = 0;
    while ((w = cal_lines_wait(
                cl, cpu_lines_ready(cl->area[1 - me][seq % 2], seq, 0, cl->bytes, &checked), &idle,
                &since)) < 0) {
    }
    if (!w) return;
    cpu_lines_get(cl->area[1 - me][seq % 2], 0, cl->dst[me], cl->bytes);
  }
}

static void* cal_lines_peer(void* arg) {
  struct cal_lines* cl = arg;
  for (;;) {
    pthread_barrier_wait(&cl->bar);
    if (cl->calls == 0) return NULL;
    cal_lines_side(cl, 1);
    pthread_barrier_wait(&cl->bar);
  }
}

/* Microseconds a call of one batch at bytes, through the lines or the FIFO. */
static double cal_lines_batch_us(struct cal_lines* cl, size_t bytes, int fifo) {
  enum { CALLS = 40 };
  cl->bytes = bytes;
  cl->calls = CALLS;
  cl->fifo = fifo;
  for (int t = 0; t < 2; t++) { /* the FIFOs start this batch empty */
    atomic_store(&cl->head[t], cl->seq - 1);
    atomic_store(&cl->tail[t], cl->seq - 1);
  }
  pthread_barrier_wait(&cl->bar);
  uint64_t t0 = time_now_ns();
  cal_lines_side(cl, 0);
  pthread_barrier_wait(&cl->bar);
  cl->seq += CALLS;
  return (double)(time_now_ns() - t0) / 1e3 / CALLS;
}

/* The medians over batches (a preempted batch is slower, never faster) of
 * a lines call at 64 B and at 8 KiB, and of a 64 B lines call over a 64 B
 * FIFO call, each pair of batches run back to back so that both see the
 * same minute. */
enum { CAL_LINES_BATCHES = 15 };
static void cal_lines_run(struct cal_lines* cl, double* small, double* big, double* step) {
  double s[CAL_LINES_BATCHES], b[CAL_LINES_BATCHES], r[CAL_LINES_BATCHES];
  for (int i = 0; i < CAL_LINES_BATCHES; i++) {
    double fifo = cal_lines_batch_us(cl, CAL_LINES_SMALL, 1);
    s[i] = cal_lines_batch_us(cl, CAL_LINES_SMALL, 0);
    b[i] = cal_lines_batch_us(cl, CAL_LINES_BIG, 0);
    r[i] = fifo > 0 ? s[i] / fifo : 0;
  }
  qsort(s, CAL_LINES_BATCHES, sizeof(s[0]), cmp_double);
  qsort(b, CAL_LINES_BATCHES, sizeof(b[0]), cmp_double);
  qsort(r, CAL_LINES_BATCHES, sizeof(r[0]), cmp_double);
  *small = s[CAL_LINES_BATCHES / 2];
  *big = b[CAL_LINES_BATCHES / 2];
  *step = r[CAL_LINES_BATCHES / 2];
}

static void lines_measure(struct tune_consts* out) {
  out->lines_gbps = out->lines_step = 0;
  if (cpus_online() < 2) return;
  size_t words = CPU_LINES_WORDS(CAL_LINES_BIG);
  struct cal_lines* cl = aligned_alloc(64, sizeof(*cl));
  int ok = cl != NULL;
  if (cl) memset(cl, 0, sizeof(*cl));
  for (int t = 0; ok && t < 2; t++) {
    for (int a = 0; a < 2; a++) {
      cl->area[t][a] = aligned_alloc(64, words * sizeof(uint64_t));
      cl->slot[t][a] = aligned_alloc(64, CAL_LINES_SMALL);
      if (cl->area[t][a]) memset(cl->area[t][a], 0, words * sizeof(uint64_t));
    }
    cl->src[t] = malloc(CAL_LINES_BIG);
    cl->dst[t] = malloc(CAL_LINES_BIG);
    ok = cl->area[t][0] && cl->area[t][1] && cl->slot[t][0] && cl->slot[t][1] && cl->src[t] &&
         cl->dst[t];
    if (ok) memset(cl->src[t], 1 + t, CAL_LINES_BIG);
  }
  pthread_t th;
  if (ok && pthread_barrier_init(&cl->bar, NULL, 2) == 0) {
    if (pthread_create(&th, NULL, cal_lines_peer, cl) == 0) {
      cl->seq = 1;
      double small, big, step;
      cal_lines_run(cl, &small, &big, &step);
      cl->calls = 0;
      pthread_barrier_wait(&cl->bar);
      pthread_join(th, NULL);
      if (big > small && step > 0 && !atomic_load(&cl->failed)) {
        out->lines_gbps = (double)(CAL_LINES_BIG - CAL_LINES_SMALL) / (big - small) / 1e3;
        out->lines_step = step;
      }
    }
    pthread_barrier_destroy(&cl->bar);
  }
  for (int t = 0; cl && t < 2; t++) {
    for (int a = 0; a < 2; a++) {
      free(cl->area[t][a]);
      free(cl->slot[t][a]);
    }
    free(cl->src[t]);
    free(cl->dst[t]);
  }
  free(cl);
}

void tune_calibrate(struct tune_consts* out) {
  out->disturbed = 0;
  out->ncpus = cpus_online(); /* the machine measured; a topology file overrides (consts_init) */
  out->step_us = step_us_measure();
  out->handoff_us = handoff_us_measure();
  lines_measure(out);
  out->copy_gbps = 4.0;
  out->reduce_gbps = 4.0;
  out->cma_gbps = 0;
  out->cma_us = cma_us_measure();
  if (cal_bandwidths(out) != 0) {
    tables_clear(out);
    return;
  }
  /* The single figures are the largest point's: what buffers that fit no
   * cache see. */
  out->copy_gbps = out->copy_at[TUNE_CAL_POINTS - 1];
  out->reduce_gbps = out->reduce_at[TUNE_CAL_POINTS - 1];
  out->cma_gbps = out->cma_at[TUNE_CAL_POINTS - 1];
  if (out->cma_gbps <= 0) out->cma_us = 0;
}

/* key@bytes for one of the points: the point's table entry, else NULL. */
static double* table_entry(struct tune_consts* k, const char* key) {
  double* tables[CAL_KINDS];
  tables_of(k, tables);
  for (int t = 0; t < CAL_KINDS; t++) {
    size_t len = strlen(table_keys[t]);
    if (strncmp(key, table_keys[t], len) != 0) continue;
    char* end = NULL;
    errno = 0;
    unsigned long long b = strtoull(key + len, &end, 10);
    if (errno || !end || *end || end == key + len) return NULL;
    for (int p = 0; p < TUNE_CAL_POINTS; p++)
      if (b == tune_cal_bytes(p)) return &tables[t][p];
  }
  return NULL;
}

int tune_consts_read(const char* path, struct tune_consts* k, int cache) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  char key[64];
  double v;
  int seen = 0, entries = 0, bad = 0;
  tables_clear(k);
  k->disturbed = 0;
  while (fscanf(f, "%63s %lf", key, &v) == 2) {
    if (strcmp(key, "step_us") == 0) k->step_us = v, seen |= 1;
    if (strcmp(key, "copy_gbps") == 0) k->copy_gbps = v, seen |= 2;
    if (strcmp(key, "reduce_gbps") == 0) k->reduce_gbps = v, seen |= 4;
    if (strcmp(key, "ncpus") == 0) k->ncpus = v >= 1 && v <= 1e6 ? (int)v : 0, seen |= 8;
    if (strcmp(key, "cma_gbps") == 0) k->cma_gbps = v, seen |= 16; /* 0: not allowed here */
    if (strcmp(key, "cma_us") == 0) k->cma_us = v;
    if (strcmp(key, "lines_gbps") == 0) k->lines_gbps = v >= 0 && v < 1e6 ? v : 0, seen |= 32;
    if (strcmp(key, "lines_step") == 0) k->lines_step = v >= 0 && v <= 4 ? v : 0, seen |= 64;
    if (strcmp(key, "handoff_us") == 0) k->handoff_us = v >= 0 && v < 1e6 ? v : 0, seen |= 128;
    if (strcmp(key, "net_gbps") == 0 && v > 0) k->net_gbps = v;
    if (strcmp(key, "net_us") == 0 && v > 0) k->net_us = v;
    if (strcmp(key, "disturbed") == 0) k->disturbed = v >= 0 && v < 1e6 ? (int)v : 0;
    double* e = table_entry(k, key);
    if (e) {
      if (!(v >= 0 && v < 1e6)) bad = 1; /* NaN and infinities too */
      *e = v;
      entries++;
    }
  }
  fclose(f);
  if (!(seen & 16)) k->cma_gbps = cache ? -1 : 2 * k->copy_gbps;
  if (!(seen & 32)) k->lines_gbps = 0;
  if (!(seen & 64)) k->lines_step = 0;
  if (!(seen & 128)) k->handoff_us = 0;
  int ok = (seen | 16 | 32 | 64 | 128) == 255 && k->cma_gbps >= 0 && k->step_us > 0 &&
           k->copy_gbps > 0 && k->reduce_gbps > 0 && k->ncpus > 0 && !bad;
  /* A cache from before the tables (or before cma_reduce_gbps@, the lines' figures or the
   * hand-off) is measured again. */
  if (cache && (entries < CAL_KINDS * TUNE_CAL_POINTS || (seen & 224) != 224)) ok = 0;
  return ok ? 0 : -1;
}

static void cache_path(char* buf, size_t len) {
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  if (xdg && *xdg)
    snprintf(buf, len, "%s/loom", xdg);
  else
    snprintf(buf, len, "%s/.cache/loom", home && *home ? home : "/tmp");
}

/* The cache directory and its parent, made where missing. */
static void cache_dir_make(const char* dir) {
  char parent[400];
  snprintf(parent, sizeof(parent), "%s", dir);
  char* slash = strrchr(parent, '/');
  if (slash) *slash = '\0';
  mkdir(parent, 0700);
  mkdir(dir, 0700);
}

/* One calibration per host at a time: the ranks of a job start together, and measuring side
 * by side they would disturb each other's figures and each take as long (64 ranks of one host
 * took 20 s to their first communicator: docs/PERFORMANCE.md, "Communicator creation"). The
 * first process takes the host's lock and measures; the others wait for it (at most a minute,
 * then they measure anyway) and read what it saved. Returns the descriptor to close, or -1
 * without a lock. */
static int cache_lock(const char* dir) {
  char path[512];
  cache_dir_make(dir);
  snprintf(path, sizeof(path), "%s/tuning-%016llx.lock", dir, (unsigned long long)host_id_get());
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  struct deadline dl = deadline_in_ms(60000);
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || deadline_passed(&dl)) {
      LOOM_INFO(SUB_TUNE, "no calibration lock (%s): calibrating beside others", path);
      close(fd);
      return -1;
    }
    usleep(5000);
  }
  return fd;
}

static void consts_save(struct tune_consts* k) {
  char dir[400], path[512], tmp[540];
  cache_path(dir, sizeof(dir));
  cache_dir_make(dir);
  snprintf(path, sizeof(path), "%s/tuning-%016llx.txt", dir, (unsigned long long)host_id_get());
  snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
  FILE* f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f,
          "step_us %.3f\ncopy_gbps %.3f\nreduce_gbps %.3f\nncpus %d\ncma_gbps %.3f\ncma_us %.3f\n"
          "lines_gbps %.3f\nlines_step %.3f\nhandoff_us %.3f\ndisturbed %d\n",
          k->step_us, k->copy_gbps, k->reduce_gbps, k->ncpus, k->cma_gbps, k->cma_us, k->lines_gbps,
          k->lines_step, k->handoff_us, k->disturbed);
  double* tables[CAL_KINDS];
  tables_of(k, tables);
  for (int p = 0; p < TUNE_CAL_POINTS; p++)
    for (int t = 0; t < CAL_KINDS; t++)
      fprintf(f, "%s%zu %.3f\n", table_keys[t], tune_cal_bytes(p), tables[t][p]);
  fclose(f);
  rename(tmp, path); /* atomic: concurrent ranks never read half a file */
}

/* Calibrates this host and caches what it found (the lock held, where there is one). */
static void consts_measure(void) {
  tune_calibrate(&consts_now);
  LOOM_INFO(SUB_TUNE,
            "calibrated: step %.2f us, copy %.2f GB/s, reduce %.2f GB/s, %d cpus, cma %.2f GB/s",
            consts_now.step_us, consts_now.copy_gbps, consts_now.reduce_gbps, consts_now.ncpus,
            consts_now.cma_gbps);
  /* A machine too busy to measure gives numbers no machine has: use them
   * for this process only, and measure again next time. */
  if (consts_now.step_us > 200 || consts_now.copy_gbps < 0.2 || consts_now.reduce_gbps < 0.2) {
    LOOM_INFO(SUB_TUNE, "calibration looks disturbed by load: not cached");
    if (consts_now.step_us > 200) consts_now.step_us = 20;
    return;
  }
  /* Figures measured while other work held the cores serve the processes
   * of the next minutes (not every process of a busy test suite measures
   * again), then a later one measures again (cache_read). */
  if (consts_now.disturbed > 0)
    LOOM_INFO(SUB_TUNE,
              "calibration disturbed by load: %d bandwidth figures had no run with both threads "
              "on their cores; cached for %d s only",
              consts_now.disturbed, CAL_DISTURBED_TTL_S);
  consts_save(&consts_now);
}

/* The cached constants of this host into consts_now: 0, or -1 when there are none. */
static int cache_read(const char* path) {
  struct stat st;
  if (tune_consts_read(path, &consts_now, 1) != 0 || stat(path, &st) != 0) return -1;
  long age = (long)(time(NULL) - st.st_mtime);
  if (consts_now.disturbed > 0 && (age > CAL_DISTURBED_TTL_S || age < 0)) {
    LOOM_INFO(SUB_TUNE,
              "the cached tuning constants %s were disturbed by load, %ld s ago: measuring again",
              path, age);
    return -1;
  }
  LOOM_INFO(SUB_TUNE, "tuning constants from the cache %s", path);
  return 0;
}

static void consts_find(void) {
  const char* file = params_get()->tuning_file;
  if (file && *file) {
    if (tune_consts_read(file, &consts_now, 0) == 0) {
      LOOM_INFO(SUB_TUNE, "tuning constants from %s", file);
      return;
    }
    LOOM_INFO(SUB_TUNE, "cannot read tuning constants from %s: calibrating", file);
  }
  char dir[400], path[512];
  cache_path(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/tuning-%016llx.txt", dir, (unsigned long long)host_id_get());
  if (cache_read(path) == 0) return;
  int lock = cache_lock(dir);
  if (cache_read(path) != 0) /* else another process measured while this one waited */
    consts_measure();
  if (lock >= 0) close(lock); /* after the save: the next one reads it */
}

static void consts_init(void) {
  consts_find();
  /* A topology file's cpus is this process's, whatever a tuning file or
   * the cache (made under another affinity, perhaps) says. */
  const struct topo_facts* topo = topo_get();
  if (topo->given & TOPO_CPUS) consts_now.ncpus = topo->cpus;
}

const struct tune_consts* tune_consts_get(void) {
  pthread_once(&consts_once, consts_init);
  return &consts_now;
}
