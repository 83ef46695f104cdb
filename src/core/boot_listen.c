/* boot_listen.c - the listening sockets of this process's rendezvous, and
 * the ids (secrets) each one serves.
 *
 * Ids share listeners. Every id loomGetUniqueId makes on an interface uses
 * one listening socket of this process: the id draws a new secret and
 * registers it here (a claim), so an id costs no descriptor. The listener
 * closes once no id made here waits for its rank 0 any more. An id named
 * by an address (loomCommInitFromEnv) gets a listener of its own on that
 * address, and an id made elsewhere gets one when its rank 0 claims it.
 *
 * Serving needs no thread of its own. Whichever rank-0 rendezvous runs
 * polls the listener and its set of pending connections (core/accept.h,
 * which bounds them and gives each a deadline for its hello); a complete
 * hello goes to the claim whose secret it carries, on a queue under the
 * registry's lock, and the listener's condition variable wakes the
 * rendezvous waiting on that queue. A hello whose secret no claim has is a
 * stranger's. The other rendezvous wait on the condition variable and take
 * over polling whenever the poller steps back: after every slice, and for
 * good when its rendezvous ends. Hellos for an id whose rank 0 has not
 * started yet wait on its queue. When the last running rendezvous ends,
 * the pending connections close (when other ids wait, once the youngest
 * has had BOOT_DRAIN_MS for its hello: it may be one of their ranks); the
 * ranks of ids still waiting stay in the kernel's backlog until their rank
 * 0 comes, which costs no descriptor. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/accept.h"
#include "core/boot_internal.h"
#include "core/checks.h"

/* A connection has this long to complete its hello. */
#define BOOT_HELLO_MS 10000
/* A poller steps back, and a waiter looks at its abort flag, this often. */
#define BOOT_POLL_SLICE_MS 100
/* When the last rendezvous ends while other ids wait, a connection accepted
 * less than this ago may be one of their ranks with its hello on the way. */
#define BOOT_DRAIN_MS 500

/* An id registered with a listener. */
struct boot_claim {
  struct boot_claim* next;
  struct boot_listener* lsn;
  uint64_t secret;
  int active; /* its rank 0's rendezvous runs */
  struct boot_arrival* head;
  struct boot_arrival** tail;
};

struct boot_listener {
  struct boot_listener* next;
  union sock_addr addr; /* as ids name it */
  int shared;           /* loomGetUniqueId's for this interface */
  int fd;
  int nclaims, nactive;
  int polling;            /* a rendezvous polls set now */
  struct accept_set* set; /* while nactive > 0; used only by the poller */
  pthread_cond_t cond;    /* CLOCK_MONOTONIC: arrivals, and the poller stepping back */
  struct boot_claim* claims;
};

static pthread_mutex_t lsn_lock = PTHREAD_MUTEX_INITIALIZER;
static struct boot_listener* lsn_head;

/* ---- Registry, under lsn_lock ------------------------------------------------------------ */

static int addr_same(const union sock_addr* a, const union sock_addr* b, int port_too) {
  if (a->sa.sa_family != b->sa.sa_family) return 0;
  if (a->sa.sa_family == AF_INET6)
    return memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, 16) == 0 &&
           (!port_too || a->sin6.sin6_port == b->sin6.sin6_port);
  return a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr &&
         (!port_too || a->sin.sin_port == b->sin.sin_port);
}

/* shared: the interface's shared listener, any port; else the exact address. */
static struct boot_listener* listener_find(const union sock_addr* addr, int shared) {
  for (struct boot_listener* l = lsn_head; l != NULL; l = l->next)
    if (shared ? l->shared && addr_same(&l->addr, addr, 0) : addr_same(&l->addr, addr, 1)) return l;
  return NULL;
}

/* Listens on *addr (port 0: any; the port chosen is written back). */
static loomResult_t listener_open(struct loom_comm* comm, union sock_addr* addr, int shared,
                                  struct boot_listener** out) {
  struct boot_listener* l = calloc(1, sizeof(*l));
  if (l == NULL)
    return err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError,
                       "bootstrap: out of memory for a listener");
  /* The listener keeps the address ids name, which is what the other ranks
   * dial, even when the socket ended up bound to the wildcard. */
  union sock_addr bound = *addr;
  loomResult_t res = sock_listen(comm, &bound, &l->fd);
  if (res != loomSuccess) {
    free(l);
    return res;
  }
  if (shared) *addr = bound;
  l->addr = *addr;
  l->shared = shared;
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&l->cond, &attr);
  pthread_condattr_destroy(&attr);
  l->next = lsn_head;
  lsn_head = l;
  char text[SOCK_ADDR_STRLEN];
  LOOM_INFO(SUB_BOOTSTRAP, "bootstrap: listening on %s%s",
            sock_addr_str(&bound, text, sizeof(text)),
            shared ? " (shared by this process's ids)" : "");
  *out = l;
  return loomSuccess;
}

