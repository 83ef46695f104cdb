/* p2p.c - sends and receives as a plan: all of one launch's consecutive
 * point-to-point calls on a communicator go into one step, so they are all
 * posted together and no order of them can deadlock. Per peer, the k-th
 * send still matches the peer's k-th receive. */
#include "collectives/coll.h"
#include "core/checks.h"
#include "core/dtype.h"

loomResult_t p2p_build(const struct coll_task* tasks, int ntasks, struct plan* out) {
  plan_init(out, tasks[0].comm->rank, tasks[0].comm->nranks, "p2p");
  plan_step_begin(out);
  for (int k = 0; k < ntasks; k++) {
    const struct coll_task* t = &tasks[k];
    size_t bytes = t->count * dtype_size(t->dtype);
    struct plan_ref ref = plan_ref_make((enum plan_buf)(PB_USER + k), 0);
    if (t->kind == COLL_SEND)
      plan_add(out, OP_SEND, t->root, ref, ref, bytes);
    else
      plan_add(out, OP_RECV, t->root, ref, ref, bytes);
  }
  return plan_finish(out);
}
