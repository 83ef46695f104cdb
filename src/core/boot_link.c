/* boot_link.c - links, and the rank-to-rank messages that travel on them
 * (boot_send, boot_recv; the peer table down its tree, boot_tree.c).
 *
 * A link is a TCP connection from one rank other than 0 to another, one per
 * direction: a rank dials a peer the first time it sends it something and
 * from then on sends to it on that socket only, under the link's send_lock;
 * the peer's watcher reads it. So two ranks never race to make one
 * connection, and one sender's messages keep their order. Rank 0 needs no
 * links: its star sockets carry messages both ways.
 *
 * Each rank other than 0 opens its listener for links before its hello, so
 * the address is in the table and answers whenever a peer dials; dialled
 * connections wait in the kernel's backlog until the rank's watcher starts.
 * The watcher runs the listener's pending set (core/accept.h: bounded,
 * with a deadline per hello, strangers dropped) and checks each hello
 * (secret, communicator, ranks). The dialler waits for BOOT_LINK_OK before
 * its first message: by then the receiver's watcher has adopted the link,
 * so a receiver that learns the sender left can tell from the link's state
 * whether anything may still come (boot_link_quiet).
 *
 * Failures need nothing of their own: a rank that dies closes its star
 * socket too, and rank 0 tells everyone. A link that closes without a
 * goodbye is therefore only marked quiet, never blamed: the peer may just
 * be leaving a communicator that failed for another rank's sake, and the
 * cause is the star's to name. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/boot_internal.h"
#include "core/checks.h"

/* A dialled connection has this long to say its hello. */
#define LINK_HELLO_MS 10000

/* ---- Dialling (the senders' side) ------------------------------------------------ */

/* What ends a wait on the way to peer: an abort, the communicator's
 * failure (unless survivor: a shrink's messages among the ranks that are
 * left), or peer's departure. */
struct peer_stop {
  struct bootstrap* b;
  int peer;
  int survivor;
};

static int peer_gone(void* arg) {
  const struct peer_stop* s = arg;
  struct loom_comm* comm = s->b->comm;
  if (atomic_load(&comm->aborted)) return 1;
  int e = atomic_load(&comm->async_error);
  if (!s->survivor && e != loomSuccess && e != loomInProgress) return 1;
  /* A survivor's send stops at its peer's known failure (a dead rank left
   * off a shrink's exclusion list), not at the deadline it shares with the
   * sends to the other survivors. */
  if (s->survivor && atomic_load(&s->b->dead[s->peer])) return 1;
  return atomic_load_explicit(&s->b->left[s->peer], memory_order_acquire) != 0;
}

/* Connects, trying again while the peer is unreachable or refuses: its
 * listener was up before the table went out, so a refusal means it is
 * going or gone, which the star reports within moments (the stop). */
static int link_connect(const union sock_addr* addr, const struct deadline* dl,
                        const struct sock_stop* stop, int* fd_out) {
  long long backoff = SOCK_BACKOFF_FIRST_MS;
  for (;;) {
    int err = sock_connect_try(addr, dl, stop, fd_out);
    if (err == 0 || err == ECANCELED || !sock_connect_retryable(err) || deadline_passed(dl))
      return err;
    for (long long t = 0; t < backoff && !deadline_passed(dl); t += 10) {
      if (stop->fn(stop->arg)) return ECANCELED;
      usleep(10000);
    }
    backoff = LOOM_MIN(backoff * 2, SOCK_BACKOFF_MAX_MS);
  }
}

/* The hello, and the peer's answer. Returns 0, a sock_* value, or EPROTO
 * with why filled (refused, or a bad answer). */
