/* stream.h - streams: where work runs, in order. A stream has a kind:
 *  - host: an ordered queue of work run by the stream's own worker thread
 *    (loomStreamCreate). Generic: the core knows nothing of the work.
 *    Work across streams is ordered by events (stream_wait_event), never
 *    by a worker blocking inside a work item;
 *  - CUDA: a cudaStream_t that work is enqueued on. stream_borrow_cuda
 *    wraps one for a single call without a handle, for callers such as an
 *    NCCL drop-in that pass a raw cudaStream_t on every call and destroy
 *    streams without telling Loom. loomStreamCreateFromCuda makes the owned
 *    wrapper when the build has a CUDA executor; synchronizing, querying
 *    and destroying it go to the driver through stream_cuda_ops, which the
 *    executor installs (the core reaches no driver itself).
 * The NULL stream is no stream: the call runs on the calling thread. */
#ifndef LOOM_CORE_STREAM_H
#define LOOM_CORE_STREAM_H

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A unit of work. run() (never NULL) returns the work's result and may
 * block; free() releases arg afterwards (may be NULL). */
struct stream_work {
  loomResult_t (*run)(void* arg);
  void (*free)(void* arg);
  void* arg;
};

struct loom_stream;
struct loom_event; /* core/event.h */

enum stream_kind { STREAM_HOST = 0, STREAM_CUDA = 1, STREAM_NONE = 2, STREAM_KIND_COUNT };
#define STREAM_KIND_BIT(k) (1u << (k))

/* What a CUDA stream wrapper needs of the driver: set once, at load, by the
 * CUDA executor (collectives/exec_cuda.c). usable: 0 and why (static
 * text) when no CUDA stream can be served here. */
struct stream_cuda_ops {
  int (*usable)(const char** why);
  loomResult_t (*sync)(void* cuda_stream);
  loomResult_t (*query)(void* cuda_stream);
};
void stream_cuda_ops_set(const struct stream_cuda_ops* ops);

/* The kind of s; STREAM_NONE for NULL (the calling thread). */
enum stream_kind stream_kind_of(const struct loom_stream* s);
/* The cudaStream_t that s wraps; NULL for host streams and NULL. */
void* stream_cuda(const struct loom_stream* s);
/* "host stream", "CUDA stream", "NULL stream (the calling thread)". */
const char* stream_kind_name(enum stream_kind k);
/* A CUDA stream view of cuda_stream for one call on this thread: valid
 * until the thread's next stream_borrow_cuda. Nothing to release; work is
 * never queued on it (stream_enqueue refuses), only enqueued on the CUDA
 * stream by an executor that copies the cudaStream_t. */
struct loom_stream* stream_borrow_cuda(void* cuda_stream);

/* The stream of a handle from the user; loomInvalidArgument naming fn and
 * what is wrong with the handle (destroyed, not a stream) otherwise. A NULL
 * handle is the caller's to allow (NULL stream: run now). Lock-free. */
loomResult_t stream_get(loomStream_t handle, const char* fn, struct loom_stream** out);
/* Queues work on host stream s. Never blocks on the work. On failure the
 * work is neither run nor freed. */
loomResult_t stream_enqueue(struct loom_stream* s, const struct stream_work* w);
/* Queues a wait for ev on host stream s (taking a reference on ev): work
 * queued on s afterwards starts only once ev completes. No work item
 * blocks: the worker sleeps in its own loop until ev's completion wakes it,
 * or until ev's deadline (core/event.h) passes. A failed ev is the
 * stream's error too (loomStreamSynchronize returns it); either way the
 * later work then runs. Never blocks. loomStreamDestroy waits for the gate
 * as for any queued work. */
loomResult_t stream_wait_event(struct loom_stream* s, struct loom_event* ev);

/* The most items a host stream holds queued and not finished before the
 * thread that queues more waits (stream_wait_room), as a CUDA stream's
 * launches wait once its queue is full: without it a thread that queues
 * faster than the worker runs grows the queue without bound. */
#define STREAM_DEPTH 1024
/* Waits, when host stream s holds STREAM_DEPTH items or more, until its
 * worker is down to half of that; at once otherwise, and for any other
 * kind of stream or NULL. Every item it waits for has a deadline of its
 * own, as for loomStreamSynchronize. Call it holding no lock that the
 * stream's work or its peers' may need. */
void stream_wait_room(struct loom_stream* s);
/* Items queued on s and not finished (for tests). */
unsigned long long stream_pending(struct loom_stream* s);

#ifdef __cplusplus
}
#endif

#endif
