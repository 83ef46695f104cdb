/* memcpy_bw: the machine's memcpy bandwidth, the yardstick for collectives on one host (every
 * shared-memory transport copies at least once, so busbw beyond it is not to be expected).
 *
 *   memcpy_bw [-s BYTES] [-r RUNS] [-t MAXTHREADS]
 *
 * For 1 .. MAXTHREADS threads (default 2) running at once, each copying its own BYTES-byte
 * buffer (default 256 MiB, far beyond the caches), the best of RUNS runs (default 7) of one
 * memcpy per thread: GB/s = bytes copied by all threads / time of the slowest thread. Each
 * copied byte is read once and written once, so memory traffic is twice that. Lines:
 *
 *   memcpy_bw threads 1 bytes 268435456 runs 7 best_gbs 11.52 median_gbs 11.31
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct worker {
  pthread_t tid;
  char *src, *dst;
  size_t bytes;
  pthread_barrier_t* start;
  double seconds;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void* copy_once(void* arg) {
  struct worker* w = (struct worker*)arg;
  pthread_barrier_wait(w->start);
  double t0 = now_s();
  memcpy(w->dst, w->src, w->bytes);
  w->seconds = now_s() - t0;
  return NULL;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* One run: every thread copies its buffer once, all starting together. Returns GB/s. */
static double run_once(struct worker* w, int nthreads) {
  pthread_barrier_t start;
  double slowest = 0;
  pthread_barrier_init(&start, NULL, (unsigned)nthreads);
  for (int i = 0; i < nthreads; i++) {
    w[i].start = &start;
    pthread_create(&w[i].tid, NULL, copy_once, &w[i]);
  }
  for (int i = 0; i < nthreads; i++) {
    pthread_join(w[i].tid, NULL);
    if (w[i].seconds > slowest) slowest = w[i].seconds;
  }
  pthread_barrier_destroy(&start);
  return (double)w[0].bytes * nthreads / slowest / 1e9;
}

int main(int argc, char** argv) {
  size_t bytes = 256u << 20;
  int runs = 7, max_threads = 2, c;
  while ((c = getopt(argc, argv, "s:r:t:")) != -1) {
    switch (c) {
      case 's':
        bytes = strtoull(optarg, NULL, 0);
        break;
      case 'r':
        runs = atoi(optarg);
        break;
      case 't':
        max_threads = atoi(optarg);
        break;
      default:
        fprintf(stderr, "usage: %s [-s BYTES] [-r RUNS] [-t MAXTHREADS]\n", argv[0]);
        return 2;
    }
  }
  if (runs < 1 || max_threads < 1 || bytes == 0) return 2;
  struct worker* w = calloc((size_t)max_threads, sizeof(*w));
  double* gbs = calloc((size_t)runs, sizeof(double));
  for (int i = 0; i < max_threads; i++) {
    w[i].src = malloc(bytes);
    w[i].dst = malloc(bytes);
    w[i].bytes = bytes;
    if (!w[i].src || !w[i].dst) {
      fprintf(stderr, "memcpy_bw: out of memory for %d x 2 x %zu bytes\n", max_threads, bytes);
      return 1;
    }
    memset(w[i].src, 1 + i, bytes); /* touch every page before timing */
    memset(w[i].dst, 0, bytes);
  }
  for (int t = 1; t <= max_threads; t++) {
    run_once(w, t); /* warm-up */
    for (int r = 0; r < runs; r++) gbs[r] = run_once(w, t);
    qsort(gbs, (size_t)runs, sizeof(double), cmp_double);
    printf("memcpy_bw threads %d bytes %zu runs %d best_gbs %.2f median_gbs %.2f\n", t, bytes, runs,
           gbs[runs - 1], gbs[runs / 2]);
  }
  for (int i = 0; i < max_threads; i++) {
    free(w[i].src);
    free(w[i].dst);
  }
  free(w);
  free(gbs);
  return 0;
}
