/* progress.c - the progress engine of one communicator (progress.h).
 *
 * Safety of the descriptors. epoll hands back the handle (struct
 * progress_fd) of each reported descriptor; a handle may be deleted by an
 * earlier callback of the same round, or by another thread while epoll_wait
 * sleeps. So deleting marks the handle dead and puts it on the graveyard,
 * which only the engine thread empties, after the callbacks of a round: an
 * event naming a dead handle is dropped. A deletion off the thread waits
 * until no callback runs (busy), so once it returns the caller may free what
 * the callback's argument points to; removing a client does the same.
 *
 * Locking. One mutex guards the lists (clients, live handles, parked
 * handles, errors to deliver, graveyard) and the flags busy and stop. The
 * thread takes it twice a round, at the start and the end of its callbacks,
 * never while one runs, so a callback may call any function here. The
 * executor's per-message path (progress_exec_polls) takes no lock. */
#include "transport/progress.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/checks.h"
#include "core/comm.h"
#include "transport/transport.h"

#define PROGRESS_EVENTS 64

struct progress_client {
  struct progress* p;
  const struct progress_client_ops* ops;
  void* arg;
  int removed; /* under lock; no callback of it runs once set */
  int failed;  /* the thread's: its progress returned an error, or the engine stopped */
  struct progress_client* next;
};

struct progress_fd {
  struct progress* p;
  struct progress_client* client;
  int fd;
  unsigned events; /* under lock: the interest when not parked */
  progress_fd_fn fn;
  void* arg;
  /* Under lock. dead is also read by the thread's callbacks, which no
   * writer overlaps (it waits for busy to clear, or is the thread). */
  int dead;
  int parked;
  int err;                         /* on p->errs: the engine could not watch it again (errno) */
  struct progress_fd *prev, *next; /* the live list, or the graveyard (next) */
  struct progress_fd* next_parked;
  struct progress_fd* next_err;
  /* The thread's: this round's errors to deliver, taken off p->errs. */
  int deliver_err;
  struct progress_fd* next_deliver;
};

struct progress {
  struct progress_hot hot; /* first: progress_exec_polls reads it through a cast */
  struct loom_comm* comm;
  char who[48]; /* "rank R: network progress engine", for log lines */
  int ep_fd, wake_fd;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t idle_cv; /* signalled when busy clears or the thread ends */
  /* Under lock. */
  int thread_live; /* started, not joined */
  int thread_done; /* the loop ended (stop, or epoll failed) */
  int busy;        /* the thread is in its callbacks */
  int stop;
  struct progress_client* clients; /* read by the thread while busy: changed only when not */
  struct progress_fd* live;
  struct progress_fd* parked;
  struct progress_fd* errs;
  struct progress_fd* grave;
};

/* The engine whose thread this is (NULL on every other thread). */
static __thread struct progress* progress_self LOOM_TLS_HOT;

static uint32_t events_to_epoll(unsigned ev) {
  return ((ev & PROGRESS_IN) ? EPOLLIN : 0) | ((ev & PROGRESS_OUT) ? EPOLLOUT : 0) |
         ((ev & PROGRESS_RDHUP) ? EPOLLRDHUP : 0) | ((ev & PROGRESS_EDGE) ? EPOLLET : 0);
}

static unsigned events_from_epoll(uint32_t ev) {
  return ((ev & EPOLLIN) ? PROGRESS_IN : 0) | ((ev & EPOLLOUT) ? PROGRESS_OUT : 0) |
         ((ev & EPOLLRDHUP) ? PROGRESS_RDHUP : 0) | ((ev & EPOLLHUP) ? PROGRESS_HUP : 0) |
         ((ev & EPOLLERR) ? PROGRESS_ERR : 0);
}

static int epoll_set(struct progress* p, int op, struct progress_fd* f, unsigned events) {
  struct epoll_event ev = {.events = events_to_epoll(events), .data.ptr = f};
  return epoll_ctl(p->ep_fd, op, f->fd, &ev) == 0 ? 0 : errno;
}

/* Off the thread: until no callback runs (the thread ends a round's
 * callbacks within a round: they never block). Under lock. */
static void callbacks_quiesce(struct progress* p) {
  if (progress_self == p) return;
  while (p->busy) pthread_cond_wait(&p->idle_cv, &p->lock);
}

