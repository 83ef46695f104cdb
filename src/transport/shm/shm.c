/* shm.c - processes on one host: a shared-memory FIFO per direction.
 *
 * The sender creates the FIFO (so it can start filling slots before the
 * receiver arrives); the receiver attaches when it first needs the
 * connection. Large messages are pipelined through the slots: the sender
 * copies piece k+1 while the receiver drains piece k.
 *
 * Unnamed mode (rankseg.h): the FIFO is an unnamed file of /dev/shm whose
 * descriptor the sender publishes in its rank segment; the receiver opens
 * it through /proc, and the sender closes its descriptor once the receiver
 * has it. Nothing outlives the two processes. One exception: a sender that
 * closes cleanly while data it sent still waits for a receiver that never
 * attached gives the FIFO an escape name (with the receiver's pid in it),
 * which the receiver collects and unlinks, or its teardown, or, if the
 * receiver died, the next communicator's sweep (shmfile_sweep).
 * Named mode: a POSIX segment per FIFO, unlinked by the receiver when it
 * attaches. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checks.h"
#include "core/params.h"
#include "kernels/cpu/cpu_kernels.h"
#include "transport/fifo.h"
#include "transport/rankseg.h"
#include "transport/shmfile.h"
#include "transport/transport.h"

/* The largest FIFO a receiver accepts to map (LOOM_BUFFSIZE's bound, slots
 * rounded up to pages). */
#define FIFO_MAX_BYTES ((size_t)(1u << 30) + (size_t)FIFO_MAX_SLOTS * 4096 + (1u << 20))

struct shm_conn {
  struct conn base;
  struct fifo_ctrl* ctrl; /* NULL until attached */
  char* data;
  size_t map_bytes;
  int named;     /* the communicator's mode */
  int fd;        /* unnamed mode, sender: the FIFO, until the receiver has it; else -1 */
  char name[96]; /* named mode: the FIFO's name; unnamed: its escape name */
  struct bell* peer_bell;
};

static void fifo_name(const struct loom_comm* comm, int src, int dst, int lane, char* buf,
                      size_t len) {
  snprintf(buf, len, "/loom-%016llx-f%d-%d-%d", (unsigned long long)comm->comm_hash, src, dst,
           lane);
}

/* The receiver's pid ends it, for shmfile_sweep. */
static void escape_name(const struct loom_comm* comm, int src, int dst, int lane, char* buf,
                        size_t len) {
  snprintf(buf, len, "/loom-%016llx-k%d-%d-%d-p%d", (unsigned long long)comm->comm_hash, src, dst,
           lane, (int)comm->peers[dst].pid);
}

static loomResult_t shm_can_connect(const struct peer_info* self, const struct peer_info* peer,
                                    int* ok_out) {
  *ok_out = self->host_id == peer->host_id;
  return loomSuccess;
}

static _Atomic int32_t* my_slot(struct shm_conn* c) {
  return rankseg_fifo_slot(tp_rank_seg(c->base.comm, c->base.comm->rank), c->base.peer,
                           c->base.lane);
}

/* Unnamed mode, sender: the receiver has the FIFO (or never will): the
 * descriptor goes, its number first, so nobody opens a reused number. */
static void fd_release(struct shm_conn* c) {
  if (c->fd < 0) return;
  atomic_store_explicit(my_slot(c), 0, memory_order_release);
  close(c->fd);
  c->fd = -1;
}

static loomResult_t shm_create(struct shm_conn* c) {
  struct loom_comm* comm = c->base.comm;
  const struct loom_params* pm = params_get();
  uint32_t nslots = (uint32_t)LOOM_MIN(LOOM_MAX(pm->nslots, 2), FIFO_MAX_SLOTS);
  size_t slot_bytes = LOOM_ALIGN_UP(LOOM_MAX(pm->buffsize / nslots, (size_t)4096), 4096);
  size_t total = fifo_ctrl_bytes() + (size_t)nslots * slot_bytes;
  void* p = NULL;
  if (c->named) {
    LOOM_CHECK(shmfile_named_create(comm, c->name, total, "a shared-memory FIFO", &p));
  } else {
    struct shm_file f;
    LOOM_CHECK(shmfile_create(comm, total, "a shared-memory FIFO", &f));
    c->fd = f.fd;
    p = f.map;
  }
  c->ctrl = p;
  c->map_bytes = total;
  memstat_add(comm, MEM_FIFO, c->base.peer, total);
  c->data = (char*)p + fifo_ctrl_bytes();
  c->ctrl->nslots = nslots;
  c->ctrl->slot_bytes = slot_bytes;
  c->ctrl->total_bytes = total;
  c->ctrl->comm_hash = comm->comm_hash;
  c->ctrl->src = comm->rank;
  c->ctrl->dst = c->base.peer;
  c->ctrl->lane = c->base.lane;
  atomic_store_explicit(&c->ctrl->magic, FIFO_MAGIC, memory_order_release);
  if (!c->named) {
    atomic_store_explicit(my_slot(c), c->fd + 1, memory_order_release);
    if (c->peer_bell) bell_ring(c->peer_bell); /* a receiver may be waiting to attach */
  }
  return loomSuccess;
}

