/* comm.h - the communicator as the core layer sees it: identity, peers, the
 * bootstrap, error state and the hooks the upper layers hang their state on.
 * The core knows nothing of transports or collectives: they attach through
 * the opaque pointers below. */
#ifndef LOOM_CORE_COMM_H
#define LOOM_CORE_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/memkind.h"
#include "core/memstat.h"
#include "core/params.h"
#include "core/util.h"
#include "loom.h"

#define LOOM_ERR_LEN 512

/* What every rank tells the others at init. Fixed size, no pointers: it is
 * sent on the wire as is (both ends are the same build of Loom). */
struct peer_info {
  int32_t rank;
  int32_t pid;
  int32_t cuda_dev;        /* the device ordinal in its own process; -1 for host ranks */
  int32_t cpus;            /* CPUs its process may run on (topo.h) */
  struct dev_identity dev; /* comparable across processes; all zero for host ranks */
  uint64_t host_id;        /* topo.h: ranks with the same id share memory */
  uint64_t process_token;  /* process_token_get() */
  uint64_t machine_id;     /* topo.h: whose cores this rank shares */
  uint64_t settings[PARAMS_AGREED_MAX]; /* params_agreed_digest(): what ranks must agree on */
  char hostname[64];
};

struct bootstrap; /* src/core/bootstrap.c */
struct tp_comm;   /* src/transport: connections of this comm */
struct coll_comm; /* src/collectives: plans, groups, per-comm executor state */
struct recorder;  /* src/core/recorder.c */

/* The communicator behind a loomComm_t. The user's handle is not a pointer
 * to it but an entry of the live-handle table (handle.h); public functions
 * turn it into this struct with comm_get. */
struct loom_comm {
  uint64_t handle; /* what the user holds (loomComm_t); 0 once ended */
  int rank;
  int nranks;
  uint64_t comm_hash; /* random, chosen by rank 0; names shared segments */
  char name[64];
  int blocking;
  long long timeout_ms;
  int cuda_dev;      /* the CUDA device the communicator is bound to; -1: host ranks */
  int check_args;    /* LOOM_CHECK_ARGS or config.checkArgs: agree on collectives' arguments */
  int deterministic; /* LOOM_DETERMINISTIC or config.deterministic: reductions in rank order */

  struct peer_info* peers; /* nranks rows, from the bootstrap */
  struct bootstrap* boot;
  struct tp_comm* tp;
  struct coll_comm* coll;
  struct mem_stat mem;  /* what the layers allocate for it (memstat.h) */
  struct recorder* rec; /* the flight recorder (recorder.h); NULL: off or not yet made */

  /* Error state. async_error is loomInProgress during a non-blocking init,
   * then loomSuccess, or the error that broke the communicator. */
  _Atomic int async_error;
  /* Nonzero: every wait of this communicator gives up. COMM_ABORT_USER:
   * loomCommAbort was called on this rank; COMM_ABORT_PARENT: the
   * communicator that this one is being split from failed while this one
   * was forming (it never reaches the user then). */
  _Atomic int aborted;
  _Atomic int failed_peer; /* the peer that failed, or -1 */
  pthread_mutex_t err_lock;
  char last_error[LOOM_ERR_LEN];
  /* The cause that broke the communicator, kept apart from last_error, which
   * later errors (echoes of the failure, such as a survivor's closed
   * connection) overwrite. */
  char fail_error[LOOM_ERR_LEN];
  /* A first failure recorded but not yet published (comm_fail_reserve):
   * its code, else loomSuccess. Under err_lock. */
  int fail_pending;
  uint32_t shrinks; /* loomCommShrink calls on this rank (their messages' tags) */

  /* Called by the bootstrap's watcher when a peer fails, so that waiters in
   * the upper layers wake up at once. Set by the transport layer. */
  void (*wake_fn)(void* arg);
  void* wake_arg;
  /* Called once the communicator has failed or is aborted, on whichever
   * thread found it out (the watcher, often): what the device waits on is
   * released there (the CUDA executor's). Set by the collectives layer. */
  void (*fail_hook)(struct loom_comm* comm);

  /* A split in progress: the child forming and the parent it comes from
   * (comm_forming_*, under a process-wide lock). */
  struct loom_comm* forming;
  struct loom_comm* parent;

  /* What public calls on other threads wait for: a non-blocking init's end
   * (async_error leaving loomInProgress) and the last of boot_users (public
   * calls inside the bootstrap: split, finalize) leaving, which
   * loomCommAbort waits for before freeing. Changes are broadcast on
   * state_cond (CLOCK_MONOTONIC) under state_lock. */
  pthread_mutex_t state_lock;
  pthread_cond_t state_cond;
  int boot_users; /* under state_lock */

  /* Non-blocking init runs on this thread. */
  pthread_t init_thread;
  int init_thread_live;
};

enum { COMM_ABORT_USER = 1, COMM_ABORT_PARENT = 2 };

/* Allocates a communicator in the initialising state, with a live handle. */
loomResult_t comm_alloc(int nranks, int rank, const loomConfig_t* config, struct loom_comm** out);
/* Frees what comm_alloc made (the upper layers release theirs first), and
 * ends its handle if comm_end has not. */