/* Under lock, with no callback running (or on the thread). */
static void fd_bury(struct progress* p, struct progress_fd* f) {
  if (f->prev)
    f->prev->next = f->next;
  else
    p->live = f->next;
  if (f->next) f->next->prev = f->prev;
  if (f->parked)
    for (struct progress_fd** at = &p->parked; *at; at = &(*at)->next_parked)
      if (*at == f) {
        *at = f->next_parked;
        break;
      }
  if (f->err)
    for (struct progress_fd** at = &p->errs; *at; at = &(*at)->next_err)
      if (*at == f) {
        *at = f->next_err;
        break;
      }
  /* A descriptor the client closed already has left the set: ignore EBADF. */
  epoll_ctl(p->ep_fd, EPOLL_CTL_DEL, f->fd, NULL);
  f->dead = 1;
  f->parked = f->err = 0;
  f->prev = NULL;
  f->next = p->grave;
  p->grave = f;
}

static void grave_free(struct progress_fd* f) {
  while (f) {
    struct progress_fd* next = f->next;
    free(f);
    f = next;
  }
}

/* ---- The thread ---------------------------------------------------------------- */

/* Every client is told, once, that nothing progresses it any more. */
static void clients_fail(struct progress* p, const char* why) {
  LOOM_WARN(SUB_NET, "%s stopped: %s", p->who, why);
  for (struct progress_client* c = p->clients; c; c = c->next)
    if (!c->removed && !c->failed) {
      c->failed = 1;
      c->ops->fail(c->arg, why);
    }
}

static void events_dispatch(struct progress* p, const struct epoll_event* evs, int n) {
  for (int i = 0; i < n; i++) {
    struct progress_fd* f = evs[i].data.ptr;
    if (f == NULL) { /* the wake-up: one read empties the counter */
      uint64_t v;
      ssize_t got = read(p->wake_fd, &v, sizeof(v));
      (void)got; /* EAGAIN: another round drained it */
      continue;
    }
    if (f->dead || f->client->failed) continue;
    f->fn(f->arg, events_from_epoll(evs[i].events), 0);
  }
}

/* Under lock: the errors noticed off the thread, as this round's list. */
static struct progress_fd* errs_take(struct progress* p) {
  struct progress_fd* list = NULL;
  for (struct progress_fd *f = p->errs, *next; f; f = next) {
    next = f->next_err;
    f->deliver_err = f->err;
    f->err = 0;
    f->next_err = NULL;
    f->next_deliver = list;
    list = f;
  }
  p->errs = NULL;
  return list;
}

/* A handle buried meanwhile stays allocated until the round ends. */
static void errs_deliver(struct progress_fd* list) {
  for (struct progress_fd* f = list; f; f = f->next_deliver)
    if (!f->dead && !f->client->failed) f->fn(f->arg, PROGRESS_ERR, f->deliver_err);
}

/* Each client's progress; returns the timeout of the next wait. */
static int clients_progress(struct progress* p) {
  int timeout = -1, again = 0;
  for (struct progress_client* c = p->clients; c; c = c->next) {
    if (c->removed || c->failed) continue;
    int moved = 0, t = -1;
    loomResult_t r = c->ops->progress(c->arg, &moved, &t);
    if (r != loomSuccess) {
      c->failed = 1;
      LOOM_WARN(SUB_NET, "%s: client %s failed (%s); it is progressed no more", p->who,
                c->ops->name, loomGetErrorString(r));
      continue;
    }
    again |= moved;
    if (t >= 0 && (timeout < 0 || t < timeout)) timeout = t;
  }
  return again ? 0 : timeout;
}

/* One round after the wait. Returns 0 when the thread should end. */
static int round_run(struct progress* p, const struct epoll_event* evs, int n, int* timeout) {
  pthread_mutex_lock(&p->lock);
  if (p->stop) {
    pthread_mutex_unlock(&p->lock);
    return 0;
  }
  p->busy = 1;
  struct progress_fd* errs = errs_take(p);
  pthread_mutex_unlock(&p->lock);
  events_dispatch(p, evs, n);
  errs_deliver(errs);
  *timeout = clients_progress(p);
  pthread_mutex_lock(&p->lock);
  p->busy = 0;
  struct progress_fd* grave = p->grave;
  p->grave = NULL;
  int stop = p->stop;
  pthread_cond_broadcast(&p->idle_cv);
  pthread_mutex_unlock(&p->lock);
  grave_free(grave); /* no event of this round names them any more */
  return !stop;
}

