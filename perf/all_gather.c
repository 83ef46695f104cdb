/* all_gather_perf - loomAllGather. The size is what each rank gets (n blocks); each rank gives
 * one block of size/n bytes. In place: sendbuff == recvbuff + r*sendcount. Bus bandwidth:
 * algbw x (n-1)/n, algbw over the n blocks. */
#include "common.h"

static loomResult_t run(const struct perf_call* c) {
  return loomAllGather(c->send, c->recv, c->count, c->type, c->comm, c->stream);
}

/* Block p of the result is rank p's input. */
static int expect(const struct perf_data* d, int rank, size_t k, int64_t* out) {
  size_t block = d->cnt.param;
  *out = data_value(d, (int)(k / block), k % block);
  return 1;
}

static const struct perf_coll coll = {
    .tool = "all_gather_perf",
    .counts = perf_counts_gathered,
    .bus_factor = perf_bus_split,
    .run = run,
    .expect = expect,
};

int main(int argc, char** argv) {
  return perf_main(&coll, argc, argv);
}
