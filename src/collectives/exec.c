/* exec.c - choosing an executor for a launch, and a launch's life:
 * prepare, launch, progress to the end, release (collectives/exec.h). */
#include "collectives/exec.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/recorder.h"
#include "kernels/cuda/cuda_kernels.h"

/* Every executor; the CUDA executor serves only in a build with the device
 * kernels. */
static const struct loom_executor* const executors[] = {&exec_host, &exec_cuda};
#define NEXEC (sizeof(executors) / sizeof(executors[0]))

const struct loom_executor* exec_pick(const struct loom_stream* s, enum mem_kind k) {
  unsigned sk = STREAM_KIND_BIT(stream_kind_of(s));
  for (size_t i = 0; i < NEXEC; i++)
    if ((executors[i]->stream_ok & sk) && (executors[i]->mem_kinds & MEM_KIND_BIT(k)) &&
        (executors[i] != &exec_cuda || cuda_kernels_built()))
      return executors[i];
  return NULL;
}

const char* exec_refusal(const struct loom_stream* s, enum mem_kind k) {
  enum stream_kind sk = stream_kind_of(s);
  if (k == MEM_CUDA && sk != STREAM_CUDA)
    return sk == STREAM_NONE
               ? "a NULL stream cannot serve: it runs the call on the calling thread, "
                 "for host memory only; pass a CUDA stream"
               : "a host stream cannot serve; pass a CUDA stream";
  if (k == MEM_CUDA)
    return "this build of Loom cannot serve: it has no device kernels (nvcc was not found when it "
           "was configured)";
  if (sk == STREAM_CUDA)
    return "a CUDA stream cannot serve in this build; pass a host stream or NULL";
  return "no executor of this build can serve";
}

/* Each thread keeps the last launch block it freed for its next launch:
 * the block is larger than malloc's per-thread caches serve, and
 * allocating and freeing it cost a small call more than all the rest of
 * its launch (docs/PERFORMANCE.md, "Launch overhead"). A pthread key, set
 * once per thread, frees it when the thread exits. */
static _Thread_local struct exec_launch* spare;
static _Thread_local int spare_keyed;
static pthread_key_t spare_key;
static int spare_key_ok;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

static void spare_free(void* unused) {
  (void)unused;
  free(spare);
  spare = NULL;
}

static void spare_init(void) {
  spare_key_ok = pthread_key_create(&spare_key, spare_free) == 0;
}

/* A zeroed block of at least bytes: the thread's spare when it is large
 * enough, else a new one. */
static struct exec_launch* block_get(size_t bytes) {
  struct exec_launch* l = spare;
  if (l && l->block_bytes >= bytes) {
    spare = NULL;
    bytes = l->block_bytes;
    memset(l, 0, bytes);
  } else {
    l = calloc(1, bytes);
  }
  if (l) l->block_bytes = bytes;
  return l;
}

/* Keeps l as the thread's spare (the larger of the two), or frees it where
 * the thread's exit could not. */
static void block_put(struct exec_launch* l) {
  if (!spare_keyed) {
    pthread_once(&spare_once, spare_init);
    spare_keyed = spare_key_ok && pthread_setspecific(spare_key, (void*)1) == 0;
  }
  if (!spare_keyed || (spare && spare->block_bytes >= l->block_bytes)) {
    free(l);
    return;
  }
  free(spare);
  spare = l;
}

/* Frees what a launch owns of its tasks: their vectors, and the array
 * unless it was lent (exec_run_one's). */
static void launch_tasks_free(struct coll_task* tasks, int ntasks, int lent) {
  if (!lent) {
    tasks_release(tasks, ntasks);
    return;
  }
  for (int i = 0; i < ntasks; i++) free(tasks[i].v);
}

/* Makes and prepares a launch of tasks in room (room_bytes on the caller's
 * stack, lent with the tasks) when it fits, else in a block of its own. */