static void* progress_main(void* arg) {
  struct progress* p = arg;
  struct epoll_event evs[PROGRESS_EVENTS];
  int timeout = 0; /* a first round at once: the first client's progress */
  progress_self = p;
  for (;;) {
    int n = epoll_wait(p->ep_fd, evs, PROGRESS_EVENTS, timeout);
    if (n < 0 && errno != EINTR) {
      char why[96];
      snprintf(why, sizeof(why), "epoll_wait failed: %s", strerror(errno));
      pthread_mutex_lock(&p->lock);
      p->busy = 1;
      pthread_mutex_unlock(&p->lock);
      clients_fail(p, why);
      break;
    }
    if (!round_run(p, evs, n < 0 ? 0 : n, &timeout)) break;
  }
  pthread_mutex_lock(&p->lock);
  p->busy = 0;
  p->thread_done = 1;
  pthread_cond_broadcast(&p->idle_cv);
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* ---- Life ------------------------------------------------------------------------- */

loomResult_t progress_create(struct loom_comm* comm, struct progress** out) {
  struct progress* p = calloc(1, sizeof(*p));
  if (p == NULL) return err_set_sub(comm, SUB_NET, loomSystemError, "out of memory");
  p->comm = comm;
  if (comm)
    snprintf(p->who, sizeof(p->who), "rank %d: network progress engine", comm->rank);
  else
    snprintf(p->who, sizeof(p->who), "network progress engine");
  const char* call = "epoll_create1";
  p->ep_fd = epoll_create1(EPOLL_CLOEXEC);
  if (p->ep_fd < 0) goto fail_epoll;
  call = "eventfd";
  p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->wake_fd < 0) goto fail_wake;
  call = "epoll_ctl";
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}; /* NULL: the wake-up */
  if (epoll_ctl(p->ep_fd, EPOLL_CTL_ADD, p->wake_fd, &ev) != 0) goto fail_ctl;
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->idle_cv, NULL);
  *out = p;
  return loomSuccess;
fail_ctl:;
  int e = errno;
  close(p->wake_fd);
  errno = e;
fail_wake:
  e = errno;
  close(p->ep_fd);
  errno = e;
fail_epoll:
  e = errno;
  free(p);
  return err_set_sub(comm, SUB_NET, loomSystemError, "network progress engine: %s failed: %s", call,
                     strerror(e));
}