static void listener_close(struct boot_listener* l) {
  for (struct boot_listener** p = &lsn_head; *p != NULL; p = &(*p)->next)
    if (*p == l) {
      *p = l->next;
      break;
    }
  sock_close(l->fd);
  pthread_cond_destroy(&l->cond);
  free(l);
}

static struct boot_claim* claim_find(const struct boot_listener* l, uint64_t secret) {
  for (struct boot_claim* c = l->claims; c != NULL; c = c->next)
    if (c->secret == secret) return c;
  return NULL;
}

static struct boot_claim* claim_add(struct boot_listener* l, uint64_t secret) {
  struct boot_claim* c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->lsn = l;
  c->secret = secret;
  c->tail = &c->head;
  c->next = l->claims;
  l->claims = c;
  l->nclaims++;
  return c;
}

static void arrivals_close(struct boot_arrival* a) {
  while (a != NULL) {
    struct boot_arrival* next = a->next;
    sock_close(a->fd);
    free(a);
    a = next;
  }
}

/* Forgets c; the last running rendezvous takes the pending set with it, the
 * last claim the listener. */
static void claim_drop(struct boot_claim* c) {
  struct boot_listener* l = c->lsn;
  for (struct boot_claim** p = &l->claims; *p != NULL; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  arrivals_close(c->head);
  l->nclaims--;
  if (c->active && --l->nactive == 0) {
    accept_set_destroy(l->set); /* nobody polls: every poller holds an active claim */
    l->set = NULL;
  }
  free(c);
  if (l->nclaims == 0) listener_close(l);
}

/* ---- Ids ---------------------------------------------------------------------------------- */

loomResult_t boot_listen_register(union sock_addr* addr, int shared, uint64_t secret) {
  loomResult_t res = loomSuccess;
  pthread_mutex_lock(&lsn_lock);
  struct boot_listener* l = listener_find(addr, shared);
  if (l == NULL) res = listener_open(NULL, addr, shared, &l);
  if (res == loomSuccess && claim_add(l, secret) == NULL) {
    if (l->nclaims == 0) listener_close(l);
    res = err_set_sub(NULL, SUB_BOOTSTRAP, loomSystemError, "bootstrap: out of memory for an id");
  }
  if (res == loomSuccess) *addr = l->addr;
  pthread_mutex_unlock(&lsn_lock);
  return res;
}

void boot_listen_forget(const union sock_addr* addr, uint64_t secret) {
  pthread_mutex_lock(&lsn_lock);
  struct boot_listener* l = listener_find(addr, 0);
  struct boot_claim* c = l ? claim_find(l, secret) : NULL;
  if (c != NULL && !c->active) claim_drop(c);
  pthread_mutex_unlock(&lsn_lock);
}

/* ---- Rendezvous ------------------------------------------------------------------------- */

/* How long a hello is, from its header (accept_hello_len_fn). */
static long hello_len(const void* buf, size_t got, char* why, size_t why_len) {
  struct boot_hdr h;
  if (got < sizeof(h)) return (long)sizeof(h);
  memcpy(&h, buf, sizeof(h));
  if (boot_hdr_check(&h, sizeof(struct boot_hello), why, why_len) != loomSuccess) return -1;
  if (h.type != BOOT_HELLO) {
    snprintf(why, why_len, "expected a hello, got a %s message", boot_type_name(h.type));
    return -1;
  }
  return (long)(sizeof(h) + h.length);
}

/* A complete hello (accept_hello_fn), on the poller's thread: to the claim
 * whose secret it carries, else refused as a stranger's. */
static void hello_route(void* arg, int fd, const union sock_addr* addr, const void* buf,
                        size_t len) {
  struct boot_listener* l = arg;
  size_t n = len - sizeof(struct boot_hdr); /* at most a struct boot_hello: hello_len saw to it */
  struct boot_arrival* a = NULL;
  const char* why = "wrong secret";
  if (n < sizeof(uint64_t)) why = "short hello (no secret)";
  if (n >= sizeof(uint64_t) && (a = calloc(1, sizeof(*a))) == NULL) why = "out of memory";
  if (a != NULL) {
    a->fd = fd;
    a->addr = *addr;
    a->len = n;
    memcpy(&a->hello, (const uint8_t*)buf + sizeof(struct boot_hdr), n);
    pthread_mutex_lock(&lsn_lock);
    struct boot_claim* c = claim_find(l, a->hello.secret);
    if (c != NULL) {
      *c->tail = a;
      c->tail = &a->next;
      pthread_cond_broadcast(&l->cond);
    }
    pthread_mutex_unlock(&lsn_lock);
    if (c != NULL) return;
    free(a);
  }
  accept_set_refuse(l->set, fd, addr, why);
}

loomResult_t boot_listen_claim(struct loom_comm* comm, const union sock_addr* addr, uint64_t secret,
                               struct boot_claim** out) {
  static const struct accept_cfg cfg = {
      .who = "bootstrap",
      .subsys = SUB_BOOTSTRAP,
      .hello_max = sizeof(struct boot_hdr) + sizeof(struct boot_hello),
      .hello_len = hello_len,
      .hello_ms = BOOT_HELLO_MS};
  loomResult_t res = loomSuccess;
  pthread_mutex_lock(&lsn_lock);
  struct boot_listener* l = listener_find(addr, 0);
  union sock_addr named = *addr;
  /* An id made elsewhere, or by boot_id_from_addr without listen. */
  if (l == NULL) res = listener_open(comm, &named, 0, &l);
  struct boot_claim* c = res == loomSuccess ? claim_find(l, secret) : NULL;
  if (c != NULL && c->active)
    res = err_set_sub(comm, SUB_BOOTSTRAP, loomInvalidUsage,
                      "bootstrap: another rank 0 of this process uses the same unique id");
  if (res == loomSuccess && c == NULL && (c = claim_add(l, secret)) == NULL)
    res = err_set_sub(comm, SUB_BOOTSTRAP, loomSystemError, "bootstrap: out of memory");
  if (res == loomSuccess && l->nactive == 0) res = accept_set_create(comm, l->fd, &cfg, &l->set);
  if (res == loomSuccess) {
    c->active = 1;
    l->nactive++;
    *out = c;
  } else if (c != NULL && !c->active) {
    claim_drop(c);
  } else if (l != NULL && l->nclaims == 0) {
    listener_close(l);
  }
  pthread_mutex_unlock(&lsn_lock);
  return res;
}

/* One slice of polling, without the lock: only the poller touches l->set. */
static void listener_poll(struct boot_listener* l, int slice_ms) {
  int t = accept_set_timeout_ms(l->set);
  if (t >= 0 && t < slice_ms) slice_ms = t;
  struct pollfd p = {.fd = accept_set_fd(l->set), .events = POLLIN, .revents = 0};
  poll(&p, 1, slice_ms);
  accept_set_run(l->set, hello_route, l);
}

static void cond_wait_ms(pthread_cond_t* cond, long long ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  pthread_cond_timedwait(cond, &lsn_lock, &ts);
}

struct boot_arrival* boot_listen_wait(struct boot_claim* c, const struct deadline* dl,
                                      const _Atomic int* abort_flag) {
  struct boot_listener* l = c->lsn;
  struct boot_arrival* got = NULL;
  pthread_mutex_lock(&lsn_lock);
  for (;;) {
    if (c->head != NULL) {
      got = c->head;
      c->head = NULL;
      c->tail = &c->head;
      break;
    }
    if (atomic_load(abort_flag) || deadline_passed(dl)) break;
    int slice = (int)LOOM_MIN(deadline_left_ms(dl), BOOT_POLL_SLICE_MS);
    if (l->polling) {
      cond_wait_ms(&l->cond, slice);
      continue;
    }
    l->polling = 1;
    pthread_mutex_unlock(&lsn_lock);
    listener_poll(l, slice);
    pthread_mutex_lock(&lsn_lock);
    l->polling = 0;
    pthread_cond_broadcast(&l->cond); /* another may take over */
  }
  pthread_mutex_unlock(&lsn_lock);
  return got;
}

void boot_listen_release(struct boot_claim* c) {
  struct boot_listener* l = c->lsn;
  pthread_mutex_lock(&lsn_lock);
  /* The last rendezvous running takes the pending set with it. Another id
   * may have a rank whose connection is in the set with its hello still on
   * the way (accepted a moment ago): let those arrive first. */
  if (l->nactive == 1 && l->nclaims > 1 && accept_set_pending(l->set) > 0) {
    while (l->polling) cond_wait_ms(&l->cond, BOOT_POLL_SLICE_MS);
    l->polling = 1;
    pthread_mutex_unlock(&lsn_lock);
    accept_set_drain(l->set, hello_route, l, BOOT_DRAIN_MS);
    pthread_mutex_lock(&lsn_lock);
    l->polling = 0;
    pthread_cond_broadcast(&l->cond);
  }
  claim_drop(c);
  pthread_mutex_unlock(&lsn_lock);
}
