/* boot_watch.c - the bootstrap's life after the rendezvous: the watcher
 * thread that owns every read of the star's sockets and of the links peers
 * dialled here (and accepts those, boot_link.c), failure detection and its
 * propagation through rank 0, and teardown.
 *
 * A peer's socket closing without a BOOT_BYE first means the peer died or
 * aborted. The watcher notices within milliseconds, whatever the ranks are
 * doing, records it with comm_set_failed, and on rank 0 tells every other
 * rank with BOOT_FAILED, so that a rank waiting on shared memory for the
 * dead one learns about it too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/boot_internal.h"
#include "core/checks.h"
#include "core/params.h"

/* ---- State -------------------------------------------------------------------- */

loomResult_t boot_state_alloc(struct loom_comm* comm, int nlinks, struct bootstrap** out) {
  struct bootstrap* b = calloc(1, sizeof(*b));
  struct boot_link* links = calloc((size_t)nlinks, sizeof(*links));
  _Atomic unsigned char* left = calloc(2 * (size_t)comm->nranks, sizeof(*left)); /* and dead */
  struct boot_addr* addrs = calloc((size_t)comm->nranks, sizeof(*addrs));
  if (b != NULL) {
    b->comm = comm;
    b->lsn_fd = -1;
    b->addrs = addrs;
  }
  if (b == NULL || links == NULL || left == NULL || addrs == NULL || boot_links_alloc(b) != 0) {
    if (b != NULL) boot_links_free(b);
    free(b);
    free(links);
    free((void*)left);
    if (b == NULL) free(addrs);
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: out of memory for %d links", nlinks);
  }
  b->nlinks = nlinks;
  b->links = links;
  b->left = left;
  b->dead = left + comm->nranks;
  b->stop_fd = -1;
  b->mail_tail = &b->mail;
  for (int i = 0; i < nlinks; i++) {
    links[i].fd = -1;
    links[i].peer = (nlinks == 1) ? 0 : i; /* one link: it goes to rank 0 */
    links[i].kind = BOOT_STAR;
    pthread_mutex_init(&links[i].send_lock, NULL);
  }
  /* Waits compute absolute times on the monotonic clock, immune to date
   * changes. */
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&b->mail_cond, &attr);
  pthread_condattr_destroy(&attr);
  pthread_mutex_init(&b->mail_lock, NULL);
  pthread_mutex_init(&b->notify_lock, NULL);
  pthread_mutex_init(&b->out_lock, NULL);
  *out = b;
  return loomSuccess;
}

static void link_bye(struct boot_link* l, const struct boot_hdr* h) {
  if (l == NULL || l->fd < 0 || atomic_load(&l->dead)) return;
  pthread_mutex_lock(&l->send_lock);
  if (!sock_send_nowait(l->fd, h, sizeof(*h)))
    LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: could not say goodbye to peer %d", l->peer);
  pthread_mutex_unlock(&l->send_lock);
}

/* Best effort and never waits: a peer that does not read must not hold us.
 * On the star and on every link this rank dialled: the goodbye follows the
 * messages on each socket, so a peer that learns of it knows no more come. */
static void say_bye(struct bootstrap* b) {
  struct boot_hdr h;
  boot_hdr_fill(&h, b->comm->rank, BOOT_BYE, 0, 0);
  for (int i = 0; i < b->nlinks; i++) link_bye(&b->links[i], &h);
  if (b->out == NULL) return;
  pthread_mutex_lock(&b->out_lock);
  for (int p = 0; p < b->comm->nranks; p++) link_bye(b->out[p], &h);
  pthread_mutex_unlock(&b->out_lock);
}

/* shutdown() on the sockets peers read (the star's, the links this rank
 * dialled): peers learn at once, even before the join. The watcher's
 * in-links close after it stops. */
