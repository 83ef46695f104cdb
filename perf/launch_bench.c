/* launch_bench: what a launch costs on the host, with no peer to wait for
 * (docs/PERFORMANCE.md).
 *
 *   launch_bench [CALLS]
 *
 * Times a 2-element float all-reduce (loomMax) on one communicator of one rank, NULL stream,
 * CALLS times (200,000 by default), best of 7: the call's checks, its launch (the executor's
 * prepare, progress and release, the plan from the cache) and a copy of 8 bytes, nothing
 * else. Then the same for two thread ranks driven by one thread in a group. Public API only:
 * run it against another build of libloom (LD_LIBRARY_PATH) to compare. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "loom.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ns per launch over nranks thread ranks (one group when nranks > 1), best of 7. */
static int bench(int nranks, long calls, double* best_out) {
  loomComm_t comms[2];
  float buf[2][2] = {{1, 2}, {3, 4}};
  if (loomCommInitAll(comms, nranks, NULL) != loomSuccess) return -1;
  double best = 1e9;
  for (int r = 0; r < 7; r++) {
    double t0 = now_s();
    for (long i = 0; i < calls; i++) {
      if (nranks > 1 && loomGroupStart() != loomSuccess) return -1;
      for (int k = 0; k < nranks; k++)
        if (loomAllReduce(buf[k], buf[k], 2, loomFloat32, loomMax, comms[k], NULL) != loomSuccess)
          return -1;
      if (nranks > 1 && loomGroupEnd() != loomSuccess) return -1;
    }
    double ns = (now_s() - t0) / (double)calls * 1e9;
    if (ns < best) best = ns;
  }
  for (int k = 0; k < nranks; k++) loomCommDestroy(comms[k]);
  *best_out = best;
  return 0;
}

int main(int argc, char** argv) {
  long calls = argc > 1 ? atol(argv[1]) : 200000L;
  if (calls <= 0) {
    fprintf(stderr, "usage: launch_bench [CALLS]\n");
    return 2;
  }
  for (int n = 1; n <= 2; n++) {
    double ns;
    if (bench(n, calls, &ns) != 0) {
      fprintf(stderr, "launch_bench: %s\n", loomGetLastError(NULL));
      return 1;
    }
    printf("%d rank%s, one thread: %.0f ns per launch (best of 7 x %ld calls)\n", n,
           n > 1 ? "s in a group" : "", ns, calls);
  }
  return 0;
}
