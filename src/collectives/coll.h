/* coll.h - the collectives layer's own types: a task (one call of the API,
 * checked and recorded), the per-communicator state, and the entry points
 * between api.c, group.c, exec_host.c and comm_api.c. */
#ifndef LOOM_COLL_COLL_H
#define LOOM_COLL_COLL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "collectives/plan.h"
#include "core/colls.h"
#include "core/comm.h"
#include "core/memkind.h"
#include "loom.h"
#include "topo/tune.h"

/* The collectives of core/colls.def, in its order, then point-to-point. */
enum coll_kind {
#define COLL(id, token, text, flags) COLL_##id,
#include "core/colls.def"
#undef COLL
  COLL_SEND,
  COLL_RECV,
  COLL_KIND_COUNT
};

/* The collective's name in messages ("all-reduce"; "send/receive"). */
const char* coll_kind_text(enum coll_kind k);

/* One call of the API, with its arguments checked. */
struct coll_task {
  enum coll_kind kind;
  struct loom_comm* comm;
  struct loom_stream* stream; /* NULL: run now */
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  loomDataType_t dtype;
  loomRedOp_t op;          /* as the user gave it */
  int root;                /* root, or peer for send/recv */
  unsigned char scalar[8]; /* PreMulSum's scalar, when read at call time */
  const void* scalar_ptr;  /* PreMulSum's scalar, when read at run time */
  size_t* v;               /* all-to-all-v: sendcounts, sdispls, recvcounts, rdispls (4n, owned) */
  enum mem_kind mem;       /* of every buffer of the call (api.c classifies them) */
  uint64_t rec;            /* its flight record (recorder.h); 0: none */
};

#define COLL_MAX_PREMUL 256

struct premul_op {
  int in_use;
  uint32_t gen; /* in the op's value, so a destroyed op's value is stale */
  loomDataType_t dtype;
  loomScalarResidence_t residence;
  const void* ptr;
  unsigned char value[8];
};

/* What determines a collective's plan besides the communicator: the tuner's
 * choice depends on the size in bytes, the plan on the element count, and
 * the families that may serve it on the memory kind. */
struct plan_key {
  int kind; /* enum coll_kind */
  size_t count;
  size_t esize;
  int premul, avg, root;
  int mem;      /* enum mem_kind */
  int distinct; /* coll_args.distinct */
};
#define PLAN_CACHE 4

/* A plan shared by the communicator's cache and the launches that run it:
 * freed when the last of them lets go (a launch may outlive the cache
 * entry it came from). */
struct plan_obj {
  struct plan plan;
  _Atomic int refs;
  struct loom_comm* comm; /* whose memory it is counted as, once built (plan_obj_count) */
  size_t bytes;           /* counted */
  /* The CUDA executor's: this rank's share of the call's graph of steps
   * (dag.h), built on first use under the communicator's exec_lock. */
  struct dag_rank* dag;
};
void plan_obj_unref(struct plan_obj* p);
/* A built plan is counted as comm's memory (memstat.h) until its last reference goes. */
void plan_obj_count(struct plan_obj* o, struct loom_comm* comm);

/* The plans' PB_SCRATCH: one per communicator, replaced by a larger one when
 * a plan needs more, freed when no launch uses it any more. */
struct scratch_obj {
  _Atomic int refs;
  size_t bytes;
  void* data;
  struct loom_comm* comm; /* whose memory it is counted as (memstat.h); outlives the object */
};
void scratch_obj_unref(struct scratch_obj* s);

struct coll_comm {
  /* Guards preparation (the plan cache, the scratch, the turns), never
   * held while a launch runs. */
  pthread_mutex_t exec_lock;
  /* Launches run in the order they were prepared (the order of the calls,
   * across streams): a launch takes the turn next_turn at preparation and
   * runs once serving reaches it; it passes the turn on when released. */
  uint64_t next_turn;       /* under exec_lock */
  _Atomic uint64_t serving; /* the turn allowed to run now */
  _Atomic int turn_waiters; /* launches waiting for their turn (release rings only for them) */
  pthread_mutex_t ops_lock;
  struct premul_op ops[COLL_MAX_PREMUL];
  /* Launches prepared on this communicator and not yet released; teardown
   * waits until there are none (coll_inflight_wait). */
  _Atomic int inflight;
  struct scratch_obj* scratch; /* the current scratch (a reference); under exec_lock */
  /* The tuner's constants, rank 0's for every rank: ranks that calibrated
   * apart would otherwise disagree on plans. */
  struct tune_consts tune;
  int* host_of;          /* host of each rank, numbered in order of first appearance */
  enum tune_proto proto; /* how slices cross connections (tune_proto_pick; simple so far) */
  /* The last plans built, reused by calls that repeat (as training loops
   * do). Under exec_lock; only the collective lane uses them. */
  struct {
    struct plan_key key;
    struct plan_obj* obj; /* a reference; NULL: empty */
  } plans[PLAN_CACHE];
  int plans_next;
  uint64_t check_seq;     /* collectives called so far, when check_args (argcheck.c) */
  struct cuda_comm* cuda; /* the CUDA executor's (exec_cuda.c); NULL until its first call */
};

/* comm_api.c */
/* Every LOOM_* setting this process was started with is valid: syntax and
 * range (params_check), and the names only the upper layers know (LOOM_ALGO,
 * LOOM_TRANSPORTS). loomInvalidArgument with one line naming the first bad
 * one otherwise. */
