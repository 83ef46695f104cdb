/* group.c - loomGroupStart/End and launching work: at once on the caller's
 * thread (NULL stream), or queued on a host stream's worker.
 *
 * A launch whose tasks name several streams runs on the first one; each
 * other stream gets a marker that waits for the launch, so every stream
 * involved is ordered after it, as with CUDA events. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "core/checks.h"
#include "core/stream.h"

static __thread int group_depth;
static __thread struct coll_task* group_tasks;
static __thread int group_ntasks, group_cap;

struct launch {
  struct coll_task* tasks;
  int ntasks;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int finished;
  int refs;
};

void tasks_release(struct coll_task* tasks, int ntasks) {
  for (int i = 0; i < ntasks; i++) free(tasks[i].v);
  free(tasks);
}

static void launch_unref(struct launch* l) {
  pthread_mutex_lock(&l->lock);
  int last = --l->refs == 0;
  pthread_mutex_unlock(&l->lock);
  if (!last) return;
  pthread_mutex_destroy(&l->lock);
  pthread_cond_destroy(&l->cond);
  tasks_release(l->tasks, l->ntasks);
  free(l);
}

/* Frees a launch that was never queued. */
static void launch_unref_init(struct launch* l) {
  pthread_mutex_destroy(&l->lock);
  pthread_cond_destroy(&l->cond);
  tasks_release(l->tasks, l->ntasks);
  free(l);
}

static loomResult_t launch_run(void* arg) {
  struct launch* l = arg;
  loomResult_t r = exec_tasks(l->tasks, l->ntasks);
  for (int i = 0; i < l->ntasks; i++) atomic_fetch_sub(&l->tasks[i].comm->coll->queued, 1);
  pthread_mutex_lock(&l->lock);
  l->finished = 1;
  pthread_cond_broadcast(&l->cond);
  pthread_mutex_unlock(&l->lock);
  return r;
}

static loomResult_t launch_wait(void* arg) {
  struct launch* l = arg;
  pthread_mutex_lock(&l->lock);
  while (!l->finished) pthread_cond_wait(&l->cond, &l->lock);
  pthread_mutex_unlock(&l->lock);
  return loomSuccess;
}

static void launch_free(void* arg) {
  launch_unref(arg);
}

static loomResult_t launch_on_streams(struct coll_task* tasks, int ntasks,
                                      struct loom_stream* first) {
  struct launch* l = calloc(1, sizeof(*l));
  if (!l) {
    tasks_release(tasks, ntasks);
    return err_set(NULL, loomSystemError, "out of memory");
  }
  l->tasks = tasks;
  l->ntasks = ntasks;
  pthread_mutex_init(&l->lock, NULL);
  pthread_cond_init(&l->cond, NULL);
  /* Every stream involved: the first runs the launch, the others wait for
   * it. All references are taken before anything is queued, since a worker
   * may run and release its share at once. */
  struct loom_stream** streams = malloc((size_t)ntasks * sizeof(*streams));
  if (!streams) {
    launch_unref_init(l);
    return err_set(NULL, loomSystemError, "out of memory");
  }
  int nstreams = 0;
  streams[nstreams++] = first;
  for (int i = 0; i < ntasks; i++) {
    struct loom_stream* s = tasks[i].stream;
    int seen = !s;
    for (int j = 0; j < nstreams && !seen; j++) seen = streams[j] == s;
    if (!seen) streams[nstreams++] = s;
  }
  l->refs = nstreams;
  for (int i = 0; i < ntasks; i++) atomic_fetch_add(&tasks[i].comm->coll->queued, 1);
  struct stream_work w = {launch_run, launch_free, l};
  loomResult_t r = stream_enqueue(first, &w);
  if (r != loomSuccess) {
    for (int i = 0; i < ntasks; i++) atomic_fetch_sub(&tasks[i].comm->coll->queued, 1);
    free(streams);
    launch_unref_init(l);
    return r;
  }
  for (int k = 1; k < nstreams; k++) {
    struct stream_work wait = {launch_wait, launch_free, l};
    if (stream_enqueue(streams[k], &wait) != loomSuccess) launch_unref(l);
  }
  free(streams);
  return loomSuccess;
}

/* Takes ownership of tasks (malloc'd). */
static loomResult_t launch(struct coll_task* tasks, int ntasks) {
  struct loom_stream* first = NULL;
  for (int i = 0; i < ntasks && !first; i++) first = tasks[i].stream;
  if (first) return launch_on_streams(tasks, ntasks, first);
  loomResult_t r = exec_tasks(tasks, ntasks);
  tasks_release(tasks, ntasks);
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
