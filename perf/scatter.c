/* scatter_perf - loomScatter. The size is what the root gives (n blocks); rank r gets block r.
 * In place: recvbuff == sendbuff + r*recvcount. Bus bandwidth: algbw x (n-1)/n, algbw over
 * the n blocks. -r -1 runs every root in turn. */
#include "common.h"

static loomResult_t run(const struct perf_call* c) {
  return loomScatter(c->send, c->recv, c->count, c->type, c->root, c->comm, c->stream);
}

static int expect(const struct perf_data* d, int rank, size_t k, int64_t* out) {
  *out = data_value(d, d->root, (size_t)rank * d->cnt.param + k);
  return 1;
}

static const struct perf_coll coll = {
    .tool = "scatter_perf",
    .has_root = 1,
    .input_root_only = 1,
    .counts = perf_counts_scattered,
    .bus_factor = perf_bus_split,
    .run = run,
    .expect = expect,
};

int main(int argc, char** argv) {
  return perf_main(&coll, argc, argv);
}