static loomResult_t shm_connect(struct loom_comm* comm, int peer, int is_send, int lane,
                                struct conn** out) {
  struct shm_conn* c = calloc(1, sizeof(*c));
  if (!c) return err_set(comm, loomSystemError, "out of memory");
  c->base.tp = &loom_transport_shm;
  c->base.comm = comm;
  c->base.peer = peer;
  c->base.is_send = is_send;
  c->base.lane = lane;
  c->peer_bell = tp_peer_bell(comm, peer);
  c->named = tp_shm_named(comm);
  c->fd = -1;
  int src = is_send ? comm->rank : peer, dst = is_send ? peer : comm->rank;
  if (c->named)
    fifo_name(comm, src, dst, lane, c->name, sizeof(c->name));
  else
    escape_name(comm, src, dst, lane, c->name, sizeof(c->name));
  if (is_send) {
    loomResult_t r = shm_create(c);
    if (r != loomSuccess) {
      free(c);
      return r;
    }
  }
  memstat_add(comm, MEM_CONN, peer, sizeof(*c));
  *out = &c->base;
  return loomSuccess;
}

/* Maps the FIFO by name, once it exists and is sized. 0 or an errno value. */
static int named_map(const char* name, void** map_out, size_t* bytes_out) {
  return shmfile_named_map(name, fifo_ctrl_bytes(), FIFO_MAX_BYTES, map_out, bytes_out);
}

/* Unnamed mode: the FIFO through the sender's descriptor, or through the
 * escape name it left when it closed first. 0 or an errno value. */
static int unnamed_map(struct shm_conn* c, void** map_out, size_t* bytes_out) {
  struct loom_comm* comm = c->base.comm;
  struct rank_seg* seg = tp_rank_seg(comm, c->base.peer);
  int32_t v =
      atomic_load_explicit(rankseg_fifo_slot(seg, comm->rank, c->base.lane), memory_order_acquire);
  int e = v > 0 ? shmfile_open_peer(comm->peers[c->base.peer].pid, v - 1, fifo_ctrl_bytes(),
                                    FIFO_MAX_BYTES, map_out, bytes_out)
                : ENOENT;
  if (e == 0 || e == EACCES || e == EPERM) return e;
  return named_map(c->name, map_out, bytes_out);
}

/* Receiver side: attach once the sender has created and initialised it. */
static loomResult_t shm_connect_test(struct conn* base) {
  struct shm_conn* c = (struct shm_conn*)base;
  if (c->ctrl) return loomSuccess;
  void* p = NULL;
  size_t total = 0;
  int e = c->named ? named_map(c->name, &p, &total) : unnamed_map(c, &p, &total);
  if (e == ENOENT || e == ESRCH || e == EINVAL) return loomInProgress;
  if (e)
    return err_set_sub(base->comm, SUB_SHM, loomSystemError,
                       "cannot map the FIFO from peer %d (%s): %s", base->peer, c->name,
                       strerror(e));
  struct fifo_ctrl* ctrl = p;
  if (atomic_load_explicit(&ctrl->magic, memory_order_acquire) != FIFO_MAGIC ||
      ctrl->total_bytes != total || ctrl->comm_hash != base->comm->comm_hash ||
      ctrl->src != base->peer || ctrl->dst != base->comm->rank || ctrl->lane != base->lane) {
    munmap(p, total);
    return loomInProgress; /* not initialised yet, or not this FIFO */
  }
  c->ctrl = ctrl;
  c->map_bytes = total;
  c->data = (char*)p + fifo_ctrl_bytes();
  atomic_store(&ctrl->attached, 1);
  shm_unlink(c->name); /* unnamed mode: an escape name, if there was one; ENOENT is the norm */
  return loomSuccess;
}