void comm_free(struct loom_comm* comm);
/* The communicator of a handle from the user; loomInvalidArgument naming
 * fn and what is wrong with the handle (NULL, destroyed, not a
 * communicator) otherwise. Lock-free. */
loomResult_t comm_get(loomComm_t handle, const char* fn, struct loom_comm** out);
/* Ends the handle (destroy, abort): returns the communicator, or
 * loomInvalidArgument as comm_get when the handle is not live, so of two
 * calls ending one handle exactly one succeeds. */
loomResult_t comm_end(loomComm_t handle, const char* fn, struct loom_comm** out);
/* The handle the user holds for comm. */
static inline loomComm_t comm_handle(const struct loom_comm* comm) {
  return (loomComm_t)(uintptr_t)comm->handle;
}
/* Records that peer failed (or, with peer < 0, that the communicator broke)
 * with code, once; later calls keep the first cause. Wakes waiters. */
void comm_set_failed(struct loom_comm* comm, int peer, loomResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* comm_set_failed in two steps, for a failure that must be told to the
 * peers before this rank's waiters wake (rank 0's bootstrap): reserve
 * records the cause as the first one (returns 0 when another came first),
 * so that a failure the telling provokes (a peer that exits on hearing it)
 * cannot take its place; publish makes it visible and wakes waiters. */
int comm_fail_reserve(struct loom_comm* comm, int peer, loomResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
void comm_fail_publish(struct loom_comm* comm);
/* Publishes the peer table (peers: nranks rows, or NULL) under the error
 * lock, so that a failure recorded meanwhile on another thread (the
 * bootstrap's watcher, while the table travels) reads either none of it or
 * all of it. */
void comm_set_peers(struct loom_comm* comm, struct peer_info* peers);
/* loomSuccess when every rank has the same value of each setting they must
 * agree on (params_agreed_*, from the peer table); otherwise
 * loomInvalidUsage naming the variable and the ranks that differ from rank
 * 0. Every rank reaches the same verdict. Pure, apart from the error. */
loomResult_t comm_settings_check(struct loom_comm* comm);
/* The agreed settings a config may override (config.checkArgs,
 * config.deterministic): writes this communicator's values over the
 * environment's digest in settings, so that ranks agree on what they act on. */
void comm_settings_own(const struct loom_comm* comm, uint64_t* settings);
/* What a split or shrink of comm inherits when given no config. */
void comm_config_inherit(const struct loom_comm* comm, loomConfig_t* out);
/* child is being made by a split of parent: if parent fails (now or before
 * comm_forming_end), child's waits give up (COMM_ABORT_PARENT), so the split
 * reports the parent's failure instead of waiting for a dead rank until its
 * deadline. */
void comm_forming_begin(struct loom_comm* parent, struct loom_comm* child);
/* child's init is over. ok: it succeeded, and a stop that came too late to
 * matter is undone. Otherwise, when it was the parent's failure that stopped
 * it, returns that failure's code with its text in the thread's (and the
 * child's) last error; else loomSuccess. */
loomResult_t comm_forming_end(struct loom_comm* child, int ok);
/* Why comm's waits were stopped, for messages: "communicator aborted" or
 * "split stopped: the communicator it is split from failed". */
const char* comm_stop_reason(const struct loom_comm* comm);
/* Waits at most ms for comm to learn that it failed (a cause recorded by
 * comm_set_failed, which rings bell, the rank's doorbell): 1 once it has,
 * 0 at the deadline. For an error seen on a connection, whose cause the
 * bootstrap learns moments later. */
int comm_await_failure(struct loom_comm* comm, struct bell* bell, long long ms);
/* A non-blocking init of comm has ended: wakes calls waiting for it
 * (comm_await_init). Any thread. */
void comm_state_changed(struct loom_comm* comm);
/* Waits for a non-blocking init of comm to end (async_error no longer
 * loomInProgress): loomSuccess, or loomTimeout naming the wait once
 * comm->timeout_ms has passed (the init's own waits have deadlines too). */
loomResult_t comm_await_init(struct loom_comm* comm);
/* A public call enters / leaves comm's bootstrap from its own thread. */
void comm_boot_enter(struct loom_comm* comm);
void comm_boot_leave(struct loom_comm* comm);
/* Waits at most ms for every call inside the bootstrap to leave (they watch
 * the abort flag): 1 once none is left, 0 at the deadline. */
int comm_await_boot_users(struct loom_comm* comm, long long ms);
/* Calls the wake hook, if set (any thread). */
void comm_wake(struct loom_comm* comm);
/* Sets the wake hook; fn NULL clears it. */
void comm_set_wake(struct loom_comm* comm, void (*fn)(void*), void* arg);
/* Sets the failure hook (fn NULL clears it), and runs it: calls it if set. */
void comm_set_fail_hook(struct loom_comm* comm, void (*fn)(struct loom_comm*));
void comm_fail_hook_run(struct loom_comm* comm);
/* loomSuccess while usable; else the error that broke it, with its text
 * copied to the caller's last error. */
loomResult_t comm_health(struct loom_comm* comm);

#endif
