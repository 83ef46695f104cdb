/* reduce_perf - loomReduce. Every rank gives count elements; the root gets their reduction
 * (the other ranks' receive buffers are not results). In place, sendbuff == recvbuff. Bus
 * bandwidth: algbw (factor 1). -r -1 runs every root in turn. */
#include "common.h"

static loomResult_t run(const struct perf_call* c) {
  return loomReduce(c->send, c->recv, c->count, c->type, c->op, c->root, c->comm, c->stream);
}

static int expect(const struct perf_data* d, int rank, size_t k, int64_t* out) {
  if (rank != d->root) return 0;
  *out = data_reduced(d, k);
  return 1;
}

static const struct perf_coll coll = {
    .tool = "reduce_perf",
    .has_op = 1,
    .has_root = 1,
    .reduces = 1,
    .counts = perf_counts_whole,
    .bus_factor = perf_bus_one,
    .run = run,
    .expect = expect,
};

int main(int argc, char** argv) {
  return perf_main(&coll, argc, argv);
}
