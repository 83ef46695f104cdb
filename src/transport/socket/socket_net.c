/* socket_net.c - the socket transport as a client of the communicator's
 * progress engine (transport/progress.h): the engine watches the listener
 * (through the accept set) and every stream, and calls back here on its
 * thread; the executor hands over new connections, posted transfers and
 * closed connections through three lists and the engine's wake-up.
 *
 * An engine round: the callbacks of the descriptors with events (accepting,
 * a stream's event adds its connection to the round's batch), then
 * sock_net_progress: the executor's lists, then progress every connection
 * of the batch, then timers; connections closed by the executor are freed
 * last. The engine waits until the accept set's next deadline, at most
 * SOCK_TICK_MS while a connect retries (the timeout sock_net_progress asks
 * for).
 *
 * Accepting never blocks the thread: the listener's connections belong to
 * an accept set (core/accept.h) until their hello is through, which reads
 * each hello without blocking, bounds how many wait and for how long
 * (SOCK_HELLO_MS), and evicts the silent when full or near the descriptor
 * limit. Whatever is not a correct hello for this communicator and rank
 * (garbage, a wrong secret, an unknown rank, silence) costs a close and a
 * WARN line under the set's rate limit; the communicator never sees it. */
#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/checks.h"
#include "transport/socket/socket.h"

#define SOCK_TICK_MS 10

static void batch_add(struct sock_comm* sc, struct sock_conn* c) {
  if (c->in_batch) return;
  c->in_batch = 1;
  c->next_batch = sc->batch;
  sc->batch = c;
}

static void stream_on_event(void* arg, unsigned events, int err);

/* The engine watches s (its fd set) from now on. Returns 0 or the errno. */
static int stream_watch(struct sock_comm* sc, struct sock_conn* c, struct sock_stream* s) {
  return progress_fd_add(sc->client, s->fd, sock_stream_events(c), stream_on_event, s, &s->watch);
}

/* Before s's fd is closed. After the client left the engine, the handles
 * are gone already. */
static void stream_unwatch(struct sock_comm* sc, struct sock_stream* s) {
  if (s->watch != NULL && sc->client != NULL) progress_fd_del(s->watch);
  s->watch = NULL;
}

/* ---- Accepting --------------------------------------------------------------- */

