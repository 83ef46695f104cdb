/* accept.c - the bounded set of connections waiting for their hello (see
 * accept.h). */
#include "core/accept.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/checks.h"
#include "core/util.h"

#define LISTENER_TAG UINT64_MAX
#define RUN_EVENTS 64
#define LOG_PERIOD_NS 1000000000ull

struct pending {
  int fd; /* -1: the slot is free */
  union sock_addr addr;
  uint64_t heard_ns; /* accepted, or the last byte came */
  uint64_t heard;    /* the same as an order: ties of the clock broken */
  uint64_t due_ns;   /* the hello's deadline */
  size_t got;
  uint8_t* buf; /* cfg.hello_max bytes */
};

/* What has been said about refusals and evictions lately. */
struct refusal_log {
  uint64_t window_ns;  /* the current second's start */
  int lines;           /* lines of their own in it */
  uint64_t summary_ns; /* the last summary, or the first event it counts */
  int quiet;           /* refusals with no line of their own since */
  int evicted;         /* evictions and drops since */
  union sock_addr last_addr;
  char last_why[96];
};

struct accept_set {
  struct accept_cfg cfg;
  int listen_fd, ep_fd;
  int listening;      /* the listener is in ep_fd's watch */
  uint64_t resume_ns; /* while not: when it goes back */
  int rest_for_room;  /* or sooner, once a pending connection leaves */
  int cap, npending;
  uint64_t heard; /* the last pending's heard */
  struct pending* slots;
  int* free_slots; /* a stack of cap - npending indices */
  uint8_t* bufs;
  struct refusal_log log;
  char who[64];   /* cfg.who points here: the caller's text may not outlive the call */
  int spare_held; /* counted in spare_users */
};

/* ---- The spare descriptor ------------------------------------------------------ */

/* One per process while any accept set exists (closed with the last, so that a process whose
 * communicators are all destroyed holds no descriptor of Loom's): at the descriptor limit,
 * with no stranger to evict, it is closed so that one accept can take the newcomer off the
 * backlog and close it, instead of leaving the listener readable forever. */
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static int spare_fd = -1;
static int spare_users; /* accept sets alive; under spare_lock */

static void spare_open(void) {
  pthread_mutex_lock(&spare_lock);
  spare_users++;
  if (spare_fd < 0) spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  pthread_mutex_unlock(&spare_lock);
}

static void spare_close(void) {
  pthread_mutex_lock(&spare_lock);
  if (--spare_users == 0 && spare_fd >= 0) {
    close(spare_fd);
    spare_fd = -1;
  }
  pthread_mutex_unlock(&spare_lock);
}

