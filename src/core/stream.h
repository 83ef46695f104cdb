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

/* Checks a stream handle from the user (not NULL, live). */
loomResult_t stream_check(loomStream_t s);
/* Queues work on s. Never blocks on the work. On failure the work is
 * neither run nor freed. */
loomResult_t stream_enqueue(loomStream_t s, const struct stream_work* w);

#endif
