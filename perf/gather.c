/* gather_perf - loomGather. The size is what the root gets (n blocks); every rank gives one
 * block of size/n bytes. In place: sendbuff == recvbuff + r*sendcount. Bus bandwidth:
 * algbw x (n-1)/n, algbw over the n blocks. -r -1 runs every root in turn. */
#include "common.h"

static loomResult_t run(const struct perf_call* c) {
  return loomGather(c->send, c->recv, c->count, c->type, c->root, c->comm, c->stream);
}

static int expect(const struct perf_data* d, int rank, size_t k, int64_t* out) {
  if (rank != d->root) return 0;
  size_t block = d->cnt.param;
  *out = data_value(d, (int)(k / block), k % block);
  return 1;
}

static const struct perf_coll coll = {
    .tool = "gather_perf",
    .has_root = 1,
    .counts = perf_counts_gathered,
    .bus_factor = perf_bus_split,
    .run = run,
    .expect = expect,
};

int main(int argc, char** argv) {
  return perf_main(&coll, argc, argv);
}
