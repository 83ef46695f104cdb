/* transport.c - per-communicator transport state: the rank segments that hold
 * each rank's doorbell, the connection tables, and transport selection. */
#include "transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/checks.h"
#include "core/params.h"
#include "transport/peer.h"
#include "transport/progress.h"
#include "transport/rankseg.h"

struct tp_comm {
  struct rank_segs segs;    /* this rank's and its same-host peers' (rankseg.h) */
  struct conn** send_conns; /* [lane * nranks + peer] */
  struct conn** recv_conns;
  int spin;
  int spread_index; /* this rank's place among the machine's ranks, or -1 (tp_thread_spread) */
  _Atomic uintptr_t spread_last; /* the thread that last drove a plan (pthread_self) */
  int helper_threads;            /* threads a transport runs for this rank (tp_helper_thread_add) */
  struct progress* progress;     /* the network progress engine, once a transport asks for it */
  struct peer_state* peer;       /* peer.c */
  uint64_t lines_calls;          /* calls with lines so far (tp_lines_next) */
  int allowed[TP_MAX_TRANSPORTS]; /* by LOOM_TRANSPORTS, index in all_transports */
  void* state[TP_MAX_TRANSPORTS]; /* each transport's own (tp_comm_state) */
};

/* In order of preference: a pair of ranks uses the first that can join them. */
static const struct loom_transport* const all_transports[] = {
    &loom_transport_local, &loom_transport_shm, &loom_transport_socket};
#define NTRANSPORTS ((int)(sizeof(all_transports) / sizeof(all_transports[0])))
_Static_assert(NTRANSPORTS <= TP_MAX_TRANSPORTS, "raise TP_MAX_TRANSPORTS");

/* The transport that joins rank a to rank b, or NULL. can_connect is a pure
 * query: a failure of it counts as "cannot". */
static const struct loom_transport* transport_pick(const struct loom_comm* comm, int a, int b) {
  for (int i = 0; i < NTRANSPORTS; i++) {
    int ok = 0;
    if (!comm->tp->allowed[i]) continue;
    if (all_transports[i]->can_connect(&comm->peers[a], &comm->peers[b], &ok) == loomSuccess && ok)
      return all_transports[i];
  }
  return NULL;
}

/* Each transport's per-communicator setup, told whether any pair of ranks
 * will use it: the peer table and LOOM_TRANSPORTS are the same on every
 * rank, so every rank reaches the same answer and the collective ones agree. */
static loomResult_t transports_comm_init(struct loom_comm* comm) {
  int used[TP_MAX_TRANSPORTS] = {0}, nused = 0;
  for (int a = 0; a < comm->nranks && nused < NTRANSPORTS; a++)
    for (int b = 0; b < comm->nranks; b++) {
      const struct loom_transport* t = transport_pick(comm, a, b); /* a == b: sends to self */
      for (int i = 0; t && i < NTRANSPORTS; i++)
        if (all_transports[i] == t && !used[i]) used[i] = 1, nused++;
    }
  for (int i = 0; i < NTRANSPORTS; i++) LOOM_CHECK(all_transports[i]->comm_init(comm, used[i]));
  return loomSuccess;
}

loomResult_t tp_mem_reg_used(struct loom_comm* comm, void* buf, size_t bytes, int kind,
                             void** handles) {
  for (int i = 0; i < NTRANSPORTS; i++) {
    const struct loom_transport* t = all_transports[i];
    handles[i] = NULL;
    if (!t->caps.registers || !comm->tp->allowed[i]) continue;
    loomResult_t r = t->mem_reg(comm, buf, bytes, kind, &handles[i]);
    if (r != loomSuccess) {
      handles[i] = NULL;
      tp_mem_dereg_used(comm, handles);
      return r;
    }
  }
  return loomSuccess;
}

