/* calibrate.c - the constants of the cost model: measured on this host at
 * first use (about 100 ms) and cached under the user's cache directory, or
 * read from LOOM_TUNING_FILE. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/debug.h"
#include "core/params.h"
#include "core/util.h"
#include "kernels/cpu/cpu_kernels.h"
#include "topo/topo.h"
#include "topo/tune.h"

#define CAL_BYTES (16u << 20)
#define CMA_PIECE (4u << 20) /* as peer.c's cma_read */

static struct tune_consts consts_now;
static pthread_once_t consts_once = PTHREAD_ONCE_INIT;

/* Best of a few runs: the machine may be busy, the best run is the truth. */
static double copy_gbps_measure(char* a, char* b) {
  double best = 0;
  for (int r = 0; r < 4; r++) {
    uint64_t t0 = time_now_ns();
    memcpy(b, a, CAL_BYTES);
    double dt = (double)(time_now_ns() - t0);
    if (dt > 0 && CAL_BYTES / dt > best) best = CAL_BYTES / dt;
  }
  return best;
}

static double reduce_gbps_measure(char* a, char* b, char* c) {
  double best = 0;
  size_t n = CAL_BYTES / sizeof(float);
  for (int r = 0; r < 4; r++) {
    uint64_t t0 = time_now_ns();
    cpu_reduce(loomFloat32, loomSum, c, a, b, n);
    double dt = (double)(time_now_ns() - t0);
    if (dt > 0 && CAL_BYTES / dt > best) best = CAL_BYTES / dt;
  }
  return best;
}

/* process_vm_readv of this process's own memory, in the pieces peer.c
 * reads: the kernel pins the pages of every call, which costs far more than
 * a memcpy on some machines. 0 when the call is not allowed. */
/* The best time of one small process_vm_readv, in microseconds. */
static double cma_us_measure(char* a, char* b) {
  double best = -1;
  for (int r = 0; r < 200; r++) {
    struct iovec l = {b, 64}, rm = {a, 64};
    uint64_t t0 = time_now_ns();
    if (process_vm_readv(getpid(), &l, 1, &rm, 1, 0) != 64) return 0;
    double dt = (double)(time_now_ns() - t0) / 1e3;
    if (best < 0 || dt < best) best = dt;
  }
  return best;
}

static double cma_gbps_measure(char* a, char* b) {
  double best = 0;
  for (int r = 0; r < 3; r++) {
    uint64_t t0 = time_now_ns();
    for (size_t off = 0; off < CAL_BYTES; off += CMA_PIECE) {
      struct iovec l = {b + off, CMA_PIECE}, rm = {a + off, CMA_PIECE};
      if (process_vm_readv(getpid(), &l, 1, &rm, 1, 0) != (ssize_t)CMA_PIECE) return 0;
    }
    double dt = (double)(time_now_ns() - t0);
    if (dt > 0 && CAL_BYTES / dt > best) best = CAL_BYTES / dt;
  }
  return best;
}

/* Half a round trip between two threads signalling through shared memory,
 * as two ranks' steps do. */
struct pingpong {
  _Atomic uint32_t turn;
  int rounds;
};

static void* pong_main(void* arg) {
  struct pingpong* pp = arg;
  for (int i = 0; i < pp->rounds; i++) {
    while (atomic_load_explicit(&pp->turn, memory_order_acquire) != (uint32_t)(2 * i + 1))
      cpu_relax();
    atomic_store_explicit(&pp->turn, (uint32_t)(2 * i + 2), memory_order_release);
  }
  return NULL;
}

/* The best of several short batches: a busy machine delays some round trips,
 * never speeds one up. */
