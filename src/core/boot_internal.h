/* boot_internal.h - state shared by the bootstrap's files: bootstrap.c (wire
 * checks, ids), boot_listen.c (the listeners ids share, and who serves
 * them), boot_init.c (the rendezvous) and boot_watch.c (watcher, mailbox,
 * all-gather, teardown). Not for other layers: they use bootstrap.h.
 *
 * Threads: the thread that calls boot_* (the user's or the init thread) and
 * one watcher per communicator. The watcher owns every read of the bootstrap
 * sockets; writes from either thread go under the link's send_lock. */
#ifndef LOOM_CORE_BOOT_INTERNAL_H
#define LOOM_CORE_BOOT_INTERNAL_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/bootstrap.h"
#include "core/sock.h"

/* The longest text a BOOT_REFUSED may carry. */
#define BOOT_REFUSED_MAX 256
/* How long rank 0's watcher tries to tell a live rank about a failure. */
#define BOOT_NOTIFY_MS 1000

/* One bootstrap socket: a rank's socket to rank 0, or rank 0's to a peer. */
struct boot_link {
  int fd; /* -1 when there is none */
  int peer;
  union sock_addr addr; /* the far end, for messages */
  pthread_mutex_t send_lock;
  _Atomic int dead; /* its failure was reported; send nothing more */
  /* Owned by the watcher. */
  int bye;  /* the peer said goodbye: its close is not a failure */
  int done; /* no longer polled (closed, failed or said goodbye) */
  struct boot_hdr hdr;
  size_t got;            /* bytes of header + payload read so far */
  struct boot_mail* msg; /* the payload being read, once the header passed */
  uint64_t heard_ns;     /* when the last byte arrived (heartbeats) */
};

/* A message's payload; BOOT_DATA ones wait in the mailbox for
 * boot_allgather, keyed by tag and sender. */
struct boot_mail {
  struct boot_mail* next;
  uint32_t tag;
  int from;
  size_t len;
  uint8_t data[];
};

struct bootstrap {
  struct loom_comm* comm;
  uint64_t secret;
  union sock_addr root_addr;
  /* Rank 0: nranks links indexed by peer (links[0] unused). Others: one. */
  int nlinks;
  struct boot_link* links;

  int stop_fd; /* eventfd that tells the watcher to stop */
  _Atomic int stopping;
  pthread_t watcher;
  int watcher_live;
  struct pollfd* watch_pfd; /* the watcher's, nlinks + 1 */
  int ping_ms;              /* heartbeat period */
  int silence_ms;           /* a link silent this long has failed */
  uint64_t pinged_ns;       /* the last heartbeat sent */
  int* watch_link;          /* link index of each watch_pfd entry */

  /* Peers that said goodbye (left the communicator), as far as this rank
   * knows: written by the watcher, read by any thread. */
  _Atomic unsigned char* left; /* comm->nranks entries */
  _Atomic int nleft;

  pthread_mutex_t notify_lock; /* rank 0: one failure or departure notice at a time */
  pthread_mutex_t mail_lock;
  pthread_cond_t mail_cond; /* CLOCK_MONOTONIC */
  struct boot_mail* mail;
  uint32_t next_tag; /* advanced identically on every rank */
};

/* bootstrap.c */
/* Sends one message (header + payload) under the link's send_lock. Returns 0
 * or a sock_* error value. */
int boot_link_send(struct boot_link* l, int from, uint16_t type, uint32_t tag, const void* payload,
                   uint32_t len, const struct deadline* dl, const _Atomic int* abort_flag);
/* Logs a failed sock_* transfer (what: "sending the hello to rank 0 at
 * ...") and returns its code: loomTimeout, loomInvalidUsage (aborted) or
 * loomRemoteError. */
loomResult_t boot_wire_error(struct loom_comm* comm, int err, const char* what);
/* Fills a header. */
void boot_hdr_fill(struct boot_hdr* h, int from, uint16_t type, uint32_t tag, uint32_t len);
const char* boot_type_name(unsigned type);
/* The id's address as a socket address. */
void boot_id_addr(const struct boot_id* id, union sock_addr* addr_out);

/* boot_listen.c */
/* A connection that said a hello with a claim's secret; the rendezvous
 * checks the rest. */
struct boot_arrival {
  struct boot_arrival* next;
  int fd;
  union sock_addr addr;
  size_t len; /* bytes of hello received */
  struct boot_hello hello;
};
struct boot_claim;
/* Registers an id made here: secret, served by this process's listener for
 * *addr (shared: the listener every id of that interface shares, port 0
 * in *addr, the port written back; else the exact address), opened on
 * first use. */
loomResult_t boot_listen_register(union sock_addr* addr, int shared, uint64_t secret);
/* Forgets an id made here that no rank 0 claimed: what waits for it
 * closes, and the listener with its last id. */
void boot_listen_forget(const union sock_addr* addr, uint64_t secret);
/* Rank 0: claims the connections that carry secret on the listener of addr
 * (one is opened when this process has none there: an id made elsewhere). */
loomResult_t boot_listen_claim(struct loom_comm* comm, const union sock_addr* addr, uint64_t secret,
                               struct boot_claim** out);
/* Waits until hellos carrying the claim's secret have arrived, the deadline
 * passes or *abort_flag is set; polls the listener meanwhile unless another
 * rendezvous does. Returns the arrivals in order (the caller owns them and
 * their sockets), or NULL. */
struct boot_arrival* boot_listen_wait(struct boot_claim* c, const struct deadline* dl,
                                      const _Atomic int* abort_flag);
/* The rendezvous is over: forgets the claim and closes what still waits
 * for it. */
void boot_listen_release(struct boot_claim* c);

/* boot_watch.c */
/* Allocates the state both roles share; links get fd -1. */
loomResult_t boot_state_alloc(struct loom_comm* comm, int nlinks, struct bootstrap** out);
/* Frees everything; stops the watcher first when it runs. */
void boot_state_free(struct bootstrap* b, int clean);
loomResult_t boot_watcher_start(struct bootstrap* b);
/* Records that peer left cleanly (once), wakes waiters and, on rank 0,
 * tells every other live rank (BOOT_LEFT). */
void boot_peer_leaves(struct bootstrap* b, int peer);
/* Records that peer failed (once per link), wakes waiters and, on rank 0,
 * tells every other live rank. why is the complete text. */
void boot_peer_failed(struct bootstrap* b, int peer, loomResult_t code, const char* why);

#endif
