/* transport.c - per-communicator transport state: the rank segments that hold
 * each rank's doorbell, the connection tables, and transport selection. */
#include "transport.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../core/bootstrap.h"
#include "../core/checks.h"
#include "../core/params.h"
#include "peer.h"

#define RANK_SEG_MAGIC 0x4c4d52414e4b3031ULL /* "LMRANK01" */
#define RANK_SEG_BYTES 4096
#define TP_MAX_TRANSPORTS 8

/* What a rank shares with the peers on its host. */
struct rank_seg {
  _Atomic uint64_t magic;
  struct bell bell;
  struct peer_pub pub; /* direct plans (peer.c) */
};
_Static_assert(sizeof(struct rank_seg) <= RANK_SEG_BYTES, "the rank segment outgrew its page");

struct tp_comm {
  struct rank_seg* self_seg;
  struct rank_seg** peer_segs; /* NULL where the peer is on another host */
  struct conn** send_conns;    /* [lane * nranks + peer] */
  struct conn** recv_conns;
  int spin;
  int same_host_ranks;
  int helper_threads;      /* threads a transport runs for this rank (tp_helper_thread_add) */
  struct peer_state* peer; /* peer.c */
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

loomResult_t tp_comm_init_none(struct loom_comm* comm, int used) {
  return loomSuccess;
}

void tp_helper_thread_add(struct loom_comm* comm) {
  comm->tp->helper_threads++;
}

void tp_idle(struct loom_comm* comm) {
  for (int i = 0; i < NTRANSPORTS; i++)
    if (all_transports[i]->idle && comm->tp->state[i]) all_transports[i]->idle(comm);
}

void** tp_comm_state(struct loom_comm* comm, const struct loom_transport* t) {
  for (int i = 0; i < NTRANSPORTS; i++)
    if (all_transports[i] == t) return &comm->tp->state[i];
  return NULL; /* not reached: every transport is in all_transports */
}

static void rank_seg_name(const struct loom_comm* comm, int rank, char* buf, size_t len) {
  snprintf(buf, len, "/loom-%016llx-r%d", (unsigned long long)comm->comm_hash, rank);
}

static int same_host(const struct loom_comm* comm, int peer) {
  return comm->peers[peer].host_id == comm->peers[comm->rank].host_id;
}

static loomResult_t rank_seg_create(struct loom_comm* comm, struct rank_seg** out) {
  char name[64];
  rank_seg_name(comm, comm->rank, name, sizeof(name));
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return err_set_sub(comm, SUB_SHM, loomSystemError, "shm_open(%s) failed: %s", name,
                       strerror(errno));
  if (ftruncate(fd, RANK_SEG_BYTES) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name);
    return err_set_sub(comm, SUB_SHM, loomSystemError, "ftruncate(%s) failed: %s", name,
                       strerror(e));
  }
  void* p = mmap(NULL, RANK_SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name);
    return err_set_sub(comm, SUB_SHM, loomSystemError, "mmap(%s) failed: %s", name,
                       strerror(errno));
  }
  struct rank_seg* seg = p;
  atomic_store(&seg->magic, RANK_SEG_MAGIC);
  *out = seg;
  return loomSuccess;
}

static loomResult_t rank_seg_open(struct loom_comm* comm, int peer, struct rank_seg** out) {
  char name[64];
  rank_seg_name(comm, peer, name, sizeof(name));
  int fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0)
    return err_set_sub(comm, SUB_SHM, loomSystemError,
                       "cannot open the shared segment %s of peer %d: %s", name, peer,
                       strerror(errno));
  void* p = mmap(NULL, RANK_SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    return err_set_sub(comm, SUB_SHM, loomSystemError, "mmap of %s failed: %s", name,
                       strerror(errno));
  if (atomic_load(&((struct rank_seg*)p)->magic) != RANK_SEG_MAGIC) {
    munmap(p, RANK_SEG_BYTES);
    return err_set_sub(comm, SUB_SHM, loomInternalError, "segment %s of peer %d is not initialised",
                       name, peer);
  }
  *out = p;
  return loomSuccess;
}