static loomResult_t shm_post(struct conn* base, struct xfer* x) {
  x->done = 0;
  x->state = 0;
  conn_queue_push(base, x);
  return loomSuccess;
}

static loomResult_t peer_closed(struct conn* base) {
  return err_set_sub(base->comm, SUB_SHM, loomRemoteError,
                     "peer %d closed its shared-memory connection (it aborted or was destroyed)",
                     base->peer);
}

/* Copies as much of the head transfers into free slots as fit. */
static loomResult_t shm_send_progress(struct shm_conn* c) {
  struct fifo_ctrl* f = c->ctrl;
  if (c->fd >= 0 && atomic_load_explicit(&f->attached, memory_order_acquire)) fd_release(c);
  uint64_t head = atomic_load_explicit(&f->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&f->tail, memory_order_acquire);
  int moved = 0;
  struct xfer* x;
  while ((x = c->base.head) != NULL) {
    /* A receiver that closed takes nothing more: what is queued cannot go. */
    if (atomic_load_explicit(&f->closed, memory_order_acquire)) return peer_closed(&c->base);
    while (x->done < x->bytes && head - tail < f->nslots) {
      uint32_t i = (uint32_t)(head % f->nslots);
      size_t n = LOOM_MIN((size_t)f->slot_bytes, x->bytes - x->done);
      cpu_copy(c->data + (size_t)i * f->slot_bytes, (const char*)x->src + x->done, n);
      f->slots[i].msg_bytes = x->bytes;
      f->slots[i].bytes = n;
      f->slots[i].offset = x->done;
      head++;
      atomic_store_explicit(&f->head, head, memory_order_release);
      x->done += n;
      moved = 1;
      if (head - tail >= f->nslots) tail = atomic_load_explicit(&f->tail, memory_order_acquire);
    }
    if (x->done < x->bytes) break;
    x->state = 1;
    conn_queue_pop(&c->base);
  }
  if (moved && c->peer_bell) bell_ring(c->peer_bell);
  return loomSuccess;
}

static loomResult_t shm_recv_progress(struct shm_conn* c) {
  struct fifo_ctrl* f = c->ctrl;
  uint64_t tail = atomic_load_explicit(&f->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&f->head, memory_order_acquire);
  int moved = 0;
  struct xfer* x;
  loomResult_t res = loomSuccess;
  while ((x = c->base.head) != NULL) {
    while (x->done < x->bytes && tail < head) {
      uint32_t i = (uint32_t)(tail % f->nslots);
      const struct fifo_slot* s = &f->slots[i];
      if (s->msg_bytes != x->bytes || s->offset != x->done || s->bytes > x->bytes - x->done) {
        res = err_set_sub(c->base.comm, SUB_SHM, loomRemoteError,
                          "peer %d sent a message of %llu bytes where this rank expected %zu: the "
                          "ranks called different operations or counts",
                          c->base.peer, (unsigned long long)s->msg_bytes, x->bytes);
        goto out;
      }
      const char* piece = c->data + (size_t)i * f->slot_bytes;
      if (x->reduce) {
        x->reduce(x, x->done, piece, s->bytes);
      } else {
        cpu_copy((char*)x->dst + x->done, piece, s->bytes);
      }
      x->done += s->bytes;
      tail++;
      atomic_store_explicit(&f->tail, tail, memory_order_release);
      moved = 1;
      if (tail == head) head = atomic_load_explicit(&f->head, memory_order_acquire);
    }
    if (x->done < x->bytes) {
      /* closed first, then head again: data posted before the close counts. */
      if (tail == head && atomic_load_explicit(&f->closed, memory_order_acquire) &&
          atomic_load_explicit(&f->head, memory_order_acquire) == tail)
        res = peer_closed(&c->base);
      break;
    }
    x->state = 1;
    conn_queue_pop(&c->base);
  }
out:
  if (moved && c->peer_bell) bell_ring(c->peer_bell);
  return res;
}

