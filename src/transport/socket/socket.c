/* socket.c - ranks on different hosts (or any ranks, with
 * LOOM_TRANSPORTS=socket): TCP streams progressed by the executor while it
 * polls and by the communicator's progress engine while it sleeps
 * (socket_net.c, socket_stream.c; the design is in socket.h).
 *
 * This file is what the executor calls. Posting puts the transfer in the
 * connection's message ring and, once the connection is up, moves what it
 * can at once (before that, it kicks the engine's thread); test() reads the
 * connection's atomic completion count and, while the transfer is not done,
 * progresses the connection when its lock is free. At init every rank opens one listening socket
 * for the communicator and all ranks exchange its address; the two directions between two ranks
 * share the streams of one link per lane (socket.h). */
#include "transport/socket/socket.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/checks.h"
#include "core/params.h"

#define SOCK_RING_FIRST 16

static struct sock_comm* sock_comm_of(struct loom_comm* comm) {
  return *tp_comm_state(comm, &loom_transport_socket);
}

/* ---- Helpers for the engine's thread ------------------------------------------ */

void sock_wake_rank(struct sock_comm* sc) {
  bell_ring(tp_self_bell(sc->comm));
}

static void why_vset(struct sock_conn* c, const char* fmt, va_list ap) {
  if (c->why[0] != '\0') return; /* the first cause stays */
  vsnprintf(c->why, sizeof(c->why), fmt, ap);
}

void sock_conn_break(struct sock_conn* c, loomResult_t code, const char* fmt, ...) {
  if (atomic_load_explicit(&c->broken, memory_order_relaxed)) return;
  sock_conn_retire(c); /* what is complete stays complete */
  va_list ap;
  va_start(ap, fmt);
  why_vset(c, fmt, ap);
  va_end(ap);
  c->code = code;
  atomic_store_explicit(&c->broken, 1, memory_order_release);
  LOOM_INFO(SUB_NET, "rank %d: socket connection %s peer %d (%s lane) broke: %s",
            c->base.comm->rank, c->base.is_send ? "to" : "from", c->base.peer,
            sock_lane_name(c->base.lane), c->why);
  sock_wake_rank(c->sc);
}

void sock_conn_peer_gone(struct sock_conn* c, const char* fmt, ...) {
  if (c->peer_gone) return;
  c->peer_gone = 1;
  va_list ap;
  va_start(ap, fmt);
  why_vset(c, fmt, ap);
  va_end(ap);
  /* Nothing pending: a peer that leaves after the last message is no error. */
  sock_conn_retire(c);
  if (c->head != c->tail) sock_conn_break(c, loomRemoteError, "%s", c->why);
}

void sock_conn_retire(struct sock_conn* c) {
  uint64_t h = c->head;
  while (h < c->tail) {
    const struct sock_msg* m = &c->ring[h & (c->cap - 1)];
    if (m->nframes == 0 || m->frames_done < m->nframes) break;
    h++;
  }
  if (h == c->head) return;
  c->head = h;
  atomic_store_explicit(&c->completed, h, memory_order_release);
  sock_wake_rank(c->sc);
}

void sock_conn_kick(struct sock_conn* c) {
  if (atomic_exchange(&c->queued, 1)) return; /* already on the list */
  struct sock_comm* sc = c->sc;
  pthread_mutex_lock(&sc->lock);
  c->next_dirty = sc->dirty_list;
  sc->dirty_list = c;
  pthread_mutex_unlock(&sc->lock);
  progress_wake(sc->engine);
}

void sock_conn_free(struct sock_conn* c) {
  struct loom_comm* comm = c->base.comm;
  for (int i = 0; i < SOCK_MAX_STREAMS; i++) { /* the sockets are its link's */
    if (c->streams[i].bounce) memstat_sub(comm, MEM_STAGING, c->base.peer, sock_bounce_bytes(c));
    free(c->streams[i].bounce);
    if (c->streams[i].rbuf) memstat_sub(comm, MEM_STAGING, c->base.peer, SOCK_RBUF_BYTES);
    free(c->streams[i].rbuf);
  }
  pthread_mutex_destroy(&c->lock);
  memstat_sub(comm, MEM_CONN, c->base.peer, sizeof(*c) + c->cap * sizeof(*c->ring));
  free(c->ring);
  free(c);
}

/* ---- The table -------------------------------------------------------------- */