/* Returns 1 when a connection was taken off the backlog and closed. */
static int spare_drop(int listen_fd, union sock_addr* addr_out) {
  int dropped = 0;
  pthread_mutex_lock(&spare_lock);
  if (spare_fd >= 0) {
    close(spare_fd);
    socklen_t len = sizeof(*addr_out);
    int fd = accept4(listen_fd, &addr_out->sa, &len, SOCK_CLOEXEC);
    if (fd >= 0) {
      close(fd);
      dropped = 1;
    }
    /* Another thread may take the freed slot first: then there is no spare
     * until spare_open runs again. */
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  pthread_mutex_unlock(&spare_lock);
  return dropped;
}

/* ---- Logging --------------------------------------------------------------------- */

static void log_summary(struct accept_set* s, uint64_t now) {
  struct refusal_log* l = &s->log;
  if (l->quiet + l->evicted > 0) {
    char text[SOCK_ADDR_STRLEN] = "the listener";
    if (l->last_addr.sa.sa_family != 0) sock_addr_str(&l->last_addr, text, sizeof(text));
    int n = l->quiet + l->evicted;
    LOOM_WARN(s->cfg.subsys,
              "%s: closed %d connection%s in the last %.1f s without a line of their own (%d "
              "evicted or dropped to stay within %d pending and the descriptor limit, %d refused "
              "past %d lines a second); the last, from %s: %s",
              s->cfg.who, n, n == 1 ? "" : "s", (double)(now - l->summary_ns) / 1e9, l->evicted,
              s->cap, l->quiet, ACCEPT_LOG_BURST, text, l->last_why);
  }
  l->quiet = l->evicted = 0;
  l->summary_ns = now;
}

static void log_note(struct accept_set* s, const union sock_addr* addr, const char* why) {
  s->log.last_addr = *addr;
  snprintf(s->log.last_why, sizeof(s->log.last_why), "%s", why);
}

/* A refusal with its reason: a line of its own while the second's lines
 * last, else counted. */
static void log_refusal(struct accept_set* s, const union sock_addr* addr, const char* why) {
  struct refusal_log* l = &s->log;
  uint64_t now = time_now_ns();
  if (now - l->window_ns >= LOG_PERIOD_NS) {
    l->window_ns = now;
    l->lines = 0;
  }
  if (l->lines < ACCEPT_LOG_BURST) {
    char text[SOCK_ADDR_STRLEN];
    l->lines++;
    LOOM_WARN(s->cfg.subsys, "%s: refused a connection from %s: %s", s->cfg.who,
              sock_addr_str(addr, text, sizeof(text)), why);
    return;
  }
  if (l->quiet + l->evicted == 0) l->summary_ns = now;
  l->quiet++;
  log_note(s, addr, why);
}

static void log_eviction(struct accept_set* s, const union sock_addr* addr, const char* why) {
  if (s->log.quiet + s->log.evicted == 0) s->log.summary_ns = time_now_ns();
  s->log.evicted++;
  log_note(s, addr, why);
}

/* A summary once a second at most, when there is something to say. */
static void log_tick(struct accept_set* s) {
  uint64_t now = time_now_ns(); /* not older than what the counts saw */
  if (s->log.quiet + s->log.evicted > 0 && now - s->log.summary_ns >= LOG_PERIOD_NS)
    log_summary(s, now);
}

/* ---- Slots ------------------------------------------------------------------------- */

static int slot_take(struct accept_set* s) {
  int i = s->free_slots[s->cap - 1 - s->npending];
  s->npending++;
  return i;
}

/* Forgets slot i; its descriptor is closed or handed on by the caller. */
static void slot_free(struct accept_set* s, int i) {
  s->slots[i].fd = -1;
  s->npending--;
  s->free_slots[s->cap - 1 - s->npending] = i;
}

static void slot_close(struct accept_set* s, int i, const char* why, int evicted) {
  struct pending* p = &s->slots[i];
  if (evicted)
    log_eviction(s, &p->addr, why);
  else
    log_refusal(s, &p->addr, why);
  sock_close(p->fd); /* leaves ep_fd with it */
  slot_free(s, i);
}

/* The connection silent the longest, or -1. */
static int slot_idlest(const struct accept_set* s) {
  int best = -1;
  for (int i = 0; i < s->cap; i++)
    if (s->slots[i].fd >= 0 && (best < 0 || s->slots[i].heard < s->slots[best].heard)) best = i;
  return best;
}

/* Reads what slot i has sent; hands the hello on once it is complete. */
static void slot_read(struct accept_set* s, int i, accept_hello_fn done, void* arg) {
  struct pending* p = &s->slots[i];
  char why[128];
  for (;;) {
    long want = s->cfg.hello_len(p->buf, p->got, why, sizeof(why));
    if (want < 0 || (size_t)want > s->cfg.hello_max || (size_t)want < p->got) {
      if (want >= 0) snprintf(why, sizeof(why), "a hello of %ld bytes", want);
      return slot_close(s, i, why, 0);
    }
    if ((size_t)want == p->got) {
      epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, p->fd, NULL);
      int fd = p->fd;
      done(arg, fd, &p->addr, p->buf, p->got);
      return slot_free(s, i); /* the buffer was the callee's to read until here */
    }
    ssize_t n = recv(p->fd, p->buf + p->got, (size_t)want - p->got, MSG_DONTWAIT);
    if (n > 0) {
      p->got += (size_t)n;
      p->heard_ns = time_now_ns();
      p->heard = ++s->heard;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n == 0)
      snprintf(why, sizeof(why), "closed after %zu bytes, before a complete hello", p->got);
    else
      snprintf(why, sizeof(why), "%s before a complete hello", strerror(errno));
    return slot_close(s, i, why, 0);
  }
}

static void slots_expire(struct accept_set* s, uint64_t now) {
  char why[96];
  snprintf(why, sizeof(why), "no complete hello in time (%lld ms)", s->cfg.hello_ms);
  for (int i = 0; i < s->cap && s->npending > 0; i++)
    if (s->slots[i].fd >= 0 && now >= s->slots[i].due_ns) slot_close(s, i, why, 0);
}

/* ---- Accepting -------------------------------------------------------------------- */

static void listener_rest(struct accept_set* s, uint64_t until_ns, int for_room) {
  if (s->listening) epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, s->listen_fd, NULL);
  s->listening = 0;
  s->resume_ns = until_ns;
  s->rest_for_room = for_room;
}

static int listener_watch(struct accept_set* s) {
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = LISTENER_TAG};
  if (!s->listening && epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, s->listen_fd, &ev) != 0) return -1;
  s->listening = 1;
  return 0;
}

