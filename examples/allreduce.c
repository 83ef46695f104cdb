/* allreduce - a short Loom program using only loom.h.
 *
 *   loomrun -n 4 ./build/examples/allreduce [count]
 *
 * Each rank contributes rank + 1 in every element of a float32 buffer; every
 * rank must end with n(n+1)/2 everywhere. Prints the result and the time of
 * the all-reduce (median of 7 runs). Works under any launcher loomCommInitFromEnv understands. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "loom.h"

#define CHECK(call)                                                          \
  do {                                                                       \
    loomResult_t r_ = (call);                                                \
    if (r_ != loomSuccess) {                                                 \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, loomGetErrorString(r_), \
              loomGetLastError(NULL));                                       \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  size_t count = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)1 << 24;
  loomComm_t comm;
  CHECK(loomCommInitFromEnv(&comm, NULL));
  int rank, n;
  CHECK(loomCommUserRank(comm, &rank));
  CHECK(loomCommCount(comm, &n));
  float* buf = malloc(count * sizeof(float));
  if (!buf) return 1;
  for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1);

  CHECK(loomAllReduce(buf, buf, count, loomFloat32, loomSum, comm, NULL)); /* warm-up */
  /* The median of a few runs: one run on a shared machine says little. */
  enum { RUNS = 7 };
  double times[RUNS];
  for (int r = 0; r < RUNS; r++) {
    for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1);
    double t0 = now_s();
    CHECK(loomAllReduce(buf, buf, count, loomFloat32, loomSum, comm, NULL));
    times[r] = now_s() - t0;
  }
  for (int i = 1; i < RUNS; i++) /* insertion sort */
    for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
      double t = times[j];
      times[j] = times[j - 1];
      times[j - 1] = t;
    }
  double dt = times[RUNS / 2];

  float want = (float)n * (float)(n + 1) / 2.0f;
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += buf[i] != want;
  double bytes = (double)count * sizeof(float);
  double busbw = n > 1 ? bytes / dt * 2.0 * (n - 1) / n / 1e9 : 0.0;
  if (rank == 0 || wrong)
    printf(
        "rank %d of %d: all-reduce of %zu floats: result %g (expected %g), %zu wrong, %.3f ms "
        "(median of 7), "
        "bus bandwidth %.2f GB/s\n",
        rank, n, count, (double)buf[0], (double)want, wrong, dt * 1e3, busbw);
  CHECK(loomCommFinalize(comm));
  CHECK(loomCommDestroy(comm));
  free(buf);
  return wrong ? 1 : 0;
}
