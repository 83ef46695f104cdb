/* stream.c - streams: host streams (calls on a stream return at once and
 * their work runs in order on the stream's worker thread), and the wrappers
 * of CUDA streams.
 *
 * A host stream's queue holds work and gates. A gate holds the queue until
 * its event completes: the worker sleeps in its own loop, not inside a work
 * item, and the event's completion wakes it (docs/streams.md). */
#include "core/stream.h"

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/checks.h"
#include "core/comm.h"
#include "core/event.h"
#include "core/handle.h"

/* A unit of work, or a gate: a gate_item, marked by w.run == NULL. */
struct work_item {
  struct stream_work w;
  struct work_item* next;
};

struct gate_item {
  struct work_item it; /* first: the queue links gates as work items */
  struct loom_event* ev;
  struct event_waiter waiter;
  struct loom_stream* s;
  int watching; /* waiter is registered with ev */
};

struct loom_stream {
  uint64_t handle; /* what the user holds (loomStream_t); 0 for a borrowed view */
  enum stream_kind kind;
  void* cuda; /* STREAM_CUDA: the cudaStream_t */
  pthread_t worker;
  pthread_mutex_t lock;
  /* Two conditions, so that neither side wakes the other for nothing: the
   * worker sleeps on work, synchronizers on done (broadcast once finished
   * reaches the lowest target waited for, not after every item, which would
   * cost a wake-up per call). */
  pthread_cond_t work, done;
  /* The lowest target of a synchronize or a wait for room; ULLONG_MAX: none. */
  unsigned long long wake_at;
  struct work_item *head, *tail;
  unsigned long long queued, finished;
  int stop;
  loomResult_t first_error; /* since the last synchronize */
  char error_text[LOOM_ERR_LEN];
};

/* A gate's waiter: its event completed or was armed. Runs under the
 * event's lock and takes the stream's, so a worker that looked at the event
 * under the stream's lock is asleep by now and gets the signal. */
static void gate_wake(struct event_waiter* w) {
  struct gate_item* g = (struct gate_item*)((char*)w - offsetof(struct gate_item, waiter));
  pthread_mutex_lock(&g->s->lock);
  pthread_cond_signal(&g->s->work);
  pthread_mutex_unlock(&g->s->lock);
}

/* Sleeps on s->work (s->lock held) until signalled or dl passes. */
static void stream_sleep(struct loom_stream* s, const struct deadline* dl) {
  if (!dl->at_ns) {
    pthread_cond_wait(&s->work, &s->lock);
    return;
  }
  struct timespec ts = {(time_t)(dl->at_ns / 1000000000u), (long)(dl->at_ns % 1000000000u)};
  pthread_cond_timedwait(&s->work, &s->lock, &ts);
}

/* The gate g at the head of s's queue (s->lock held): 0 while it holds the
 * queue, after one sleep (the caller looks again); 1 once it opens, with
 * the result to record in *r_out: its event's, or loomTimeout when the
 * event's deadline passed first (both with the thread's error text). The
 * stream's lock is dropped to (un)register with the event, whose lock
 * comes first. */
static int gate_open(struct loom_stream* s, struct gate_item* g, loomResult_t* r_out) {
  if (!event_done(g->ev)) {
    if (!g->watching) {
      pthread_mutex_unlock(&s->lock);
      g->watching = event_watch(g->ev, &g->waiter);
      pthread_mutex_lock(&s->lock);
      return 0;
    }
    struct deadline dl = event_deadline(g->ev);
    if (!deadline_passed(&dl)) {
      stream_sleep(s, &dl);
      return 0;
    }
  }
  if (g->watching) {
    pthread_mutex_unlock(&s->lock);
    event_unwatch(g->ev, &g->waiter); /* then no wake can touch g or s */
    pthread_mutex_lock(&s->lock);
    g->watching = 0;
  }
  if (event_done(g->ev)) {
    char why[LOOM_ERR_LEN];
    *r_out = event_result(g->ev, why, sizeof(why));
    if (*r_out != loomSuccess) err_copy_to_thread(why);
  } else {
    *r_out = err_set(NULL, loomTimeout,
                     "a host stream waited for a launch on another stream past twice that "
                     "launch's deadline; the stream's later work runs without waiting longer");
  }
  return 1;
}

