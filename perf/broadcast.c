/* broadcast_perf - loomBroadcast. The root's count elements reach every rank; in place,
 * sendbuff == recvbuff. Bus bandwidth: algbw (factor 1). -r -1 runs every root in turn. */
#include "common.h"

static loomResult_t run(const struct perf_call* c) {
  return loomBroadcast(c->send, c->recv, c->count, c->type, c->root, c->comm, c->stream);
}

static int expect(const struct perf_data* d, int rank, size_t k, int64_t* out) {
  *out = data_value(d, d->root, k);
  return 1;
}

static const struct perf_coll coll = {
    .tool = "broadcast_perf",
    .has_root = 1,
    .input_root_only = 1,
    .counts = perf_counts_whole,
    .bus_factor = perf_bus_one,
    .run = run,
    .expect = expect,
};

int main(int argc, char** argv) {
  return perf_main(&coll, argc, argv);
}
