/* mpi_perf: nccl-tests' table for MPI's collectives, so that Loom can be compared with the MPI
 * libraries a user already has. One source, built once per MPI (mpicc.openmpi, mpicc.mpich):
 *
 *   mpirun.openmpi -np 4 build-compare/compare/mpi_perf_openmpi -C allreduce -b 8 -e 256M -f 4
 *   mpiexec.mpich  -n 4  build-compare/compare/mpi_perf_mpich   -C alltoall ...
 *
 * Flags as nccl-tests (perf_common.h). What is timed, per size and per placement:
 *   -w warm-up calls, MPI_Barrier, -n calls, and the mean time of one call, max across ranks
 *   (under --min_ms, a barrier and as many more calls as fill the time, all of them in the mean).
 * Then, with -c 1, the buffers are filled with check values, one more call is made, and every
 * rank counts its wrong elements (their sum is the #wrong column).
 *
 * The calls:
 *   allreduce      MPI_Allreduce(send, recv) | MPI_Allreduce(MPI_IN_PLACE, buf)
 *   allgather      MPI_Allgather(send, recv) | MPI_Allgather(MPI_IN_PLACE, buf), own block at rank
 *   reducescatter  MPI_Reduce_scatter_block(send, recv) | (MPI_IN_PLACE, buf): MPI leaves the
 *                  result at the start of buf, where NCCL leaves it at rank*recvcount
 *   alltoall       MPI_Alltoall(send, recv) | MPI_Alltoall(MPI_IN_PLACE, buf)
 *   broadcast      out of place: the root copies send to recv, then MPI_Bcast(recv), since MPI's
 *                  broadcast has one buffer; in place: MPI_Bcast(buf)
 */
#include <mpi.h>

#include "perf_common.h"

struct mpi_bench {
  struct bench_opts o;
  int rank, nranks;
  float *send, *recv; /* each max_bytes rounded up, touched */
};

static MPI_Op mpi_op(enum red_kind op) {
  switch (op) {
    case RED_SUM:
      return MPI_SUM;
    case RED_PROD:
      return MPI_PROD;
    case RED_MAX:
      return MPI_MAX;
    case RED_MIN:
      return MPI_MIN;
  }
  return MPI_SUM;
}

/* One call of the collective over COUNT elements of the row (see coll_count). */
static int coll_call(const struct mpi_bench* b, size_t count, int in_place) {
  const struct bench_opts* o = &b->o;
  MPI_Comm comm = MPI_COMM_WORLD;
  float* buf = b->recv;
  int per = (int)(count / (size_t)b->nranks);
  int n = (int)count;
  switch (o->coll) {
    case COLL_ALLREDUCE:
      return MPI_Allreduce(in_place ? MPI_IN_PLACE : b->send, buf, n, MPI_FLOAT, mpi_op(o->op),
                           comm);
    case COLL_ALLGATHER:
      if (in_place)
        return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, per, MPI_FLOAT, comm);
      return MPI_Allgather(b->send, per, MPI_FLOAT, buf, per, MPI_FLOAT, comm);
    case COLL_REDUCESCATTER:
      if (in_place)
        return MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, per, MPI_FLOAT, mpi_op(o->op), comm);
      return MPI_Reduce_scatter_block(b->send, buf, per, MPI_FLOAT, mpi_op(o->op), comm);
    case COLL_ALLTOALL:
      if (in_place)
        return MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, per, MPI_FLOAT, comm);
      return MPI_Alltoall(b->send, per, MPI_FLOAT, buf, per, MPI_FLOAT, comm);
    case COLL_BROADCAST:
      if (!in_place && b->rank == o->root) memcpy(buf, b->send, count * sizeof(float));
      return MPI_Bcast(buf, n, MPI_FLOAT, o->root, comm);
  }
  return MPI_ERR_OTHER;
}