static int link_handshake(struct bootstrap* b, int fd, int peer, const struct deadline* dl,
                          const struct sock_stop* stop, char* why, size_t why_len) {
  struct loom_comm* comm = b->comm;
  struct {
    struct boot_hdr h;
    struct boot_link_hello hello;
  } msg;
  memset(&msg, 0, sizeof(msg));
  boot_hdr_fill(&msg.h, comm->rank, BOOT_LINK, 0, sizeof(msg.hello));
  msg.hello.secret = b->secret;
  msg.hello.comm_hash = comm->comm_hash;
  msg.hello.nranks = comm->nranks;
  msg.hello.from = comm->rank;
  msg.hello.to = peer;
  struct boot_hdr h;
  int err = sock_send_until(fd, &msg, sizeof(msg), dl, stop);
  if (err == 0) err = sock_recv_until(fd, &h, sizeof(h), dl, stop);
  if (err != 0) return err;
  if (boot_hdr_check(&h, BOOT_REFUSED_MAX, why, why_len) != loomSuccess) return EPROTO;
  if (h.type == BOOT_LINK_OK && h.length == 0 && h.from == peer) return 0;
  if (h.type != BOOT_REFUSED) {
    snprintf(why, why_len, "it answered with a %s message of %u bytes from rank %d",
             boot_type_name(h.type), h.length, h.from);
    return EPROTO;
  }
  char text[BOOT_REFUSED_MAX + 1];
  err = sock_recv_until(fd, text, h.length, dl, stop);
  if (err != 0) return err;
  text[h.length] = '\0';
  snprintf(why, why_len, "it refused: %s", text);
  return EPROTO;
}

/* Opens out-link l; the caller holds its send_lock. */
static loomResult_t link_dial(struct bootstrap* b, struct boot_link* l, const struct deadline* dl,
                              const struct sock_stop* stop) {
  struct loom_comm* comm = b->comm;
  char text[SOCK_ADDR_STRLEN], what[160], why[BOOT_REFUSED_MAX + 64] = "";
  int fd = -1;
  boot_addr_unpack(&b->addrs[l->peer], &l->addr);
  snprintf(what, sizeof(what), "a link hello (at %s)", sock_addr_str(&l->addr, text, sizeof(text)));
  if (l->addr.sa.sa_family == 0)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInternalError,
                       "bootstrap: rank %d has no address for links in the peer table", l->peer);
  int err = link_connect(&l->addr, dl, stop, &fd);
  if (err == 0) err = link_handshake(b, fd, l->peer, dl, stop, why, sizeof(why));
  if (err != 0) sock_close(fd);
  if (err == EPROTO)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomRemoteError,
                       "bootstrap: rank %d: a link to rank %d at %s failed: %s", comm->rank,
                       l->peer, text, why);
  if (err != 0) return boot_send_error(b, err, what, l->peer);
  l->fd = fd;
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: rank %d: link to rank %d at %s is up", comm->rank, l->peer,
            text);
  return loomSuccess;
}

