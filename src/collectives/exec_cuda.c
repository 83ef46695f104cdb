/* exec_cuda.c - the CUDA executor: collectives on device buffers, queued on
 * the caller's CUDA stream (docs/DESIGN.md, "The GPU path").
 *
 * A call's plans become a graph of steps (dag.c): a receive is the
 * receiver reading the sender's buffer, and each step waits for the peers'
 * steps it depends on. The calling thread queues its rank's steps on the
 * stream one by one; before queuing a step it waits, on the host, until
 * every peer that step depends on has queued the step it needs, and then
 * queues a stream wait for the peer's progress word. So every wait on the
 * device is for work already queued: ranks that share a GPU (threads or
 * processes) never depend on being resident together, whichever hardware queues their
 * streams share. The call returns once its work is queued.
 *
 * Progress words: each rank of a communicator has one in the device area of
 * its rank segment (transport/devarea.h), shared memory that every rank of
 * the host maps and registers for the device, written by its stream after each step (a stream
 * memory operation) with value(seq, steps done), seq being the call's
 * number on the communicator; peers' streams wait for it to reach a value
 * (>=, so a later call's value satisfies an earlier wait). A second word,
 * written by the host, says how far the rank has queued. A communicator's
 * calls run one after another on the device whatever streams they are on
 * (an event recorded at the end of each call holds the next call on another
 * stream; the event outlives a stream the caller destroys), which keeps
 * each word rising.
 *
 * Buffers: a rank publishes the addresses of a call's send, receive and
 * scratch buffers in one of CUDA_SLOTS slots; it reuses a slot only once
 * every peer has queued past the call that used it. Where a peer is in
 * another process, a rank works in staging buffers of its own (the user's
 * copied in and out: CUDA leaves undefined an allocation freed while another
 * process has it open, so only Loom's memory is ever opened by a peer),
 * published with their IPC handles, which a peer opens once.
 *
 * Sends and receives (and all-to-all-v, whose plan no peer can know) match
 * per pair of ranks instead: the k-th send from a to b meets b's k-th
 * receive from a, however many calls each made on the communicator in
 * between. Each rank has, per peer, words written by its stream (sends
 * whose buffer is ready, receives done) and by its host (how far each is
 * queued), and P2P_DEPTH descriptors of its sends' buffers. The receiver
 * reads the sender's buffer once the sender's stream reaches the send; the
 * sender's stream waits for the receive to be done before it goes on (the
 * buffer is the user's again). A launch's sends and receives on one
 * communicator are queued in whatever order the peers allow, and the
 * sends' final waits last, so no order of them within a group deadlocks.
 *
 * A failed or aborted communicator sets every peer's words so that no
 * stream waits for a write a dead peer will never make (dev_poison).
 *
 * This executor serves the ranks of one host, threads of one process or
 * processes: device buffers between hosts wait for the network transports'
 * staging. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/dag.h"
#include "collectives/exec.h"
#include "core/checks.h"
#include "core/dtype.h"
#include "kernels/cuda/cuda_kernels.h"
#include "transport/devarea.h"
#include "transport/transport.h"

#define CUDA_SLOTS DEV_SLOTS
#define P2P_DEPTH DEV_P2P_DEPTH
#define STEPS_MAX ((1u << 24) - 2)
_Static_assert(PB_COUNT == DEV_SLOT_BUFS, "a slot holds each buffer of plan.h");
_Static_assert(CUDA_IPC_BYTES == DEV_IPC_BYTES, "an IPC handle fits a dev_buf");
static inline uint64_t val(uint64_t seq, uint32_t done) {
  return (seq << 24) | done;
}

/* A peer's allocation this rank opened (IPC). */
struct import {
  int peer;
  uint64_t base, id;
  void* map;
};

/* A communicator's state (coll_comm's cuda). */
struct cuda_comm {
  int dev;
  struct loom_comm* comm;
  struct dev_pub** area;     /* [nranks]: each rank's device area, as this rank maps it */
  struct dev_pub** area_dev; /* ... the same, registered: as the device sees it */
  int* local;                /* [nranks]: index among the host's ranks */
  int other_procs;           /* a peer is in another process: buffers are exported */
  uint64_t seq;              /* calls prepared, under exec_lock */
  void* last_stream;         /* the stream of the last call queued */
  int any_stream;            /* last_stream is set */
  void* join_ev;             /* recorded at the end of every call: joins a new stream to it */
  void* scratch;             /* device memory */
  size_t scratch_bytes;
  void** old_scratch; /* outgrown (scratch or staging), freed at the end */
  int nold;
  /* Between processes a rank works in buffers of its own, which peers open
   * once and which live until every peer has closed them (DESIGN.md): the
   * plans' send and receive buffers, and the bytes of sends. */
  void *st_send, *st_recv, *st_p2p;
  size_t st_send_bytes, st_recv_bytes, st_p2p_bytes;
  struct import* imports; /* peers' allocations this rank opened */
  int nimports;
  uint64_t* nsent; /* per peer: sends prepared, under exec_lock */
  uint64_t* ngot;  /* ... receives */
  /* This rank's allocations exported to peers in other processes: only its
   * own (staging and scratch), which live until destroy, so an address in
   * one of their ranges is that allocation (no driver call to find it). A
   * handful: each grows by doubling. */
#define EXPORTS 64
  struct {
    uint64_t base, id;
    size_t size;
    unsigned char ipc[DEV_IPC_BYTES];
  } ex[EXPORTS];
  int nex;
};

/* 1 when peer is a rank of another process. */
static inline int other_proc(const struct loom_comm* comm, int peer) {
  return comm->peers[peer].process_token != comm->peers[comm->rank].process_token;
}

static inline struct dev_pub* pub_host(const struct cuda_comm* cc, int r) {
  return cc->area[r];
}
static inline struct dev_pub* pub_dev(const struct cuda_comm* cc, int r) {
  return cc->area_dev[r];
}
/* Rank r's pair towards peer, on the host or as the device sees it. */
static inline struct dev_pair* pair_host(const struct cuda_comm* cc, int r, int peer) {
  return dev_area_pair(cc->area[r], cc->local[peer]);
}
static inline struct dev_pair* pair_dev(const struct cuda_comm* cc, int r, int peer) {
  return dev_area_pair(cc->area_dev[r], cc->local[peer]);
}

/* ---- Peers' buffers in other processes ---- */

