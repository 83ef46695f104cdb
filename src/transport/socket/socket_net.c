/* socket_net.c - the socket transport as a client of the communicator's
 * progress engine (transport/progress.h): the engine watches the listener
 * (through the accept set) and every stream of every link, and calls back
 * here on its thread; the executor hands over new connections, posted
 * transfers and closed connections through three lists and the engine's
 * wake-up.
 *
 * Links (socket.h, "Wire"): a connection is made for one direction; its link
 * (peer, lane) is found or made when the engine adopts it, so nothing is
 * held for a peer before this rank needs it. The lower rank's link opens the
 * streams as soon as either direction is made; on the higher rank a peer's
 * hellos that come first are parked until this rank makes the link. A link
 * is up once every stream is (the opening side: its hello sent; the
 * accepting side: its hello read), and then every connection on it is up,
 * now or when it is made.
 *
 * An engine round: the callbacks of the descriptors with events (accepting,
 * a stream's event adds the link's connection it concerns to the round's
 * batch), then
 * sock_net_progress: the executor's lists, then progress every connection
 * of the batch, then timers; connections closed by the executor are freed
 * last. Links live until the transport stops. The engine waits until the
 * accept set's next deadline, at most SOCK_TICK_MS while a connect retries
 * (the timeout sock_net_progress asks for).
 *
 * Accepting never blocks the thread: the listener's connections belong to
 * an accept set (core/accept.h) until their hello is through, which reads
 * each hello without blocking, bounds how many wait and for how long
 * (SOCK_HELLO_MS), and evicts the silent when full or near the descriptor
 * limit. Whatever is not a correct hello for this communicator and rank
 * (garbage, a wrong secret, an unknown rank, a rank that should be
 * accepting, silence) costs a close and a WARN line under the set's rate
 * limit; the communicator never sees it. */
#include <errno.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/checks.h"
#include "transport/socket/socket.h"

#define SOCK_TICK_MS 10
#define SOCK_EVENTS (PROGRESS_IN | PROGRESS_OUT | PROGRESS_RDHUP | PROGRESS_EDGE)

static void batch_add(struct sock_comm* sc, struct sock_conn* c) {
  if (c == NULL || c->in_batch) return;
  c->in_batch = 1;
  c->next_batch = sc->batch;
  sc->batch = c;
}

static void sock_on_event(void* arg, unsigned events, int err);

/* The engine watches k (its fd set) from now on. Returns 0 or the errno. */
static int sock_watch(struct sock_comm* sc, struct sock_sock* k) {
  return progress_fd_add(sc->client, k->fd, SOCK_EVENTS, sock_on_event, k, &k->watch);
}

/* Before k's fd is closed. After the client left the engine, the handles
 * are gone already. */
static void sock_unwatch(struct sock_comm* sc, struct sock_sock* k) {
  if (k->watch != NULL && sc->client != NULL) progress_fd_del(k->watch);
  k->watch = NULL;
}

static void stream_tune(const struct sock_comm* sc, int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* frames are latency-bound */
  if (sc->bufsize > 0) {
    int b = (int)sc->bufsize;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
  }
}

/* ---- Links ------------------------------------------------------------------ */

static int link_self(const struct sock_link* l) {
  return l->peer == l->sc->comm->rank;
}

/* The link of (peer, lane), made on first use; NULL when memory ran short. */
static struct sock_link* link_get(struct sock_comm* sc, int peer, int lane) {
  size_t key = (size_t)lane * (size_t)sc->comm->nranks + (size_t)peer;
  if (sc->links[key] != NULL) return sc->links[key];
  struct sock_link* l = calloc(1, sizeof(*l));
  if (l == NULL) return NULL;
  l->sc = sc;
  l->peer = peer;
  l->lane = lane;
  l->opens = sc->comm->rank <= peer;
  for (int i = 0; i < SOCK_MAX_STREAMS; i++) {
    l->socks[i] = (struct sock_sock){.link = l, .index = i, .fd = -1};
    l->self_in[i] = (struct sock_sock){.link = l, .index = i, .fd = -1, .in = 1};
  }
  memstat_add(sc->comm, MEM_CONN, peer, sizeof(*l));
  sc->links[key] = l;
  l->next_all = sc->all_links;
  sc->all_links = l;
  return l;
}