static loomResult_t out_get(struct bootstrap* b, int peer, struct boot_link** out) {
  pthread_mutex_lock(&b->out_lock);
  struct boot_link* l = b->out[peer];
  if (l == NULL && (l = calloc(1, sizeof(*l))) != NULL) {
    l->fd = -1;
    l->peer = peer;
    l->kind = BOOT_OUT;
    pthread_mutex_init(&l->send_lock, NULL);
    b->out[peer] = l;
  }
  pthread_mutex_unlock(&b->out_lock);
  if (l == NULL)
    return err_set_sub(b->comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: out of memory for a link to rank %d", peer);
  *out = l;
  return loomSuccess;
}

static loomResult_t peer_send(struct bootstrap* b, int peer, uint16_t type, uint32_t tag,
                              const void* buf, size_t len, const char* what,
                              const struct deadline* dl, int survivor) {
  struct loom_comm* comm = b->comm;
  struct peer_stop ps = {.b = b, .peer = peer, .survivor = survivor};
  struct sock_stop stop = {.fn = peer_gone, .arg = &ps};
  if (peer_gone(&ps)) return boot_send_error(b, ECANCELED, what, peer);
  struct boot_link* l = NULL;
  if (comm->rank == 0 || peer == 0)
    l = &b->links[comm->rank == 0 ? peer : 0];
  else
    LOOM_CHECK(out_get(b, peer, &l));
  if (boot_link_lock(l, dl) != 0) return boot_send_error(b, ETIMEDOUT, what, peer);
  loomResult_t res = loomSuccess;
  int err = 0;
  if (l->kind == BOOT_OUT && atomic_load(&l->dead))
    res = err_set_sub(comm, SUB_BOOTSTRAP, loomRemoteError,
                      "bootstrap: rank %d: the link to rank %d broke earlier (a message on it "
                      "was cut short)",
                      comm->rank, peer);
  else if (l->kind == BOOT_OUT && l->fd < 0)
    res = link_dial(b, l, dl, &stop);
  if (res == loomSuccess) {
    err = boot_link_send_locked(l, comm->rank, type, tag, buf, (uint32_t)len, dl, &stop);
    /* The stream may now end mid-message: nothing more may follow on it. */
    if (err != 0 && l->kind == BOOT_OUT) atomic_store(&l->dead, 1);
  }
  pthread_mutex_unlock(&l->send_lock);
  if (err != 0 && survivor) /* the communicator has failed: name this send's own cause */
    return err_set_sub(comm, SUB_BOOTSTRAP, loomRemoteError,
                       "bootstrap: rank %d: sending %s to rank %d failed: %s", comm->rank, what,
                       peer, sock_err_str(err));
  if (err != 0) return boot_send_error(b, err, what, peer);
  return res;
}

loomResult_t boot_peer_send(struct bootstrap* b, int peer, uint16_t type, uint32_t tag,
                            const void* buf, size_t len, const char* what,
                            const struct deadline* dl) {
  return peer_send(b, peer, type, tag, buf, len, what, dl, 0);
}

/* ---- State ------------------------------------------------------------------------ */

int boot_links_alloc(struct bootstrap* b) {
  size_t n = (size_t)b->comm->nranks;
  if (b->comm->rank == 0 || n <= 2) return 0;
  b->out = calloc(n, sizeof(*b->out));
  b->in = calloc(n, sizeof(*b->in));
  b->in_peers = calloc(n, sizeof(*b->in_peers));
  b->in_state = calloc(n, sizeof(*b->in_state));
  return b->out && b->in && b->in_peers && b->in_state ? 0 : -1;
}

void boot_links_free(struct bootstrap* b) {
  for (int p = 0; b->out != NULL && p < b->comm->nranks; p++) {
    struct boot_link* l = b->out[p];
    if (l == NULL) continue;
    if (l->fd >= 0) close(l->fd);
    pthread_mutex_destroy(&l->send_lock);
    free(l);
  }
  for (int p = 0; b->in != NULL && p < b->comm->nranks; p++) {
    struct boot_link* l = b->in[p];
    if (l == NULL) continue;
    if (l->fd >= 0) close(l->fd);
    free(l->msg);
    pthread_mutex_destroy(&l->send_lock);
    free(l);
  }
  if (b->lsn_set != NULL) accept_set_destroy(b->lsn_set);
  if (b->lsn_fd >= 0) close(b->lsn_fd);
  free(b->out);
  free(b->in);
  free(b->in_peers);
  free((void*)b->in_state);
  free(b->addrs);
}

/* ---- Accepting (the watcher's side) ------------------------------------------------- */

loomResult_t boot_link_listen(struct bootstrap* b, const union sock_addr* local) {
  union sock_addr a = *local;
  char text[SOCK_ADDR_STRLEN];
  if (a.sa.sa_family == AF_INET6)
    a.sin6.sin6_port = 0;
  else
    a.sin.sin_port = 0;
  LOOM_CHECK(sock_listen(b->comm, &a, &b->lsn_fd));
  boot_addr_pack(&a, &b->lsn_addr);
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: rank %d listens for links on %s", b->comm->rank,
            sock_addr_str(&a, text, sizeof(text)));
  return loomSuccess;
}

/* How long a link hello is, from its header (accept_hello_len_fn). */
static long link_hello_len(const void* buf, size_t got, char* why, size_t why_len) {
  struct boot_hdr h;
  if (got < sizeof(h)) return (long)sizeof(h);
  memcpy(&h, buf, sizeof(h));
  if (boot_hdr_check(&h, sizeof(struct boot_link_hello), why, why_len) != loomSuccess) return -1;
  if (h.type != BOOT_LINK) {
    snprintf(why, why_len, "expected a link hello, got a %s message", boot_type_name(h.type));
    return -1;
  }
  return (long)(sizeof(h) + h.length);
}

/* It knows the secret: it is told why before the close (a fresh socket
 * takes the few bytes at once). */
