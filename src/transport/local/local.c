/* local.c - ranks that are threads of one process: one copy, directly.
 *
 * The sender posts a pointer to its own buffer in a slot; the receiver copies
 * (or reduces) straight from it into the destination and frees the slot, and
 * only then is the send complete. A receiver claims a slot before reading so
 * that a sender that gives up (timeout, abort) can withdraw what it posted
 * and never have its buffer read after it returned. The FIFO lives on the
 * heap; a process-wide registry lets the receiver find the sender's. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/checks.h"
#include "core/params.h"
#include "kernels/cpu/cpu_kernels.h"
#include "transport/fifo.h"
#include "transport/transport.h"

#define LOCAL_SLOTS 16
#define LOCAL_CANCEL_WAIT_MS 5000

struct local_conn {
  struct conn base;
  struct fifo_ctrl* ctrl; /* NULL until attached (receiver) */
  struct bell* peer_bell;
  uint64_t key_hash;
};

/* The registry: FIFOs created by senders, not yet taken by their receiver. */
struct reg_entry {
  uint64_t hash;
  int src, dst, lane;
  struct fifo_ctrl* ctrl;
  struct reg_entry* next;
};
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct reg_entry* reg_head;

static void reg_add(uint64_t hash, int src, int dst, int lane, struct fifo_ctrl* ctrl,
                    struct reg_entry* e) {
  e->hash = hash;
  e->src = src;
  e->dst = dst;
  e->lane = lane;
  e->ctrl = ctrl;
  pthread_mutex_lock(&reg_lock);
  e->next = reg_head;
  reg_head = e;
  pthread_mutex_unlock(&reg_lock);
}

/* Removes and returns the entry's FIFO, or NULL. */
static struct fifo_ctrl* reg_take(uint64_t hash, int src, int dst, int lane) {
  struct fifo_ctrl* found = NULL;
  pthread_mutex_lock(&reg_lock);
  for (struct reg_entry** pp = &reg_head; *pp; pp = &(*pp)->next) {
    struct reg_entry* e = *pp;
    if (e->hash == hash && e->src == src && e->dst == dst && e->lane == lane) {
      found = e->ctrl;
      *pp = e->next;
      free(e);
      break;
    }
  }
  pthread_mutex_unlock(&reg_lock);
  return found;
}

static loomResult_t local_can_connect(const struct peer_info* self, const struct peer_info* peer,
                                      int* ok_out) {
  *ok_out = self->host_id == peer->host_id && self->process_token == peer->process_token;
  return loomSuccess;
}

/* What a sender allocates for a FIFO: its control (slots of pointers, no data: the receiver
 * copies from the sender's buffer) and its registry entry. Counted on the sender (memstat.h)
 * until it closes, whichever side frees it last. */
#define LOCAL_FIFO_BYTES (LOOM_ALIGN_UP(sizeof(struct fifo_ctrl), 64) + sizeof(struct reg_entry))

static void fifo_unref(struct fifo_ctrl* f) {
  if (atomic_fetch_sub(&f->refs, 1) == 1) free(f);
}

static loomResult_t local_connect(struct loom_comm* comm, int peer, int is_send, int lane,
                                  struct conn** out) {
  struct local_conn* c = calloc(1, sizeof(*c));
  if (!c) return err_set(comm, loomSystemError, "out of memory");
  c->base.tp = &loom_transport_local;
  c->base.comm = comm;
  c->base.peer = peer;
  c->base.is_send = is_send;
  c->base.lane = lane;
  c->peer_bell = tp_peer_bell(comm, peer);
  c->key_hash = comm->comm_hash;
  if (is_send) {
    struct fifo_ctrl* f = aligned_alloc(64, LOOM_ALIGN_UP(sizeof(*f), 64));
    struct reg_entry* e = malloc(sizeof(*e));
    if (!f || !e) {
      free(f);
      free(e);
      free(c);
      return err_set(comm, loomSystemError, "out of memory");
    }
    memset(f, 0, sizeof(*f));
    f->nslots = LOCAL_SLOTS;
    atomic_init(&f->refs, 2); /* the sender, and the receiver once attached */
    atomic_store(&f->magic, FIFO_MAGIC);
    c->ctrl = f;
    reg_add(comm->comm_hash, comm->rank, peer, lane, f, e);
    memstat_add(comm, MEM_FIFO, peer, LOCAL_FIFO_BYTES);
  }
  memstat_add(comm, MEM_CONN, peer, sizeof(*c));
  *out = &c->base;
  return loomSuccess;
}