static void connecting_done(struct sock_comm* sc, struct sock_link* l) {
  if (!l->connecting) return;
  l->connecting = 0;
  sc->nconnecting--;
}

/* The link's connection of one direction, now up: its streams take the
 * link's sockets, and the messages posted so far are dealt over them. */
static void conn_up(struct sock_link* l, struct sock_conn* c) {
  pthread_mutex_lock(&c->lock);
  c->nstreams = l->nstreams;
  for (int i = 0; i < l->nstreams; i++) {
    struct sock_stream* s = &c->streams[i];
    s->fd = link_self(l) && !c->base.is_send ? l->self_in[i].fd : l->socks[i].fd;
    s->state = ST_UP;
    s->seq = 0;
    s->frame = -1;
  }
  if (c->base.is_send)
    for (uint64_t q = c->head; q < c->tail; q++) {
      struct sock_msg* m = &c->ring[q & (c->cap - 1)];
      m->first = c->rr;
      c->rr = (uint32_t)((c->rr + m->nframes) % (uint32_t)c->nstreams);
    }
  pthread_mutex_unlock(&c->lock);
  atomic_store_explicit(&c->up, 1, memory_order_release);
  sock_wake_rank(l->sc);
  batch_add(l->sc, c); /* what was posted, and what may be waiting already */
}

/* Every stream up (a link to itself: both ends of each)? Then the link is,
 * and so are its connections. */
static void link_check_up(struct sock_link* l) {
  if (l->up || l->broken || l->nstreams == 0) return;
  for (int i = 0; i < l->nstreams; i++) {
    if (l->socks[i].state != ST_UP) return;
    if (link_self(l) && l->self_in[i].state != ST_UP) return;
  }
  l->up = 1;
  connecting_done(l->sc, l);
  if (l->send) conn_up(l, l->send);
  if (l->recv) conn_up(l, l->recv);
}

static void conn_break_locked(struct sock_conn* c, loomResult_t code, const char* why) {
  pthread_mutex_lock(&c->lock);
  sock_conn_break(c, code, "%s", why);
  pthread_mutex_unlock(&c->lock);
}

/* The link cannot go on: both directions fail (now, or when made). */
static void link_break(struct sock_link* l, loomResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void link_break(struct sock_link* l, loomResult_t code, const char* fmt, ...) {
  if (!l->broken) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->why, sizeof(l->why), fmt, ap);
    va_end(ap);
    l->code = code;
    l->broken = 1;
  }
  connecting_done(l->sc, l);
  if (l->send) conn_break_locked(l->send, l->code, l->why);
  if (l->recv) conn_break_locked(l->recv, l->code, l->why);
}