/* The descriptor limit now (a process may change it at any time). */
static long long fd_limit(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 1 << 20;
  return (long long)r.rlim_cur;
}

/* Makes room for one more. Returns 0, or -1 when the listener must rest
 * until the oldest may be evicted. */
static int make_room(struct accept_set* s) {
  if (s->npending < s->cap) return 0;
  int i = slot_idlest(s);
  uint64_t grace_ns = (uint64_t)ACCEPT_GRACE_MS * 1000000u;
  if (s->slots[i].heard_ns + grace_ns > time_now_ns()) { /* heard may be newer than a run's now */
    listener_rest(s, s->slots[i].heard_ns + grace_ns, 1);
    return -1;
  }
  slot_close(s, i, "silent the longest while the pending connections were at their bound", 1);
  return 0;
}

/* 1 when a connection waits in the backlog. (accept takes a descriptor
 * before it looks: at the limit it fails with EMFILE even when none waits.) */
static int listener_has_one(const struct accept_set* s) {
  struct pollfd p = {.fd = s->listen_fd, .events = POLLIN, .revents = 0};
  return poll(&p, 1, 0) == 1;
}

/* accept failed with err. Returns 1 to try again, 0 to stop for now. */
static int accept_failed(struct accept_set* s, int err, uint64_t now) {
  if (err == EINTR || err == ECONNABORTED || err == EPROTO) return 1;
  if (err == EAGAIN || err == EWOULDBLOCK) return 0;
  if ((err == EMFILE || err == ENFILE) && !listener_has_one(s)) return 0;
  if (err == EMFILE || err == ENFILE) {
    int i = slot_idlest(s);
    if (i >= 0) {
      slot_close(s, i, "silent the longest when the process ran out of descriptors", 1);
      return 1;
    }
    union sock_addr a;
    memset(&a, 0, sizeof(a));
    if (spare_drop(s->listen_fd, &a)) {
      log_eviction(s, &a, "dropped on arrival: the process is out of descriptors");
      return 1;
    }
  }
  union sock_addr none;
  memset(&none, 0, sizeof(none));
  log_eviction(s, &none, strerror(err));
  listener_rest(s, now + (uint64_t)ACCEPT_REST_MS * 1000000u, 0);
  return 0;
}

/* One new connection: into a slot, and its hello read at once if it is
 * there already (a rank's usually is). */
static void pending_add(struct accept_set* s, int fd, const union sock_addr* addr,
                        accept_hello_fn done, void* arg, uint64_t now) {
  int i = slot_take(s);
  struct pending* p = &s->slots[i];
  p->fd = fd;
  p->addr = *addr;
  p->heard_ns = now;
  p->heard = ++s->heard;
  p->due_ns = now + (uint64_t)s->cfg.hello_ms * 1000000u;
  p->got = 0;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)i};
  if (epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, fd, &ev) != 0) return slot_close(s, i, strerror(errno), 1);
  slot_read(s, i, done, arg);
}

static void accept_all(struct accept_set* s, accept_hello_fn done, void* arg, uint64_t now) {
  long long near = fd_limit();
  near -= near / 8;
  for (;;) {
    if (make_room(s) != 0) return;
    union sock_addr a;
    socklen_t len = sizeof(a);
    int fd = accept4(s->listen_fd, &a.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (accept_failed(s, errno, now)) continue;
      return;
    }
    /* As the connecting side's (sock.c): without it each small reply waits
     * for the peer's delayed acknowledgement, 40 ms at a time. */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* accept hands out the lowest free number: past `near`, nearly every
     * descriptor is taken. */
    int i = fd >= near ? slot_idlest(s) : -1;
    if (i >= 0)
      slot_close(s, i, "silent the longest when the process neared its descriptor limit", 1);
    pending_add(s, fd, &a, done, arg, now);
  }
}

/* ---- The set ------------------------------------------------------------------------ */

