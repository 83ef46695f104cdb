/* dag.h - the plans of one call as a graph of steps, for an executor that
 * queues a rank's whole share ahead of time and lets the device run it (the
 * CUDA executor; docs/DESIGN.md, "The GPU path").
 *
 * Such an executor cannot wait inside a step for a peer: its waits must be
 * for work a peer has already queued, or ranks that share a GPU can hang it
 * (a spinning kernel whose peer is not resident, a stream wait in a hardware
 * queue that the peer's work sits behind). So a receive becomes a read of
 * the sender's buffer by the receiver (the sender's send does nothing), and
 * each step gets the peers' steps it must wait for, under the rule the
 * checker proves every plan deadlock-free under (rendezvous: a send
 * completes only once its receiver has taken it):
 *  - a receive in step r of the receiver, matching a send in step s of the
 *    sender, waits until the sender has done s steps (the data is there;
 *    for s = 0, until the sender has started the call: its input is ready
 *    once the work queued before the call is done);
 *  - the sender's step s + 1 waits until the receiver has done r + 1 steps
 *    (nothing overwrites the data before it is read); after its last step,
 *    the sender's end does (the caller may reuse the buffer once the call is
 *    over).
 * A rank queues step k once every step it waits for has been queued by its
 * rank; tests/unit/test_dag.cc proves that order never sticks, for every
 * family at 1 to 12 ranks, and runs the reads in random orders the graph
 * allows against the collectives' results. Plans with peer or lines ops
 * (direct and lines plans, host memory only) are refused. */
#ifndef LOOM_COLL_DAG_H
#define LOOM_COLL_DAG_H

#include <stdint.h>

#include "collectives/plan.h"

/* Wait until rank `peer` has done `after` steps of the call (0: it has
 * started the call). */
struct dag_wait {
  int32_t peer;
  uint32_t after;
};

/* Where a receive of this rank reads: the sender, the sender's step holding
 * the matching send, and the sender's source range (its buffer, offset). */
struct dag_read {
  int32_t peer;
  uint32_t peer_step;
  struct plan_ref src;
};

/* One rank's share. Step k (0 <= k < nsteps) waits for waits[wait_begin[k]
 * .. wait_begin[k + 1]); k == nsteps is the end, after the last step. read[i]
 * is op i's (of the rank's plan) for OP_RECV and OP_RECV_REDUCE, unused
 * (peer -1) elsewhere. */
struct dag_rank {
  uint32_t nsteps;
  uint32_t* wait_begin; /* nsteps + 2 entries */
  struct dag_wait* waits;
  struct dag_read* read;
};

/* Builds the graph of the nranks plans of one call (plans[r] is rank r's)
 * into out[0..nranks). loomInvalidUsage when a plan holds ops the graph
 * cannot express or sends and receives do not pair up; loomSystemError when
 * memory runs out. On failure out holds nothing to free. */
loomResult_t dag_build(const struct plan* plans, int nranks, struct dag_rank* out);
void dag_free(struct dag_rank* ranks, int nranks);

#endif