static void parked_unlink(struct sock_comm* sc, struct sock_pending* p) {
  for (struct sock_pending** pp = &sc->parked; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
}

/* Refuses a connection whose hello was complete (p is off the list). */
static void pending_drop(struct sock_comm* sc, struct sock_pending* p, const char* why) {
  accept_set_refuse(sc->accept, p->fd, &p->addr, why);
  free(p);
}

const char* sock_hello_problem(const struct sock_hello* h, uint64_t secret, uint64_t comm_hash,
                               int nranks, int self, char* buf, size_t len) {
  if (h->magic != SOCK_HELLO_MAGIC) return "not a Loom socket hello (garbage, or another program)";
  if (h->version != SOCK_WIRE_VERSION || h->bytes != sizeof(*h)) {
    snprintf(buf, len, "wire version %u (%u bytes); this rank speaks version %u", h->version,
             h->bytes, SOCK_WIRE_VERSION);
    return buf;
  }
  if (h->secret != secret) return "wrong secret";
  if (h->comm_hash != comm_hash) return "it belongs to another communicator";
  if (h->src < 0 || h->src >= nranks) {
    snprintf(buf, len, "unknown rank %d (the communicator has %d)", h->src, nranks);
    return buf;
  }
  if (h->dst != self) {
    snprintf(buf, len, "rank %d meant to reach rank %d, not this one", h->src, h->dst);
    return buf;
  }
  if (h->lane >= LANE_COUNT || h->nstreams < 1 || h->nstreams > SOCK_MAX_STREAMS ||
      h->stream >= h->nstreams) {
    snprintf(buf, len, "rank %d sent lane %u, stream %u of %u", h->src, h->lane, h->stream,
             h->nstreams);
    return buf;
  }
  return NULL;
}

/* Makes a checked connection (off the parked list) a stream of c. Returns
 * why not, or NULL. */
static const char* stream_attach(struct sock_comm* sc, struct sock_conn* c, struct sock_pending* p,
                                 char* buf, size_t len) {
  const struct sock_hello* h = &p->hello;
  const char* why = NULL;
  pthread_mutex_lock(&c->lock);
  if (c->dead)
    why = "its connection was already closed";
  else if (c->nstreams != 0 && c->nstreams != h->nstreams) {
    snprintf(buf, len, "rank %d announced %u streams, its earlier streams %d", h->src, h->nstreams,
             c->nstreams);
    why = buf;
  } else if (c->streams[h->stream].fd >= 0) {
    snprintf(buf, len, "rank %d opened stream %u twice", h->src, h->stream);
    why = buf;
  }
  if (why == NULL) {
    struct sock_stream* s = &c->streams[h->stream];
    c->nstreams = h->nstreams;
    s->fd = p->fd;
    s->state = ST_UP;
    if (++c->nup == c->nstreams) {
      atomic_store_explicit(&c->up, 1, memory_order_release);
      sock_wake_rank(sc);
    }
  }
  pthread_mutex_unlock(&c->lock);
  if (why != NULL) return why;
  struct sock_stream* s = &c->streams[h->stream];
  free(p); /* and h with it */
  int err = stream_watch(sc, c, s);
  if (err != 0) {
    pthread_mutex_lock(&c->lock);
    sock_conn_break(c, loomSystemError, "cannot watch socket stream %d from peer %d (%s lane): %s",
                    s->index, c->base.peer, sock_lane_name(c->base.lane), strerror(err));
    pthread_mutex_unlock(&c->lock);
  }
  return NULL;
}

/* A complete hello: check it, then attach or park. */
static void hello_done(struct sock_comm* sc, struct sock_pending* p) {
  char buf[160];
  const char* why = sock_hello_problem(&p->hello, sc->secret, sc->comm->comm_hash, sc->comm->nranks,
                                       sc->comm->rank, buf, sizeof(buf));
  if (why != NULL) {
    pending_drop(sc, p, why);
    return;
  }
  const struct sock_hello* h = &p->hello;
  struct sock_conn* c =
      sc->recv_by_key[(size_t)h->lane * (size_t)sc->comm->nranks + (size_t)h->src];
  if (c != NULL) {
    why = stream_attach(sc, c, p, buf, sizeof(buf));
    if (why != NULL)
      pending_drop(sc, p, why);
    else
      batch_add(sc, c); /* data may be waiting already */
    return;
  }
  for (struct sock_pending* q = sc->parked; q; q = q->next)
    if (q->hello.src == h->src && q->hello.lane == h->lane && q->hello.stream == h->stream) {
      snprintf(buf, sizeof(buf), "rank %d opened %s stream %u twice", h->src,
               sock_lane_name(h->lane), h->stream);
      pending_drop(sc, p, buf);
      return;
    }
  p->next = sc->parked; /* until this rank makes its receiving connection */
  sc->parked = p;
}

/* The accept set has a complete hello (accept_hello_fn). */
static void hello_arrived(void* arg, int fd, const union sock_addr* addr, const void* hello,
                          size_t len) {
  struct sock_comm* sc = arg;
  struct sock_pending* p = calloc(1, sizeof(*p));
  if (p == NULL) return accept_set_refuse(sc->accept, fd, addr, "out of memory");
  p->fd = fd;
  p->addr = *addr;
  memcpy(&p->hello, hello, LOOM_MIN(len, sizeof(p->hello)));
  hello_done(sc, p);
}

/* A hello is a fixed 40 bytes; its fields are checked once it is whole. */
static long hello_len(const void* buf, size_t got, char* why, size_t why_len) {
  return (long)sizeof(struct sock_hello);
}

static void net_accept(struct sock_comm* sc) {
  accept_set_run(sc->accept, hello_arrived, sc);
}

/* The accept set's descriptor has work (an engine callback). */
static void accept_on_event(void* arg, unsigned events, int err) {
  net_accept(arg);
}

/* ---- Connecting (senders) ---------------------------------------------------- */

static void stream_tune(const struct sock_comm* sc, int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* frames are latency-bound */
  if (sc->bufsize > 0) {
    int b = (int)sc->bufsize;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
  }
}

static void connecting_done(struct sock_comm* sc, struct sock_conn* c) {
  if (!c->connecting) return;
  c->connecting = 0;
  sc->nconnecting--;
}

/* A connect attempt failed with err: retry later, or give up. */
static void connect_failed(struct sock_comm* sc, struct sock_conn* c, struct sock_stream* s,
                           int err) {
  char text[SOCK_ADDR_STRLEN];
  sock_addr_str(&sc->addrs[c->base.peer], text, sizeof(text));
  stream_unwatch(sc, s);
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  pthread_mutex_lock(&c->lock);
  if (sock_connect_retryable(err) && !deadline_passed(&c->connect_dl)) {
    s->state = ST_RETRY;
    s->backoff_ms =
        s->backoff_ms ? LOOM_MIN(2 * s->backoff_ms, SOCK_BACKOFF_MAX_MS) : SOCK_BACKOFF_FIRST_MS;
    s->retry_at_ns = time_now_ns() + (uint64_t)s->backoff_ms * 1000000u;
  } else if (sock_connect_retryable(err)) {
    sock_conn_break(c, loomTimeout, "could not connect to peer %d at %s within %lld ms (%s)",
                    c->base.peer, text, c->base.comm->timeout_ms, strerror(err));
  } else {
    sock_conn_break(c, loomSystemError, "connect to peer %d at %s failed: %s", c->base.peer, text,
                    strerror(err));
  }
  pthread_mutex_unlock(&c->lock);
}

static void stream_connect(struct sock_comm* sc, struct sock_conn* c, struct sock_stream* s) {
  const union sock_addr* a = &sc->addrs[c->base.peer];
  int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    connect_failed(sc, c, s, errno);
    return;
  }
  stream_tune(sc, fd);
  s->fd = fd;
  s->state = ST_CONNECTING;
  if (connect(fd, &a->sa, sock_addr_len(a)) != 0 && errno != EINPROGRESS) {
    connect_failed(sc, c, s, errno);
    return;
  }
  /* Edge-triggered: the first edge says the connect finished (or failed). */
  int err = stream_watch(sc, c, s);
  if (err != 0) connect_failed(sc, c, s, err);
}