static void shut_all(struct bootstrap* b, int how) {
  for (int i = 0; i < b->nlinks; i++)
    if (b->links[i].fd >= 0) shutdown(b->links[i].fd, how);
  if (b->out == NULL) return;
  pthread_mutex_lock(&b->out_lock);
  for (int p = 0; p < b->comm->nranks; p++)
    if (b->out[p] != NULL && b->out[p]->fd >= 0) shutdown(b->out[p]->fd, how);
  pthread_mutex_unlock(&b->out_lock);
}

/* Reads what is left without waiting, so that close() sends a FIN after our
 * goodbye rather than a reset that could overtake it. */
static void drain(int fd) {
  char junk[4096];
  for (int i = 0; i < 64 && recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0; i++) {
  }
}

static void watcher_stop(struct bootstrap* b) {
  if (!b->watcher_live) return;
  uint64_t one = 1;
  ssize_t n;
  do {
    n = write(b->stop_fd, &one, sizeof(one));
  } while (n < 0 && errno == EINTR);
  pthread_join(b->watcher, NULL);
  b->watcher_live = 0;
}

void boot_state_free(struct bootstrap* b, int clean) {
  /* A failed communicator says no goodbye: its peers must not take its
   * departure for a clean one. */
  int state = atomic_load(&b->comm->async_error);
  if (state != loomSuccess && state != loomInProgress) clean = 0;
  atomic_store(&b->stopping, 1); /* closes from here on are ours, not failures */
  if (clean) say_bye(b);
  shut_all(b, clean ? SHUT_WR : SHUT_RDWR);
  watcher_stop(b);
  for (int p = 0; b->out != NULL && p < b->comm->nranks; p++) {
    if (b->out[p] != NULL && b->out[p]->fd >= 0) drain(b->out[p]->fd);
    if (b->in[p] != NULL && b->in[p]->fd >= 0) drain(b->in[p]->fd);
  }
  boot_links_free(b);
  for (int i = 0; i < b->nlinks; i++) {
    struct boot_link* l = &b->links[i];
    if (l->fd >= 0) {
      drain(l->fd); /* never waits; makes close send FIN, not a reset */
      close(l->fd);
    }
    free(l->msg);
    pthread_mutex_destroy(&l->send_lock);
  }
  if (b->stop_fd >= 0) close(b->stop_fd);
  while (b->mail != NULL) {
    struct boot_mail* m = b->mail;
    b->mail = m->next;
    free(m);
  }
  pthread_cond_destroy(&b->mail_cond);
  pthread_mutex_destroy(&b->mail_lock);
  pthread_mutex_destroy(&b->notify_lock);
  pthread_mutex_destroy(&b->out_lock);
  free(b->watch_pfd);
  free(b->watch_link);
  free(b->links);
  free((void*)b->left);
  free(b);
}

void boot_fini(struct loom_comm* comm, int clean) {
  if (comm == NULL || comm->boot == NULL) return;
  boot_state_free(comm->boot, clean);
  comm->boot = NULL;
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: rank %d closed (%s)", comm->rank,
            clean ? "goodbye sent" : "abort");
}

/* ---- Failures ----------------------------------------------------------------- */

static struct boot_link* link_of(struct bootstrap* b, int peer) {
  if (b->comm->rank != 0) return peer == 0 ? &b->links[0] : NULL;
  return (peer > 0 && peer < b->nlinks) ? &b->links[peer] : NULL;
}

/* Rank 0 only: sends a notice about peer (type, payload) to the other live
 * ranks (what: "failed", "left"; skip_done: not to ranks that said goodbye
 * themselves). Bounded, and cut short when the bootstrap stops, so the
 * watcher never hangs on a peer that does not read. One notice at a time,
 * from whichever thread: a rank hears of the first failure before the
 * echoes it causes (a rank that failed because of it and then closed its
 * socket). */
static void notice_broadcast(struct bootstrap* b, int peer, uint16_t type, const void* payload,
                             uint32_t len, int skip_done, const char* what) {
  struct deadline dl = deadline_in_ms(BOOT_NOTIFY_MS);
  pthread_mutex_lock(&b->notify_lock);
  for (int r = 1; r < b->nlinks; r++) {
    struct boot_link* l = &b->links[r];
    if (r == peer || l->fd < 0 || (skip_done && l->done) || atomic_load(&l->dead)) continue;
    int err = boot_link_send(l, 0, type, 0, payload, len, &dl, &b->stopping);
    if (err != 0)
      LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: could not tell peer %d that peer %d %s: %s", r, peer,
                what, sock_err_str(err));
  }
  pthread_mutex_unlock(&b->notify_lock);
}