/* ---- Accepting --------------------------------------------------------------- */

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
  if (h->src > self) {
    snprintf(buf, len, "rank %d opened a link to rank %d: the lower rank of a pair opens it",
             h->src, self);
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

/* A checked hello: its socket becomes a stream of its link. Returns why
 * not, or NULL (the socket is the link's then). */
static const char* hello_take(struct sock_comm* sc, int fd, const struct sock_hello* h, char* buf,
                              size_t len) {
  struct sock_link* l = link_get(sc, h->src, h->lane);
  if (l == NULL) return "out of memory for its link";
  if (l->broken) return "its link already failed";
  if (l->nstreams != 0 && l->nstreams != h->nstreams) {
    snprintf(buf, len, "rank %d announced %u streams, its earlier streams %d", h->src, h->nstreams,
             l->nstreams);
    return buf;
  }
  struct sock_sock* k = link_self(l) ? &l->self_in[h->stream] : &l->socks[h->stream];
  if (k->fd >= 0) {
    snprintf(buf, len, "rank %d opened %s stream %u twice", h->src, sock_lane_name(h->lane),
             h->stream);
    return buf;
  }
  l->nstreams = h->nstreams;
  stream_tune(sc, fd); /* this end writes too */
  k->fd = fd;
  k->state = ST_UP;
  int err = sock_watch(sc, k);
  if (err != 0)
    link_break(l, loomSystemError, "cannot watch socket stream %d with peer %d (%s lane): %s",
               k->index, l->peer, sock_lane_name(l->lane), strerror(err));
  link_check_up(l);
  return NULL;
}

/* The accept set has a complete hello (accept_hello_fn): checked, it goes to
 * its link, or waits for this rank to make that link. */
static void hello_arrived(void* arg, int fd, const union sock_addr* addr, const void* hello,
                          size_t len) {
  struct sock_comm* sc = arg;
  struct sock_hello h;
  memset(&h, 0, sizeof(h));
  memcpy(&h, hello, LOOM_MIN(len, sizeof(h)));
  char buf[160];
  const char* why = sock_hello_problem(&h, sc->secret, sc->comm->comm_hash, sc->comm->nranks,
                                       sc->comm->rank, buf, sizeof(buf));
  if (why == NULL && sc->links[(size_t)h.lane * (size_t)sc->comm->nranks + (size_t)h.src] != NULL) {
    why = hello_take(sc, fd, &h, buf, sizeof(buf));
  } else if (why == NULL) {
    for (struct sock_pending* q = sc->parked; q && why == NULL; q = q->next)
      if (q->hello.src == h.src && q->hello.lane == h.lane && q->hello.stream == h.stream) {
        snprintf(buf, sizeof(buf), "rank %d opened %s stream %u twice", h.src,
                 sock_lane_name(h.lane), h.stream);
        why = buf;
      }
    struct sock_pending* p = why == NULL ? calloc(1, sizeof(*p)) : NULL;
    if (why == NULL && p == NULL) why = "out of memory";
    if (p != NULL) {
      p->fd = fd;
      p->addr = *addr;
      p->hello = h;
      p->next = sc->parked;
      sc->parked = p;
    }
  }
  if (why != NULL) accept_set_refuse(sc->accept, fd, addr, why);
}

/* The parked streams of l's peer and lane join l, now made. */
static void parked_take(struct sock_comm* sc, struct sock_link* l) {
  for (struct sock_pending **pp = &sc->parked, *p; (p = *pp) != NULL;) {
    if (p->hello.src != l->peer || p->hello.lane != l->lane) {
      pp = &p->next;
      continue;
    }
    *pp = p->next;
    char buf[160];
    const char* why = hello_take(sc, p->fd, &p->hello, buf, sizeof(buf));
    if (why != NULL) accept_set_refuse(sc->accept, p->fd, &p->addr, why);
    free(p);
  }
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

/* ---- Opening (the lower rank) ------------------------------------------------ */

/* A connect attempt failed with err: retry later, or give up. */
static void connect_failed(struct sock_comm* sc, struct sock_link* l, struct sock_sock* k,
                           int err) {
  char text[SOCK_ADDR_STRLEN];
  sock_addr_str(&sc->addrs[l->peer], text, sizeof(text));
  sock_unwatch(sc, k);
  if (k->fd >= 0) close(k->fd);
  k->fd = -1;
  if (sock_connect_retryable(err) && !deadline_passed(&l->connect_dl)) {
    k->state = ST_RETRY;
    k->backoff_ms =
        k->backoff_ms ? LOOM_MIN(2 * k->backoff_ms, SOCK_BACKOFF_MAX_MS) : SOCK_BACKOFF_FIRST_MS;
    k->retry_at_ns = time_now_ns() + (uint64_t)k->backoff_ms * 1000000u;
  } else if (sock_connect_retryable(err)) {
    link_break(l, loomTimeout, "could not connect to peer %d at %s within %lld ms (%s)", l->peer,
               text, sc->comm->timeout_ms, strerror(err));
  } else {
    link_break(l, loomSystemError, "connect to peer %d at %s failed: %s", l->peer, text,
               strerror(err));
  }
}

static void sock_open(struct sock_comm* sc, struct sock_link* l, struct sock_sock* k) {
  const union sock_addr* a = &sc->addrs[l->peer];
  int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    connect_failed(sc, l, k, errno);
    return;
  }
  stream_tune(sc, fd);
  k->fd = fd;
  k->state = ST_CONNECTING;
  if (connect(fd, &a->sa, sock_addr_len(a)) != 0 && errno != EINPROGRESS) {
    connect_failed(sc, l, k, errno);
    return;
  }
  /* Edge-triggered: the first edge says the connect finished (or failed). */
  int err = sock_watch(sc, k);
  if (err != 0) connect_failed(sc, l, k, err);
}

/* The opening side begins: nstreams connects to the peer's listener. */
static void link_start(struct sock_comm* sc, struct sock_link* l) {
  if (l->started || l->broken) return;
  l->started = 1;
  l->nstreams = sc->nstreams;
  l->connecting = 1;
  sc->nconnecting++;
  l->connect_dl = deadline_in_ms(sc->comm->timeout_ms);
  for (int i = 0; i < l->nstreams && !l->broken; i++) sock_open(sc, l, &l->socks[i]);
}

/* Sends what is left of k's hello; once it is all out, k is up. */
static void hello_send(struct sock_comm* sc, struct sock_link* l, struct sock_sock* k) {
  while (k->hello_sent < sizeof(k->hello)) {
    ssize_t n = send(k->fd, (const char*)&k->hello + k->hello_sent,
                     sizeof(k->hello) - k->hello_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      k->hello_sent += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return; /* the next edge */
    link_break(l, loomRemoteError, "peer %d closed socket stream %d (%s lane) before its hello: %s",
               l->peer, k->index, sock_lane_name(l->lane), n < 0 ? strerror(errno) : "closed");
    return;
  }
  k->state = ST_UP;
  link_check_up(l);
}

static void connect_finish(struct sock_comm* sc, struct sock_link* l, struct sock_sock* k) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err == EINPROGRESS || err == EALREADY) return;
  if (err != 0) {
    connect_failed(sc, l, k, err);
    return;
  }
  struct sock_hello* h = &k->hello;
  memset(h, 0, sizeof(*h));
  h->magic = SOCK_HELLO_MAGIC;
  h->version = SOCK_WIRE_VERSION;
  h->bytes = sizeof(*h);
  h->secret = sc->secret;
  h->comm_hash = sc->comm->comm_hash;
  h->src = sc->comm->rank;
  h->dst = l->peer;
  h->lane = (uint16_t)l->lane;
  h->stream = (uint16_t)k->index;
  h->nstreams = (uint16_t)l->nstreams;
  k->hello_sent = 0;
  k->state = ST_HELLO;
  hello_send(sc, l, k);
}