static loomResult_t launch_make(struct coll_task* tasks, int ntasks, void* room, size_t room_bytes,
                                struct exec_launch** out) {
  *out = NULL;
  int lent = room != NULL;
  struct loom_stream* first = NULL;
  for (int i = 0; i < ntasks && !first; i++) first = tasks[i].stream;
  /* One executor runs the whole launch: every task's memory must be its. */
  const struct loom_executor* ex = exec_pick(first, tasks[0].mem);
  for (int i = 0; i < ntasks && ex; i++)
    if (!(ex->mem_kinds & MEM_KIND_BIT(tasks[i].mem))) ex = NULL;
  if (!ex) {
    loomResult_t r =
        err_set(tasks[0].comm, loomInvalidUsage,
                "a group mixes %s memory with calls that the %s executor cannot serve: launch "
                "them in separate groups",
                mem_kind_name(tasks[0].mem), stream_kind_name(stream_kind_of(first)));
    launch_tasks_free(tasks, ntasks, lent);
    return r;
  }
  /* The launch and the executor's state in one block. */
  size_t head = (sizeof(struct exec_launch) + 15) & ~(size_t)15;
  size_t bytes = head + ex->state_size(ntasks);
  struct exec_launch* l;
  if (room && bytes <= room_bytes) {
    l = room;
    memset(l, 0, bytes);
    l->block_bytes = bytes;
    l->block_lent = 1;
  } else {
    l = block_get(bytes);
  }
  if (!l) {
    launch_tasks_free(tasks, ntasks, lent);
    return err_set(tasks[0].comm, loomSystemError, "out of memory");
  }
  l->tasks = tasks;
  l->ntasks = ntasks;
  l->tasks_lent = lent;
  l->ex = ex;
  l->state = (char*)l + head;
  for (int i = 0; i < ntasks; i++) {
    struct coll_task* t = &tasks[i];
    struct rec_call c = {.kind = (int)t->kind,
                         .is_p2p = t->kind == COLL_SEND || t->kind == COLL_RECV,
                         .count = t->count,
                         .dtype = t->dtype,
                         .op = t->op,
                         .root = t->root,
                         .stream = (uint64_t)(uintptr_t)t->stream};
    t->rec = recorder_enqueue(t->comm->rec, &c);
  }
  loomResult_t r = ex->prepare(l);
  if (r != loomSuccess) {
    for (int i = 0; i < ntasks; i++) recorder_end(tasks[i].comm->rec, tasks[i].rec, r);
    ex->release(l);
    launch_tasks_free(tasks, ntasks, lent);
    if (!l->block_lent) block_put(l);
    return r;
  }
  *out = l;
  return loomSuccess;
}

loomResult_t exec_launch_prepare(struct coll_task* tasks, int ntasks, struct exec_launch** out) {
  return launch_make(tasks, ntasks, NULL, 0, out);
}

static void launch_free(struct exec_launch* l) {
  l->ex->release(l);
  /* Released first: whoever waits for the launch finds its turns passed
   * on and its transfers withdrawn. */
  if (l->done_event) {
    event_complete(l->done_event, l->result, err_thread_last());
    event_release(l->done_event);
  }
  launch_tasks_free(l->tasks, l->ntasks, l->tasks_lent);
  if (!l->block_lent) block_put(l);
}

void exec_launch_arm(struct exec_launch* l) {
  /* Each communicator's deadline counts from the turn; then up to 1.5 s to
   * name a failure's cause (root_cause in exec_host.c) and the release. */
  long long bound = 0;
  for (int i = 0; i < l->ntasks; i++) bound = LOOM_MAX(bound, l->tasks[i].comm->timeout_ms);
  event_arm(l->done_event, bound + 2000);
}

loomResult_t exec_launch_run(struct exec_launch* l) {
  loomResult_t r = l->ex->launch(l);
  int done = 0;
  while (r == loomSuccess && !done) r = l->ex->progress(l, &done);
  l->result = r;
  launch_free(l);
  return r;
}

/* Room for the launch of one task on the caller's stack: the host
 * executor's takes some 730 bytes (launch_make falls back to a block of its
 * own for more). */
#define ONE_ROOM 1024

loomResult_t exec_run_one(struct coll_task* t) {
  union {
    struct exec_launch l;
    max_align_t align;
    char bytes[ONE_ROOM];
  } room;
  struct exec_launch* l;
  LOOM_CHECK(launch_make(t, 1, &room, sizeof(room), &l));
  return exec_launch_run(l);
}

void exec_launch_drop(struct exec_launch* l) {
  l->cancel = 1;
  int done = 0;
  loomResult_t r = loomSuccess;
  /* It waits for its turn, so that the turn passes on in order. */
  while (r == loomSuccess && !done) r = l->ex->progress(l, &done);
  l->result = r;
  launch_free(l);
}