static void tp_wake(void* arg) {
  struct tp_comm* tp = arg;
  if (tp->self_seg) bell_ring(&tp->self_seg->bell);
}

loomResult_t tp_comm_init(struct loom_comm* comm) {
  int n = comm->nranks;
  struct tp_comm* tp = calloc(1, sizeof(*tp));
  if (!tp) return err_set(comm, loomSystemError, "out of memory");
  comm->tp = tp;
  tp->peer_segs = calloc((size_t)n, sizeof(*tp->peer_segs));
  tp->send_conns = calloc((size_t)n * LANE_COUNT, sizeof(*tp->send_conns));
  tp->recv_conns = calloc((size_t)n * LANE_COUNT, sizeof(*tp->recv_conns));
  if (!tp->peer_segs || !tp->send_conns || !tp->recv_conns)
    return err_set(comm, loomSystemError, "out of memory");
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  LOOM_CHECK(rank_seg_create(comm, &tp->self_seg));
  comm_set_wake(comm, tp_wake, tp);
  /* Everyone's segment exists before anyone opens; everyone has opened
   * before anyone unlinks, so nothing stays in /dev/shm. */
  LOOM_CHECK(boot_barrier(comm, &dl));
  for (int p = 0; p < n; p++) {
    if (!same_host(comm, p)) continue;
    tp->same_host_ranks++;
    if (p == comm->rank) {
      tp->peer_segs[p] = tp->self_seg;
      continue;
    }
    LOOM_CHECK(rank_seg_open(comm, p, &tp->peer_segs[p]));
  }
  LOOM_CHECK(peer_comm_init(comm));
  LOOM_CHECK(boot_barrier(comm, &dl));
  char name[64];
  rank_seg_name(comm, comm->rank, name, sizeof(name));
  shm_unlink(name);
  for (int i = 0; i < NTRANSPORTS; i++)
    tp->allowed[i] = tp_transport_allowed(all_transports[i]->name);
  LOOM_CHECK(transports_comm_init(comm));
  /* A transport's own thread (sockets' network thread) needs a core too:
   * spinning would take it. Ranks of other hosts on this machine (network
   * namespaces, containers) share its cores as well. */
  int machine_ranks = 0;
  for (int p = 0; p < n; p++)
    machine_ranks += comm->peers[p].machine_id == comm->peers[comm->rank].machine_id;
  int threads = LOOM_MAX(machine_ranks, tp->same_host_ranks) * (1 + tp->helper_threads);
  long long spin = params_get()->spin_count;
  if (spin < 0) spin = threads > cpus_online() ? 0 : 2000;
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
  /* After a failure a peer may have died before unlinking its names: every
   * survivor removes every name it could have shared. ENOENT is the norm. */
  if (comm->peers) {
    for (int p = 0; p < comm->nranks; p++) {
      char name[64];
      if (!same_host(comm, p)) continue;
      rank_seg_name(comm, p, name, sizeof(name));
      shm_unlink(name);
    }
  }
  for (int p = 0; p < comm->nranks && tp->peer_segs; p++)
    if (tp->peer_segs[p] && tp->peer_segs[p] != tp->self_seg)
      munmap(tp->peer_segs[p], RANK_SEG_BYTES);
  if (tp->self_seg) munmap(tp->self_seg, RANK_SEG_BYTES);
  free(tp->peer_segs);
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
  return &comm->tp->self_seg->bell;
}

struct bell* tp_peer_bell(struct loom_comm* comm, int peer) {
  struct rank_seg* s = comm->tp->peer_segs[peer];
  return s ? &s->bell : NULL;
}

int tp_spin_count(struct loom_comm* comm) {
  return comm->tp->spin;
}

struct peer_pub* tp_pub(struct loom_comm* comm, int rank) {
  struct rank_seg* s = comm->tp->peer_segs[rank];
  return s ? &s->pub : NULL;
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