static void* stream_main(void* arg) {
  struct loom_stream* s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->lock);
    if (!s->head) break; /* stopping and drained */
    struct work_item* it = s->head;
    loomResult_t r;
    if (__builtin_expect(!it->w.run, 0)) {
      if (!gate_open(s, (struct gate_item*)it, &r)) continue;
    } else {
      pthread_mutex_unlock(&s->lock);
      r = it->w.run(it->w.arg);
      if (it->w.free) it->w.free(it->w.arg);
      pthread_mutex_lock(&s->lock);
    }
    s->head = it->next;
    if (!s->head) s->tail = NULL;
    if (r != loomSuccess && s->first_error == loomSuccess) {
      s->first_error = r;
      snprintf(s->error_text, sizeof(s->error_text), "%s", err_thread_last());
    }
    s->finished++;
    if (s->finished >= s->wake_at) {
      s->wake_at = ULLONG_MAX;
      pthread_cond_broadcast(&s->done);
    }
    if (!it->w.run) event_release(((struct gate_item*)it)->ev);
    free(it);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static loomResult_t stream_bad(loomStream_t handle, const char* fn) {
  if (!handle)
    return err_set(NULL, loomInvalidArgument, "invalid argument: %s: stream is NULL", fn);
  return err_set(NULL, loomInvalidArgument, "invalid argument: %s: stream %p %s", fn, (void*)handle,
                 handle_why((uint64_t)(uintptr_t)handle, HANDLE_STREAM));
}

loomResult_t stream_get(loomStream_t handle, const char* fn, struct loom_stream** out) {
  struct loom_stream* s = handle_get((uint64_t)(uintptr_t)handle, HANDLE_STREAM);
  if (__builtin_expect(!s, 0)) return stream_bad(handle, fn);
  *out = s;
  return loomSuccess;
}

static void stream_free(struct loom_stream* s) {
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->done);
  free(s);
}

/* Stops the worker once what is queued is done, and frees. */
static void stream_stop_free(struct loom_stream* s) {
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->worker, NULL);
  stream_free(s);
}

loomResult_t loomStreamCreate(loomStream_t* stream) {
  if (!stream)
    return err_set(NULL, loomInvalidArgument, "invalid argument: stream pointer is NULL");
  struct loom_stream* s = calloc(1, sizeof(*s));
  if (!s) return err_set(NULL, loomSystemError, "out of memory allocating a stream");
  pthread_mutex_init(&s->lock, NULL);
  pthread_condattr_t ca; /* a gate sleeps on work until a deadline */
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->work, &ca);
  pthread_condattr_destroy(&ca);
  pthread_cond_init(&s->done, NULL);
  s->wake_at = ULLONG_MAX;
  int rc = pthread_create(&s->worker, NULL, stream_main, s);
  if (rc != 0) {
    stream_free(s);
    return err_set(NULL, loomSystemError, "cannot start a stream worker: %s", strerror(rc));
  }
  if (handle_new(HANDLE_STREAM, s, &s->handle) != loomSuccess) {
    stream_stop_free(s);
    return loomSystemError;
  }
  *stream = (loomStream_t)(uintptr_t)s->handle;
  return loomSuccess;
}

/* The CUDA executor's (stream_cuda_ops_set): the core reaches no driver. */
static const struct stream_cuda_ops* cuda_ops;

void stream_cuda_ops_set(const struct stream_cuda_ops* ops) {
  cuda_ops = ops;
}

loomResult_t loomStreamCreateFromCuda(loomStream_t* stream, void* cudaStream) {
  if (!stream)
    return err_set(NULL, loomInvalidArgument,
                   "invalid argument: loomStreamCreateFromCuda: stream pointer is NULL");
  const char* why = "this build of Loom has no CUDA executor (it was configured without nvcc)";
  if (cuda_ops && cuda_ops->usable(&why)) why = NULL;
  if (why)
    return err_set(NULL, loomInvalidUsage,
                   "loomStreamCreateFromCuda: %s; use host buffers with loomStreamCreate or a "
                   "NULL stream",
                   why);
  struct loom_stream* s = calloc(1, sizeof(*s));
  if (!s) return err_set(NULL, loomSystemError, "out of memory allocating a stream");
  s->kind = STREAM_CUDA;
  s->cuda = cudaStream;
  if (handle_new(HANDLE_STREAM, s, &s->handle) != loomSuccess) {
    free(s);
    return loomSystemError;
  }
  *stream = (loomStream_t)(uintptr_t)s->handle;
  return loomSuccess;
}

loomResult_t loomStreamGetCuda(loomStream_t stream, void** cudaStream) {
  struct loom_stream* s = NULL;
  if (!cudaStream)
    return err_set(NULL, loomInvalidArgument,
                   "invalid argument: loomStreamGetCuda: cudaStream pointer is NULL");
  LOOM_CHECK(stream_get(stream, "loomStreamGetCuda", &s));
  *cudaStream = s->cuda;
  return loomSuccess;
}

enum stream_kind stream_kind_of(const struct loom_stream* s) {
  return s ? s->kind : STREAM_NONE;
}