static void failure_broadcast(struct bootstrap* b, int peer, loomResult_t code, const char* why) {
  struct boot_failed f;
  memset(&f, 0, sizeof(f));
  f.rank = peer;
  f.code = code;
  snprintf(f.why, sizeof(f.why), "%s", why);
  notice_broadcast(b, peer, BOOT_FAILED, &f, sizeof(f), 0, "failed");
}

/* So that a rank waiting on peer fails at once instead of at its deadline. */
static void left_broadcast(struct bootstrap* b, int peer) {
  int32_t who = peer;
  notice_broadcast(b, peer, BOOT_LEFT, &who, sizeof(who), 1, "left");
}

void boot_peer_leaves(struct bootstrap* b, int peer) {
  if (peer < 0 || peer >= b->comm->nranks || peer == b->comm->rank) return;
  if (atomic_exchange(&b->left[peer], 1)) return;
  atomic_fetch_add(&b->nleft, 1);
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: rank %d: peer %d left the communicator", b->comm->rank,
            peer);
  if (b->comm->rank == 0) left_broadcast(b, peer);
  boot_mail_wake(b);
  comm_wake(b->comm);
}

void boot_peer_failed(struct bootstrap* b, int peer, loomResult_t code, const char* why) {
  struct boot_link* l = link_of(b, peer);
  if (l != NULL && atomic_exchange(&l->dead, 1)) return; /* reported already */
  if (peer >= 0 && peer < b->comm->nranks) atomic_store(&b->dead[peer], 1);
  if (b->comm->rank != 0) {
    comm_set_failed(b->comm, peer, code, "%s", why);
  } else {
    /* Tell the others first: once local waiters wake, this rank may tear
     * its sockets down, and the notice would be lost. Yet recorded first:
     * a peer that exits on hearing it must not become the cause here. */
    int first = comm_fail_reserve(b->comm, peer, code, "%s", why);
    failure_broadcast(b, peer, code, why);
    if (first)
      comm_fail_publish(b->comm);
    else
      comm_set_failed(b->comm, peer, code, "%s", why); /* wakes; keeps the first cause */
  }
  boot_mail_wake(b);
}

/* ---- The watcher -------------------------------------------------------------- */

/* An in-link that ends is only marked quiet (boot_link.c says why). */
static void in_link_closed(struct bootstrap* b, struct boot_link* l, int err) {
  l->done = 1;
  atomic_store_explicit(&b->in_state[l->peer], BOOT_IN_DONE, memory_order_release);
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: rank %d: link from rank %d ended: %s", b->comm->rank,
            l->peer, l->bye ? "goodbye" : sock_err_str(err));
  boot_mail_wake(b);
}

static void link_closed(struct bootstrap* b, struct boot_link* l, int err) {
  if (l->kind == BOOT_IN) return in_link_closed(b, l, err);
  l->done = 1;
  if (l->bye) {
    LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: peer %d said goodbye and closed", l->peer);
    return;
  }
  if (atomic_load(&b->stopping)) return;
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: connection to peer %d ended: %s", l->peer,
            sock_err_str(err));
  char why[200];
  snprintf(why, sizeof(why),
           "peer %d closed its bootstrap connection without saying goodbye (process died or "
           "aborted)",
           l->peer);
  boot_peer_failed(b, l->peer, loomRemoteError, why);
}

static void link_malformed(struct bootstrap* b, struct boot_link* l, const char* what) {
  l->done = 1;
  if (l->kind == BOOT_IN)
    atomic_store_explicit(&b->in_state[l->peer], BOOT_IN_DONE, memory_order_release);
  if (atomic_load(&b->stopping)) return;
  char why[200];
  snprintf(why, sizeof(why), "peer %d sent a malformed bootstrap message (%s)", l->peer, what);
  boot_peer_failed(b, l->peer, loomRemoteError, why);
}