loomResult_t coll_settings_check(void);
loomResult_t coll_comm_init(struct loom_comm* comm);
void coll_comm_fini(struct loom_comm* comm);
/* Waits for a non-blocking init of comm to end (sleeping on comm's state
 * condition; loomTimeout after comm->timeout_ms, though the init's own waits
 * have deadlines too); then loomSuccess when comm is initialised, whether or
 * not it broke since, else the error that ended its init. */
loomResult_t coll_comm_settled(struct loom_comm* comm);
/* coll_comm_settled, then: comm is usable (not aborted, not broken). */
loomResult_t coll_comm_ready(struct loom_comm* comm);
/* comm_api.c: a rank's init on the id (blocking or not, by config). parent:
 * the communicator a split makes this one from, or NULL; cuda_dev: the CUDA
 * device the rank is bound to (loomCommInitAll's devlist, a split's
 * parent), or -1 for a host rank. */
struct boot_id;
loomResult_t coll_init_rank(loomComm_t* out, int nranks, const struct boot_id* id, int rank,
                            const loomConfig_t* config, struct loom_comm* parent, int cuda_dev);
/* A user's config: NULL, or made with LOOM_CONFIG_INITIALIZER and valid. */
loomResult_t coll_check_config(const loomConfig_t* config);

/* reg.c: ends every registration of comm (at teardown). */
void reg_comm_fini(struct loom_comm* comm);

/* redop.c: resolves a user op for a task: the built-in op used to reduce,
 * and the PreMulSum scalar if any. */
loomResult_t redop_resolve(struct loom_comm* comm, loomRedOp_t op, loomDataType_t dtype,
                           struct coll_task* t);
static inline int redop_is_premul(loomRedOp_t op) {
  return (int)op >= (int)loomNumOps;
}

/* group.c: runs t now (no group open, NULL stream), queues it on its stream,
 * or adds it to the thread's open group. Takes ownership of t->v, also on
 * failure. */
loomResult_t group_submit(const struct coll_task* t);
/* group_submit for a collective of api.c: first its argument check when the
 * communicator has one (argcheck_call), then nothing more when it moves no
 * bytes (empty; t->v is freed). Takes ownership of t->v. */
loomResult_t group_submit_coll(const char* fn, const struct coll_task* t, int empty);

/* exec_host.c: a launch on comm was released: the caller's last touch of
 * comm. coll_inflight_wait returns when no launch of cc is in flight
 * (teardown). */
void coll_inflight_done(struct loom_comm* comm);
void coll_inflight_wait(struct coll_comm* cc);

/* algos.c: the plan of a collective task, by the algorithm the tuner picks
 * among those that can serve it. out is initialised here. */
loomResult_t algo_plan(const struct coll_task* t, struct plan* out);
/* The plan that rank (of t's communicator) builds for its share of t's
 * call: every rank picks the same algorithm (the tuner's constants are
 * rank 0's), so a rank can build its peers' plans (the CUDA executor's
 * graph). Not for all-to-all-v, whose counts only their rank knows. */
loomResult_t algo_plan_rank(const struct coll_task* t, int rank, struct plan* out);
/* As algo_plan, through the communicator's cache: *out is a reference the
 * caller releases with plan_obj_unref. All-to-all-v (whose plan depends on
 * its counts) is built anew every time. Caller holds the communicator's
 * exec_lock. */
loomResult_t algo_plan_cached(const struct coll_task* t, struct plan_obj** out);
/* A plan_obj of its own (one reference) around an empty plan. */
struct plan_obj* plan_obj_new(void);
/* The algorithms (TUNE_ALGO_BIT mask) that can serve kind. */
unsigned algo_available(enum coll_kind kind);
/* Those among them the tuner may pick for one call: direct plans only when
 * direct (every rank on one host, host memory), lines only when lines (one
 * host, host memory, what a rank puts fits them), the two-level all-reduce
 * only on an even layout of several hosts (k's shape), and, for the
 * reductions, only the ordered family and lines when deterministic (ordered
 * never otherwise). */
unsigned algo_candidates(enum coll_kind kind, int direct, int lines, int deterministic,
                         const struct tune_consts* k);

/* argcheck.c (comm->check_args): the ranks of t's communicator agree on
 * its arguments: now (in_group 0: blocks until every rank has called), or,
 * inside a group, at argcheck_group_end. On a mismatch every rank gets
 * loomInvalidUsage naming the ranks and fields, set on the communicator. */
loomResult_t argcheck_call(const char* fn, const struct coll_task* t, int in_group);
/* Runs the checks of the calling thread's group (one launch, so that one
 * thread may drive several ranks of a communicator) and removes from tasks
 * (*ntasks of them; their v freed) those of every communicator whose check
 * failed; the first failure's code. */
loomResult_t argcheck_group_end(struct coll_task* tasks, int* ntasks);

/* group.c: frees what tasks own (all-to-all-v arrays). */
void tasks_release(struct coll_task* tasks, int ntasks);

/* p2p.c: the plan of consecutive sends and receives on one communicator: one
 * step holding them all, so that no order of them can deadlock. Buffer k of
 * the plan (PB_USER + k) is tasks[k]'s buffer; counts are in bytes. */
#define PB_USER PB_COUNT
loomResult_t p2p_build(const struct coll_task* tasks, int ntasks, struct plan* out);

#endif