/* Sockets reach every rank; the order of the transports (socket last) keeps
 * local and shm the choice where they can serve. */
static loomResult_t socket_can_connect(const struct peer_info* self, const struct peer_info* peer,
                                       int* ok_out) {
  *ok_out = 1;
  return loomSuccess;
}

static loomResult_t socket_connect(struct loom_comm* comm, int peer, int is_send, int lane,
                                   struct conn** out) {
  struct sock_comm* sc = sock_comm_of(comm);
  if (sc == NULL)
    return err_set_sub(comm, SUB_NET, loomInternalError,
                       "the socket transport was not set up for this communicator "
                       "(LOOM_TRANSPORTS must be the same on every rank)");
  struct sock_conn* c = calloc(1, sizeof(*c));
  struct sock_msg* ring = calloc(SOCK_RING_FIRST, sizeof(*ring));
  if (c == NULL || ring == NULL) {
    free(c);
    free(ring);
    return err_set(comm, loomSystemError, "out of memory for a socket connection");
  }
  c->base.tp = &loom_transport_socket;
  c->base.comm = comm;
  c->base.peer = peer;
  c->base.is_send = is_send;
  c->base.lane = lane;
  c->sc = sc;
  c->ring = ring;
  c->cap = SOCK_RING_FIRST;
  memstat_add(comm, MEM_CONN, peer, sizeof(*c) + c->cap * sizeof(*c->ring));
  for (int i = 0; i < SOCK_MAX_STREAMS; i++) {
    c->streams[i].conn = c;
    c->streams[i].index = i;
    c->streams[i].fd = -1;
    c->streams[i].frame = -1;
  }
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_lock(&sc->lock);
  /* Under the lock: the engine's fail callback breaks what is on the list. */
  if (atomic_load_explicit(&sc->engine_failed, memory_order_acquire))
    sock_conn_break(c, loomSystemError, "no connection to peer %d: %s", peer, sc->engine_why);
  c->next_new = sc->new_list;
  sc->new_list = c;
  pthread_mutex_unlock(&sc->lock);
  progress_wake(sc->engine);
  *out = &c->base;
  return loomSuccess;
}

static loomResult_t socket_connect_test(struct conn* base) {
  struct sock_conn* c = (struct sock_conn*)base;
  if (atomic_load_explicit(&c->broken, memory_order_acquire))
    return err_set_sub(base->comm, SUB_NET, c->code, "%s", c->why);
  return atomic_load_explicit(&c->up, memory_order_acquire) ? loomSuccess : loomInProgress;
}

/* Doubles the ring, keeping every message at its sequence's slot. Under
 * c->lock. */
static int ring_grow(struct sock_conn* c) {
  uint64_t cap = c->cap * 2;
  struct sock_msg* ring = calloc(cap, sizeof(*ring));
  if (ring == NULL) return -1;
  for (uint64_t s = c->head; s < c->tail; s++) ring[s & (cap - 1)] = c->ring[s & (c->cap - 1)];
  memstat_add(c->base.comm, MEM_CONN, c->base.peer, (cap - c->cap) * sizeof(*ring));
  free(c->ring);
  c->ring = ring;
  c->cap = cap;
  return 0;
}

/* The executor may move bytes itself (under c->lock) once every stream is
 * up: from then on streams change state only under the lock. */
static int conn_inline_ok(struct sock_conn* c) {
  return atomic_load_explicit(&c->up, memory_order_acquire) && !c->dead &&
         !atomic_load_explicit(&c->broken, memory_order_relaxed);
}

static int msg_done(struct sock_conn* c, const struct xfer* x) {
  uint64_t completed = atomic_load_explicit(&c->completed, memory_order_acquire);
  return (int32_t)((uint32_t)completed - x->slot) > 0;
}