static double step_us_measure(void) {
  if (cpus_online() < 2) return 30.0; /* a futex hand-off, not a spin */
  double best = -1;
  for (int batch = 0; batch < 5; batch++) {
    struct pingpong pp = {0, 200};
    pthread_t t;
    if (pthread_create(&t, NULL, pong_main, &pp) != 0) break;
    uint64_t t0 = time_now_ns();
    for (int i = 0; i < pp.rounds; i++) {
      atomic_store_explicit(&pp.turn, (uint32_t)(2 * i + 1), memory_order_release);
      while (atomic_load_explicit(&pp.turn, memory_order_acquire) != (uint32_t)(2 * i + 2))
        cpu_relax();
    }
    double half_rt_us = (double)(time_now_ns() - t0) / 1e3 / pp.rounds / 2;
    pthread_join(t, NULL);
    if (best < 0 || half_rt_us < best) best = half_rt_us;
  }
  if (best < 0) return 5.0;
  /* A step also posts, tests and retires its transfers: a few hand-offs. */
  return 4 * best + 1.0;
}

void tune_calibrate(struct tune_consts* out) {
  char* a = malloc(CAL_BYTES);
  char* b = malloc(CAL_BYTES);
  char* c = malloc(CAL_BYTES);
  out->ncpus = cpus_online(); /* the machine measured; a topology file overrides (consts_init) */
  out->step_us = step_us_measure();
  out->copy_gbps = 4.0;
  out->reduce_gbps = 4.0;
  if (a && b && c) {
    memset(a, 1, CAL_BYTES);
    memset(b, 2, CAL_BYTES);
    memset(c, 0, CAL_BYTES);
    /* Through a FIFO every byte is copied twice (in and out). */
    out->copy_gbps = copy_gbps_measure(a, b) / 2;
    out->reduce_gbps = reduce_gbps_measure(a, b, c);
    out->cma_gbps = cma_gbps_measure(a, c);
    out->cma_us = cma_us_measure(a, c);
  }
  free(a);
  free(b);
  free(c);
}

int tune_consts_read(const char* path, struct tune_consts* k, int need_cma) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  char key[64];
  double v;
  int seen = 0;
  while (fscanf(f, "%63s %lf", key, &v) == 2) {
    if (strcmp(key, "step_us") == 0) k->step_us = v, seen |= 1;
    if (strcmp(key, "copy_gbps") == 0) k->copy_gbps = v, seen |= 2;
    if (strcmp(key, "reduce_gbps") == 0) k->reduce_gbps = v, seen |= 4;
    if (strcmp(key, "ncpus") == 0) k->ncpus = v >= 1 && v <= 1e6 ? (int)v : 0, seen |= 8;
    if (strcmp(key, "cma_gbps") == 0) k->cma_gbps = v, seen |= 16; /* 0: not allowed here */
    if (strcmp(key, "cma_us") == 0) k->cma_us = v;
    if (strcmp(key, "net_gbps") == 0 && v > 0) k->net_gbps = v;
    if (strcmp(key, "net_us") == 0 && v > 0) k->net_us = v;
  }
  fclose(f);
  if (!(seen & 16)) k->cma_gbps = need_cma ? -1 : 2 * k->copy_gbps;
  int ok = (seen | 16) == 31 && k->cma_gbps >= 0 && k->step_us > 0 && k->copy_gbps > 0 &&
           k->reduce_gbps > 0 && k->ncpus > 0;
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

static void consts_save(const struct tune_consts* k) {
  char dir[400], path[512], tmp[540];
  cache_path(dir, sizeof(dir));
  char parent[400];
  snprintf(parent, sizeof(parent), "%s", dir);
  char* slash = strrchr(parent, '/');
  if (slash) *slash = '\0';
  mkdir(parent, 0700);
  mkdir(dir, 0700);
  snprintf(path, sizeof(path), "%s/tuning-%016llx.txt", dir, (unsigned long long)host_id_get());
  snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
  FILE* f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f,
          "step_us %.3f\ncopy_gbps %.3f\nreduce_gbps %.3f\nncpus %d\ncma_gbps %.3f\ncma_us %.3f\n",
          k->step_us, k->copy_gbps, k->reduce_gbps, k->ncpus, k->cma_gbps, k->cma_us);
  fclose(f);
  rename(tmp, path); /* atomic: concurrent ranks never read half a file */
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
  if (tune_consts_read(path, &consts_now, 1) == 0) {
    LOOM_INFO(SUB_TUNE, "tuning constants from the cache %s", path);
    return;
  }
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
  consts_save(&consts_now);
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