/* Fills the buffers for a checked call: input where the call reads it, NaN where it writes. */
static long run_check(const struct mpi_bench* b, size_t count, int in_place) {
  long wrong, total = 0;
  bench_prepare_check(b->o.coll, b->o.root, b->send, b->recv, count, b->rank, b->nranks, in_place);
  if (coll_call(b, count, in_place) != MPI_SUCCESS) return -1;
  wrong = (long)check_output(b->o.coll, b->o.op, b->recv, count, b->rank, b->nranks, b->o.root);
  MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

static int measure(const struct mpi_bench* b, size_t count, int in_place, struct bench_result* r) {
  double t0, spent, mine, slowest;
  long wrong = -1;
  int more;
  if (in_place) /* defined input; in-place sums still grow */
    bench_prepare_check(b->o.coll, b->o.root, b->send, b->recv, count, b->rank, b->nranks, 1);
  for (int i = 0; i < b->o.warmup; i++)
    if (coll_call(b, count, in_place) != MPI_SUCCESS) return -1;
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  for (int i = 0; i < b->o.iters; i++)
    if (coll_call(b, count, in_place) != MPI_SUCCESS) return -1;
  spent = MPI_Wtime() - t0;
  mine = spent / b->o.iters;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  more = bench_more_iters(&b->o, slowest);
  if (more > 0) { /* --min_ms */
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < more; i++)
      if (coll_call(b, count, in_place) != MPI_SUCCESS) return -1;
    mine = (spent + MPI_Wtime() - t0) / (b->o.iters + more);
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
  if (b->o.check) wrong = run_check(b, count, in_place);
  fill_result(r, &b->o, count, b->nranks, slowest, wrong);
  return 0;
}

static void print_ranks(const struct mpi_bench* b) {
  char host[MPI_MAX_PROCESSOR_NAME] = "";
  int len = 0, pid = (int)getpid();
  int* pids = b->rank == 0 ? (int*)malloc(sizeof(int) * (size_t)b->nranks) : NULL;
  MPI_Get_processor_name(host, &len);
  MPI_Gather(&pid, 1, MPI_INT, pids, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (b->rank != 0) return;
  print_devices(pids, b->nranks, host);
  free(pids);
}

static void print_library(const struct mpi_bench* b) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  char how[256];
  int len = 0;
  MPI_Get_library_version(version, &len);
  version[strcspn(version, "\n")] = '\0'; /* the first line names it and its version */
  snprintf(how, sizeof(how), "MPI collectives on MPI_COMM_WORLD, %s%s",
           b->o.coll == COLL_BROADCAST ? "out-of-place = root memcpy + MPI_Bcast, " : "",
           b->o.coll == COLL_REDUCESCATTER ? "in-place result at offset 0 (MPI_IN_PLACE)"
                                           : "in-place = MPI_IN_PLACE");
  if (b->rank == 0) print_header(&b->o, version, how, b->nranks);
}

static int run_sizes(const struct mpi_bench* b) {
  struct bench_totals totals = {0, 0, 0};
  for (size_t bytes = b->o.min_bytes; bytes <= b->o.max_bytes;
       bytes = bench_next_size(&b->o, bytes)) {
    size_t count = coll_count(b->o.coll, bytes, b->nranks);
    struct bench_result oop, ip;
    if (measure(b, count, 0, &oop) || measure(b, count, 1, &ip)) {
      fprintf(stderr, "mpi_perf: rank %d: the MPI call failed at %zu bytes\n", b->rank, bytes);
      return 1;
    }
    if (b->rank == 0) print_row(&b->o, count, b->nranks, &oop, &ip, &totals);
  }
  if (b->rank == 0) print_footer(&totals);
  return totals.wrong != 0;
}

int main(int argc, char** argv) {
  struct mpi_bench b;
  int failed;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.nranks);
  if (bench_parse_args(argc, argv, &b.o) != 0) {
    if (b.rank == 0) bench_usage(argv[0], NULL);
    MPI_Finalize();
    return 2;
  }
  if (b.o.root >= b.nranks) b.o.root = 0;
  b.send = bench_alloc(b.o.max_bytes / sizeof(float) + 1);
  b.recv = bench_alloc(b.o.max_bytes / sizeof(float) + 1);
  if (!b.send || !b.recv) {
    fprintf(stderr, "mpi_perf: rank %d: out of memory for %zu bytes\n", b.rank, b.o.max_bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  print_library(&b);
  print_ranks(&b);
  if (b.rank == 0) print_rule_lines();
  failed = run_sizes(&b);
  free(b.send);
  free(b.recv);
  MPI_Finalize();
  return failed;
}