static void link_refuse(struct bootstrap* b, int fd, const union sock_addr* addr, const char* why) {
  struct {
    struct boot_hdr h;
    char why[BOOT_REFUSED_MAX];
  } msg;
  size_t len = LOOM_MIN(strlen(why) + 1, sizeof(msg.why));
  boot_hdr_fill(&msg.h, b->comm->rank, BOOT_REFUSED, 0, (uint32_t)len);
  snprintf(msg.why, sizeof(msg.why), "%s", why);
  sock_send_nowait(fd, &msg, sizeof(msg.h) + len);
  accept_set_refuse(b->lsn_set, fd, addr, why);
}

static void link_adopt(struct bootstrap* b, int fd, const union sock_addr* addr, int peer) {
  struct loom_comm* comm = b->comm;
  struct boot_link* l = calloc(1, sizeof(*l));
  if (l == NULL) return accept_set_refuse(b->lsn_set, fd, addr, "out of memory for a link");
  l->fd = fd;
  l->peer = peer;
  l->kind = BOOT_IN;
  l->addr = *addr;
  pthread_mutex_init(&l->send_lock, NULL);
  b->in[peer] = l;
  b->in_peers[b->nin++] = peer;
  /* Up before the answer: once answered the peer may send, and a waiter
   * that learns it left must then wait for this link to go quiet. */
  atomic_store_explicit(&b->in_state[peer], BOOT_IN_UP, memory_order_release);
  struct boot_hdr h;
  boot_hdr_fill(&h, comm->rank, BOOT_LINK_OK, 0, 0);
  if (!sock_send_nowait(fd, &h, sizeof(h))) { /* only a broken socket refuses 24 bytes */
    l->done = 1;
    atomic_store_explicit(&b->in_state[peer], BOOT_IN_DONE, memory_order_release);
    LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: rank %d: could not answer the link from rank %d",
              comm->rank, peer);
    return;
  }
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: rank %d: link from rank %d is up", comm->rank, peer);
}

/* A complete link hello (accept_hello_fn), on the watcher's thread. */
static void link_hello_in(void* arg, int fd, const union sock_addr* addr, const void* buf,
                          size_t len) {
  struct bootstrap* b = arg;
  struct loom_comm* comm = b->comm;
  struct boot_link_hello h;
  size_t n = len - sizeof(struct boot_hdr); /* link_hello_len bounded it */
  char why[200];
  memset(&h, 0, sizeof(h));
  memcpy(&h, (const uint8_t*)buf + sizeof(struct boot_hdr), LOOM_MIN(n, sizeof(h)));
  loomResult_t res = boot_link_hello_check(&h, n, b->secret, comm->comm_hash, comm->nranks,
                                           comm->rank, why, sizeof(why));
  if (res == loomSuccess && b->in[h.from] != NULL) {
    snprintf(why, sizeof(why), "rank %d has a link to rank %d already", h.from, comm->rank);
    res = loomInvalidUsage;
  }
  if (res == loomSuccess) return link_adopt(b, fd, addr, h.from);
  if (res == loomInvalidUsage) return link_refuse(b, fd, addr, why);
  accept_set_refuse(b->lsn_set, fd, addr, why);
}

loomResult_t boot_link_accept_start(struct bootstrap* b) {
  char who[48];
  snprintf(who, sizeof(who), "rank %d: bootstrap links", b->comm->rank);
  struct accept_cfg cfg = {.who = who,
                           .subsys = SUB_BOOTSTRAP,
                           .hello_max = sizeof(struct boot_hdr) + sizeof(struct boot_link_hello),
                           .hello_len = link_hello_len,
                           .hello_ms = LOOM_MIN(LINK_HELLO_MS, LOOM_MAX(b->comm->timeout_ms, 1))};
  return accept_set_create(b->comm, b->lsn_fd, &cfg, &b->lsn_set);
}

void boot_link_accept(struct bootstrap* b) {
  accept_set_run(b->lsn_set, link_hello_in, b);
}

int boot_link_quiet(const struct bootstrap* b, int peer) {
  if (b->in_state == NULL || peer == 0 || b->comm->rank == 0) return 1;
  return atomic_load_explicit(&b->in_state[peer], memory_order_acquire) != BOOT_IN_UP;
}

/* ---- Rank to rank ------------------------------------------------------------------- */

