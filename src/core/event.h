/* event.h - events: a point in one stream's work that other streams wait
 * for, instead of a worker thread blocking on it. An event completes once,
 * with the result of the work it marks; later completions are ignored.
 * Reference counted: the producer (the work that completes it) and every
 * waiter hold one each, so either side may go first.
 *
 * Kinds (docs/streams.md):
 *  - host: completed by a host thread (event_complete); host streams wait
 *    for it without blocking their worker inside a work item: the queue
 *    is gated (stream_wait_event) and the event's completion wakes it.
 *  - CUDA (planned, refused by event_create until there is a CUDA
 *    executor): also wraps a cudaEvent_t. The producer records it with
 *    cudaEventRecord after enqueueing its kernels, and a cudaLaunchHostFunc
 *    behind them completes the host side, so host streams wait for it as
 *    for a host event; a CUDA stream waits with cudaStreamWaitEvent on the
 *    device, no thread involved.
 *
 * Lock order: an event's lock, then a waiter's (the wake callback takes
 * it). A waiter never calls into its event while holding its own lock. */
#ifndef LOOM_CORE_EVENT_H
#define LOOM_CORE_EVENT_H

#include <stddef.h>

#include "core/util.h"
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

enum event_kind { EVENT_HOST = 0, EVENT_CUDA = 1 };

struct loom_event;

/* One waiter, owned by whoever waits (a stream's gate). wake runs, under the
 * event's lock, when the event completes or is armed: it must not block and
 * must not call into the event. */
struct event_waiter {
  void (*wake)(struct event_waiter* w);
  struct event_waiter* next;
};

/* A new event of kind, not complete, with one reference (the caller's). */
loomResult_t event_create(enum event_kind kind, struct loom_event** out);
void event_retain(struct loom_event* e);
/* Drops a reference; the last one frees e. */
void event_release(struct loom_event* e);
/* The number of references (tests). */
int event_refs(const struct loom_event* e);
enum event_kind event_kind_of(const struct loom_event* e);

/* The producer has started: it completes e within bound_ms from now (its
 * own deadline). Until then waiters have no deadline of their own, as the
 * work ahead of the producer has its own; from then on they give up at
 * twice that bound (event_deadline), so the producer's own, more precise
 * error comes first. Wakes the waiters so that they see the deadline.
 * Once; later calls are ignored. Never blocks. */
void event_arm(struct loom_event* e, long long bound_ms);
/* When waiters give up; no deadline (at_ns 0) before event_arm. */
struct deadline event_deadline(struct loom_event* e);

/* Completes e with the result of its work (why: its error text, may be
 * NULL) and wakes every waiter. Only the first call counts. Never blocks
 * on the waiters beyond their wake callbacks. */
void event_complete(struct loom_event* e, loomResult_t result, const char* why);
/* 1 once e is complete. Lock-free. */
int event_done(const struct loom_event* e);
/* The result of a complete e; its error text (when not loomSuccess) into
 * why (len bytes, may be NULL). */
loomResult_t event_result(struct loom_event* e, char* why, size_t len);

/* Registers w to be woken when e completes: 1 when registered, 0 when e
 * is complete already (w is then never called). */
int event_watch(struct loom_event* e, struct event_waiter* w);
/* Unregisters w (registered or not). On return, w's wake is not running
 * and will not run again, so w may be freed. */
void event_unwatch(struct loom_event* e, struct event_waiter* w);

/* Blocks the calling thread until e completes or dl passes; returns e's
 * result, or loomTimeout (with a WARN) at the deadline. For threads that
 * have nothing else to do; streams use event_watch. */
loomResult_t event_wait(struct loom_event* e, const struct deadline* dl);

#ifdef __cplusplus
}
#endif

#endif
