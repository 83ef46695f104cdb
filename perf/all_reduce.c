/* all_reduce_perf - loomAllReduce. Every rank gives count elements and gets their reduction
 * over all ranks; in place, sendbuff == recvbuff. Bus bandwidth: algbw x 2(n-1)/n. */
#include "common.h"

static double bus_factor(int nranks) {
  return 2.0 * (nranks - 1) / nranks;
}

static loomResult_t run(const struct perf_call* c) {
  return loomAllReduce(c->send, c->recv, c->count, c->type, c->op, c->comm, c->stream);
}

static int expect(const struct perf_data* d, int rank, size_t k, int64_t* out) {
  *out = data_reduced(d, k);
  return 1;
}

static const struct perf_coll coll = {
    .tool = "all_reduce_perf",
    .has_op = 1,
    .reduces = 1,
    .counts = perf_counts_whole,
    .bus_factor = bus_factor,
    .run = run,
    .expect = expect,
};

int main(int argc, char** argv) {
  return perf_main(&coll, argc, argv);
}