static loomResult_t local_connect_test(struct conn* base) {
  struct local_conn* c = (struct local_conn*)base;
  if (c->ctrl) return loomSuccess;
  c->ctrl = reg_take(c->key_hash, base->peer, base->comm->rank, base->lane);
  return c->ctrl ? loomSuccess : loomInProgress;
}

static loomResult_t local_post(struct conn* base, struct xfer* x) {
  x->done = 0;
  x->state = 0;
  conn_queue_push(base, x);
  return loomSuccess;
}

static loomResult_t peer_gone(struct conn* base, const char* what) {
  return err_set_sub(base->comm, SUB_P2P, loomRemoteError, "peer %d %s", base->peer, what);
}

/* Sender: publish pointers for queued transfers; retire the ones taken. */
static loomResult_t local_send_progress(struct local_conn* c) {
  struct fifo_ctrl* f = c->ctrl;
  uint64_t head = atomic_load_explicit(&f->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&f->tail, memory_order_acquire);
  int posted = 0;
  for (struct xfer* x = c->base.head; x; x = x->next) {
    if (x->state != 0) continue;
    if (head - tail >= f->nslots) break;
    struct fifo_slot* s = &f->slots[head % f->nslots];
    s->msg_bytes = x->bytes;
    s->bytes = x->bytes;
    s->offset = 0;
    s->ptr = (uint64_t)(uintptr_t)x->src;
    atomic_store_explicit(&s->state, SLOT_POSTED, memory_order_relaxed);
    x->slot = (uint32_t)head;
    x->state = 2;
    head++;
    atomic_store_explicit(&f->head, head, memory_order_release);
    posted = 1;
  }
  if (posted && c->peer_bell) bell_ring(c->peer_bell);
  /* Look at closed before the final look at tail: a receiver that takes the
   * last slot and then closes must not turn a finished send into an error. */
  int closed = atomic_load_explicit(&f->closed, memory_order_acquire);
  tail = atomic_load_explicit(&f->tail, memory_order_acquire);
  struct xfer* x;
  while ((x = c->base.head) != NULL && x->state == 2 && (int32_t)((uint32_t)tail - x->slot) > 0) {
    x->done = x->bytes;
    x->state = 1;
    conn_queue_pop(&c->base);
  }
  if (c->base.head && closed)
    return peer_gone(&c->base,
                     "closed the connection before taking the data (aborted or destroyed)");
  return loomSuccess;
}

static loomResult_t local_recv_one(struct local_conn* c, struct xfer* x, struct fifo_slot* s) {
  uint32_t expect = SLOT_POSTED;
  if (!atomic_compare_exchange_strong(&s->state, &expect, SLOT_CLAIMED))
    return peer_gone(&c->base, "withdrew its data (it gave up or aborted)");
  if (s->msg_bytes != x->bytes) {
    atomic_store(&s->state, SLOT_POSTED);
    return err_set_sub(c->base.comm, SUB_P2P, loomRemoteError,
                       "peer %d sent a message of %llu bytes where this rank expected %zu: the "
                       "ranks called different operations or counts",
                       c->base.peer, (unsigned long long)s->msg_bytes, x->bytes);
  }
  const void* src = (const void*)(uintptr_t)s->ptr;
  if (x->reduce)
    x->reduce(x, 0, src, x->bytes);
  else
    cpu_copy(x->dst, src, x->bytes);
  atomic_store_explicit(&s->state, SLOT_FREE, memory_order_relaxed);
  return loomSuccess;
}

static loomResult_t local_recv_progress(struct local_conn* c) {
  struct fifo_ctrl* f = c->ctrl;
  uint64_t tail = atomic_load_explicit(&f->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&f->head, memory_order_acquire);
  int moved = 0;
  struct xfer* x;
  loomResult_t res = loomSuccess;
  while ((x = c->base.head) != NULL && tail < head) {
    res = local_recv_one(c, x, &f->slots[tail % f->nslots]);
    if (res != loomSuccess) break;
    tail++;
    atomic_store_explicit(&f->tail, tail, memory_order_release);
    x->done = x->bytes;
    x->state = 1;
    conn_queue_pop(&c->base);
    moved = 1;
  }
  if (moved && c->peer_bell) bell_ring(c->peer_bell);
  /* closed first, then head again: data posted before the close still counts. */
  if (res == loomSuccess && c->base.head &&
      atomic_load_explicit(&f->closed, memory_order_acquire) &&
      atomic_load_explicit(&f->head, memory_order_acquire) == tail)
    res = peer_gone(&c->base, "closed the connection (aborted or destroyed)");
  return res;
}