/* Where this rank reads b, a buffer of rank peer: the address itself for a
 * peer of this process, else through the peer's allocation, opened once
 * (and again when the peer's allocation at that base has another id: a
 * grown staging buffer). Only Loom's own allocations are published to peers
 * in other processes; they live until this rank has closed them. */
static loomResult_t buf_open(struct cuda_comm* cc, int peer, const struct dev_buf* b, void** out) {
  if (!other_proc(cc->comm, peer) || !b->va) {
    *out = (void*)(uintptr_t)b->va;
    return loomSuccess;
  }
  if (!b->id)
    return err_set(cc->comm, loomInternalError, "rank %d published a buffer without its handle",
                   peer);
  struct import* hit = NULL;
  for (int i = 0; i < cc->nimports && !hit; i++)
    if (cc->imports[i].peer == peer && cc->imports[i].id == b->id && cc->imports[i].base == b->base)
      hit = &cc->imports[i];
  if (!hit) {
    struct import* grown = realloc(cc->imports, (size_t)(cc->nimports + 1) * sizeof *grown);
    if (!grown) return err_set(cc->comm, loomSystemError, "out of memory");
    cc->imports = grown;
    void* map = NULL;
    loomResult_t r = cuda_ipc_open(b->ipc, &map);
    if (r != loomSuccess)
      return err_set(cc->comm, r, "rank %d's buffer at %#llx: %s", peer, (unsigned long long)b->va,
                     err_thread_last());
    hit = &cc->imports[cc->nimports++];
    *hit = (struct import){peer, b->base, b->id, map};
    atomic_store(&pub_host(cc, cc->comm->rank)->maps_open, (uint64_t)cc->nimports);
  }
  *out = (char*)hit->map + (b->va - b->base);
  return loomSuccess;
}

/* b describes p for the peers: its address, and when exported (read by a
 * peer in another process: then p is Loom's own memory), its allocation's
 * handle, made once per allocation. */
static loomResult_t buf_describe(struct cuda_comm* cc, const void* p, int exported,
                                 struct dev_buf* b) {
  b->va = (uint64_t)(uintptr_t)p;
  b->base = b->id = 0;
  if (!exported || !p) return loomSuccess;
  for (int i = 0; i < cc->nex; i++)
    if (b->va >= cc->ex[i].base && b->va - cc->ex[i].base < cc->ex[i].size) {
      b->base = cc->ex[i].base;
      b->id = cc->ex[i].id;
      memcpy(b->ipc, cc->ex[i].ipc, sizeof b->ipc);
      return loomSuccess;
    }
  if (cc->nex == EXPORTS)
    return err_set(cc->comm, loomInternalError, "more than %d device buffers exported", EXPORTS);
  size_t size;
  LOOM_CHECK(cuda_alloc_of(p, &b->base, &size, &b->id));
  LOOM_CHECK(cuda_ipc_export(b->base, b->ipc));
  int at = cc->nex++;
  cc->ex[at].base = b->base;
  cc->ex[at].size = size;
  cc->ex[at].id = b->id;
  memcpy(cc->ex[at].ipc, b->ipc, sizeof b->ipc);
  return loomSuccess;
}

/* ---- The communicator's state ---- */

/* Every peer on this host (device buffers between hosts go through the
 * network transports, which this executor does not drive yet), or why not. */
static loomResult_t peers_here(struct loom_comm* comm) {
  for (int r = 0; r < comm->nranks; r++)
    if (!tp_dev_area(comm, r))
      return err_set(comm, loomInvalidUsage,
                     "collectives on device buffers: rank %d is on another host; this build "
                     "serves CUDA ranks of one host (device buffers between hosts need the "
                     "network transports' staging, not built yet)",
                     r);
  return loomSuccess;
}

static void areas_release(struct cuda_comm* cc, int n) {
  for (int r = 0; r < n; r++)
    if (cc->area_dev[r]) cuda_host_unregister(cc->area[r]);
}

/* A value every device wait accepts: waits compare cyclically, (int64_t)(word
 * - value) >= 0, so it is not the largest word but one above every value a
 * wait asks for (val's are below 2^62 while calls number fewer than 2^38,
 * and sends and receives fewer than 2^62). */
#define DEV_POISON (1ull << 62)

/* The failure hook: every word a device wait of this rank may read is set
 * to DEV_POISON, every peer's progress word and pair, so that no stream of
 * this rank is left waiting on a peer that died (its stream died with its
 * process and will never write what was queued). Only words of the peers:
 * this rank's own stream writes its own. Safe for a peer that is alive: a
 * stream waits only for values its peer has queued the writes of, so once
 * that peer's stream writes its lower value again, every wait still pending
 * on it is for a value it will write. Reads only the rank segments, which
 * outlive the watcher thread that calls this most often. */
static void dev_poison(struct loom_comm* comm) {
  int nlocal = 0;
  for (int r = 0; r < comm->nranks; r++) nlocal += tp_local_index(comm, r) >= 0;
  for (int r = 0; r < comm->nranks; r++) {
    struct dev_pub* a = r == comm->rank ? NULL : tp_dev_area(comm, r);
    if (!a) continue;
    __atomic_store_n(&a->gpu_done, DEV_POISON, __ATOMIC_RELEASE);
    for (int l = 0; l < nlocal; l++) {
      __atomic_store_n(&dev_area_pair(a, l)->sent_gpu, DEV_POISON, __ATOMIC_RELEASE);
      __atomic_store_n(&dev_area_pair(a, l)->got_gpu, DEV_POISON, __ATOMIC_RELEASE);
    }
  }
}

