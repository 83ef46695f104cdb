/* scatter_perf - loomScatter. The size is what the root gives (n blocks); rank r gets block r.
 * In place: recvbuff == sendbuff + r*recvcount. Bus bandwidth: algbw x (n-1)/n, algbw over
 * the n blocks. -r -1 runs every root in turn. */
#include "common.h"

static void counts(size_t count, size_t esize, int nranks, struct perf_counts* c) {
  size_t block = perf_split_count(count, esize, nranks);
  *c = (struct perf_counts){
      .send = block * (size_t)nranks, .recv = block, .param = block, .recv_inplace = block};
}

static double bus_factor(int nranks) {
  return (double)(nranks - 1) / nranks;
}

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
    .algbw_per_rank = 1,
    .counts = counts,
    .bus_factor = bus_factor,
    .run = run,
    .expect = expect,
};

int main(int argc, char** argv) {
  return perf_main(&coll, argc, argv);
}
