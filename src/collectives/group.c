/* group.c - loomGroupStart/End and launching work: at once on the caller's
 * thread (NULL stream), or queued on a host stream's worker.
 *
 * A launch whose tasks name several streams runs on the first one; each
 * other stream gets a gate on the launch's event (core/event.h), so every
 * stream involved is ordered after it without a worker blocking for it.
 * The launch itself is prepared at call time by its executor
 * (collectives/exec.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/exec.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/stream.h"

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER; /* see launch() */
static __thread int group_depth LOOM_TLS_HOT;
static __thread struct coll_task* group_tasks LOOM_TLS_HOT;
static __thread int group_ntasks LOOM_TLS_HOT, group_cap LOOM_TLS_HOT;

void tasks_release(struct coll_task* tasks, int ntasks) {
  for (int i = 0; i < ntasks; i++) free(tasks[i].v);
  free(tasks);
}

static loomResult_t launch_work(void* arg) {
  return exec_launch_run(arg);
}

/* Queues a gate for l's done_event on every stream of its tasks but first
 * (each once). */
static loomResult_t gates_queue(struct exec_launch* l, struct loom_stream* first) {
  for (int i = 0; i < l->ntasks; i++) {
    struct loom_stream* s = l->tasks[i].stream;
    int seen = !s || s == first;
    for (int j = 0; j < i && !seen; j++) seen = l->tasks[j].stream == s;
    if (!seen) LOOM_CHECK(stream_wait_event(s, l->done_event));
  }
  return loomSuccess;
}

/* Queues l on its first stream. The other streams of its tasks get a gate
 * on l's event, so their later work waits for l; their workers sleep
 * meanwhile. One stream (the common case) needs no event. The gates go
 * first: when one cannot be queued, l is dropped before it ran. */
static loomResult_t launch_on_streams(struct exec_launch* l, struct loom_stream* first) {
  int several = 0;
  for (int i = 0; i < l->ntasks && !several; i++)
    several = l->tasks[i].stream && l->tasks[i].stream != first;
  loomResult_t r = loomSuccess;
  if (several) {
    r = event_create(EVENT_HOST, &l->done_event);
    if (r == loomSuccess) r = gates_queue(l, first);
  }
  struct stream_work w = {launch_work, NULL, l};
  if (r == loomSuccess) r = stream_enqueue(first, &w);
  if (r != loomSuccess) {
    /* The gates queued already open, with the error. */
    if (l->done_event) event_complete(l->done_event, r, err_thread_last());
    exec_launch_drop(l);
  }
  return r;
}

/* Takes ownership of tasks (malloc'd). The launch is prepared here, on the
 * calling thread, so that it takes its turn on each communicator in the
 * order of the calls; then it runs now (NULL stream) or on its stream. */
static loomResult_t launch(struct coll_task* tasks, int ntasks) {
  struct loom_stream* first = NULL;
  for (int i = 0; i < ntasks && !first; i++) first = tasks[i].stream;
  struct exec_launch* l;
  /* The NULL stream runs the launch here; so does a CUDA stream, where
   * running it means queueing its work on the device (exec_cuda.c). */
  if (!first || stream_kind_of(first) == STREAM_CUDA) {
    LOOM_CHECK(exec_launch_prepare(tasks, ntasks, &l));
    return exec_launch_run(l);
  }
  /* A full stream makes the caller wait here, holding no lock: the launches
   * it waits for may need this thread's peers to queue theirs. */
  stream_wait_room(first);
  /* Taking the turns and queueing on the streams under one lock keeps every
   * stream's queue in turn order: otherwise two threads could queue on one
   * stream in the opposite order of their turns, and its worker would run a
   * launch that waits, forever, for the turn of one queued behind it. */
  pthread_mutex_lock(&queue_lock);
  loomResult_t r = exec_launch_prepare(tasks, ntasks, &l);
  if (r == loomSuccess) r = launch_on_streams(l, first);
  pthread_mutex_unlock(&queue_lock);
  return r;
}

loomResult_t group_submit(const struct coll_task* t) {
  if (group_depth == 0) {
    if (!t->stream) {
      struct coll_task here = *t; /* on this stack, as its launch */
      return exec_run_one(&here);
    }
    struct coll_task* one = malloc(sizeof(*one));
    if (!one) {
      free(t->v);
      return err_set(t->comm, loomSystemError, "out of memory");
    }
    *one = *t;
    return launch(one, 1);
  }
  if (group_ntasks == group_cap) {
    int cap = group_cap ? group_cap * 2 : 16;
    struct coll_task* n = realloc(group_tasks, (size_t)cap * sizeof(*n));
    if (!n) {
      free(t->v);
      return err_set(t->comm, loomSystemError, "out of memory");
    }
    group_tasks = n;
    group_cap = cap;
  }
  group_tasks[group_ntasks++] = *t;
  return loomSuccess;
}

loomResult_t group_submit_coll(const char* fn, const struct coll_task* t, int empty) {
  if (t->comm->check_args) {
    loomResult_t r = argcheck_call(fn, t, group_depth > 0);
    if (r != loomSuccess) {
      free(t->v);
      return r;
    }
  }
  if (empty) {
    free(t->v);
    return loomSuccess;
  }
  return group_submit(t);
}

loomResult_t loomGroupStart(void) {
  group_depth++;
  return loomSuccess;
}

loomResult_t loomGroupEnd(void) {
  if (group_depth == 0)
    return err_set(NULL, loomInvalidUsage, "loomGroupEnd called without a matching loomGroupStart");
  if (--group_depth > 0) return loomSuccess;
  struct coll_task* tasks = group_tasks;
  int n = group_ntasks;
  group_tasks = NULL;
  group_ntasks = group_cap = 0;
  /* Checks first: a communicator whose check fails launches nothing of the
   * group; the others' tasks run. */
  loomResult_t checked = argcheck_group_end(tasks, &n);
  if (n == 0) {
    free(tasks);
    return checked;
  }
  loomResult_t r = launch(tasks, n);
  return checked != loomSuccess ? checked : r;
}