/* Under exec_lock, in the device's context. */
static loomResult_t cuda_comm_get(struct loom_comm* comm, int dev, struct cuda_comm** out) {
  if (comm->coll->cuda) {
    *out = comm->coll->cuda;
    return loomSuccess;
  }
  LOOM_CHECK(peers_here(comm));
  int n = comm->nranks;
  struct cuda_comm* cc = calloc(1, sizeof *cc);
  if (!cc) return err_set(comm, loomSystemError, "out of memory");
  cc->dev = dev;
  cc->comm = comm;
  cc->nsent = calloc((size_t)n, sizeof *cc->nsent);
  cc->ngot = calloc((size_t)n, sizeof *cc->ngot);
  cc->area = calloc((size_t)n, sizeof *cc->area);
  cc->area_dev = calloc((size_t)n, sizeof *cc->area_dev);
  cc->local = calloc((size_t)n, sizeof *cc->local);
  loomResult_t r = cc->nsent && cc->ngot && cc->area && cc->area_dev && cc->local
                       ? cuda_event_create(&cc->join_ev)
                       : err_set(comm, loomSystemError, "out of memory");
  /* Each rank's area, registered through this rank's mapping of it. */
  for (int p = 0; p < n && r == loomSuccess; p++) {
    cc->area[p] = tp_dev_area(comm, p);
    cc->local[p] = tp_local_index(comm, p);
    cc->other_procs |= other_proc(comm, p);
    void* d = NULL;
    r = cuda_host_register(cc->area[p], tp_dev_area_bytes(comm), &d);
    cc->area_dev[p] = d;
  }
  if (r != loomSuccess) {
    if (cc->area_dev) areas_release(cc, n);
    if (cc->join_ev) cuda_event_destroy(cc->join_ev);
    free(cc->nsent);
    free(cc->ngot);
    free(cc->area);
    free(cc->area_dev);
    free(cc->local);
    free(cc);
    return r;
  }
  comm->coll->cuda = cc;
  comm_set_fail_hook(comm, dev_poison);
  /* A failure that came before the hook was set. */
  if (comm_health(comm) != loomSuccess || atomic_load(&comm->aborted)) dev_poison(comm);
  *out = cc;
  return loomSuccess;
}

/* Whether every peer in another process has closed its mappings of this
 * rank's buffers: each closes them as its communicator ends, so this waits
 * (the communicator's timeout at most) for the peers' ends. No: a failed or
 * aborted communicator, a peer that never ends; this rank's buffers then
 * stay allocated (freeing memory a peer still maps is undefined). */
static int peers_closed(struct cuda_comm* cc) {
  struct loom_comm* comm = cc->comm;
  if (!cc->other_procs) return 1;
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  for (int p = 0; p < comm->nranks; p++) {
    if (!other_proc(comm, p)) continue;
    while (atomic_load(&pub_host(cc, p)->maps_open) != 0) {
      if (comm_health(comm) != loomSuccess || atomic_load(&comm->aborted) || deadline_passed(&dl)) {
        LOOM_WARN(SUB_INIT,
                  "rank %d: rank %d still maps this rank's device buffers: they stay allocated",
                  comm->rank, p);
        return 0;
      }
      sched_yield();
    }
  }
  return 1;
}

void exec_cuda_comm_fini(struct loom_comm* comm) {
  struct cuda_comm* cc = comm->coll ? comm->coll->cuda : NULL;
  if (!cc) return;
  comm_set_fail_hook(comm, NULL);
  if (cuda_ctx_enter(cc->dev) == loomSuccess) {
    /* Nothing of this rank runs on the device after this: its mappings of
     * peers' buffers may go, and its own buffers once no peer maps them. */
    if (cc->any_stream) cuda_event_sync(cc->join_ev);
    for (int i = 0; i < cc->nimports; i++) cuda_ipc_close(cc->imports[i].map);
    atomic_store(&pub_host(cc, comm->rank)->maps_open, 0);
    if (peers_closed(cc)) {
      void* mine[] = {cc->scratch, cc->st_send, cc->st_recv, cc->st_p2p};
      for (int i = 0; i < 4; i++) cuda_dev_free(mine[i]);
      for (int i = 0; i < cc->nold; i++) cuda_dev_free(cc->old_scratch[i]);
    }
    cuda_event_destroy(cc->join_ev);
    areas_release(cc, comm->nranks);
    cuda_ctx_leave();
  }
  free(cc->imports);
  free(cc->old_scratch);
  free(cc->nsent);
  free(cc->ngot);
  free(cc->area);
  free(cc->area_dev);
  free(cc->local);
  free(cc);
  comm->coll->cuda = NULL;
}

/* *buf (scratch or staging) of at least need bytes; an outgrown one is kept
 * until the end (work queued earlier may still use it). Under exec_lock, in
 * context. */
static loomResult_t dev_grow(struct loom_comm* comm, struct cuda_comm* cc, void** buf, size_t* have,
                             size_t need) {
  if (need <= *have) return loomSuccess;
  size_t bytes = LOOM_MAX(need, *have * 2);
  void* p;
  void** old = realloc(cc->old_scratch, (size_t)(cc->nold + 1) * sizeof *old);
  if (!old) return err_set(comm, loomSystemError, "out of memory");
  cc->old_scratch = old;
  LOOM_CHECK(cuda_dev_alloc(&p, bytes));
  if (*buf) cc->old_scratch[cc->nold++] = *buf;
  *buf = p;
  *have = bytes;
  return loomSuccess;
}

/* This rank's share of the graph of t's call, built once per cached plan:
 * every rank's plan, then the graph. Under exec_lock. */
static loomResult_t dag_get(const struct coll_task* t, struct plan_obj* po) {
  if (po->dag) return loomSuccess;
  struct loom_comm* comm = t->comm;
  int n = comm->nranks;
  struct plan* plans = calloc((size_t)n, sizeof *plans);
  struct dag_rank* all = calloc((size_t)n, sizeof *all);
  loomResult_t r = plans && all ? loomSuccess : err_set(comm, loomSystemError, "out of memory");
  int built = 0;
  for (; r == loomSuccess && built < n; built++)
    r = built == comm->rank ? loomSuccess : algo_plan_rank(t, built, &plans[built]);
  if (r == loomSuccess) plans[comm->rank] = po->plan; /* borrowed */
  if (r == loomSuccess) r = dag_build(plans, n, all);
  if (r == loomSuccess && po->plan.nsteps > STEPS_MAX)
    r = err_set(comm, loomInternalError, "a plan of %u steps: more than %u", po->plan.nsteps,
                STEPS_MAX);
  if (r == loomSuccess) {
    po->dag = malloc(sizeof *po->dag);
    if (!po->dag) r = err_set(comm, loomSystemError, "out of memory");
  }
  if (r == loomSuccess) {
    *po->dag = all[comm->rank];
    memset(&all[comm->rank], 0, sizeof all[comm->rank]);
    dag_free(all, n);
  }
  for (int i = 0; plans && i < built; i++)
    if (i != comm->rank) plan_free(&plans[i]);
  free(plans);
  free(all);
  return r;
}

/* ---- A launch ---- */

enum { PH_TURN, PH_SLOT, PH_STEPS, PH_P2P, PH_P2P_END, PH_DONE };

