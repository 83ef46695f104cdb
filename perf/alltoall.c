/* alltoall_perf - loomAlltoAll. The size is one rank's send buffer: n blocks of count elements,
 * block p for rank p; rank r's result holds, in block p, what p sent to r. In place:
 * sendbuff == recvbuff (Loom serves it, so it is checked; nccl-tests leaves it unchecked). Bus
 * bandwidth: algbw x (n-1)/n, algbw over the n blocks. */
#include "common.h"

static void counts(size_t count, size_t esize, int nranks, struct perf_counts* c) {
  size_t block = perf_split_count(count, esize, nranks);
  *c = (struct perf_counts){
      .send = block * (size_t)nranks, .recv = block * (size_t)nranks, .param = block};
}

static loomResult_t run(const struct perf_call* c) {
  return loomAlltoAll(c->send, c->recv, c->count, c->type, c->comm, c->stream);
}

static int expect(const struct perf_data* d, int rank, size_t k, int64_t* out) {
  size_t block = d->cnt.param;
  *out = data_value(d, (int)(k / block), (size_t)rank * block + k % block);
  return 1;
}

static const struct perf_coll coll = {
    .tool = "alltoall_perf",
    .counts = counts,
    .bus_factor = perf_bus_split,
    .run = run,
    .expect = expect,
};

int main(int argc, char** argv) {
  return perf_main(&coll, argc, argv);
}