void progress_destroy(struct progress* p) {
  if (p == NULL) return;
  pthread_mutex_lock(&p->lock);
  p->stop = 1;
  int live = p->thread_live;
  pthread_mutex_unlock(&p->lock);
  if (live) {
    progress_wake(p);
    pthread_join(p->thread, NULL);
  }
  grave_free(p->grave);
  grave_free(p->live); /* clients still registered: the descriptors are theirs */
  while (p->clients) {
    struct progress_client* c = p->clients;
    p->clients = c->next;
    free(c);
  }
  close(p->wake_fd);
  close(p->ep_fd);
  pthread_cond_destroy(&p->idle_cv);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

loomResult_t progress_client_add(struct progress* p, const struct progress_client_ops* ops,
                                 void* arg, struct progress_client** out) {
  struct progress_client* c = calloc(1, sizeof(*c));
  if (c == NULL) return err_set_sub(p->comm, SUB_NET, loomSystemError, "out of memory");
  c->p = p;
  c->ops = ops;
  c->arg = arg;
  pthread_mutex_lock(&p->lock);
  callbacks_quiesce(p);
  int rc = 0, started = 0, ended = p->thread_done;
  if (!p->thread_live) {
    rc = pthread_create(&p->thread, NULL, progress_main, p);
    started = p->thread_live = rc == 0;
  }
  if (rc == 0 && !ended) {
    c->next = p->clients;
    p->clients = c;
  }
  pthread_mutex_unlock(&p->lock);
  if (rc != 0 || ended) {
    free(c);
    if (ended)
      return err_set_sub(p->comm, SUB_NET, loomSystemError,
                         "the network progress thread has stopped (see its warning)");
    return err_set_sub(p->comm, SUB_NET, loomSystemError,
                       "cannot start the network progress thread: %s", strerror(rc));
  }
  /* Waiters spin less with one more thread to leave a core to. */
  if (started && p->comm) tp_helper_thread_add(p->comm);
  progress_wake(p);
  *out = c;
  return loomSuccess;
}

void progress_client_remove(struct progress_client* c) {
  if (c == NULL) return;
  struct progress* p = c->p;
  pthread_mutex_lock(&p->lock);
  callbacks_quiesce(p);
  c->removed = 1;
  for (struct progress_fd *f = p->live, *next; f; f = next) {
    next = f->next;
    if (f->client == c) fd_bury(p, f);
  }
  pthread_mutex_unlock(&p->lock);
  /* The struct stays on the list (a round may still hold it) until destroy. */
}

/* ---- Descriptors ------------------------------------------------------------------- */

int progress_fd_add(struct progress_client* c, int fd, unsigned events, progress_fd_fn fn,
                    void* arg, struct progress_fd** out) {
  struct progress* p = c->p;
  struct progress_fd* f = calloc(1, sizeof(*f));
  if (f == NULL) return ENOMEM;
  f->p = p;
  f->client = c;
  f->fd = fd;
  f->events = events;
  f->fn = fn;
  f->arg = arg;
  pthread_mutex_lock(&p->lock);
  /* Linked, and *out set, before epoll may report it: its callback may
   * name the handle (to park it), and the thread reads both only after
   * taking the lock for its round. */
  f->next = p->live;
  if (p->live) p->live->prev = f;
  p->live = f;
  *out = f;
  int err = epoll_set(p, EPOLL_CTL_ADD, f, events);
  if (err != 0) {
    p->live = f->next;
    if (p->live) p->live->prev = NULL;
    *out = NULL;
  }
  pthread_mutex_unlock(&p->lock);
  if (err != 0) free(f);
  return err;
}

int progress_fd_mod(struct progress_fd* f, unsigned events) {
  struct progress* p = f->p;
  pthread_mutex_lock(&p->lock);
  f->events = events;
  int err = f->parked ? 0 : epoll_set(p, EPOLL_CTL_MOD, f, events);
  pthread_mutex_unlock(&p->lock);
  return err;
}

void progress_fd_del(struct progress_fd* f) {
  if (f == NULL) return;
  struct progress* p = f->p;
  pthread_mutex_lock(&p->lock);
  callbacks_quiesce(p);
  fd_bury(p, f);
  pthread_mutex_unlock(&p->lock);
}

void progress_wake(struct progress* p) {
  uint64_t one = 1;
  ssize_t n;
  do {
    n = write(p->wake_fd, &one, sizeof(one));
  } while (n < 0 && errno == EINTR); /* EAGAIN: the count is huge, a round comes anyway */
}

int progress_thread_started(struct progress* p) {
  pthread_mutex_lock(&p->lock);
  int live = p->thread_live;
  pthread_mutex_unlock(&p->lock);
  return live;
}

/* ---- The idle hand-over ------------------------------------------------------------ */

int progress_fd_park(struct progress_fd* f, unsigned events) {
  struct progress* p = f->p;
  if (!__atomic_load_n(&p->hot.exec_polling, __ATOMIC_ACQUIRE)) return 0;
  int parked = 0;
  pthread_mutex_lock(&p->lock);
  if (__atomic_load_n(&p->hot.exec_polling, __ATOMIC_RELAXED) && !f->dead) {
    /* Watched only for events until the executor idles. If epoll refuses,
     * the descriptor stays watched in full and its callback goes on. */
    if (f->parked || epoll_set(p, EPOLL_CTL_MOD, f, events) == 0) {
      if (!f->parked) {
        f->parked = 1;
        f->next_parked = p->parked;
        p->parked = f;
      }
      parked = 1;
    }
  }
  pthread_mutex_unlock(&p->lock);
  return parked;
}

void progress_idle(struct progress* p) {
  if (p == NULL || !__atomic_load_n(&p->hot.exec_polling, __ATOMIC_RELAXED)) return;
  int failed = 0;
  pthread_mutex_lock(&p->lock);
  __atomic_store_n(&p->hot.exec_polling, 0, __ATOMIC_RELEASE);
  for (struct progress_fd *f = p->parked, *next; f; f = next) {
    next = f->next_parked;
    f->parked = 0;
    f->next_parked = NULL;
    /* Watched again: one with events waiting reports them at once. */
    int err = epoll_set(p, EPOLL_CTL_MOD, f, f->events);
    if (err != 0 && !f->err) { /* the thread tells its client (callbacks run there) */
      f->err = err;
      f->next_err = p->errs;
      p->errs = f;
      failed = 1;
    }
  }
  p->parked = NULL;
  pthread_mutex_unlock(&p->lock);
  if (failed) progress_wake(p);
}