void tp_mem_dereg_used(struct loom_comm* comm, void** handles) {
  for (int i = 0; i < NTRANSPORTS; i++)
    if (handles[i]) {
      all_transports[i]->mem_dereg(comm, handles[i]);
      handles[i] = NULL;
    }
}

loomResult_t tp_comm_init_none(struct loom_comm* comm, int used) {
  return loomSuccess;
}

void tp_idle_none(struct loom_comm* comm) {
  (void)comm;
}

loomResult_t tp_mem_reg_none(struct loom_comm* comm, void* buf, size_t bytes, int kind,
                             void** handle_out) {
  (void)buf;
  (void)bytes;
  (void)kind;
  (void)handle_out;
  return err_set(comm, loomInvalidUsage,
                 "this transport registers no memory: its transfers need no registration");
}

loomResult_t tp_mem_dereg_none(struct loom_comm* comm, void* handle) {
  (void)handle;
  return err_set(comm, loomInvalidUsage,
                 "this transport registers no memory: there is nothing to deregister");
}

loomResult_t tp_fifo_describe_none(struct conn* c, struct fifo_desc* out) {
  (void)out;
  return err_set(c->comm, loomInvalidUsage,
                 "transport %s keeps no FIFO in memory: there is nothing a kernel could drive",
                 c->tp->name);
}

loomResult_t tp_table_check(const struct loom_transport* t) {
  if (t->size != sizeof(*t))
    return err_set(NULL, loomInternalError,
                   "transport %s: its table is %zu bytes, this build's is %zu (built for another "
                   "version of Loom)",
                   t->name ? t->name : "(unnamed)", t->size, sizeof(*t));
  const char* missing = !t->name             ? "name"
                        : !t->caps.mem_kinds ? "caps.mem_kinds"
                        : !t->can_connect    ? "can_connect"
                        : !t->connect        ? "connect"
                        : !t->connect_test   ? "connect_test"
                        : !t->send_post      ? "send_post"
                        : !t->recv_post      ? "recv_post"
                        : !t->test           ? "test"
                        : !t->cancel         ? "cancel"
                        : !t->close          ? "close"
                        : !t->comm_init      ? "comm_init"
                        : !t->comm_fini      ? "comm_fini"
                        : !t->idle           ? "idle"
                        : !t->mem_reg        ? "mem_reg"
                        : !t->mem_dereg      ? "mem_dereg"
                        : !t->fifo_describe  ? "fifo_describe"
                                             : NULL;
  if (missing)
    return err_set(NULL, loomInternalError,
                   "transport %s: slot %s is empty (unsupported slots point to the tp_*_none "
                   "stubs)",
                   t->name ? t->name : "(unnamed)", missing);
  return loomSuccess;
}

void tp_helper_thread_add(struct loom_comm* comm) {
  comm->tp->helper_threads++;
}

void tp_idle(struct loom_comm* comm) {
  progress_idle(comm->tp->progress); /* what the executor polled, the engine's thread watches */
  for (int i = 0; i < NTRANSPORTS; i++)
    if (comm->tp->state[i]) all_transports[i]->idle(comm);
}

loomResult_t tp_progress_get(struct loom_comm* comm, struct progress** out) {
  struct tp_comm* tp = comm->tp;
  if (tp->progress == NULL) LOOM_CHECK(progress_create(comm, &tp->progress));
  *out = tp->progress;
  return loomSuccess;
}

void** tp_comm_state(struct loom_comm* comm, const struct loom_transport* t) {
  for (int i = 0; i < NTRANSPORTS; i++)
    if (all_transports[i] == t) return &comm->tp->state[i];
  return NULL; /* not reached: every transport is in all_transports */
}

static void tp_wake(void* arg) {
  struct tp_comm* tp = arg;
  if (tp->segs.self) bell_ring(&tp->segs.self->bell);
}

/* The tables of connections, both directions. */
static size_t tp_tables_bytes(const struct loom_comm* comm) {
  return 2 * (size_t)comm->nranks * LANE_COUNT * sizeof(struct conn*) + sizeof(struct tp_comm);
}

