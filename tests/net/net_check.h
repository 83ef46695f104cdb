/* net_check.h - what the parts of net_check share: the run's context, the
 * failure reporting, and the collective runners (net_colls.c). Public API
 * only (include/loom.h). */
#ifndef LOOM_TESTS_NET_CHECK_H
#define LOOM_TESTS_NET_CHECK_H

#include <stddef.h>

#include "loom.h"

struct nc_ctx {
  loomComm_t comm;
  int rank, nranks;
  long calls;      /* collective calls made in the current collective's run */
  long wrong;      /* wrong elements seen, over the whole run */
  long wrong_here; /* in the current collective's run */
  int big;         /* also run the large count (1<<20)+3, on a subset */
};

/* A call failed: prints the result's name, loomGetLastError and what was
 * being done, aborts the communicator and exits 2. */
void nc_die_call(struct nc_ctx* c, loomResult_t r, const char* what);
/* Counts and (the first few) prints a wrong element. */
void nc_wrong(struct nc_ctx* c, const char* what, size_t i, double got, double want);

#define NC_CALL(c, what, call)                                 \
  do {                                                         \
    loomResult_t nc_r_ = (call);                               \
    if (nc_r_ != loomSuccess) nc_die_call((c), nc_r_, (what)); \
  } while (0)

/* The runners: each runs its collective over the counts, datatypes, ops,
 * roots and in-place forms of the matrix and checks every element. */
void nc_allreduce(struct nc_ctx* c);
void nc_broadcast(struct nc_ctx* c);
void nc_reduce(struct nc_ctx* c);
void nc_allgather(struct nc_ctx* c);
void nc_reducescatter(struct nc_ctx* c);
void nc_alltoall(struct nc_ctx* c);
void nc_alltoallv(struct nc_ctx* c);
void nc_gather(struct nc_ctx* c);
void nc_scatter(struct nc_ctx* c);
void nc_sendrecv(struct nc_ctx* c);

/* One all-reduce (float32 sum) of count elements, checked; the fault loop's
 * step. Returns the call's result without exiting; *wrong_out counts wrong
 * elements. */
loomResult_t nc_allreduce_once(struct nc_ctx* c, float* send, float* recv, size_t count,
                               long* wrong_out);

#endif /* LOOM_TESTS_NET_CHECK_H */
