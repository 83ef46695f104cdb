/* handle_bench: what the live-handle table costs a call (docs/PERFORMANCE.md).
 *
 *   handle_bench [CALLS]
 *
 * Times loomCommCount on one communicator, CALLS times (20 M by default), best of 5: the
 * public call that does nothing but look its handle up and write one int, so its time is the
 * lookup plus a library call. Every collective makes the same lookup once (and one more for a
 * stream). Public API only: link it against another build of libloom to compare. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "loom.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  long calls = argc > 1 ? atol(argv[1]) : 20000000L;
  if (calls <= 0) {
    fprintf(stderr, "usage: handle_bench [CALLS]\n");
    return 2;
  }
  loomComm_t comm;
  if (loomCommInitAll(&comm, 1, NULL) != loomSuccess) {
    fprintf(stderr, "handle_bench: %s\n", loomGetLastError(NULL));
    return 1;
  }
  int n = 0;
  double best = 1e9;
  for (int r = 0; r < 5; r++) {
    double t0 = now_s();
    for (long i = 0; i < calls; i++) loomCommCount(comm, &n);
    double ns = (now_s() - t0) / (double)calls * 1e9;
    if (ns < best) best = ns;
  }
  printf("loomCommCount: %.2f ns per call (best of 5 x %ld calls, %d rank)\n", best, calls, n);
  loomCommDestroy(comm);
  return 0;
}