loomResult_t tp_comm_init(struct loom_comm* comm) {
  int n = comm->nranks;
  struct tp_comm* tp = calloc(1, sizeof(*tp));
  if (!tp) return err_set(comm, loomSystemError, "out of memory");
  comm->tp = tp;
  tp->send_conns = calloc((size_t)n * LANE_COUNT, sizeof(*tp->send_conns));
  tp->recv_conns = calloc((size_t)n * LANE_COUNT, sizeof(*tp->recv_conns));
  if (!tp->send_conns || !tp->recv_conns) return err_set(comm, loomSystemError, "out of memory");
  memstat_add(comm, MEM_CONN, -1, tp_tables_bytes(comm));
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  LOOM_CHECK(rankseg_init(comm, &tp->segs, &dl));
  comm_set_wake(comm, tp_wake, tp);
  LOOM_CHECK(peer_comm_init(comm));
  /* Every peer has mapped this rank's segment: nothing of it needs to stay
   * reachable by name or descriptor. */
  LOOM_CHECK(boot_barrier(comm, &dl));
  rankseg_shared(comm, &tp->segs);
  for (int i = 0; i < NTRANSPORTS; i++) {
    LOOM_CHECK(tp_table_check(all_transports[i]));
    tp->allowed[i] = tp_transport_allowed(all_transports[i]->name);
  }
  LOOM_CHECK(transports_comm_init(comm));
  /* A transport's own thread (sockets' network thread) needs a core too:
   * spinning would take it. Ranks of other hosts on this machine (network
   * namespaces, containers) share its cores as well. */
  int machine_ranks = 0, before = 0;
  for (int p = 0; p < n; p++) {
    int here = comm->peers[p].machine_id == comm->peers[comm->rank].machine_id;
    machine_ranks += here;
    before += here && p < comm->rank;
  }
  tp->spread_index = machine_ranks > 1 && params_get()->spread ? before : -1;
  int threads = LOOM_MAX(machine_ranks, tp->segs.same_host) * (1 + tp->helper_threads);
  long long spin = params_get()->spin_count;
  if (spin < 0) spin = threads > LOOM_MAX(comm->peers[comm->rank].cpus, 1) ? 0 : 2000;
  tp->spin = (int)spin;
  return loomSuccess;
}

void tp_comm_fini(struct loom_comm* comm) {
  struct tp_comm* tp = comm->tp;
  if (!tp) return;
  comm_set_wake(comm, NULL, NULL);
  peer_comm_fini(comm);
  for (int i = 0; i < comm->nranks * LANE_COUNT; i++) {
    if (tp->send_conns && tp->send_conns[i]) tp->send_conns[i]->tp->close(tp->send_conns[i]);
    if (tp->recv_conns && tp->recv_conns[i]) tp->recv_conns[i]->tp->close(tp->recv_conns[i]);
  }
  int e = atomic_load(&comm->async_error);
  int failed = (e != loomSuccess && e != loomInProgress) || atomic_load(&comm->aborted);
  for (int t = 0; t < NTRANSPORTS; t++) all_transports[t]->comm_fini(comm, failed);
  progress_destroy(tp->progress); /* its clients have left it */
  rankseg_fini(comm, &tp->segs);
  if (tp->send_conns && tp->recv_conns) memstat_sub(comm, MEM_CONN, -1, tp_tables_bytes(comm));
  free(tp->send_conns);
  free(tp->recv_conns);
  free(tp);
  comm->tp = NULL;
}

int tp_transport_allowed(const char* name) {
  const char* list = params_get()->transports;
  if (!list || !*list) return 1;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", list);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    if (strcasecmp(tok, name) == 0) return 1;
  return 0;
}

