/* exec.h - executors: what runs the plans of a launch (one call, or one
 * group), chosen per launch by the kind of its stream.
 *
 * A launch goes through four functions of its executor's table:
 *  - prepare, on the calling thread at call time: builds every plan and
 *    takes a reference on all the launch will use (plans, scratch), under
 *    each communicator's lock, and takes the launch's turn on each of its
 *    communicators. The turn fixes the order in which launches run on a
 *    communicator: the order of the calls, whatever streams they are on.
 *    Never blocks on peers.
 *  - launch, where the launch runs (the caller for a NULL stream, a host
 *    stream's worker): starts it. The host executor has nothing to start;
 *    a CUDA executor enqueues its kernels on the stream here.
 *  - progress: advances without waiting longer than one short sleep on the
 *    rank's doorbell; *done_out once every communicator's share is over.
 *    It waits for the launch's turn first.
 *  - release: drops every reference prepare took and passes each
 *    communicator's turn on, whether the launch succeeded, failed or never
 *    ran. The communicator lock guards preparation only: a launch runs
 *    without it, and whatever it uses lives until its release. */
#ifndef LOOM_COLL_EXEC_H
#define LOOM_COLL_EXEC_H

#include "core/memkind.h"
#include "core/stream.h"
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

struct coll_task; /* collectives/coll.h */
struct loom_comm;
struct exec_launch;

struct loom_executor {
  const char* name;   /* "host", "cuda" */
  unsigned mem_kinds; /* MEM_KIND_BIT of each memory kind it can work on */
  unsigned stream_ok; /* STREAM_KIND_BIT of each stream kind that runs it (NULL: host) */
  /* Bytes of state a launch of ntasks tasks needs: allocated (zeroed) with
   * the launch, in one block, as l->state. */
  size_t (*state_size)(int ntasks);
  loomResult_t (*prepare)(struct exec_launch* l);
  loomResult_t (*launch)(struct exec_launch* l);
  loomResult_t (*progress)(struct exec_launch* l, int* done_out);
  void (*release)(struct exec_launch* l);
};

/* One launch: its tasks (owned), the executor that runs them, and that
 * executor's state (set by prepare, freed by release). */
struct exec_launch {
  struct coll_task* tasks;
  int ntasks;
  const struct loom_executor* ex;
  void* state;
  /* Set before release: how it ended, and whether it was dropped (it then
   * only waits for its turns and passes them on, running nothing). */
  loomResult_t result;
  int cancel;
  /* Completed with result once the launch is released (streams other than
   * the one it runs on wait for it), and armed when its turns come; NULL:
   * nobody waits. A reference, the launch's. */
  struct loom_event* done_event;
  size_t block_bytes; /* the block's size (the launch, then the state) */
  /* The block and the tasks' array belong to the caller (exec_run_one):
   * the launch frees neither. */
  unsigned char block_lent, tasks_lent;
};

extern const struct loom_executor exec_host;
/* exec_cuda.c: device buffers on CUDA streams. exec_cuda_comm_fini ends a
 * communicator's CUDA state (its last stream synchronized first). */
extern const struct loom_executor exec_cuda;
void exec_cuda_comm_fini(struct loom_comm* comm);

/* The executor for work on stream s (NULL: run now on the calling thread)
 * over memory of kind k; NULL when there is none in this build. */
const struct loom_executor* exec_pick(const struct loom_stream* s, enum mem_kind k);
/* Why no executor of this build can run work on s over memory of kind k
 * (exec_pick NULL), for a message: "a host stream cannot serve; ...".
 * Static text. */
const char* exec_refusal(const struct loom_stream* s, enum mem_kind k);

/* Makes a launch of tasks (taking ownership of them, also on failure) and
 * prepares it; *out is NULL on failure. */
loomResult_t exec_launch_prepare(struct coll_task* tasks, int ntasks, struct exec_launch** out);
/* Launches l, drives it to its end, releases and frees it. Returns the
 * launch's result. */
loomResult_t exec_launch_run(struct exec_launch* l);
/* Prepares and runs at once, on the calling thread, a launch of the one
 * task t (NULL stream, no group), kept on this thread's stack: t stays the
 * caller's (its v is freed). Returns the launch's result. */
loomResult_t exec_run_one(struct coll_task* t);
/* Releases and frees a prepared launch that will never run. */
void exec_launch_drop(struct exec_launch* l);
/* For executors: l's turns have come and it starts now. From here its own
 * deadlines bound it, so its done_event gets one too (event_arm). */
void exec_launch_arm(struct exec_launch* l);
static inline void exec_launch_started(struct exec_launch* l) {
  if (l->done_event) exec_launch_arm(l);
}

#ifdef __cplusplus
}
#endif

#endif