/* Rank 0 says another rank failed; or, on rank 0, a rank says an operation
 * of it failed because of a peer (boot_report_failure): rank 0 tells all. */
static void failed_report(struct bootstrap* b, const struct boot_link* l,
                          const struct boot_mail* m) {
  struct boot_failed f;
  memcpy(&f, m->data, sizeof(f));
  f.why[sizeof(f.why) - 1] = '\0';
  int peer = (f.rank >= 0 && f.rank < b->comm->nranks) ? f.rank : -1;
  if (b->comm->rank == 0) {
    char why[sizeof(f.why) + 48];
    snprintf(why, sizeof(why), "%s (reported by rank %d)", f.why, l->peer);
    boot_peer_failed(b, peer, loomRemoteError, why);
    return;
  }
  if (peer < 0) /* not a peer's failure: the communicator's (a revoke) */
    comm_set_failed(b->comm, -1, loomRemoteError, "%s (told by rank 0)", f.why);
  else {
    atomic_store(&b->dead[peer], 1);
    comm_set_failed(b->comm, peer, loomRemoteError, "peer %d failed (reported by rank 0): %s", peer,
                    f.why);
  }
  boot_mail_wake(b);
}

void boot_report_failure(struct loom_comm* comm, int peer, const char* why) {
  struct bootstrap* b = comm->boot;
  if (b == NULL) return;
  if (comm->rank == 0) {
    boot_peer_failed(b, peer, loomRemoteError, why);
    return;
  }
  struct boot_failed f;
  memset(&f, 0, sizeof(f));
  f.rank = peer;
  f.code = loomRemoteError;
  snprintf(f.why, sizeof(f.why), "%.*s", (int)sizeof(f.why) - 1, why);
  struct boot_link* l = &b->links[0];
  if (l->fd < 0 || atomic_load(&l->dead) || l->done) return;
  /* A whole message or none, bounded like rank 0's notices. */
  struct deadline dl = deadline_in_ms(BOOT_NOTIFY_MS);
  int err = boot_link_send(l, comm->rank, BOOT_FAILED, 0, &f, sizeof(f), &dl, &b->stopping);
  if (err != 0)
    LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: could not tell rank 0 that peer %d failed: %s", peer,
              sock_err_str(err));
}

/* Checks a complete header; allocates room for the payload. */
static int link_hdr_ok(struct bootstrap* b, struct boot_link* l) {
  const struct boot_hdr* h = &l->hdr;
  char why[120];
  int ok = boot_hdr_check(h, BOOT_MAX_PAYLOAD, why, sizeof(why)) == loomSuccess;
  if (ok && h->from != l->peer) {
    snprintf(why, sizeof(why), "a %s message that claims to come from rank %d",
             boot_type_name(h->type), h->from);
    ok = 0;
  }
  int bye = h->type == BOOT_BYE && h->length == 0;
  int fits = bye || h->type == BOOT_P2P;
  if (l->kind == BOOT_IN) /* the table, from this rank's tree parent only */
    fits = fits || (h->type == BOOT_TABLE && l->peer == boot_tree_parent(b->comm->rank) &&
                    h->length == boot_table_len(b->comm->nranks));
  else
    fits = fits || (h->type == BOOT_DATA) || (h->type == BOOT_PING && h->length == 0) ||
           (h->type == BOOT_FAILED && (l->peer == 0 || b->comm->rank == 0) &&
            h->length == sizeof(struct boot_failed)) ||
           (h->type == BOOT_LEFT && l->peer == 0 && h->length == sizeof(int32_t));
  if (ok && !fits) {
    snprintf(why, sizeof(why), "unexpected %s message of %u bytes", boot_type_name(h->type),
             h->length);
    ok = 0;
  }
  if (!ok) {
    link_malformed(b, l, why);
    return 0;
  }
  l->msg = malloc(sizeof(*l->msg) + h->length);
  if (l->msg == NULL) {
    snprintf(why, sizeof(why), "no memory for its %u-byte message", h->length);
    link_malformed(b, l, why);
    return 0;
  }
  l->msg->next = NULL;
  l->msg->type = h->type;
  l->msg->tag = h->tag;
  l->msg->from = l->peer;
  l->msg->len = h->length;
  return 1;
}