void* stream_cuda(const struct loom_stream* s) {
  return s ? s->cuda : NULL;
}

const char* stream_kind_name(enum stream_kind k) {
  switch (k) {
    case STREAM_HOST:
      return "host stream";
    case STREAM_CUDA:
      return "CUDA stream";
    case STREAM_NONE:
      return "NULL stream (the calling thread)";
    default:
      return "stream of unknown kind";
  }
}

struct loom_stream* stream_borrow_cuda(void* cuda_stream) {
  static __thread struct loom_stream view;
  memset(&view, 0, sizeof(view));
  view.kind = STREAM_CUDA;
  view.cuda = cuda_stream;
  return &view;
}

/* Appends it to s's queue and wakes the worker. */
static void stream_push(struct loom_stream* s, struct work_item* it) {
  it->next = NULL;
  pthread_mutex_lock(&s->lock);
  if (s->tail)
    s->tail->next = it;
  else
    s->head = it;
  s->tail = it;
  s->queued++;
  pthread_cond_signal(&s->work); /* no system call when the worker is awake */
  pthread_mutex_unlock(&s->lock);
}

loomResult_t stream_enqueue(struct loom_stream* s, const struct stream_work* w) {
  if (s->kind != STREAM_HOST)
    return err_set(NULL, loomInternalError, "work queued on a %s", stream_kind_name(s->kind));
  struct work_item* it = malloc(sizeof(*it));
  if (!it) return err_set(NULL, loomSystemError, "out of memory queueing work on a stream");
  it->w = *w;
  stream_push(s, it);
  return loomSuccess;
}

void stream_wait_room(struct loom_stream* s) {
  if (!s || s->kind != STREAM_HOST) return;
  pthread_mutex_lock(&s->lock);
  if (s->queued - s->finished >= STREAM_DEPTH) {
    unsigned long long target = s->queued - STREAM_DEPTH / 2;
    while (s->finished < target) {
      if (target < s->wake_at) s->wake_at = target;
      pthread_cond_wait(&s->done, &s->lock);
    }
  }
  pthread_mutex_unlock(&s->lock);
}

unsigned long long stream_pending(struct loom_stream* s) {
  pthread_mutex_lock(&s->lock);
  unsigned long long n = s->queued - s->finished;
  pthread_mutex_unlock(&s->lock);
  return n;
}

loomResult_t stream_wait_event(struct loom_stream* s, struct loom_event* ev) {
  if (s->kind != STREAM_HOST)
    return err_set(NULL, loomInternalError, "a %s cannot wait for an event in this build",
                   stream_kind_name(s->kind));
  struct gate_item* g = calloc(1, sizeof(*g));
  if (!g) return err_set(NULL, loomSystemError, "out of memory queueing a wait on a stream");
  event_retain(ev);
  g->ev = ev;
  g->waiter.wake = gate_wake;
  g->s = s;
  stream_push(s, &g->it); /* w.run NULL: a gate */
  return loomSuccess;
}

loomResult_t loomStreamSynchronize(loomStream_t stream) {
  struct loom_stream* s = NULL;
  LOOM_CHECK(stream_get(stream, "loomStreamSynchronize", &s));
  if (s->kind == STREAM_CUDA) return cuda_ops->sync(s->cuda);
  pthread_mutex_lock(&s->lock);
  unsigned long long target = s->queued;
  while (s->finished < target) {
    if (target < s->wake_at) s->wake_at = target;
    pthread_cond_wait(&s->done, &s->lock);
  }
  loomResult_t r = s->first_error;
  if (r != loomSuccess) err_copy_to_thread(s->error_text);
  s->first_error = loomSuccess;
  pthread_mutex_unlock(&s->lock);
  return r;
}

loomResult_t loomStreamQuery(loomStream_t stream) {
  struct loom_stream* s = NULL;
  LOOM_CHECK(stream_get(stream, "loomStreamQuery", &s));
  if (s->kind == STREAM_CUDA) return cuda_ops->query(s->cuda);
  pthread_mutex_lock(&s->lock);
  loomResult_t r = s->finished == s->queued ? loomSuccess : loomInProgress;
  pthread_mutex_unlock(&s->lock);
  return r;
}

loomResult_t loomStreamDestroy(loomStream_t stream) {
  struct loom_stream* s = handle_end((uint64_t)(uintptr_t)stream, HANDLE_STREAM);
  if (!s) return stream_bad(stream, "loomStreamDestroy");
  if (s->kind == STREAM_CUDA) { /* a wrapper: the cudaStream_t stays the caller's */
    free(s);
    return loomSuccess;
  }
  stream_stop_free(s);
  return loomSuccess;
}