static loomResult_t p2p_check(struct loom_comm* comm, const char* fn, int peer, const void* buf,
                              size_t len) {
  if (comm->boot == NULL)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidUsage,
                       "bootstrap: %s on rank %d, whose bootstrap is not running", fn, comm->rank);
  if (peer < 0 || peer >= comm->nranks)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidArgument,
                       "bootstrap: %s on rank %d: peer %d is out of range 0..%d", fn, comm->rank,
                       peer, comm->nranks - 1);
  if (len > BOOT_MAX_PAYLOAD)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidArgument,
                       "bootstrap: %s of %zu bytes is over the %u-byte message bound", fn, len,
                       BOOT_MAX_PAYLOAD);
  if (buf == NULL && len > 0)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidArgument,
                       "bootstrap: %s with a NULL buffer of %zu bytes", fn, len);
  return loomSuccess;
}

/* A message to this rank itself goes straight to its mailbox. */
static loomResult_t send_self(struct bootstrap* b, uint32_t tag, const void* buf, size_t len) {
  struct loom_comm* comm = b->comm;
  loomResult_t health = comm_health(comm);
  if (health != loomSuccess) return health;
  struct boot_mail* m = malloc(sizeof(*m) + len);
  if (m == NULL)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: out of memory for a message of %zu bytes", len);
  m->type = BOOT_P2P;
  m->tag = tag;
  m->from = comm->rank;
  m->len = len;
  if (len > 0) memcpy(m->data, buf, len);
  boot_mail_put(b, m);
  return loomSuccess;
}

static loomResult_t send_to(struct loom_comm* comm, int peer, uint32_t tag, const void* buf,
                            size_t len, const struct deadline* dl, int survivor) {
  LOOM_CHECK(p2p_check(comm, "boot_send", peer, buf, len));
  struct bootstrap* b = comm->boot;
  struct deadline own = deadline_in_ms(comm->timeout_ms);
  char what[64];
  if (dl == NULL) dl = &own;
  if (peer == comm->rank) return send_self(b, tag, buf, len);
  snprintf(what, sizeof(what), "a message with tag %u", tag);
  return peer_send(b, peer, BOOT_P2P, tag, buf, len, what, dl, survivor);
}

loomResult_t boot_send(struct loom_comm* comm, int peer, uint32_t tag, const void* buf, size_t len,
                       const struct deadline* dl) {
  return send_to(comm, peer, tag, buf, len, dl, 0);
}

static loomResult_t recv_from(struct loom_comm* comm, int peer, uint32_t tag, void* buf, size_t len,
                              size_t* got_out, const struct deadline* dl, int survivor) {
  LOOM_CHECK(p2p_check(comm, "boot_recv", peer, buf, len));
  struct bootstrap* b = comm->boot;
  struct deadline own = deadline_in_ms(comm->timeout_ms);
  struct boot_mail* m;
  char what[64];
  if (dl == NULL) dl = &own;
  snprintf(what, sizeof(what), "the message with tag %u", tag);
  LOOM_CHECK(survivor ? boot_mail_wait_sender(b, BOOT_P2P, tag, peer, what, dl, &m)
                      : boot_mail_wait(b, BOOT_P2P, tag, peer, what, dl, &m));
  if (got_out != NULL ? m->len > len : m->len != len) {
    size_t got = m->len;
    free(m);
    return err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidUsage,
                       "bootstrap: rank %d: %s from rank %d has %zu bytes, expected %s%zu",
                       comm->rank, what, peer, got, got_out != NULL ? "at most " : "", len);
  }
  if (m->len > 0) memcpy(buf, m->data, m->len);
  if (got_out != NULL) *got_out = m->len;
  free(m);
  return loomSuccess;
}

loomResult_t boot_recv(struct loom_comm* comm, int peer, uint32_t tag, void* buf, size_t len,
                       size_t* got_out, const struct deadline* dl) {
  return recv_from(comm, peer, tag, buf, len, got_out, dl, 0);
}

loomResult_t boot_survivor_send(struct loom_comm* comm, int peer, uint32_t tag, const void* buf,
                                size_t len, const struct deadline* dl) {
  return send_to(comm, peer, tag, buf, len, dl, 1);
}

loomResult_t boot_survivor_recv(struct loom_comm* comm, int peer, uint32_t tag, void* buf,
                                size_t len, const struct deadline* dl) {
  return recv_from(comm, peer, tag, buf, len, NULL, dl, 1);
}