/* A send or a receive of a point-to-point run. */
struct p2p_item {
  int send; /* else a receive */
  int peer;
  void* addr;
  size_t bytes;
  uint64_t k; /* its number among the rank's sends to (receives from) peer */
  int queued; /* its part is queued */
  int last;   /* a send: the run's last to peer (its end waits for that peer) */
  int kind;   /* enum coll_kind of its task */
};

/* One unit of the launch: a collective, or a communicator's consecutive
 * sends and receives (and all-to-all-v) as one point-to-point run. */
struct crun {
  struct coll_task* t;
  struct loom_comm* comm;
  struct cuda_comm* cc;
  struct plan_obj* plan;
  void* stream;
  void* bufs[PB_COUNT];
  uint64_t seq, turn;
  int holds_turn; /* the comm's first task in the launch: takes and passes its turn */
  int has_turn;   /* ... and took it */
  int owns;       /* the comm served the turn when the launch started */
  int prev;       /* the comm's previous task in the launch, or -1 */
  int phase;
  uint32_t k, w; /* the step being queued, and its next wait */
  loomDataType_t dtype;
  loomRedOp_t redop;
  const void* scalar; /* PreMulSum's: the user's pointer, or the task's copy */
  int scalar_on_dev;  /* ... read by the device (device memory) */
  struct deadline dl;
  int p2p;                /* a point-to-point run: items, no plan */
  struct p2p_item* items; /* owned */
  int nitems, cap;
  /* Between processes (cuda_comm's staging): the user's buffers, the bytes
   * copied into the staging buffers at the start and out at the end; a
   * point-to-point run's staging for its sends, and how much is used. */
  const void* user_send;
  void* user_recv;
  size_t in_send, in_recv, out_recv;
  char* st_base;
  size_t st_off;
};

struct cuda_launch {
  struct crun* runs;
  int nruns;
  int started; /* every turn was reached */
};

static size_t cuda_state_size(int ntasks) {
  return sizeof(struct cuda_launch) + (size_t)ntasks * sizeof(struct crun);
}

/* The device of t's buffers (the communicator's, when it is bound). */
static int task_dev(const struct coll_task* t) {
  int dev = -1;
  if (t->comm->cuda_dev >= 0) return t->comm->cuda_dev;
  if (t->sendbuff) mem_kind_of(t->sendbuff, &dev);
  if (dev < 0 && t->recvbuff) mem_kind_of(t->recvbuff, &dev);
  return dev < 0 ? 0 : dev;
}

static int is_p2p(const struct coll_task* t) {
  return t->kind == COLL_SEND || t->kind == COLL_RECV || t->kind == COLL_ALLTOALLV;
}

static loomResult_t item_add(struct crun* run, int send, int peer, const void* addr, size_t bytes,
                             int kind) {
  if (bytes == 0) return loomSuccess; /* as the API skips an empty send or receive */
  if (run->nitems == run->cap) {
    int cap = run->cap ? run->cap * 2 : 8;
    struct p2p_item* n = realloc(run->items, (size_t)cap * sizeof *n);
    if (!n) return err_set(run->comm, loomSystemError, "out of memory");
    run->items = n;
    run->cap = cap;
  }
  run->items[run->nitems++] = (struct p2p_item){
      .send = send, .peer = peer, .addr = (void*)addr, .bytes = bytes, .kind = kind};
  return loomSuccess;
}

/* Task t's sends and receives, added to run. All-to-all-v's go to peers in
 * the order me+1, me+2, ... so that ranks start on different peers. */
static loomResult_t items_of(struct crun* run, const struct coll_task* t) {
  size_t es = dtype_size(t->dtype);
  int k = t->kind;
  if (k == COLL_SEND) return item_add(run, 1, t->root, t->sendbuff, t->count * es, k);
  if (k == COLL_RECV) return item_add(run, 0, t->root, t->recvbuff, t->count * es, k);
  int n = run->comm->nranks, me = run->comm->rank;
  const size_t *sc = t->v, *sd = t->v + n, *rc = t->v + 2 * n, *rd = t->v + 3 * n;
  for (int j = 0; j < n; j++) {
    int to = (me + j) % n, from = (me - j + n) % n;
    LOOM_CHECK(item_add(run, 1, to, (const char*)t->sendbuff + sd[to] * es, sc[to] * es, k));
    LOOM_CHECK(item_add(run, 0, from, (char*)t->recvbuff + rd[from] * es, rc[from] * es, k));
  }
  return loomSuccess;
}

/* 1 when the plan writes buffer b; when it reads or writes it (a send's
 * source is read by the peer). */
static int plan_writes(const struct plan* p, int b) {
  for (uint32_t i = 0; i < p->nops; i++)
    if (p->ops[i].kind != OP_SEND && p->ops[i].dst.buf == (unsigned)b) return 1;
  return 0;
}
static int plan_touches(const struct plan* p, int b) {
  for (uint32_t i = 0; i < p->nops; i++)
    if (p->ops[i].dst.buf == (unsigned)b || p->ops[i].src.buf == (unsigned)b) return 1;
  return 0;
}

/* Between processes a collective runs in the communicator's staging
 * buffers: the user's receive buffer is copied in (its input in place, and
 * what the plan does not write), the send buffer too unless it lies inside
 * the receive buffer (in place: it is then the same place in the staging),
 * and the receive buffer out at the end. Only buffers the rank's plan uses
 * are copied: a rank where a buffer only matters at the root (gather's and
 * reduce's receive, scatter's send) may pass one of any size there. */
static loomResult_t coll_stage(struct crun* run, size_t es) {
  struct cuda_comm* cc = run->cc;
  const struct plan* p = &run->plan->plan;
  const char* us = run->t->sendbuff;
  char* ur = run->t->recvbuff;
  size_t sb = p->buf_count[PB_SEND] * es, rb = p->buf_count[PB_RECV] * es;
  int inside = us && ur && us >= ur && us + sb <= ur + rb;
  LOOM_CHECK(dev_grow(run->comm, cc, &cc->st_recv, &cc->st_recv_bytes, rb));
  if (!inside) LOOM_CHECK(dev_grow(run->comm, cc, &cc->st_send, &cc->st_send_bytes, sb));
  run->user_send = us;
  run->user_recv = ur;
  run->bufs[PB_SEND] = inside ? (char*)cc->st_recv + (us - ur) : cc->st_send;
  run->bufs[PB_RECV] = cc->st_recv;
  int use_send = plan_touches(p, PB_SEND), use_recv = plan_touches(p, PB_RECV);
  run->in_recv = ur && use_recv ? rb : 0;
  /* Inside the receive buffer, the send part comes with it, unless the plan
   * uses only the send part. */
  run->in_send = us && use_send && !(inside && run->in_recv) ? sb : 0;
  run->out_recv = ur && plan_writes(p, PB_RECV) ? rb : 0;
  return loomSuccess;
}