/* A stream's event, on the engine's thread. While the executor polls, an
 * event on a stream of an up link parks the stream (the engine's idle
 * hand-over), once per polling period, rather than waking this thread (and
 * taking a core from a polling rank) for every message. */
static void sock_on_event(void* arg, unsigned events, int err) {
  struct sock_sock* k = arg;
  struct sock_link* l = k->link;
  struct sock_comm* sc = l->sc;
  if (err != 0) { /* the engine could not watch it again: nothing would move it */
    link_break(l, loomSystemError, "lost the watch on socket stream %d with peer %d (%s lane): %s",
               k->index, l->peer, sock_lane_name(l->lane), strerror(err));
    return;
  }
  if (k->state == ST_CONNECTING) {
    connect_finish(sc, l, k);
    return;
  }
  if (k->state == ST_HELLO) {
    hello_send(sc, l, k);
    return;
  }
  if (k->state != ST_UP) return;
  int gone = (events & (PROGRESS_RDHUP | PROGRESS_HUP | PROGRESS_ERR)) != 0;
  if (!l->up) {
    /* What comes before the link is up waits in the socket; a peer that
     * leaves before then fails the link at once. */
    if (gone)
      link_break(l, loomRemoteError,
                 "peer %d closed socket stream %d (%s lane) before the link was up: it aborted, "
                 "failed or was destroyed",
                 l->peer, k->index, sock_lane_name(l->lane));
    return;
  }
  /* The receiving direction reads the peer's close at the end of its
   * bytes; the sending one learns it here, also while the executor polls
   * (a rank's link to itself closes only with the rank). */
  if (gone && l->send != NULL && !link_self(l)) {
    struct sock_conn* c = l->send;
    pthread_mutex_lock(&c->lock);
    sock_conn_peer_gone(c,
                        "peer %d closed its socket connection (%s lane, stream %d): it aborted, "
                        "failed or was destroyed",
                        l->peer, sock_lane_name(l->lane), k->index);
    pthread_mutex_unlock(&c->lock);
  }
  /* Parked, edge-triggered, only the peer's close (and hang-ups and errors,
   * always reported): the executor moves the bytes meanwhile. */
  if (progress_fd_park(k->watch, PROGRESS_EDGE | PROGRESS_RDHUP)) return;
  /* Each direction for what concerns it: bytes to read (or the close) for the
   * receiving one, room to write for the sending one; an error for both. */
  unsigned both = PROGRESS_HUP | PROGRESS_ERR;
  if (events & (PROGRESS_IN | PROGRESS_RDHUP | both)) batch_add(sc, l->recv);
  if (events & (PROGRESS_OUT | both)) batch_add(sc, l->send);
}

