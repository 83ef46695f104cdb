/* progress.h - the progress engine of one communicator: one thread, one epoll
 * set and one wake-up eventfd that every transport needing a thread shares
 * (sockets today; UCX, verbs and the CUDA executor's network side later), so
 * that no transport grows a proxy thread of its own. docs/transports/progress.md
 * tells the whole story.
 *
 * A transport joins as a client: a progress callback the engine calls once
 * per round on its thread, and file descriptors, each with interest flags
 * and a callback the engine calls when epoll reports it. The engine knows
 * nothing of what the descriptors are.
 *
 * A round: wait (until the earliest deadline a client asked for, or a wake),
 * call the callbacks of the descriptors epoll reported, deliver the errors
 * noticed off the thread, then call every client's progress callback.
 * Descriptors deleted during a round are freed after it, so an event of the
 * round that still names one is dropped, never delivered.
 *
 * The idle hand-over. The executor of the communicator polls its
 * connections itself while it works (progress_exec_polls, on every post and
 * test); meanwhile a descriptor whose callback parks it (progress_fd_park)
 * is watched only for what the executor does not poll, so the thread does
 * not wake, taking a core from a polling rank, for every message. Before
 * the executor sleeps it calls progress_idle: every parked descriptor is
 * watched in full again, and the thread moves what nobody polls.
 *
 * Callbacks run on the engine thread only, one at a time, never holding the
 * engine's lock; they must not block (a peer's slowness never stalls the
 * other clients). The functions below may be called from any thread, and
 * from the callbacks, unless they say otherwise. */
#ifndef LOOM_TRANSPORT_PROGRESS_H
#define LOOM_TRANSPORT_PROGRESS_H

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

struct loom_comm;
struct progress;
struct progress_client;
struct progress_fd;

/* Interest flags (progress_fd_add, _mod, _park) and the events a
 * descriptor's callback gets. HUP and ERR are always reported. */
enum progress_events {
  PROGRESS_IN = 1u << 0,    /* readable */
  PROGRESS_OUT = 1u << 1,   /* writable */
  PROGRESS_RDHUP = 1u << 2, /* the peer shut its writing half (sockets) */
  PROGRESS_EDGE = 1u << 3,  /* interest only: report changes, not levels */
  PROGRESS_HUP = 1u << 4,   /* event only: hung up */
  PROGRESS_ERR = 1u << 5    /* event only: an error on the descriptor, see progress_fd_fn */
};

/* A descriptor's callback, on the engine thread. events: what happened.
 * err: 0 when the kernel reported the events (with PROGRESS_ERR the client
 * finds the cause itself, e.g. the errno of its next read); otherwise the
 * errno of the engine's own failure to watch the descriptor (events is then
 * PROGRESS_ERR: the descriptor is no longer watched, and the client fails
 * what depends on it, naming its peer). */
typedef void (*progress_fd_fn)(void* arg, unsigned events, int err);

struct progress_client_ops {
  const char* name; /* "socket": for the engine's log lines */
  /* Once per round, on the engine thread, after the descriptors'
   * callbacks: moves what it can without blocking. *moved_out: 1 when it
   * moved something and calling it again at once may move more (the engine
   * then does not sleep before the next round), else 0. *timeout_ms_out:
   * milliseconds until it must be called again even without events, or -1
   * (not before an event or a wake). An error means the client cannot go on
   * (it has failed what depends on it): the engine calls it no more. */
  loomResult_t (*progress)(void* arg, int* moved_out, int* timeout_ms_out);
  /* The engine cannot progress anything any more (epoll itself failed):
   * the client fails every connection it has, saying why, and every later
   * one. On the engine thread, once, the client's last call. */
  void (*fail)(void* arg, const char* why);
};

/* Makes the engine of comm (NULL in the unit tests: comm is named in log
 * lines and told of the thread). No thread yet: the first client starts it.
 * On error comm gets the cause. */
loomResult_t progress_create(struct loom_comm* comm, struct progress** out);
/* Stops the thread (waking it, and joining it after at most the round it is
 * in) and frees everything, descriptors of clients still registered
 * included (it closes none of them). Never blocks on peers. Not from a
 * callback. NULL is a no-op. */
void progress_destroy(struct progress* p);

/* Registers a client and starts the thread if it is the first. ops must
 * outlive the client. The new client's progress is called at the next
 * round, which this call brings on. */
loomResult_t progress_client_add(struct progress* p, const struct progress_client_ops* ops,
                                 void* arg, struct progress_client** out);
/* Once this returns, no callback of the client or of its descriptors runs
 * again, and every descriptor it still had is deleted (the handles are gone;
 * the descriptors themselves stay open, the client's to close). Off the
 * engine thread it waits for the round in progress to finish its callbacks;
 * the caller must hold no lock a callback takes. */
void progress_client_remove(struct progress_client* c);

/* Watches fd for events (PROGRESS_IN, _OUT, _RDHUP, _EDGE); fn(arg, ...)
 * runs on each. Returns 0 with *out set (before fn can first run), or the
 * errno of the failure with *out NULL (the client reports it naming its
 * peer: the engine has no peer to name). */
int progress_fd_add(struct progress_client* c, int fd, unsigned events, progress_fd_fn fn,
                    void* arg, struct progress_fd** out);
/* Changes what f is watched for (a parked descriptor takes it on when the
 * executor next idles). Returns 0 or the errno. */
int progress_fd_mod(struct progress_fd* f, unsigned events);
/* Stops watching f and forgets it (delete before closing the descriptor).
 * After it returns, fn is not called for f again: off the engine thread it
 * waits for the round in progress to finish its callbacks (hold no lock a
 * callback takes); from a callback, the rest of the round's events for f
 * are dropped. */
void progress_fd_del(struct progress_fd* f);

/* Makes the thread run a round soon (one eventfd write). Never blocks. */
void progress_wake(struct progress* p);
/* 1 once the thread runs. */
int progress_thread_started(struct progress* p);

/* ---- The idle hand-over ---- */

/* The first member of struct progress: read on the executor's path with
 * the compiler's atomics (so that C++ tests read this header too). */
struct progress_hot {
  int exec_polling; /* the executor polls its connections itself */
};

/* The executor is at its connections (each post and test). One relaxed
 * load while it stays there; no lock, no system call. */
static inline void progress_exec_polls(struct progress* p) {
  int* f = &((struct progress_hot*)(void*)p)->exec_polling;
  if (!__atomic_load_n(f, __ATOMIC_RELAXED)) __atomic_store_n(f, 1, __ATOMIC_RELEASE);
}
/* From f's callback: while the executor polls, watch f only for events
 * (e.g. PROGRESS_EDGE | PROGRESS_RDHUP: the peer's close) until the executor
 * idles, rather than waking the thread for what it polls anyway. Returns 1
 * when f is parked (the callback leaves the event to the executor), 0 when
 * the executor is idle or f cannot be parked (the callback handles it). */
int progress_fd_park(struct progress_fd* f, unsigned events);
/* The executor is about to sleep on its doorbell: every parked descriptor is
 * watched in full again (those with events waiting report them at once).
 * One relaxed load when nothing polled since the last call; otherwise the
 * engine's lock and one epoll_ctl per parked descriptor. Never blocks on
 * peers. */
void progress_idle(struct progress* p);

#ifdef __cplusplus
}
#endif

#endif