static loomResult_t shm_test(struct xfer* x, int* done_out) {
  struct shm_conn* c = (struct shm_conn*)x->conn;
  *done_out = 0;
  if (x->state == 1) {
    *done_out = 1;
    return loomSuccess;
  }
  if (!c->ctrl) {
    loomResult_t r = shm_connect_test(&c->base);
    if (r != loomSuccess) return r == loomInProgress ? loomSuccess : r;
  }
  LOOM_CHECK(c->base.is_send ? shm_send_progress(c) : shm_recv_progress(c));
  *done_out = x->state == 1;
  return loomSuccess;
}

static loomResult_t shm_close(struct conn* base) {
  struct shm_conn* c = (struct shm_conn*)base;
  /* Data sent but not yet collected by a receiver that has not attached yet
   * must stay reachable: leave a name for the receiver, which unlinks it
   * when it attaches (or, if it never does, when its communicator goes). */
  int keep = 0;
  if (c->ctrl) {
    keep = base->is_send && !atomic_load(&c->ctrl->attached) &&
           atomic_load(&c->ctrl->head) != atomic_load(&c->ctrl->tail);
    /* A peer still waiting on this FIFO learns that nothing more will come. */
    atomic_store(&c->ctrl->closed, 1);
    if (c->peer_bell) bell_ring(c->peer_bell);
  }
  if (!c->named && c->fd >= 0) {
    /* Named before the descriptor goes, so that a receiver finds one or the
     * other; one that attached meanwhile may have missed the name: then it
     * is this side's to remove. */
    if (keep && shmfile_name(c->fd, c->name) == 0 && atomic_load(&c->ctrl->attached))
      shm_unlink(c->name);
    fd_release(c);
  } else if (c->named && !keep) {
    shm_unlink(c->name);
  }
  if (c->ctrl) munmap(c->ctrl, c->map_bytes);
  if (base->is_send && c->ctrl) memstat_sub(base->comm, MEM_FIFO, base->peer, c->map_bytes);
  memstat_sub(base->comm, MEM_CONN, base->peer, sizeof(*c));
  free(c);
  return loomSuccess;
}

/* Forgets what is queued (after a failure): nothing here points into user
 * memory once queued data has been copied, so the queue is simply dropped. */
static loomResult_t shm_cancel(struct conn* base) {
  base->head = base->tail = NULL;
  return loomSuccess;
}

static loomResult_t shm_fifo_describe(struct conn* base, struct fifo_desc* out) {
  struct shm_conn* c = (struct shm_conn*)base;
  if (!c->ctrl) return loomInProgress;
  *out = (struct fifo_desc){c->ctrl->slots,  c->data,          &c->ctrl->head,
                            &c->ctrl->tail,  &c->ctrl->closed, c->ctrl->slot_bytes,
                            c->ctrl->nslots, MEM_HOST,         c->peer_bell};
  return loomSuccess;
}

/* Names of FIFOs into this rank are its to remove (named mode: left by a
 * sender that closed first; unnamed mode: escape names); those out of it
 * too when the communicator failed (their receiver may be dead). */
static void shm_comm_fini(struct loom_comm* comm, int failed) {
  if (!comm->peers || !comm->tp) return;
  int named = tp_shm_named(comm);
  for (int p = 0; p < comm->nranks; p++) {
    if (comm->peers[p].host_id != comm->peers[comm->rank].host_id) continue;
    for (int lane = 0; lane < LANE_COUNT; lane++) {
      char name[96];
      for (int out = 0; out < 1 + failed; out++) {
        int src = out ? comm->rank : p, dst = out ? p : comm->rank;
        if (named)
          fifo_name(comm, src, dst, lane, name, sizeof(name));
        else
          escape_name(comm, src, dst, lane, name, sizeof(name));
        shm_unlink(name);
      }
    }
  }
}

const struct loom_transport loom_transport_shm = {
    .size = sizeof(struct loom_transport),
    .name = "shm",
    .caps = {.mem_kinds = MEM_KIND_BIT(MEM_HOST), .rendezvous = 0, .fused_reduce = 1},
    .can_connect = shm_can_connect,
    .connect = shm_connect,
    .connect_test = shm_connect_test,
    .send_post = shm_post,
    .recv_post = shm_post,
    .test = shm_test,
    .cancel = shm_cancel,
    .close = shm_close,
    .comm_init = tp_comm_init_none,
    .comm_fini = shm_comm_fini,
    .idle = tp_idle_none,
    .mem_reg = tp_mem_reg_none,
    .mem_dereg = tp_mem_dereg_none,
    .fifo_describe = shm_fifo_describe,
};