/* A point-to-point run's staging for its sends to peers in other processes. */
static loomResult_t p2p_stage(struct crun* run) {
  struct cuda_comm* cc = run->cc;
  size_t need = 0;
  for (int i = 0; i < run->nitems; i++) {
    const struct p2p_item* it = &run->items[i];
    if (it->send && other_proc(run->comm, it->peer)) need += it->bytes;
  }
  if (need) LOOM_CHECK(dev_grow(run->comm, cc, &cc->st_p2p, &cc->st_p2p_bytes, need));
  run->st_base = cc->st_p2p;
  run->st_off = 0;
  return loomSuccess;
}

static loomResult_t run_prepare(struct crun* run) {
  struct coll_task* t = run->t;
  struct loom_comm* comm = run->comm;
  if (cuda_stream_capturing(stream_cuda(t->stream)))
    return err_set(comm, loomInvalidUsage,
                   "%s: the CUDA stream is being captured into a graph, which this build's CUDA "
                   "executor cannot serve yet",
                   coll_kind_text(t->kind));
  LOOM_CHECK(cuda_comm_get(comm, task_dev(t), &run->cc));
  run->stream = stream_cuda(t->stream);
  if (run->p2p) return p2p_stage(run);
  LOOM_CHECK(algo_plan_cached(t, &run->plan));
  LOOM_CHECK(dag_get(t, run->plan));
  size_t es = dtype_size(t->dtype);
  struct cuda_comm* cc = run->cc;
  LOOM_CHECK(dev_grow(comm, cc, &cc->scratch, &cc->scratch_bytes,
                      run->plan->plan.buf_count[PB_SCRATCH] * es));
  run->bufs[PB_SEND] = (void*)t->sendbuff;
  run->bufs[PB_RECV] = t->recvbuff;
  run->bufs[PB_SCRATCH] = run->cc->scratch;
  if (cc->other_procs) LOOM_CHECK(coll_stage(run, es));
  run->dtype = t->dtype;
  run->redop = redop_is_premul(t->op) || t->op == loomAvg ? loomSum : t->op;
  run->scalar = t->scalar_ptr ? t->scalar_ptr : t->scalar;
  run->scalar_on_dev = t->scalar_ptr && mem_kind_of(t->scalar_ptr, NULL) == MEM_CUDA;
  return loomSuccess;
}

/* The run's numbers: its call's on the communicator, or its sends' and
 * receives' per peer. Once every run of the launch is prepared (a launch
 * that fails to prepare takes none), under the communicator's lock. */
static void run_number(struct crun* run) {
  struct cuda_comm* cc = run->cc;
  if (!run->p2p) {
    run->seq = ++cc->seq;
    return;
  }
  for (int i = 0; i < run->nitems; i++) {
    struct p2p_item* it = &run->items[i];
    it->k = it->send ? cc->nsent[it->peer]++ : cc->ngot[it->peer]++;
  }
  for (int i = 0; i < run->nitems; i++) {
    struct p2p_item* it = &run->items[i];
    it->last = it->send && it->k + 1 == cc->nsent[it->peer];
  }
}

static int ptr_order(const void* a, const void* b) {
  uintptr_t x = (uintptr_t) * (void*const*)a, y = (uintptr_t) * (void*const*)b;
  return (x > y) - (x < y);
}

static loomResult_t cuda_prepare(struct exec_launch* l) {
  struct cuda_launch* h = l->state;
  h->runs = (struct crun*)(h + 1);
  struct loom_comm** comms = malloc((size_t)l->ntasks * sizeof *comms);
  if (!comms) return err_set(l->tasks[0].comm, loomSystemError, "out of memory");
  int nc = 0;
  loomResult_t res = loomSuccess;
  h->nruns = 0;
  for (int i = 0; i < l->ntasks && res == loomSuccess; i++) {
    struct coll_task* t = &l->tasks[i];
    int prev = -1;
    for (int j = h->nruns - 1; j >= 0 && prev < 0; j--)
      if (h->runs[j].comm == t->comm) prev = j;
    /* A communicator's consecutive sends and receives make one run. */
    if (prev >= 0 && h->runs[prev].p2p && t->kind != COLL_ALLTOALLV &&
        h->runs[prev].t->kind != COLL_ALLTOALLV && is_p2p(t)) {
      res = items_of(&h->runs[prev], t);
      continue;
    }
    struct crun* run = &h->runs[h->nruns++];
    run->t = t;
    run->comm = t->comm;
    run->prev = prev;
    run->p2p = is_p2p(t);
    run->holds_turn = prev < 0;
    if (run->holds_turn) comms[nc++] = run->comm;
    if (run->p2p) res = items_of(run, t);
  }
  if (res != loomSuccess) {
    free(comms);
    return res;
  }
  /* Every communicator's lock, in address order (as the host executor
   * takes them), so that the turns of a launch are taken at one moment and
   * two launches over the same communicators take theirs in one order. */
  qsort(comms, (size_t)nc, sizeof *comms, ptr_order);
  for (int i = 0; i < nc; i++) pthread_mutex_lock(&comms[i]->coll->exec_lock);
  for (int i = 0; i < h->nruns && res == loomSuccess; i++) {
    struct crun* run = &h->runs[i];
    res = comm_health(run->comm);
    if (res == loomSuccess) res = cuda_ctx_enter(task_dev(run->t));
    if (res != loomSuccess) break;
    res = run_prepare(run);
    cuda_ctx_leave();
  }
  for (int i = 0; i < h->nruns && res == loomSuccess; i++) {
    struct crun* run = &h->runs[i];
    struct coll_comm* cc = run->comm->coll;
    run_number(run);
    if (!run->holds_turn) {
      run->turn = h->runs[run->prev].turn;
      continue;
    }
    run->turn = cc->next_turn++;
    run->has_turn = 1;
    atomic_fetch_add(&cc->inflight, 1);
  }
  for (int i = nc - 1; i >= 0; i--) pthread_mutex_unlock(&comms[i]->coll->exec_lock);
  free(comms);
  return res;
}

/* 1 once every communicator serves the launch's turn, or is broken or
 * aborted (the launch then fails at once). */