static void link_dispatch(struct bootstrap* b, struct boot_link* l) {
  struct boot_mail* m = l->msg;
  l->msg = NULL;
  l->got = 0;
  if (l->hdr.type == BOOT_DATA || l->hdr.type == BOOT_P2P || l->hdr.type == BOOT_TABLE)
    return boot_mail_put(b, m);
  if (l->hdr.type == BOOT_PING) {
    /* Only its arrival matters (heard_ns). */
  } else if (l->hdr.type == BOOT_BYE) {
    l->bye = 1;
    LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: peer %d said goodbye", l->peer);
    /* Its last word on this link: nothing more comes by it. */
    if (l->kind == BOOT_IN)
      atomic_store_explicit(&b->in_state[l->peer], BOOT_IN_DONE, memory_order_release);
    boot_peer_leaves(b, l->peer);
  } else if (l->hdr.type == BOOT_LEFT) {
    int32_t who;
    memcpy(&who, m->data, sizeof(who));
    boot_peer_leaves(b, who);
  } else {
    failed_report(b, l, m);
  }
  free(m);
}

/* Reads what link l has, without waiting; dispatches complete messages. */
static void link_read(struct bootstrap* b, struct boot_link* l) {
  const size_t hdr_len = sizeof(l->hdr);
  while (!l->done) {
    uint8_t* dst;
    size_t want;
    if (l->got < hdr_len) {
      dst = (uint8_t*)&l->hdr + l->got;
      want = hdr_len - l->got;
    } else {
      dst = l->msg->data + (l->got - hdr_len);
      want = hdr_len + l->hdr.length - l->got;
    }
    ssize_t n = recv(l->fd, dst, want, MSG_DONTWAIT);
    if (n == 0) return link_closed(b, l, SOCK_EOF);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0) return link_closed(b, l, errno);
    l->heard_ns = time_now_ns();
    l->got += (size_t)n;
    if (l->got == hdr_len && !link_hdr_ok(b, l)) return;
    if (l->got == hdr_len + l->hdr.length) link_dispatch(b, l);
  }
}

/* Heartbeats: every rank pings the other end of each of its links, and a
 * link silent for silence_ms has failed, as a closed one has. This is what
 * notices a host or a network link that went down: TCP itself would stay
 * quiet for many minutes. Rank 0 then tells the others, so every rank names
 * the unreachable one. Pings never wait: a full socket skips a beat. */
static void heartbeat(struct bootstrap* b) {
  uint64_t now = time_now_ns();
  if (atomic_load(&b->stopping)) return;
  int ping = now - b->pinged_ns >= (uint64_t)b->ping_ms * 1000000u;
  if (ping) b->pinged_ns = now;
  struct boot_hdr h;
  boot_hdr_fill(&h, b->comm->rank, BOOT_PING, 0, 0);
  for (int i = 0; i < b->nlinks; i++) {
    struct boot_link* l = &b->links[i];
    if (l->fd < 0 || l->done || atomic_load(&l->dead)) continue;
    /* A sender may hold the lock for long (a big message to a slow
     * reader): skip a beat rather than stop reading. */
    if (ping && pthread_mutex_trylock(&l->send_lock) == 0) {
      sock_send_nowait(l->fd, &h, sizeof(h));
      pthread_mutex_unlock(&l->send_lock);
    }
    if (l->bye || now - l->heard_ns <= (uint64_t)b->silence_ms * 1000000u) continue;
    l->done = 1;
    char why[200];
    snprintf(why, sizeof(why),
             "peer %d has sent nothing on its bootstrap connection for %d ms: its host, its "
             "network link or the process is down or stalled",
             l->peer, b->silence_ms);
    boot_peer_failed(b, l->peer, loomRemoteError, why);
  }
}

