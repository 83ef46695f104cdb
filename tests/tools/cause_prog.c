/* cause_prog: a real Loom program for tests/tools/test_loomrun.sh, to check that loomrun names
 * the rank whose failure made the others fail, not the first of them it happens to reap.
 *
 *   cause_prog VICTIM [ARGS...]
 *
 * Every rank joins a communicator from the environment (loomCommInitFromEnv) and runs one
 * all-reduce, so that all of them are up. Then rank VICTIM dies of SIGSEGV (a write through a
 * null pointer the compiler cannot see), while the others run all-reduces until one fails,
 * print loomGetLastError and exit 1. A survivor whose all-reduces still succeed after 20 s
 * exits 3. Arguments after VICTIM are ignored, so a test can add a marker to find its
 * processes by.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "loom.h"

#define GIVE_UP_S 20

static int* volatile g_nowhere; /* NULL, but the compiler may not assume it */

static int fail(const char* what, loomResult_t res, loomComm_t comm) {
  fprintf(stderr, "cause_prog: %s failed: %s (%s)\n", what, loomGetErrorString(res),
          loomGetLastError(comm));
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: loomrun -n N cause_prog VICTIM [ARGS...]\n");
    return 2;
  }
  int victim = atoi(argv[1]);
  loomComm_t comm;
  loomResult_t res = loomCommInitFromEnv(&comm, NULL);
  if (res != loomSuccess) return fail("loomCommInitFromEnv", res, NULL);
  int rank;
  loomCommUserRank(comm, &rank);
  float x = 1.0f;
  res = loomAllReduce(&x, &x, 1, loomFloat32, loomSum, comm, NULL);
  if (res != loomSuccess) return fail("the first all-reduce", res, comm);
  if (rank == victim) *g_nowhere = 1;
  for (time_t end = time(NULL) + GIVE_UP_S; time(NULL) < end;) {
    res = loomAllReduce(&x, &x, 1, loomFloat32, loomSum, comm, NULL);
    if (res != loomSuccess) return fail("all-reduce", res, comm);
  }
  fprintf(stderr, "cause_prog: rank %d: rank %d never failed\n", rank, victim);
  return 3;
}
