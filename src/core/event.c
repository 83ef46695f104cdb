/* event.c - host events (core/event.h): a flag set once under a lock, a
 * list of waiters woken by callback, and a condition for threads that
 * block. */
#include "core/event.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/checks.h"
#include "core/comm.h"

struct loom_event {
  enum event_kind kind;
  _Atomic int refs;
  pthread_mutex_t lock;
  pthread_cond_t cond;          /* event_wait sleeps here (CLOCK_MONOTONIC) */
  struct event_waiter* waiters; /* under lock */
  /* Set once, under lock; read lock-free by event_done, so release/acquire:
   * whoever sees done sees result and why. */
  _Atomic int done;
  loomResult_t result;
  char why[LOOM_ERR_LEN];
  _Atomic uint64_t give_up_ns; /* 0: not armed */
};

loomResult_t event_create(enum event_kind kind, struct loom_event** out) {
  *out = NULL;
  if (kind != EVENT_HOST)
    return err_set(NULL, loomInvalidUsage,
                   "a CUDA event needs the CUDA executor, which this build of Loom lacks");
  struct loom_event* e = calloc(1, sizeof(*e));
  if (!e) return err_set(NULL, loomSystemError, "out of memory allocating an event");
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&e->cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&e->lock, NULL);
  e->kind = kind;
  atomic_init(&e->refs, 1);
  *out = e;
  return loomSuccess;
}

void event_retain(struct loom_event* e) {
  atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
}

void event_release(struct loom_event* e) {
  if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1) return;
  pthread_mutex_destroy(&e->lock);
  pthread_cond_destroy(&e->cond);
  free(e);
}

int event_refs(const struct loom_event* e) {
  return atomic_load(&e->refs);
}

enum event_kind event_kind_of(const struct loom_event* e) {
  return e->kind;
}

/* Under e->lock: tells every waiter to look again. */
static void waiters_wake(struct loom_event* e) {
  for (struct event_waiter* w = e->waiters; w; w = w->next) w->wake(w);
  pthread_cond_broadcast(&e->cond);
}

void event_arm(struct loom_event* e, long long bound_ms) {
  pthread_mutex_lock(&e->lock);
  if (!atomic_load(&e->give_up_ns) && !atomic_load(&e->done)) {
    struct deadline dl = deadline_in_ms(2 * LOOM_MAX(bound_ms, 1LL));
    atomic_store(&e->give_up_ns, dl.at_ns);
    waiters_wake(e);
  }
  pthread_mutex_unlock(&e->lock);
}

struct deadline event_deadline(struct loom_event* e) {
  struct deadline dl = {atomic_load(&e->give_up_ns)};
  return dl;
}

void event_complete(struct loom_event* e, loomResult_t result, const char* why) {
  pthread_mutex_lock(&e->lock);
  if (!atomic_load_explicit(&e->done, memory_order_relaxed)) {
    e->result = result;
    snprintf(e->why, sizeof(e->why), "%s", result != loomSuccess && why ? why : "");
    atomic_store_explicit(&e->done, 1, memory_order_release);
    waiters_wake(e);
    /* Each waiter is woken once: it unregisters (event_unwatch) before it
     * goes, and nothing wakes it again. */
    e->waiters = NULL;
  }
  pthread_mutex_unlock(&e->lock);
}

int event_done(const struct loom_event* e) {
  return atomic_load_explicit(&e->done, memory_order_acquire);
}

loomResult_t event_result(struct loom_event* e, char* why, size_t len) {
  if (why && len) snprintf(why, len, "%s", e->why);
  return e->result;
}

int event_watch(struct loom_event* e, struct event_waiter* w) {
  pthread_mutex_lock(&e->lock);
  int pending = !atomic_load_explicit(&e->done, memory_order_relaxed);
  if (pending) {
    w->next = e->waiters;
    e->waiters = w;
  }
  pthread_mutex_unlock(&e->lock);
  return pending;
}

void event_unwatch(struct loom_event* e, struct event_waiter* w) {
  /* Taking the lock also waits for a completion that is calling wakes. */
  pthread_mutex_lock(&e->lock);
  for (struct event_waiter** p = &e->waiters; *p; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      break;
    }
  pthread_mutex_unlock(&e->lock);
}

loomResult_t event_wait(struct loom_event* e, const struct deadline* dl) {
  pthread_mutex_lock(&e->lock);
  while (!atomic_load_explicit(&e->done, memory_order_relaxed) && !deadline_passed(dl)) {
    if (!dl->at_ns) {
      pthread_cond_wait(&e->cond, &e->lock);
      continue;
    }
    struct timespec ts = {(time_t)(dl->at_ns / 1000000000u), (long)(dl->at_ns % 1000000000u)};
    pthread_cond_timedwait(&e->cond, &e->lock, &ts);
  }
  int done = atomic_load_explicit(&e->done, memory_order_relaxed);
  pthread_mutex_unlock(&e->lock);
  if (!done) return err_set(NULL, loomTimeout, "timed out waiting for an event");
  if (e->result != loomSuccess) err_copy_to_thread(e->why);
  return e->result;
}
