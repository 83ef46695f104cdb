/* group.c - loomGroupStart/End and launching work: at once on the caller's
 * thread (NULL stream), or queued on a host stream's worker.
 *
 * A launch whose tasks name several streams runs on the first one; each
 * other stream gets a marker that waits for the launch, so every stream
 * involved is ordered after it. The launch itself is prepared at call time
 * by its executor (collectives/exec.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/exec.h"
#include "core/checks.h"
#include "core/stream.h"

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER; /* see launch() */
static __thread int group_depth;
static __thread struct coll_task* group_tasks;
static __thread int group_ntasks, group_cap;

void tasks_release(struct coll_task* tasks, int ntasks) {
  for (int i = 0; i < ntasks; i++) free(tasks[i].v);
  free(tasks);
}

/* A launch queued on host streams: the first stream runs it, the others
 * wait for it (a host stream's worker has nothing else to do meanwhile;
 * the CUDA executor orders its streams with events instead). */
struct queued {
  struct exec_launch* l;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int finished;
  int refs;
};

static void queued_unref(struct queued* q) {
  pthread_mutex_lock(&q->lock);
  int last = --q->refs == 0;
  pthread_mutex_unlock(&q->lock);
  if (!last) return;
  pthread_mutex_destroy(&q->lock);
  pthread_cond_destroy(&q->cond);
  free(q);
}

static loomResult_t queued_run(void* arg) {
  struct queued* q = arg;
  loomResult_t r = exec_launch_run(q->l);
  q->l = NULL;
  pthread_mutex_lock(&q->lock);
  q->finished = 1;
  pthread_cond_broadcast(&q->cond);
  pthread_mutex_unlock(&q->lock);
  return r;
}

/* The launch always finishes (its waits have deadlines), so neither does
 * this wait need one of its own. */
static loomResult_t queued_wait(void* arg) {
  struct queued* q = arg;
  pthread_mutex_lock(&q->lock);
  while (!q->finished) pthread_cond_wait(&q->cond, &q->lock);
  pthread_mutex_unlock(&q->lock);
  return loomSuccess;
}

static void queued_free(void* arg) {
  queued_unref(arg);
}

static loomResult_t launch_on_streams(struct exec_launch* l, struct loom_stream* first) {
  struct queued* q = calloc(1, sizeof(*q));
  /* Every stream involved: the first runs the launch, the others wait for
   * it. All references are taken before anything is queued, since a worker
   * may run and release its share at once. */
  struct loom_stream** streams = malloc((size_t)l->ntasks * sizeof(*streams));
  if (!q || !streams) {
    free(q);
    free(streams);
    exec_launch_drop(l);
    return err_set(NULL, loomSystemError, "out of memory");
  }
  q->l = l;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->cond, NULL);
  int nstreams = 0;
  streams[nstreams++] = first;
  for (int i = 0; i < l->ntasks; i++) {
    struct loom_stream* s = l->tasks[i].stream;
    int seen = !s;
    for (int j = 0; j < nstreams && !seen; j++) seen = streams[j] == s;
    if (!seen) streams[nstreams++] = s;
  }
  q->refs = nstreams;
  struct stream_work w = {queued_run, queued_free, q};
  loomResult_t r = stream_enqueue(first, &w);
  if (r != loomSuccess) {
    free(streams);
    exec_launch_drop(l);
    q->refs = 1;
    queued_unref(q);
    return r;
  }
  for (int k = 1; k < nstreams; k++) {
    struct stream_work wait = {queued_wait, queued_free, q};
    if (stream_enqueue(streams[k], &wait) != loomSuccess) queued_unref(q);
  }
  free(streams);
  return loomSuccess;
}

/* Takes ownership of tasks (malloc'd). The launch is prepared here, on the
 * calling thread, so that it takes its turn on each communicator in the
 * order of the calls; then it runs now (NULL stream) or on its stream. */
static loomResult_t launch(struct coll_task* tasks, int ntasks) {
  struct loom_stream* first = NULL;
  for (int i = 0; i < ntasks && !first; i++) first = tasks[i].stream;
  struct exec_launch* l;
  if (!first) {
    LOOM_CHECK(exec_launch_prepare(tasks, ntasks, &l));
    return exec_launch_run(l);
  }
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
  if (n == 0) {
    free(tasks);
    return loomSuccess;
  }
  return launch(tasks, n);
}