static void connect_finish(struct sock_comm* sc, struct sock_conn* c, struct sock_stream* s) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err == EINPROGRESS || err == EALREADY) return;
  if (err != 0) {
    connect_failed(sc, c, s, err);
    return;
  }
  pthread_mutex_lock(&c->lock);
  s->state = ST_UP;
  sock_stream_hello_init(c, s);
  if (++c->nup == c->nstreams) {
    connecting_done(sc, c);
    atomic_store_explicit(&c->up, 1, memory_order_release);
    sock_wake_rank(sc);
  }
  pthread_mutex_unlock(&c->lock);
  batch_add(sc, c); /* the hello, and what is posted already */
}

/* A receiver never writes: anything readable on a sender's stream is its
 * close (or a broken peer). */
static void send_stream_probe(struct sock_conn* c, struct sock_stream* s) {
  char b;
  ssize_t n;
  do {
    n = recv(s->fd, &b, 1, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  pthread_mutex_lock(&c->lock);
  if (n > 0)
    sock_conn_break(c, loomRemoteError, "peer %d wrote on a socket stream it only reads from",
                    c->base.peer);
  else
    sock_conn_peer_gone(c,
                        "peer %d closed its socket connection (%s lane, stream %d: %s): it "
                        "aborted, failed or was destroyed",
                        c->base.peer, sock_lane_name(c->base.lane), s->index,
                        n == 0 ? "end of stream" : strerror(errno));
  pthread_mutex_unlock(&c->lock);
}

unsigned sock_stream_events(const struct sock_conn* c) {
  return PROGRESS_IN | PROGRESS_RDHUP | PROGRESS_EDGE | (c->base.is_send ? PROGRESS_OUT : 0);
}

/* A stream's event, on the engine's thread. While the executor polls, an
 * event on an up stream parks the stream (the engine's idle hand-over),
 * once per polling period, rather than waking this thread (and taking a
 * core from a polling rank) for every message. */
static void stream_on_event(void* arg, unsigned events, int err) {
  struct sock_stream* s = arg;
  struct sock_conn* c = s->conn;
  struct sock_comm* sc = c->sc;
  if (err != 0) { /* the engine could not watch it again: nothing would move it */
    pthread_mutex_lock(&c->lock);
    sock_conn_break(
        c, loomSystemError, "lost the watch on socket stream %d %s peer %d (%s lane): %s", s->index,
        c->base.is_send ? "to" : "from", c->base.peer, sock_lane_name(c->base.lane), strerror(err));
    pthread_mutex_unlock(&c->lock);
    return;
  }
  /* Once every stream is up, states change only under c->lock (the executor
   * moves bytes too): progress looks at them there. */
  int up = atomic_load_explicit(&c->up, memory_order_acquire);
  if (!up && s->state == ST_CONNECTING) {
    connect_finish(sc, c, s);
    return;
  }
  if (!up && s->state != ST_UP) return;
  /* The executor only writes a sender's stream: the peer's close is seen
   * here, also while the executor polls. */
  if (c->base.is_send && (events & (PROGRESS_IN | PROGRESS_RDHUP | PROGRESS_HUP | PROGRESS_ERR)))
    send_stream_probe(c, s);
  /* Parked, edge-triggered, only the peer's close (and hang-ups and errors,
   * always reported): a sender's stream is probed for it above, a
   * receiver's executor reads it anyway. */
  if (up && progress_fd_park(s->watch, PROGRESS_EDGE | PROGRESS_RDHUP)) return;
  batch_add(sc, c);
}

/* ---- The executor's lists ------------------------------------------------------- */

static void conn_adopt(struct sock_comm* sc, struct sock_conn* c) {
  c->next_all = sc->all;
  c->prev_all = NULL;
  if (sc->all) sc->all->prev_all = c;
  sc->all = c;
  if (c->base.is_send) {
    c->connecting = 1;
    sc->nconnecting++;
    for (int i = 0; i < c->nstreams; i++) stream_connect(sc, c, &c->streams[i]);
    return;
  }
  sc->recv_by_key[(size_t)c->base.lane * (size_t)sc->comm->nranks + (size_t)c->base.peer] = c;
  for (struct sock_pending *p = sc->parked, *next; p; p = next) {
    next = p->next;
    if (p->hello.src != c->base.peer || p->hello.lane != c->base.lane) continue;
    parked_unlink(sc, p);
    char buf[160];
    const char* why = stream_attach(sc, c, p, buf, sizeof(buf));
    if (why != NULL) pending_drop(sc, p, why);
  }
  batch_add(sc, c);
}

static void conn_release(struct sock_comm* sc, struct sock_conn* c) {
  if (c->prev_all)
    c->prev_all->next_all = c->next_all;
  else if (sc->all == c)
    sc->all = c->next_all;
  if (c->next_all) c->next_all->prev_all = c->prev_all;
  connecting_done(sc, c);
  size_t key = (size_t)c->base.lane * (size_t)sc->comm->nranks + (size_t)c->base.peer;
  if (!c->base.is_send && sc->recv_by_key[key] == c) sc->recv_by_key[key] = NULL;
  for (int i = 0; i < SOCK_MAX_STREAMS; i++) stream_unwatch(sc, &c->streams[i]);
  sock_conn_free(c);
}

/* ---- Timers --------------------------------------------------------------------- */

static void net_timers(struct sock_comm* sc) {
  if (sc->nconnecting == 0) return;
  uint64_t now = time_now_ns();
  for (struct sock_conn* c = sc->all; c; c = c->next_all) {
    if (!c->connecting) continue;
    if (atomic_load(&c->broken) || c->dead) {
      connecting_done(sc, c);
      continue;
    }
    for (int i = 0; i < c->nstreams; i++) {
      struct sock_stream* s = &c->streams[i];
      if (s->state == ST_RETRY && now >= s->retry_at_ns)
        stream_connect(sc, c, s);
      else if (s->state == ST_CONNECTING && deadline_passed(&c->connect_dl))
        connect_failed(sc, c, s, ETIMEDOUT);
    }
  }
}

/* ---- The engine's rounds ------------------------------------------------------- */

static void progress_batch(struct sock_comm* sc) {
  struct sock_conn* batch = sc->batch;
  sc->batch = NULL;
  for (struct sock_conn *c = batch, *next; c; c = next) {
    next = c->next_batch;
    c->in_batch = 0;
    pthread_mutex_lock(&c->lock);
    if (!c->dead && !atomic_load_explicit(&c->broken, memory_order_relaxed))
      sock_stream_progress(c);
    pthread_mutex_unlock(&c->lock);
  }
}

/* The client's progress (progress_client_ops), after the round's events.
 * Its movers go until the sockets say EAGAIN, and the next edge brings the
 * rest: it never asks for another round at once. */
static loomResult_t sock_net_progress(void* arg, int* moved_out, int* timeout_ms_out) {
  struct sock_comm* sc = arg;
  pthread_mutex_lock(&sc->lock);
  struct sock_conn* fresh = sc->new_list;
  struct sock_conn* dirty = sc->dirty_list;
  struct sock_conn* closing = sc->closing_list;
  sc->new_list = sc->dirty_list = sc->closing_list = NULL;
  pthread_mutex_unlock(&sc->lock);
  for (struct sock_conn *c = fresh, *next; c; c = next) {
    next = c->next_new;
    conn_adopt(sc, c);
  }
  for (struct sock_conn *c = dirty, *next; c; c = next) {
    next = c->next_dirty;
    atomic_store(&c->queued, 0); /* a post from here on queues it again */
    batch_add(sc, c);
  }
  if (accept_set_timeout_ms(sc->accept) == 0) net_accept(sc); /* its deadlines */
  progress_batch(sc);
  net_timers(sc);
  /* Last: nothing of this round names them any more. */
  for (struct sock_conn *c = closing, *next; c; c = next) {
    next = c->next_closing;
    conn_release(sc, c);
  }
  int timeout = accept_set_timeout_ms(sc->accept);
  if (sc->nconnecting > 0 && (timeout < 0 || timeout > SOCK_TICK_MS)) timeout = SOCK_TICK_MS;
  *moved_out = 0;
  *timeout_ms_out = timeout;
  return loomSuccess;
}

/* The engine stopped for good: every connection fails, naming its peer. */
static void sock_net_fail(void* arg, const char* why) {
  struct sock_comm* sc = arg;
  pthread_mutex_lock(&sc->lock);
  snprintf(sc->engine_why, sizeof(sc->engine_why), "the network progress engine stopped (%s)", why);
  atomic_store_explicit(&sc->engine_failed, 1, memory_order_release);
  struct sock_conn* fresh = sc->new_list;
  pthread_mutex_unlock(&sc->lock);
  /* Those on new_list stay there (sock_net_stop releases them): only the
   * executor's close takes one off, through the engine, which is gone. */
  for (int pass = 0; pass < 2; pass++)
    for (struct sock_conn* c = pass ? fresh : sc->all; c; c = pass ? c->next_new : c->next_all) {
      pthread_mutex_lock(&c->lock);
      sock_conn_break(c, loomSystemError, "socket connection %s peer %d (%s lane): %s",
                      c->base.is_send ? "to" : "from", c->base.peer, sock_lane_name(c->base.lane),
                      sc->engine_why);
      pthread_mutex_unlock(&c->lock);
    }
}

static const struct progress_client_ops sock_client_ops = {
    .name = "socket",
    .progress = sock_net_progress,
    .fail = sock_net_fail,
};

loomResult_t sock_net_start(struct sock_comm* sc) {
  struct loom_comm* comm = sc->comm;
  snprintf(sc->who, sizeof(sc->who), "rank %d: socket transport", comm->rank);
  const struct accept_cfg cfg = {.who = sc->who,
                                 .subsys = SUB_NET,
                                 .hello_max = sizeof(struct sock_hello),
                                 .hello_len = hello_len,
                                 .hello_ms = LOOM_MIN(comm->timeout_ms, (long long)SOCK_HELLO_MS)};
  LOOM_CHECK(accept_set_create(comm, sc->listen_fd, &cfg, &sc->accept));
  LOOM_CHECK(tp_progress_get(comm, &sc->engine));
  LOOM_CHECK(progress_client_add(sc->engine, &sock_client_ops, sc, &sc->client));
  int err = progress_fd_add(sc->client, accept_set_fd(sc->accept), PROGRESS_IN, accept_on_event, sc,
                            &sc->accept_watch);
  if (err != 0)
    return err_set_sub(comm, SUB_NET, loomSystemError,
                       "rank %d: socket transport: cannot watch its listener: %s", comm->rank,
                       strerror(err));
  return loomSuccess;
}

void sock_net_stop(struct sock_comm* sc) {
  /* From here on no callback runs, and the engine's handles of the
   * streams and the listener are gone: what is left is this thread's. */
  progress_client_remove(sc->client);
  sc->client = NULL;
  sc->accept_watch = NULL;
  /* What the engine did not get to (it stopped early, or never ran). */
  for (struct sock_conn *c = sc->new_list, *next; c; c = next) {
    next = c->next_new;
    c->next_all = sc->all;
    c->prev_all = NULL;
    if (sc->all) sc->all->prev_all = c;
    sc->all = c;
  }
  for (struct sock_conn *c = sc->closing_list, *next; c; c = next) {
    next = c->next_closing;
    conn_release(sc, c);
  }
  while (sc->all) conn_release(sc, sc->all);
  sc->new_list = sc->dirty_list = sc->closing_list = NULL;
  while (sc->parked) {
    struct sock_pending* p = sc->parked;
    sc->parked = p->next;
    sock_close(p->fd);
    free(p);
  }
  accept_set_destroy(sc->accept);
  sc->accept = NULL;
}