/* ---- The executor's lists ------------------------------------------------------- */

static void conn_adopt(struct sock_comm* sc, struct sock_conn* c) {
  c->next_all = sc->all;
  c->prev_all = NULL;
  if (sc->all) sc->all->prev_all = c;
  sc->all = c;
  struct sock_link* l = link_get(sc, c->base.peer, c->base.lane);
  if (l == NULL) {
    conn_break_locked(c, loomSystemError, "out of memory for a socket link");
    return;
  }
  c->link = l;
  if (c->base.is_send)
    l->send = c;
  else
    l->recv = c;
  parked_take(sc, l);
  if (l->broken) {
    conn_break_locked(c, l->code, l->why);
    return;
  }
  if (l->up) {
    conn_up(l, c);
    return;
  }
  if (l->opens) link_start(sc, l);
}

static void conn_release(struct sock_comm* sc, struct sock_conn* c) {
  if (c->prev_all)
    c->prev_all->next_all = c->next_all;
  else if (sc->all == c)
    sc->all = c->next_all;
  if (c->next_all) c->next_all->prev_all = c->prev_all;
  struct sock_link* l = c->link;
  if (l != NULL && l->send == c) l->send = NULL;
  if (l != NULL && l->recv == c) l->recv = NULL;
  sock_conn_free(c);
}

static void link_free(struct sock_comm* sc, struct sock_link* l) {
  for (int i = 0; i < SOCK_MAX_STREAMS; i++)
    for (int side = 0; side < 2; side++) {
      struct sock_sock* k = side ? &l->self_in[i] : &l->socks[i];
      sock_unwatch(sc, k);
      if (k->fd >= 0) sock_close(k->fd);
      k->fd = -1;
    }
  memstat_sub(sc->comm, MEM_CONN, l->peer, sizeof(*l));
  free(l);
}

/* ---- Timers --------------------------------------------------------------------- */

static void net_timers(struct sock_comm* sc) {
  if (sc->nconnecting == 0) return;
  uint64_t now = time_now_ns();
  for (struct sock_link* l = sc->all_links; l; l = l->next_all) {
    if (!l->connecting) continue;
    for (int i = 0; i < l->nstreams && !l->broken; i++) {
      struct sock_sock* k = &l->socks[i];
      if (k->state == ST_RETRY && now >= k->retry_at_ns)
        sock_open(sc, l, k);
      else if ((k->state == ST_CONNECTING || k->state == ST_HELLO) &&
               deadline_passed(&l->connect_dl))
        connect_failed(sc, l, k, ETIMEDOUT);
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
    if (!c->dead && !atomic_load_explicit(&c->broken, memory_order_relaxed) &&
        atomic_load_explicit(&c->up, memory_order_acquire))
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
  if (sc->client != NULL) progress_client_remove(sc->client);
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
  while (sc->all_links) {
    struct sock_link* l = sc->all_links;
    sc->all_links = l->next_all;
    sc->links[(size_t)l->lane * (size_t)sc->comm->nranks + (size_t)l->peer] = NULL;
    link_free(sc, l);
  }
  while (sc->parked) {
    struct sock_pending* p = sc->parked;
    sc->parked = p->next;
    sock_close(p->fd);
    free(p);
  }
  accept_set_destroy(sc->accept);
  sc->accept = NULL;
}
