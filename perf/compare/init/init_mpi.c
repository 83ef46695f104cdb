/* init_mpi: an MPI library's time to a working communicator (perf/compare/init/run): MPI_Init,
 * then one 1-float MPI_Allreduce; prints the slowest rank's time from the call to the
 * all-reduce's return, in milliseconds. */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int main(int argc, char** argv) {
  double t0 = now_ms();
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 1;
  float x = 1, y = 0;
  MPI_Allreduce(&x, &y, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double ms = now_ms() - t0, worst = 0;
  MPI_Allreduce(&ms, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) printf("init_ms %.3f\n", worst);
  MPI_Finalize();
  return 0;
}