static loomResult_t local_test(struct xfer* x, int* done_out) {
  struct local_conn* c = (struct local_conn*)x->conn;
  *done_out = 0;
  if (x->state == 1) {
    *done_out = 1;
    return loomSuccess;
  }
  if (!c->ctrl) {
    loomResult_t r = local_connect_test(&c->base);
    if (r != loomSuccess) return r == loomInProgress ? loomSuccess : r;
  }
  LOOM_CHECK(c->base.is_send ? local_send_progress(c) : local_recv_progress(c));
  *done_out = x->state == 1;
  return loomSuccess;
}

/* Withdraws what this sender posted and the receiver has not taken, waiting
 * (briefly) for a receiver that is reading right now. */
static void local_withdraw(struct local_conn* c) {
  struct fifo_ctrl* f = c->ctrl;
  uint64_t head = atomic_load(&f->head);
  struct deadline dl = deadline_in_ms(LOCAL_CANCEL_WAIT_MS);
  for (uint64_t seq = atomic_load(&f->tail); seq < head; seq++) {
    struct fifo_slot* s = &f->slots[seq % f->nslots];
    uint32_t expect = SLOT_POSTED;
    if (atomic_compare_exchange_strong(&s->state, &expect, SLOT_CANCELLED)) continue;
    while (atomic_load(&s->state) == SLOT_CLAIMED && !deadline_passed(&dl)) sched_yield();
  }
}

/* After a failure: withdraw what this sender posted (so no peer reads the
 * caller's buffers once the call has returned) and drop the queue. */
static loomResult_t local_cancel(struct conn* base) {
  struct local_conn* c = (struct local_conn*)base;
  if (c->ctrl && base->is_send) local_withdraw(c);
  base->head = base->tail = NULL;
  return loomSuccess;
}

static loomResult_t local_close(struct conn* base) {
  struct local_conn* c = (struct local_conn*)base;
  struct fifo_ctrl* f = c->ctrl;
  memstat_sub(base->comm, MEM_CONN, base->peer, sizeof(*c));
  if (base->is_send) memstat_sub(base->comm, MEM_FIFO, base->peer, LOCAL_FIFO_BYTES);
  if (!f) {
    free(c);
    return loomSuccess;
  }
  atomic_store(&f->closed, 1);
  if (base->is_send) {
    local_withdraw(c);
    /* Never attached: the receiver will not find it any more. */
    if (reg_take(c->key_hash, base->comm->rank, base->peer, base->lane)) fifo_unref(f);
  }
  if (c->peer_bell) bell_ring(c->peer_bell);
  fifo_unref(f);
  free(c);
  return loomSuccess;
}

static void local_comm_fini(struct loom_comm* comm, int failed) {}

/* Local slots name a whole message in the sender's memory: no data area,
 * no bound on a piece (slot_bytes 0), claimed through each slot's state. */
static loomResult_t local_fifo_describe(struct conn* base, struct fifo_desc* out) {
  struct local_conn* c = (struct local_conn*)base;
  if (!c->ctrl) return loomInProgress;
  *out = (struct fifo_desc){c->ctrl->slots,   NULL, &c->ctrl->head,  &c->ctrl->tail,
                            &c->ctrl->closed, 0,    c->ctrl->nslots, MEM_HOST,
                            c->peer_bell};
  return loomSuccess;
}

const struct loom_transport loom_transport_local = {
    .size = sizeof(struct loom_transport),
    .name = "local",
    .caps = {.mem_kinds = MEM_KIND_BIT(MEM_HOST), .rendezvous = 1, .fused_reduce = 1},
    .can_connect = local_can_connect,
    .connect = local_connect,
    .connect_test = local_connect_test,
    .send_post = local_post,
    .recv_post = local_post,
    .test = local_test,
    .cancel = local_cancel,
    .close = local_close,
    .comm_init = tp_comm_init_none,
    .comm_fini = local_comm_fini,
    .idle = tp_idle_none,
    .mem_reg = tp_mem_reg_none,
    .mem_dereg = tp_mem_dereg_none,
    .fifo_describe = local_fifo_describe,
};
