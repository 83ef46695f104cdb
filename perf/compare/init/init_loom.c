/* init_loom: Loom's time to a working communicator (perf/compare/init/run). Under loomrun:
 * loomCommInitFromEnv, then one 1-float all-reduce; prints the slowest rank's time from the
 * call to the all-reduce's return, in milliseconds. */
#include <stdio.h>
#include <time.h>

#include "loom.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int main(void) {
  double t0 = now_ms();
  loomComm_t comm;
  if (loomCommInitFromEnv(&comm, NULL) != loomSuccess) {
    fprintf(stderr, "init_loom: %s\n", loomGetLastError(NULL));
    return 1;
  }
  float x = 1;
  if (loomAllReduce(&x, &x, 1, loomFloat32, loomSum, comm, NULL) != loomSuccess) return 1;
  double ms = now_ms() - t0, worst = 0;
  if (loomAllReduce(&ms, &worst, 1, loomFloat64, loomMax, comm, NULL) != loomSuccess) return 1;
  int rank = 0;
  loomCommUserRank(comm, &rank);
  if (rank == 0) printf("init_ms %.3f\n", worst);
  loomCommDestroy(comm);
  return 0;
}