static int turns_reached(const struct cuda_launch* h) {
  for (int i = 0; i < h->nruns; i++) {
    const struct crun* run = &h->runs[i];
    if (!run->holds_turn || atomic_load(&run->comm->coll->serving) == run->turn) continue;
    int e = atomic_load(&run->comm->async_error);
    if (atomic_load(&run->comm->aborted) || (e != loomSuccess && e != loomInProgress)) continue;
    return 0;
  }
  return 1;
}

static loomResult_t cuda_launch_start(struct exec_launch* l) {
  (void)l;
  return loomSuccess;
}

/* Where the step reads a peer's buffer, once the peer has published this
 * call's buffers (its every receive waits for the peer to have started the
 * call, which it does after publishing). */
static loomResult_t peer_src(const struct crun* run, const struct dag_read* rd, void** out) {
  const struct dev_pub* p = pub_host(run->cc, rd->peer);
  const __typeof__(p->slot[0])* s = &p->slot[run->seq % CUDA_SLOTS];
  uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
  if (seq != run->seq)
    return err_set(run->comm, loomInternalError,
                   "rank %d reads rank %d's buffers of call %llu, which has published call %llu "
                   "there",
                   run->comm->rank, rd->peer, (unsigned long long)run->seq,
                   (unsigned long long)seq);
  void* base;
  LOOM_CHECK(buf_open(run->cc, rd->peer, &s->buf[rd->src.buf], &base));
  *out = (char*)base + rd->src.off * dtype_size(run->dtype);
  return loomSuccess;
}

/* Queues step k's ops. */
static loomResult_t step_queue(struct crun* run) {
  const struct plan* p = &run->plan->plan;
  const struct plan_step* st = &p->steps[run->k];
  size_t es = dtype_size(run->dtype);
  for (uint32_t i = st->op_begin; i < st->op_end; i++) {
    const struct plan_op* op = &p->ops[i];
    void* dst = (char*)run->bufs[op->dst.buf] + op->dst.off * es;
    const void* src = (char*)run->bufs[op->src.buf] + op->src.off * es;
    void* from;
    size_t n = op->count;
    switch (op->kind) {
      case OP_SEND:
        break; /* the receiver reads */
      case OP_RECV:
        LOOM_CHECK(peer_src(run, &run->plan->dag->read[i], &from));
        LOOM_CHECK(cuda_memcpy(dst, from, n * es, run->stream));
        break;
      case OP_RECV_REDUCE:
        LOOM_CHECK(peer_src(run, &run->plan->dag->read[i], &from));
        LOOM_CHECK(cuda_reduce(run->dtype, run->redop, dst, src, from, n, run->stream));
        break;
      case OP_COPY:
        LOOM_CHECK(cuda_memcpy(dst, src, n * es, run->stream));
        break;
      case OP_REDUCE:
        LOOM_CHECK(cuda_reduce(run->dtype, run->redop, dst, dst, src, n, run->stream));
        break;
      case OP_PREMUL:
        LOOM_CHECK(
            cuda_mul_scalar(run->dtype, dst, src, n, run->scalar, run->scalar_on_dev, run->stream));
        break;
      case OP_DIV:
        LOOM_CHECK(cuda_div(run->dtype, dst, src, n, run->comm->nranks, run->stream));
        break;
      default:
        return err_set(run->comm, loomInternalError, "a %s op in a device plan",
                       plan_op_name(op->kind));
    }
  }
  return loomSuccess;
}

/* Says on the device and to the peers that this rank has done `done` steps. */
static loomResult_t mark(struct crun* run, uint32_t done) {
  uint64_t v = val(run->seq, done);
  LOOM_CHECK(cuda_write_value(run->stream, &pub_dev(run->cc, run->comm->rank)->gpu_done, v));
  atomic_store_explicit(&pub_host(run->cc, run->comm->rank)->queued, v, memory_order_release);
  return loomSuccess;
}

/* The communicator's last call, on another stream, ends before this one
 * starts. */
static loomResult_t stream_join(struct crun* run) {
  struct cuda_comm* cc = run->cc;
  if (cc->any_stream && cc->last_stream != run->stream)
    LOOM_CHECK(cuda_event_wait(run->stream, cc->join_ev));
  cc->last_stream = run->stream;
  cc->any_stream = 1;
  return loomSuccess;
}

/* Queues a send's part once its earlier sends to the peer are queued and
 * its descriptor is free (the peer has queued the receive that read it
 * last): the descriptor, then the word saying the buffer is ready. */
static loomResult_t send_try(struct crun* run, struct p2p_item* it) {
  struct cuda_comm* cc = run->cc;
  int me = run->comm->rank;
  struct dev_pair* mine = pair_host(cc, me, it->peer);
  const struct dev_pair* theirs = pair_host(cc, it->peer, me);
  if (atomic_load_explicit(&mine->sent_q, memory_order_relaxed) != it->k) return loomSuccess;
  if (it->k >= P2P_DEPTH &&
      atomic_load_explicit(&theirs->got_q, memory_order_acquire) < it->k + 1 - P2P_DEPTH)
    return loomSuccess;
  const void* src = it->addr;
  int other = other_proc(run->comm, it->peer);
  if (other) { /* a peer in another process reads a copy in Loom's memory */
    src = run->st_base + run->st_off;
    run->st_off += it->bytes;
    LOOM_CHECK(cuda_memcpy((void*)src, it->addr, it->bytes, run->stream));
  }
  LOOM_CHECK(buf_describe(cc, src, other, &mine->desc[it->k % P2P_DEPTH].buf));
  mine->desc[it->k % P2P_DEPTH].bytes = it->bytes;
  LOOM_CHECK(cuda_write_value(run->stream, &pair_dev(cc, me, it->peer)->sent_gpu, it->k + 1));
  atomic_store_explicit(&mine->sent_q, it->k + 1, memory_order_release);
  it->queued = 1;
  return loomSuccess;
}

/* Queues a receive once its earlier receives from the peer are queued and
 * the peer has queued the send it matches: a wait for the sender's stream
 * to reach the send, the copy, and the word saying it is done. */
