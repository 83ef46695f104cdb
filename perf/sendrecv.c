/* sendrecv_perf - loomSend and loomRecv in one group: rank r sends count elements to r+1 and
 * receives as many from r-1 (mod n). The in-place form (one buffer both sent and received)
 * has no defined result, so, as in nccl-tests, it is timed but not checked (N/A). Bus
 * bandwidth: algbw (factor 1). The op is listed, as nccl-tests does, but combines nothing. */
#include "common.h"

static loomResult_t run(const struct perf_call* c) {
  int to = (c->rank + 1) % c->nranks, from = (c->rank - 1 + c->nranks) % c->nranks;
  loomResult_t res = loomGroupStart();
  if (res != loomSuccess) return res;
  res = loomSend(c->send, c->count, c->type, to, c->comm, c->stream);
  if (res == loomSuccess) res = loomRecv(c->recv, c->count, c->type, from, c->comm, c->stream);
  loomResult_t end = loomGroupEnd();
  return res != loomSuccess ? res : end;
}

static int expect(const struct perf_data* d, int rank, size_t k, int64_t* out) {
  *out = data_value(d, (rank - 1 + d->nranks) % d->nranks, k);
  return 1;
}

static const struct perf_coll coll = {
    .tool = "sendrecv_perf",
    .has_op = 1,
    .inplace_unchecked = 1,
    .counts = perf_counts_whole,
    .bus_factor = perf_bus_one,
    .run = run,
    .expect = expect,
};

int main(int argc, char** argv) {
  return perf_main(&coll, argc, argv);
}