static void heartbeat_init(struct bootstrap* b) {
  long long s = params_get()->heartbeat_ms;
  if (s <= 0) s = LOOM_MIN(LOOM_MAX(b->comm->timeout_ms / 2, 3000LL), 30000LL);
  b->silence_ms = (int)LOOM_MIN(s, (long long)INT32_MAX);
  b->ping_ms = LOOM_MAX(b->silence_ms / 5, 1);
  b->pinged_ns = time_now_ns();
  for (int i = 0; i < b->nlinks; i++) b->links[i].heard_ns = b->pinged_ns;
}

/* The stop eventfd, the star's sockets, the links' listener and the
 * in-links: who to poll now. */
static int watch_fill(struct bootstrap* b) {
  int n = 0;
  b->watch_pfd[n++] = (struct pollfd){.fd = b->stop_fd, .events = POLLIN};
  for (int i = 0; i < b->nlinks; i++) {
    if (b->links[i].fd < 0 || b->links[i].done) continue;
    b->watch_pfd[n] = (struct pollfd){.fd = b->links[i].fd, .events = POLLIN};
    b->watch_link[n++] = &b->links[i];
  }
  if (b->lsn_set != NULL) {
    b->watch_pfd[n] = (struct pollfd){.fd = accept_set_fd(b->lsn_set), .events = POLLIN};
    b->watch_link[n++] = NULL;
  }
  for (int k = 0; k < b->nin; k++) {
    struct boot_link* l = b->in[b->in_peers[k]];
    if (l->done) continue;
    b->watch_pfd[n] = (struct pollfd){.fd = l->fd, .events = POLLIN};
    b->watch_link[n++] = l;
  }
  return n;
}

static void* watcher_main(void* arg) {
  struct bootstrap* b = arg;
  for (;;) {
    int n = watch_fill(b);
    /* The stop eventfd is the way out; the timeout paces the heartbeats
     * and the deadlines of links' hellos. */
    int timeout = b->ping_ms;
    int t = b->lsn_set != NULL ? accept_set_timeout_ms(b->lsn_set) : -1;
    if (t >= 0 && t < timeout) timeout = t;
    int ready = poll(b->watch_pfd, (nfds_t)n, timeout);
    if (ready < 0) {
      if (errno == EINTR) continue;
      comm_set_failed(b->comm, -1, loomSystemError, "bootstrap: the watcher's poll failed: %s",
                      strerror(errno));
      boot_mail_wake(b);
      return NULL;
    }
    if (b->watch_pfd[0].revents) return NULL;
    for (int k = 1; k < n && ready > 0; k++)
      if (b->watch_pfd[k].revents && b->watch_link[k] != NULL) link_read(b, b->watch_link[k]);
    if (b->lsn_set != NULL) boot_link_accept(b); /* never blocks; also expires hellos */
    heartbeat(b);
  }
}

loomResult_t boot_watcher_start(struct bootstrap* b) {
  struct loom_comm* comm = b->comm;
  size_t cap = 2 + (size_t)b->nlinks + (b->in != NULL ? (size_t)comm->nranks : 0);
  b->watch_pfd = calloc(cap, sizeof(*b->watch_pfd));
  b->watch_link = calloc(cap, sizeof(*b->watch_link));
  if (b->watch_pfd == NULL || b->watch_link == NULL)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: out of memory for the watcher");
  if (b->lsn_fd >= 0) LOOM_CHECK(boot_link_accept_start(b));
  b->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (b->stop_fd < 0)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError, "bootstrap: eventfd failed: %s",
                       strerror(errno));
  heartbeat_init(b);
  int rc = pthread_create(&b->watcher, NULL, watcher_main, b);
  if (rc != 0)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: cannot start the watcher thread: %s", strerror(rc));
  b->watcher_live = 1;
  char name[16];
  snprintf(name, sizeof(name), "loom-boot-%d", comm->rank);
  pthread_setname_np(b->watcher, name);
  return loomSuccess;
}