loomResult_t tp_transports_check(const char* list) {
  char buf[256], why[160], acc[160];
  size_t used = (size_t)snprintf(acc, sizeof(acc), "a comma list of ");
  for (int i = 0; i < NTRANSPORTS; i++)
    used += (size_t)snprintf(acc + used, sizeof(acc) - used, "%s%s", i ? ", " : "",
                             all_transports[i]->name);
  if (!list || !*list) return loomSuccess;
  snprintf(buf, sizeof(buf), "%s", list);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int i = 0;
    while (i < NTRANSPORTS && strcasecmp(tok, all_transports[i]->name) != 0) i++;
    if (i == NTRANSPORTS) {
      snprintf(why, sizeof(why), "'%s' is not a transport of this build", tok);
      return params_reject("LOOM_TRANSPORTS", why, acc);
    }
  }
  return loomSuccess;
}

void tp_comm_cancel(struct loom_comm* comm) {
  struct tp_comm* tp = comm->tp;
  if (!tp) return;
  for (int i = 0; i < comm->nranks * LANE_COUNT; i++) {
    if (tp->send_conns[i]) tp->send_conns[i]->tp->cancel(tp->send_conns[i]);
    if (tp->recv_conns[i]) tp->recv_conns[i]->tp->cancel(tp->recv_conns[i]);
  }
}

loomResult_t tp_conn_get(struct loom_comm* comm, int peer, int is_send, int lane,
                         struct conn** conn_out) {
  struct tp_comm* tp = comm->tp;
  size_t at = (size_t)lane * (size_t)comm->nranks + (size_t)peer;
  struct conn** slot = is_send ? &tp->send_conns[at] : &tp->recv_conns[at];
  if (*slot) {
    *conn_out = *slot;
    return loomSuccess;
  }
  const struct loom_transport* t = transport_pick(comm, comm->rank, peer);
  if (t != NULL) {
    LOOM_CHECK(t->connect(comm, peer, is_send, lane, slot));
    LOOM_INFO(SUB_INIT, "rank %d: %s connection %s peer %d over %s", comm->rank,
              is_send ? "send" : "receive", is_send ? "to" : "from", peer, t->name);
    *conn_out = *slot;
    return loomSuccess;
  }
  return err_set_sub(
      comm, SUB_INIT, loomInvalidUsage,
      "no transport can reach peer %d (host %s) from host %s with LOOM_TRANSPORTS='%s'"
      "; transports here: %s",
      peer, comm->peers[peer].hostname, comm->peers[comm->rank].hostname, params_get()->transports,
      tp_list_available());
}

struct bell* tp_self_bell(struct loom_comm* comm) {
  return &comm->tp->segs.self->bell;
}

struct bell* tp_peer_bell(struct loom_comm* comm, int peer) {
  struct rank_seg* s = comm->tp->segs.peer[peer];
  return s ? &s->bell : NULL;
}

int tp_spread_cpu(const cpu_set_t* mask, int index) {
  int allowed = CPU_COUNT(mask);
  if (index < 0 || allowed < 2) return -1;
  int want = index % allowed;
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; cpu++)
    if (CPU_ISSET(cpu, mask) && seen++ == want) return cpu;
  return -1;
}

int tp_thread_move(int cpu) {
  cpu_set_t mask, one;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0 || !CPU_ISSET(cpu, &mask)) return -1;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) return -1;
  /* cpu: a thread leaves a CPU its mask excludes before the call returns. */
  int at = sched_getcpu();
  if (sched_setaffinity(0, sizeof(mask), &mask) != 0) {
    LOOM_WARN(SUB_INIT, "cannot restore a thread's CPU mask after moving it to CPU %d: %s", cpu,
              strerror(errno));
    return -1;
  }
  return at;
}

