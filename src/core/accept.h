/* accept.h - the connections a listening socket has accepted whose hello
 * has not arrived yet: a bounded set, with a partial-hello buffer and a
 * deadline per connection, that evicts the connection silent longest when it
 * is full or the process nears its descriptor limit. So connections that
 * never say who they are (a port scanner, a flood of silent connects) cannot
 * use up the process's descriptors or stall the ranks, which send their
 * hello at once after connecting. The bootstrap's listeners (boot_listen.c)
 * and the socket transport use it.
 *
 * The set has its own epoll instance over the listener and every pending
 * connection: accept_set_fd() is readable when there is something to do, so
 * the owner waits on it with poll or nests it in its own epoll, then calls
 * accept_set_run(). Never blocks. Not thread-safe: one thread at a time
 * uses a set (the owner's lock or role says which).
 *
 * Logging: refusals with a reason get a WARN line each, at most
 * ACCEPT_LOG_BURST per second; evictions and refusals beyond that are
 * counted and reported in one line per second at most (and when the set is
 * destroyed), never a line per stranger. */
#ifndef LOOM_CORE_ACCEPT_H
#define LOOM_CORE_ACCEPT_H

#include <stddef.h>

#include "core/sock.h"
#include "loom.h"

/* Pending connections at most (fewer under a low descriptor limit: an
 * eighth of it). */
#define ACCEPT_MAX_PENDING 128
/* A full set evicts its oldest only once that one has been silent this
 * long; until then the listener rests and newcomers wait in the kernel's
 * backlog, which costs no descriptor. */
#define ACCEPT_GRACE_MS 100
/* How long the listener rests when accept fails for want of descriptors
 * and nothing could be evicted or dropped. */
#define ACCEPT_REST_MS 50
#define ACCEPT_LOG_BURST 10

/* How many bytes the whole hello has, judging by the first got bytes
 * (got is 0 at first, then what the previous answer asked for): returns
 * that length, more than got while incomplete, or -1 with why filled when
 * the bytes so far are not a hello. Pure. */
typedef long (*accept_hello_len_fn)(const void* buf, size_t got, char* why, size_t why_len);
/* A complete hello of len bytes; fd (non-blocking, out of the set) now
 * belongs to the callee. */
typedef void (*accept_hello_fn)(void* arg, int fd, const union sock_addr* addr, const void* hello,
                                size_t len);

struct accept_cfg {
  const char* who;  /* what the log lines start with: "bootstrap", "rank 3: socket transport"
                     * (copied: it need not outlive accept_set_create) */
  unsigned subsys;  /* SUB_BOOTSTRAP, SUB_NET */
  size_t hello_max; /* the longest hello */
  accept_hello_len_fn hello_len;
  long long hello_ms; /* a connection completes its hello within this, or is closed */
};

struct accept_set;

/* Makes a set over listen_fd (non-blocking; the set does not own it). comm
 * (may be NULL) gets the error. */
loomResult_t accept_set_create(struct loom_comm* comm, int listen_fd, const struct accept_cfg* cfg,
                               struct accept_set** out);
/* Closes every pending connection (they are strangers to whoever stops
 * listening), reports what is left to report, and frees. Not the listener. */
void accept_set_destroy(struct accept_set* s);
/* Readable when accept_set_run has work. */
int accept_set_fd(const struct accept_set* s);
/* Milliseconds until accept_set_run must run even without events (a
 * deadline, the listener's rest), or -1 when there is no such time. */
int accept_set_timeout_ms(const struct accept_set* s);
/* Accepts what waits, reads hellos, evicts and expires; calls done for each
 * complete hello (the callee may call accept_set_refuse, nothing else of
 * the set). Never blocks. */
void accept_set_run(struct accept_set* s, accept_hello_fn done, void* arg);
/* Stops accepting and runs until every pending connection has had ms
 * since it was accepted (hellos completing meanwhile go to done), so that a
 * rank's hello in flight is not cut off when its owner is about to destroy
 * the set. Blocks up to ms. The next accept_set_run accepts again. */
void accept_set_drain(struct accept_set* s, accept_hello_fn done, void* arg, int ms);
/* The owner refuses a complete hello (wrong secret, ...): logs, under the
 * set's limit, and closes fd. */
void accept_set_refuse(struct accept_set* s, int fd, const union sock_addr* addr, const char* why);
/* Connections still reading their hello. */
int accept_set_pending(const struct accept_set* s);

#endif
