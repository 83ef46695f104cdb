/* reduce_scatter_perf - loomReduceScatter. The size is what each rank gives (n blocks of
 * recvcount elements); rank r gets the reduction of block r. In place:
 * recvbuff == sendbuff + r*recvcount. Bus bandwidth: algbw x (n-1)/n, algbw over n blocks. */
#include "common.h"

static loomResult_t run(const struct perf_call* c) {
  return loomReduceScatter(c->send, c->recv, c->count, c->type, c->op, c->comm, c->stream);
}

static int expect(const struct perf_data* d, int rank, size_t k, int64_t* out) {
  *out = data_reduced(d, (size_t)rank * d->cnt.param + k);
  return 1;
}

static const struct perf_coll coll = {
    .tool = "reduce_scatter_perf",
    .has_op = 1,
    .reduces = 1,
    .counts = perf_counts_scattered,
    .bus_factor = perf_bus_split,
    .run = run,
    .expect = expect,
};

int main(int argc, char** argv) {
  return perf_main(&coll, argc, argv);
}