/* Two ranks that poll each other need two cores. The wake-ups at the end
 * of init often put every rank of a machine on the vCPU where the bootstrap
 * threads ran, and where one rank runs ahead and waits (a broadcast's
 * root) the kernel's balancer left them there for the whole launch: a
 * waiter that spins or yields keeps the core until its slice ends, so each
 * hand-off costs a scheduler slice (docs/PERFORMANCE.md, "Two ranks on one
 * vCPU"). So the first time a thread drives a plan, it moves to
 * the CPU of its place among the machine's ranks (within the CPUs it may
 * use) and gets its own mask back at once: it is not pinned, the balancer
 * may move it later, and a thread that was bound to one CPU stays put. Once
 * a thread: a rank's later communicators keep where the first put it. */
void tp_thread_spread(struct loom_comm* comm) {
  static _Thread_local int settled;
  struct tp_comm* tp = comm->tp;
  if (!tp || tp->spread_index < 0) return;
  /* Every call: one load. The thread that drove the last plan is settled
   * already (a thread-local costs a call into the dynamic linker here). A
   * new thread that reuses an old one's id is not moved: no harm. */
  uintptr_t me = (uintptr_t)pthread_self();
  if (atomic_load_explicit(&tp->spread_last, memory_order_relaxed) == me) return;
  atomic_store_explicit(&tp->spread_last, me, memory_order_relaxed);
  if (settled) return;
  settled = 1;
  int index = tp->spread_index;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return;
  int cpu = tp_spread_cpu(&mask, index), was = sched_getcpu();
  if (cpu < 0) return;
  int at = was == cpu ? cpu : tp_thread_move(cpu);
  LOOM_INFO(SUB_INIT, "rank %d: place %d among the machine's ranks, CPU %d of %d: from CPU %d %s",
            comm->rank, index, cpu, CPU_COUNT(&mask), was,
            was == cpu  ? "(already there)"
            : at == cpu ? "(moved)"
                        : "(could not move)");
}

int tp_spin_count(struct loom_comm* comm) {
  return comm->tp->spin;
}

struct peer_pub* tp_pub(struct loom_comm* comm, int rank) {
  struct rank_seg* s = comm->tp->segs.peer[rank];
  return s ? &s->pub : NULL;
}

struct rank_seg* tp_rank_seg(struct loom_comm* comm, int rank) {
  return comm->tp->segs.peer[rank];
}

int tp_shm_named(struct loom_comm* comm) {
  return comm->tp->segs.named;
}

struct dev_pub* tp_dev_area(struct loom_comm* comm, int rank) {
  unsigned char* seg = (unsigned char*)comm->tp->segs.peer[rank];
  return seg ? (struct dev_pub*)(seg + comm->tp->segs.dev_off) : NULL;
}

size_t tp_dev_area_bytes(struct loom_comm* comm) {
  return comm->tp->segs.bytes - comm->tp->segs.dev_off;
}

int tp_local_index(struct loom_comm* comm, int rank) {
  return comm->tp->segs.local[rank];
}

int tp_lines_ok(struct loom_comm* comm) {
  return params_get()->direct != 0 && comm->tp->segs.same_host == comm->nranks &&
         (tp_transport_allowed("shm") || tp_transport_allowed("local"));
}

/* Numbers go round the areas in turn (seq % TP_LINES_AREAS) and start at 1:
 * never 0, what fresh memory holds. */
uint64_t tp_lines_next(struct loom_comm* comm) {
  return ++comm->tp->lines_calls;
}

struct peer_state** tp_peer_state_slot(struct loom_comm* comm) {
  return &comm->tp->peer;
}

const char* tp_list_available(void) {
  return "local (thread ranks of one process), shm (processes on one host), socket (TCP, any "
         "ranks)";
}

void conn_queue_push(struct conn* c, struct xfer* x) {
  x->next = NULL;
  x->conn = c;
  if (c->tail)
    c->tail->next = x;
  else
    c->head = x;
  c->tail = x;
}

void conn_queue_pop(struct conn* c) {
  struct xfer* x = c->head;
  if (!x) return;
  c->head = x->next;
  if (!c->head) c->tail = NULL;
  x->next = NULL;
}