loomResult_t accept_set_create(struct loom_comm* comm, int listen_fd, const struct accept_cfg* cfg,
                               struct accept_set** out) {
  struct accept_set* s = calloc(1, sizeof(*s));
  if (s == NULL) goto fail_mem;
  s->cfg = *cfg;
  snprintf(s->who, sizeof(s->who), "%s", cfg->who);
  s->cfg.who = s->who;
  s->listen_fd = listen_fd;
  s->cap = (int)LOOM_MAX(4, LOOM_MIN(ACCEPT_MAX_PENDING, fd_limit() / 8));
  s->slots = calloc((size_t)s->cap, sizeof(*s->slots));
  s->free_slots = calloc((size_t)s->cap, sizeof(*s->free_slots));
  s->bufs = malloc((size_t)s->cap * cfg->hello_max);
  if (s->slots == NULL || s->free_slots == NULL || s->bufs == NULL) goto fail_mem;
  for (int i = 0; i < s->cap; i++) {
    s->slots[i].fd = -1;
    s->slots[i].buf = s->bufs + (size_t)i * cfg->hello_max;
    s->free_slots[i] = i;
  }
  s->ep_fd = epoll_create1(EPOLL_CLOEXEC);
  if (s->ep_fd < 0 || listener_watch(s) != 0) {
    int e = errno;
    if (s->ep_fd >= 0) close(s->ep_fd);
    s->ep_fd = -1;
    accept_set_destroy(s);
    return err_set_sub(comm, cfg->subsys, loomSystemError, "%s: epoll for accepting failed: %s",
                       cfg->who, strerror(e));
  }
  spare_open();
  s->spare_held = 1;
  *out = s;
  return loomSuccess;
fail_mem:
  if (s != NULL) s->ep_fd = -1;
  accept_set_destroy(s);
  return err_set_sub(comm, cfg->subsys, loomSystemError,
                     "%s: out of memory for the pending connections", cfg->who);
}

void accept_set_destroy(struct accept_set* s) {
  if (s == NULL) return;
  for (int i = 0; s->slots != NULL && i < s->cap; i++)
    if (s->slots[i].fd >= 0) {
      log_eviction(s, &s->slots[i].addr, "still silent when the listener closed");
      sock_close(s->slots[i].fd);
    }
  if (s->slots != NULL) log_summary(s, time_now_ns());
  if (s->ep_fd >= 0) close(s->ep_fd);
  free(s->slots);
  free(s->free_slots);
  free(s->bufs);
  if (s->spare_held) spare_close();
  free(s);
}

int accept_set_fd(const struct accept_set* s) {
  return s->ep_fd;
}

int accept_set_pending(const struct accept_set* s) {
  return s->npending;
}

int accept_set_timeout_ms(const struct accept_set* s) {
  uint64_t next = UINT64_MAX;
  if (!s->listening) next = s->resume_ns;
  for (int i = 0; i < s->cap && s->npending > 0; i++)
    if (s->slots[i].fd >= 0) next = LOOM_MIN(next, s->slots[i].due_ns);
  if (s->log.quiet + s->log.evicted > 0) next = LOOM_MIN(next, s->log.summary_ns + LOG_PERIOD_NS);
  if (next == UINT64_MAX) return -1;
  uint64_t now = time_now_ns();
  return next <= now ? 0 : (int)LOOM_MIN((next - now + 999999) / 1000000, 60000u);
}

void accept_set_run(struct accept_set* s, accept_hello_fn done, void* arg) {
  struct epoll_event evs[RUN_EVENTS];
  int n = epoll_wait(s->ep_fd, evs, RUN_EVENTS, 0);
  int listener_ready = 0;
  /* Hellos first: a slot freed here may be taken by an accept below, and
   * this batch's events name slots as they were. */
  for (int k = 0; k < n; k++) {
    if (evs[k].data.u64 == LISTENER_TAG) {
      listener_ready = 1;
      continue;
    }
    int i = (int)evs[k].data.u64;
    if (s->slots[i].fd >= 0) slot_read(s, i, done, arg);
  }
  uint64_t now = time_now_ns();
  slots_expire(s, now);
  int rested = now >= s->resume_ns || (s->rest_for_room && s->npending < s->cap);
  if (!s->listening && rested && listener_watch(s) == 0) listener_ready = 1;
  if (listener_ready) accept_all(s, done, arg, now);
  log_tick(s);
}

void accept_set_drain(struct accept_set* s, accept_hello_fn done, void* arg, int ms) {
  uint64_t span = (uint64_t)ms * 1000000u, hello = (uint64_t)s->cfg.hello_ms * 1000000u;
  listener_rest(s, UINT64_MAX, 0);
  for (;;) {
    uint64_t youngest = 0; /* accepted, ns */
    for (int i = 0; i < s->cap; i++)
      if (s->slots[i].fd >= 0) youngest = LOOM_MAX(youngest, s->slots[i].due_ns - hello);
    uint64_t now = time_now_ns();
    if (youngest == 0 || now - youngest >= span) break;
    struct pollfd p = {.fd = s->ep_fd, .events = POLLIN, .revents = 0};
    poll(&p, 1, (int)LOOM_MAX(1, (youngest + span - now) / 1000000));
    accept_set_run(s, done, arg); /* the listener stays out of it */
  }
  s->resume_ns = 0; /* the next run watches it again */
}

void accept_set_refuse(struct accept_set* s, int fd, const union sock_addr* addr, const char* why) {
  log_refusal(s, addr, why);
  sock_close(fd);
}