static loomResult_t socket_post(struct conn* base, struct xfer* x) {
  struct sock_conn* c = (struct sock_conn*)base;
  progress_exec_polls(c->sc->engine); /* the executor is at the sockets (until tp_idle) */
  x->conn = base;
  x->next = NULL;
  x->done = 0;
  x->state = 0;
  pthread_mutex_lock(&c->lock);
  if (c->dead) {
    pthread_mutex_unlock(&c->lock);
    return err_set_sub(base->comm, SUB_NET, loomInvalidUsage,
                       "the socket connection %s peer %d was cancelled after an error",
                       base->is_send ? "to" : "from", base->peer);
  }
  if (c->tail - c->head == c->cap && ring_grow(c) != 0) {
    pthread_mutex_unlock(&c->lock);
    return err_set(base->comm, loomSystemError, "out of memory for socket messages");
  }
  struct sock_msg* m = &c->ring[c->tail & (c->cap - 1)];
  memset(m, 0, sizeof(*m));
  m->x = x;
  if (base->is_send) {
    size_t chunk = c->sc->chunk;
    m->nframes = x->bytes == 0 ? 1 : (uint32_t)LOOM_DIV_UP(x->bytes, chunk);
    if (c->nstreams > 0) { /* else dealt when the link is up (the streams are counted then) */
      m->first = c->rr;
      c->rr = (uint32_t)((c->rr + m->nframes) % (uint32_t)c->nstreams);
    }
  }
  x->slot = (uint32_t)c->tail;
  c->tail++;
  if (c->peer_gone) sock_conn_break(c, loomRemoteError, "%s", c->why);
  /* Once every stream is up, the poster moves what it can at once: a small
   * message goes out (or, posted late, comes in) without waking the
   * engine's thread. What is left, the thread finishes on the socket's next
   * edge, as every mover reads and writes until the socket says EAGAIN. */
  int inline_ok = conn_inline_ok(c);
  if (inline_ok) sock_stream_progress(c);
  pthread_mutex_unlock(&c->lock);
  if (!inline_ok) sock_conn_kick(c);
  return loomSuccess;
}

static loomResult_t socket_test(struct xfer* x, int* done_out) {
  struct sock_conn* c = (struct sock_conn*)x->conn;
  if (x->state == 1) {
    *done_out = 1;
    return loomSuccess;
  }
  int done = msg_done(c, x);
  if (!done) progress_exec_polls(c->sc->engine);
  /* A waiting executor polls the sockets itself (when the engine's thread is
   * not at them): no hand-off between threads on the way in. */
  if (!done && atomic_load_explicit(&c->up, memory_order_acquire) &&
      pthread_mutex_trylock(&c->lock) == 0) {
    if (conn_inline_ok(c)) sock_stream_progress(c);
    pthread_mutex_unlock(&c->lock);
    done = msg_done(c, x);
  }
  if (done) {
    x->done = x->bytes;
    x->state = 1;
    *done_out = 1;
    return loomSuccess;
  }
  *done_out = 0;
  if (atomic_load_explicit(&c->broken, memory_order_acquire))
    return err_set_sub(c->base.comm, SUB_NET, c->code, "%s", c->why);
  return loomSuccess;
}

/* The engine's thread moves bytes only under c->lock and only for a live
 * connection: once dead is set under the lock, no buffer of a posted
 * transfer is touched again. */
static loomResult_t socket_cancel(struct conn* base) {
  struct sock_conn* c = (struct sock_conn*)base;
  pthread_mutex_lock(&c->lock);
  c->dead = 1;
  pthread_mutex_unlock(&c->lock);
  return loomSuccess;
}

/* The engine's thread closes the sockets and frees the connection, after
 * the events it may still hold for it. */
static loomResult_t socket_close(struct conn* base) {
  struct sock_conn* c = (struct sock_conn*)base;
  struct sock_comm* sc = c->sc;
  socket_cancel(base);
  pthread_mutex_lock(&sc->lock);
  c->next_closing = sc->closing_list;
  sc->closing_list = c;
  pthread_mutex_unlock(&sc->lock);
  progress_wake(sc->engine);
  return loomSuccess;
}

/* ---- Per communicator ------------------------------------------------------- */

/* The interface: LOOM_SOCKET_IFNAME's, else the one this rank reaches rank 0
 * by (so the data goes where the bootstrap found a route). */
static loomResult_t listen_addr_pick(struct loom_comm* comm, union sock_addr* addr_out) {
  char ifname[64] = "";
  if (params_get()->socket_ifname[0] != '\0' || boot_route_addr(comm, addr_out) != 0)
    LOOM_CHECK(sock_if_pick(addr_out, ifname, sizeof(ifname)));
  if (addr_out->sa.sa_family == AF_INET)
    addr_out->sin.sin_port = 0;
  else
    addr_out->sin6.sin6_port = 0;
  return loomSuccess;
}

