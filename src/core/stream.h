/* stream.h - host streams: an ordered queue of work run by one worker
 * thread. Generic: the core knows nothing of what the work is. */
#ifndef LOOM_CORE_STREAM_H
#define LOOM_CORE_STREAM_H

#include "loom.h"

/* A unit of work. run() returns the work's result and may block; free()
 * releases arg afterwards (may be NULL). */
struct stream_work {
  loomResult_t (*run)(void* arg);
  void (*free)(void* arg);
  void* arg;
};

struct loom_stream;

/* The stream of a handle from the user; loomInvalidArgument naming fn and
 * what is wrong with the handle (destroyed, not a stream) otherwise. A NULL
 * handle is the caller's to allow (NULL stream: run now). Lock-free. */
loomResult_t stream_get(loomStream_t handle, const char* fn, struct loom_stream** out);
/* Queues work on s. Never blocks on the work. On failure the work is
 * neither run nor freed. */
loomResult_t stream_enqueue(struct loom_stream* s, const struct stream_work* w);

#endif
