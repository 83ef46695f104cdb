/* stream.c - host streams: calls on a stream return at once and their work
 * runs in order on the stream's worker thread. */
#include "stream.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "comm.h"

#define STREAM_MAGIC 0x4c4d535452454d31ULL /* "LMSTREM1" */

struct work_item {
  struct stream_work w;
  struct work_item* next;
};

struct loomStream {
  uint64_t magic;
  pthread_t worker;
  pthread_mutex_t lock;
  /* Two conditions, so that neither side wakes the other for nothing: the
   * worker sleeps on work, synchronizers on done (broadcast once finished
   * reaches the lowest target waited for, not after every item, which would
   * cost a wake-up per call). */
  pthread_cond_t work, done;
  unsigned long long wake_at; /* the lowest target of a waiting synchronize; ULLONG_MAX: none */
  struct work_item *head, *tail;
  unsigned long long queued, finished;
  int stop;
  loomResult_t first_error; /* since the last synchronize */
  char error_text[LOOM_ERR_LEN];
};

static void* stream_main(void* arg) {
  struct loomStream* s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->lock);
    if (!s->head) break; /* stopping and drained */
    struct work_item* it = s->head;
    pthread_mutex_unlock(&s->lock);
    loomResult_t r = it->w.run(it->w.arg);
    if (it->w.free) it->w.free(it->w.arg);
    pthread_mutex_lock(&s->lock);
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
    free(it);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

loomResult_t stream_check(loomStream_t s) {
  if (!s || s->magic != STREAM_MAGIC)
    return err_set(NULL, loomInvalidArgument, "invalid argument: stream %p is not a live Loom stream",
                   (void*)s);
  return loomSuccess;
}

loomResult_t loomStreamCreate(loomStream_t* stream) {
  if (!stream) return err_set(NULL, loomInvalidArgument, "invalid argument: stream pointer is NULL");
  struct loomStream* s = calloc(1, sizeof(*s));
  if (!s) return err_set(NULL, loomSystemError, "out of memory allocating a stream");
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->done, NULL);
  s->wake_at = ULLONG_MAX;
  s->magic = STREAM_MAGIC;
  int rc = pthread_create(&s->worker, NULL, stream_main, s);
  if (rc != 0) {
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done);
    free(s);
    return err_set(NULL, loomSystemError, "cannot start a stream worker: %s", strerror(rc));
  }
  *stream = s;
  return loomSuccess;
}

loomResult_t loomStreamCreateFromCuda(loomStream_t* stream, void* cudaStream) {
  return err_set(NULL, loomInvalidUsage,
                 "loomStreamCreateFromCuda is not available yet: this build of Loom has no CUDA "
                 "device path");
}

loomResult_t stream_enqueue(loomStream_t s, const struct stream_work* w) {
  struct work_item* it = malloc(sizeof(*it));
  if (!it) return err_set(NULL, loomSystemError, "out of memory queueing work on a stream");
  it->w = *w;
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
  return loomSuccess;
}

loomResult_t loomStreamSynchronize(loomStream_t stream) {
  LOOM_CHECK(stream_check(stream));
  struct loomStream* s = stream;
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
  LOOM_CHECK(stream_check(stream));
  struct loomStream* s = stream;
  pthread_mutex_lock(&s->lock);
  loomResult_t r = s->finished == s->queued ? loomSuccess : loomInProgress;
  pthread_mutex_unlock(&s->lock);
  return r;
}

loomResult_t loomStreamDestroy(loomStream_t stream) {
  LOOM_CHECK(stream_check(stream));
  struct loomStream* s = stream;
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->worker, NULL);
  s->magic = 0;
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->done);
  free(s);
  return loomSuccess;
}