static loomResult_t recv_try(struct crun* run, struct p2p_item* it) {
  struct cuda_comm* cc = run->cc;
  int me = run->comm->rank;
  struct dev_pair* mine = pair_host(cc, me, it->peer);
  const struct dev_pair* theirs = pair_host(cc, it->peer, me);
  if (atomic_load_explicit(&mine->got_q, memory_order_relaxed) != it->k) return loomSuccess;
  if (atomic_load_explicit(&theirs->sent_q, memory_order_acquire) < it->k + 1) return loomSuccess;
  const struct dev_buf* buf = &theirs->desc[it->k % P2P_DEPTH].buf;
  uint64_t bytes = theirs->desc[it->k % P2P_DEPTH].bytes;
  if (bytes != it->bytes) {
    atomic_store_explicit(&mine->refused_bytes, it->bytes, memory_order_relaxed);
    atomic_store_explicit(&mine->refused, it->k + 1, memory_order_release);
    return err_set(run->comm, loomInvalidUsage,
                   "%s on device buffers: rank %d sends %llu bytes where this rank's receive "
                   "from it takes %zu (send number %llu from it to this rank)",
                   coll_kind_text((enum coll_kind)it->kind), it->peer, (unsigned long long)bytes,
                   it->bytes, (unsigned long long)it->k + 1);
  }
  if (it->peer != me)
    LOOM_CHECK(cuda_wait_value(run->stream, &pair_dev(cc, it->peer, me)->sent_gpu, it->k + 1));
  void* from;
  LOOM_CHECK(buf_open(cc, it->peer, buf, &from));
  LOOM_CHECK(cuda_memcpy(it->addr, from, it->bytes, run->stream));
  LOOM_CHECK(cuda_write_value(run->stream, &pair_dev(cc, me, it->peer)->got_gpu, it->k + 1));
  atomic_store_explicit(&mine->got_q, it->k + 1, memory_order_release);
  it->queued = 1;
  return loomSuccess;
}

/* A point-to-point run: every send and receive queued as the peers allow,
 * then, per peer sent to, a wait for its receives to be done. */
static loomResult_t p2p_advance(struct crun* run, int* moved) {
  struct cuda_comm* cc = run->cc;
  int me = run->comm->rank;
  if (run->phase == PH_P2P) {
    int left = 0;
    for (int i = 0; i < run->nitems; i++) {
      struct p2p_item* it = &run->items[i];
      if (it->queued) continue;
      LOOM_CHECK(it->send ? send_try(run, it) : recv_try(run, it));
      *moved |= it->queued;
      left += !it->queued;
    }
    if (left) return loomSuccess;
    run->phase = PH_P2P_END;
    run->w = 0;
  }
  for (; run->w < (uint32_t)run->nitems; run->w++) {
    const struct p2p_item* it = &run->items[run->w];
    if (!it->last) continue;
    const struct dev_pair* theirs = pair_host(cc, it->peer, me);
    uint64_t refused = atomic_load_explicit(&theirs->refused, memory_order_acquire);
    if (refused && refused <= it->k + 1)
      return err_set(run->comm, loomInvalidUsage,
                     "%s on device buffers: rank %d refused send number %llu from this rank: "
                     "its receive takes %llu bytes, a different size",
                     coll_kind_text((enum coll_kind)it->kind), it->peer,
                     (unsigned long long)refused,
                     (unsigned long long)atomic_load(&theirs->refused_bytes));
    if (atomic_load_explicit(&theirs->got_q, memory_order_acquire) < it->k + 1) return loomSuccess;
    if (it->peer != me)
      LOOM_CHECK(cuda_wait_value(run->stream, &pair_dev(cc, it->peer, me)->got_gpu, it->k + 1));
    *moved = 1;
  }
  LOOM_CHECK(cuda_event_record(run->cc->join_ev, run->stream));
  run->phase = PH_DONE;
  *moved = 1;
  return loomSuccess;
}

/* Advances run as far as the peers allow; *moved when it queued anything. */
static loomResult_t run_advance(struct cuda_launch* h, struct crun* run, int* moved) {
  struct loom_comm* comm = run->comm;
  struct cuda_comm* cc = run->cc;
  int me = comm->rank;
  if (run->phase == PH_TURN) {
    /* The communicator's tasks of the launch run one after another. */
    if (run->prev >= 0 && h->runs[run->prev].phase != PH_DONE) return loomSuccess;
    run->dl = deadline_in_ms(comm->timeout_ms);
    run->phase = PH_SLOT;
    *moved = 1;
  }
  if (run->phase == PH_SLOT && run->p2p) {
    LOOM_CHECK(stream_join(run));
    run->phase = PH_P2P;
    *moved = 1;
  }
  if (run->phase == PH_P2P || run->phase == PH_P2P_END) return p2p_advance(run, moved);
  if (run->phase == PH_SLOT) {
    /* The slot's last call is queued by every peer. */
    uint64_t need = run->seq > CUDA_SLOTS - 1 ? val(run->seq - (CUDA_SLOTS - 1), 0) : 0;
    for (int p = 0; p < comm->nranks; p++)
      if (atomic_load_explicit(&pub_host(cc, p)->queued, memory_order_acquire) < need)
        return loomSuccess;
    __typeof__(pub_host(cc, me)->slot[0])* s = &pub_host(cc, me)->slot[run->seq % CUDA_SLOTS];
    for (int b = 0; b < PB_COUNT; b++)
      LOOM_CHECK(buf_describe(cc, run->bufs[b], cc->other_procs, &s->buf[b]));
    atomic_store_explicit(&s->seq, run->seq, memory_order_release);
    LOOM_CHECK(stream_join(run));
    /* Between processes: the user's input into the staging buffers, before
     * any peer may read them (they wait for value(seq, 0)). */
    if (run->in_recv)
      LOOM_CHECK(cuda_memcpy(run->bufs[PB_RECV], run->user_recv, run->in_recv, run->stream));
    if (run->in_send)
      LOOM_CHECK(cuda_memcpy(run->bufs[PB_SEND], run->user_send, run->in_send, run->stream));
    LOOM_CHECK(mark(run, 0));
    run->phase = PH_STEPS;
    run->k = run->w = 0;
    *moved = 1;
  }
  const struct dag_rank* d = run->plan ? run->plan->dag : NULL;
  while (run->phase == PH_STEPS) {
    /* Step k's waits (k == nsteps: the end's). */
    for (; d->wait_begin[run->k] + run->w < d->wait_begin[run->k + 1]; run->w++) {
      const struct dag_wait* wt = &d->waits[d->wait_begin[run->k] + run->w];
      uint64_t v = val(run->seq, wt->after);
      if (atomic_load_explicit(&pub_host(cc, wt->peer)->queued, memory_order_acquire) < v)
        return loomSuccess;
      LOOM_CHECK(cuda_wait_value(run->stream, &pub_dev(cc, wt->peer)->gpu_done, v));
      *moved = 1;
    }
    if (run->k == d->nsteps) {
      if (run->out_recv)
        LOOM_CHECK(cuda_memcpy(run->user_recv, run->bufs[PB_RECV], run->out_recv, run->stream));
      LOOM_CHECK(cuda_event_record(run->cc->join_ev, run->stream));
      run->phase = PH_DONE;
      *moved = 1;
      break;
    }
    LOOM_CHECK(step_queue(run));
    LOOM_CHECK(mark(run, run->k + 1));
    run->k++;
    run->w = 0;
    *moved = 1;
  }
  return loomSuccess;
}