static loomResult_t listen_open(struct sock_comm* sc, union sock_addr* addr) {
  struct loom_comm* comm = sc->comm;
  char text[SOCK_ADDR_STRLEN];
  LOOM_CHECK(listen_addr_pick(comm, addr));
  sock_addr_str(addr, text, sizeof(text));
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return err_set_sub(comm, SUB_NET, loomSystemError, "socket() for %s failed: %s", text,
                       strerror(errno));
  socklen_t len = sizeof(*addr);
  if (sc->bufsize > 0) { /* accepted streams inherit it; before listen, for the window scale */
    int b = (int)sc->bufsize;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
  }
  const char* call = "bind";
  if (bind(fd, &addr->sa, sock_addr_len(addr)) != 0) goto fail;
  call = "listen";
  if (listen(fd, SOMAXCONN) != 0) goto fail;
  call = "getsockname";
  if (getsockname(fd, &addr->sa, &len) != 0) goto fail;
  sc->listen_fd = fd;
  /* The tests read the port from this line. */
  LOOM_INFO(SUB_NET, "rank %d: socket transport listening on %s (%d streams, chunks of %zu bytes)",
            comm->rank, sock_addr_str(addr, text, sizeof(text)), sc->nstreams, sc->chunk);
  return loomSuccess;
fail:;
  int e = errno;
  close(fd);
  return err_set_sub(comm, SUB_NET, loomSystemError, "%s on %s for the socket transport failed: %s",
                     call, text, strerror(e));
}

static loomResult_t socket_comm_init(struct loom_comm* comm, int used) {
  if (!used) return loomSuccess;
  const struct loom_params* pm = params_get();
  struct sock_comm* sc = calloc(1, sizeof(*sc));
  if (sc == NULL) return err_set(comm, loomSystemError, "out of memory");
  sc->comm = comm;
  sc->listen_fd = -1;
  pthread_mutex_init(&sc->lock, NULL);
  *tp_comm_state(comm, &loom_transport_socket) = sc; /* comm_fini frees it on any failure */
  sc->secret = boot_secret(comm);
  sc->nstreams = (int)LOOM_MIN(LOOM_MAX(pm->socket_nstreams, 1), SOCK_MAX_STREAMS);
  sc->chunk =
      LOOM_ALIGN_UP(LOOM_MIN(LOOM_MAX(pm->socket_chunk, (size_t)4096), (size_t)64 << 20), 64);
  sc->bufsize = LOOM_MIN(pm->socket_bufsize, (size_t)1 << 30);
  sc->addrs = calloc((size_t)comm->nranks, sizeof(*sc->addrs));
  sc->links = calloc((size_t)comm->nranks * LANE_COUNT, sizeof(*sc->links));
  if (sc->addrs == NULL || sc->links == NULL)
    return err_set(comm, loomSystemError, "out of memory");
  union sock_addr mine;
  memset(&mine, 0, sizeof(mine));
  LOOM_CHECK(listen_open(sc, &mine));
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  LOOM_CHECK(boot_allgather(comm, &mine, sizeof(mine), sc->addrs, &dl));
  return sock_net_start(sc);
}

static void socket_comm_fini(struct loom_comm* comm, int failed) {
  void** slot = tp_comm_state(comm, &loom_transport_socket);
  struct sock_comm* sc = *slot;
  if (sc == NULL) return;
  sock_net_stop(sc);
  if (sc->listen_fd >= 0) close(sc->listen_fd);
  pthread_mutex_destroy(&sc->lock);
  free(sc->addrs);
  free(sc->links);
  free(sc);
  *slot = NULL;
}

const struct loom_transport loom_transport_socket = {
    .size = sizeof(struct loom_transport),
    .name = "socket",
    .caps = {.mem_kinds = MEM_KIND_BIT(MEM_HOST), .rendezvous = 0, .fused_reduce = 1},
    .sees_close = 1,
    .can_connect = socket_can_connect,
    .connect = socket_connect,
    .connect_test = socket_connect_test,
    .send_post = socket_post,
    .recv_post = socket_post,
    .test = socket_test,
    .cancel = socket_cancel,
    .close = socket_close,
    .comm_init = socket_comm_init,
    .comm_fini = socket_comm_fini,
    .idle = tp_idle_none, /* the progress engine's hand-over (tp_idle) covers it */
    .mem_reg = tp_mem_reg_none,
    .mem_dereg = tp_mem_dereg_none,
    .fifo_describe = tp_fifo_describe_none,
};