/* Why run is stuck, for the timeout's message. */
static void run_describe(const struct crun* run, char* buf, size_t len) {
  const struct dag_rank* d = run->plan ? run->plan->dag : NULL;
  if (run->p2p) {
    const struct p2p_item* it = run->items;
    if (run->phase == PH_P2P_END) {
      it += run->w;
      snprintf(buf, len, "waiting for rank %d to queue its receive of send number %llu", it->peer,
               (unsigned long long)it->k + 1);
      return;
    }
    while (it < run->items + run->nitems && it->queued) it++;
    if (it == run->items + run->nitems) {
      snprintf(buf, len, "waiting for its turn");
      return;
    }
    if (it->send)
      snprintf(buf, len,
               "send number %llu to rank %d, waiting for it to queue its receive of send "
               "number %llu",
               (unsigned long long)it->k + 1, it->peer,
               (unsigned long long)(it->k + 1 > P2P_DEPTH ? it->k + 1 - P2P_DEPTH : 0));
    else
      snprintf(buf, len, "receive number %llu from rank %d, waiting for it to queue its send",
               (unsigned long long)it->k + 1, it->peer);
    return;
  }
  if (run->phase == PH_SLOT || !d) {
    snprintf(buf, len, "waiting for every peer to have queued call %llu",
             (unsigned long long)(run->seq > CUDA_SLOTS - 1 ? run->seq - (CUDA_SLOTS - 1) : 0));
    return;
  }
  const struct dag_wait* wt = &d->waits[d->wait_begin[run->k] + run->w];
  snprintf(buf, len, "step %u of %u, waiting for peer %d to queue its step %u", run->k + 1,
           d->nsteps, wt->peer, wt->after);
}

static loomResult_t run_check(struct crun* run) {
  struct loom_comm* comm = run->comm;
  if (atomic_load(&comm->aborted))
    return err_set(comm, loomRemoteError, "%s interrupted: the communicator was aborted",
                   coll_kind_text(run->t->kind));
  LOOM_CHECK(comm_health(comm));
  if (run->phase != PH_TURN && deadline_passed(&run->dl)) {
    char why[160];
    run_describe(run, why, sizeof why);
    comm_set_failed(comm, -1, loomTimeout, "%s on device buffers timed out after %lld ms (%s)",
                    coll_kind_text(run->t->kind), comm->timeout_ms, why);
    return loomTimeout;
  }
  return loomSuccess;
}

static loomResult_t cuda_progress(struct exec_launch* l, int* done_out) {
  struct cuda_launch* h = l->state;
  int moved = 0, left = 0;
  *done_out = 0;
  if (!h->started) {
    if (!turns_reached(h)) {
      sched_yield(); /* the launches before it have deadlines of their own */
      return loomSuccess;
    }
    h->started = 1;
    exec_launch_started(l);
    for (int i = 0; i < h->nruns; i++)
      h->runs[i].owns = atomic_load(&h->runs[i].comm->coll->serving) == h->runs[i].turn;
    if (l->cancel) { /* dropped: nothing runs; release passes the turns on */
      *done_out = 1;
      return loomSuccess;
    }
    for (int i = 0; i < h->nruns; i++) LOOM_CHECK(run_check(&h->runs[i]));
  }
  for (int i = 0; i < h->nruns; i++) {
    struct crun* run = &h->runs[i];
    if (run->phase == PH_DONE) continue;
    LOOM_CHECK(cuda_ctx_enter(run->cc->dev));
    loomResult_t r = run_advance(h, run, &moved);
    cuda_ctx_leave();
    LOOM_CHECK(r);
    left += run->phase != PH_DONE;
  }
  if (!left) {
    *done_out = 1;
    return loomSuccess;
  }
  if (moved) return loomSuccess;
  for (int i = 0; i < h->nruns; i++)
    if (h->runs[i].phase != PH_DONE) LOOM_CHECK(run_check(&h->runs[i]));
  /* The peers are threads queuing their own steps: let them run. */
  sched_yield();
  return loomSuccess;
}

static void cuda_release(struct exec_launch* l) {
  struct cuda_launch* h = l->state;
  for (int i = 0; i < h->nruns; i++) {
    struct crun* run = &h->runs[i];
    if (l->result != loomSuccess && h->started && run->phase != PH_TURN && run->phase != PH_DONE)
      comm_set_failed(run->comm, -1, l->result, "%s on device buffers failed: %s",
                      coll_kind_text(run->t->kind), err_thread_last());
    plan_obj_unref(run->plan);
    free(run->items);
  }
  for (int i = 0; i < h->nruns; i++) {
    struct crun* run = &h->runs[i];
    if (!run->has_turn) continue;
    struct coll_comm* cc = run->comm->coll;
    /* Pass the turn on when this launch holds it. */
    if (h->started && run->owns) {
      atomic_store(&cc->serving, run->turn + 1);
      if (atomic_load(&cc->turn_waiters) > 0) bell_ring(tp_self_bell(run->comm));
    }
    coll_inflight_done(run->comm);
  }
}

static const struct stream_cuda_ops ops = {cuda_stream_usable, cuda_stream_sync, cuda_stream_query};

/* The core's CUDA stream wrappers reach the driver through this executor. */
__attribute__((constructor)) static void cuda_ops_install(void) {
  if (cuda_kernels_built()) stream_cuda_ops_set(&ops);
}

const struct loom_executor exec_cuda = {
    .name = "cuda",
    .mem_kinds = MEM_KIND_BIT(MEM_CUDA),
    .stream_ok = STREAM_KIND_BIT(STREAM_CUDA),
    .state_size = cuda_state_size,
    .prepare = cuda_prepare,
    .launch = cuda_launch_start,
    .progress = cuda_progress,
    .release = cuda_release,
};
