/* boot_internal.h - state shared by the bootstrap's files: bootstrap.c (wire
 * checks, ids, the table's layout and tree), boot_listen.c (the listeners
 * ids share, and who serves them), boot_init.c (the rendezvous), boot_tree.c
 * (the table down the tree), boot_link.c (links, rank-to-rank messages),
 * boot_mail.c (the mailbox and its waits), boot_gather.c (all-gather) and
 * boot_watch.c (watcher, teardown). Not for other layers: they use
 * bootstrap.h.
 *
 * Threads: the threads that call boot_* (the user's, the init thread) and
 * one watcher per communicator. The watcher owns every read of the star's
 * sockets and of the links peers dialled here (in-links), and accepts those;
 * writes from any thread go under the link's send_lock. A link this rank
 * dialled (out-link) belongs to its senders, under its send_lock: after its
 * handshake nothing reads it. */
#ifndef LOOM_CORE_BOOT_INTERNAL_H
#define LOOM_CORE_BOOT_INTERNAL_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/accept.h"
#include "core/bootstrap.h"
#include "core/sock.h"

/* The longest text a BOOT_REFUSED may carry. */
#define BOOT_REFUSED_MAX 256
/* How long rank 0's watcher tries to tell a live rank about a failure. */
#define BOOT_NOTIFY_MS 1000

enum boot_link_kind {
  BOOT_STAR, /* a rank's socket to rank 0, or rank 0's to a peer: both ways */
  BOOT_OUT,  /* dialled by this rank: sends only */
  BOOT_IN    /* dialled by the peer: the watcher reads it */
};
/* What waiters may know of the in-link from a peer (bootstrap.in_state). */
enum { BOOT_IN_NONE = 0, BOOT_IN_UP, BOOT_IN_DONE };

/* One bootstrap socket. */
struct boot_link {
  int fd; /* -1 when there is none */
  int peer;
  int kind;             /* enum boot_link_kind */
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

/* A message's payload. BOOT_DATA (all-gather), BOOT_P2P (boot_send) and
 * BOOT_TABLE (the tree) ones wait in the mailbox, keyed by type, tag and
 * sender. */
struct boot_mail {
  struct boot_mail* next;
  uint16_t type;
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
  struct pollfd* watch_pfd;      /* the watcher's, nlinks + 1 */
  int ping_ms;                   /* heartbeat period */
  int silence_ms;                /* a link silent this long has failed */
  uint64_t pinged_ns;            /* the last heartbeat sent */
  struct boot_link** watch_link; /* the link of each watch_pfd entry (NULL: not a link) */

  /* Peers that said goodbye (left the communicator), as far as this rank
   * knows: written by the watcher, read by any thread. */
  _Atomic unsigned char* left; /* comm->nranks entries */
  _Atomic int nleft;
  /* Peers known to have failed (a closed link, rank 0's notice): ends a
   * wait on that sender alone (boot_mail_wait_sender). After left. */
  _Atomic unsigned char* dead;

  pthread_mutex_t notify_lock; /* rank 0: one failure or departure notice at a time */
  pthread_mutex_t mail_lock;
  pthread_cond_t mail_cond; /* CLOCK_MONOTONIC */
  struct boot_mail* mail;
  struct boot_mail** mail_tail;
  uint32_t next_tag; /* advanced identically on every rank */

  /* Links (boot_link.c): ranks other than 0 of communicators of more than
   * two ranks; NULL arrays otherwise. */
  struct boot_addr* addrs; /* nranks: where each rank listens (the table's) */
  int lsn_fd;              /* where peers dial this rank; -1: none */
  struct boot_addr lsn_addr;
  struct accept_set* lsn_set;      /* the watcher's: dialled links before their hello */
  char lsn_who[48];                /* the set's name in its log lines */
  pthread_mutex_t out_lock;        /* creates out[] entries */
  struct boot_link** out;          /* nranks: links this rank dialled */
  struct boot_link** in;           /* nranks: links peers dialled here (the watcher's) */
  int* in_peers;                   /* the peers of in[], in order (the watcher's) */
  int nin;                         /* entries of in_peers */
  _Atomic unsigned char* in_state; /* nranks: BOOT_IN_*, written by the watcher */
};

/* bootstrap.c */
/* Sends one message (header + payload) under the link's send_lock. Returns 0
 * or a sock_* error value. */
int boot_link_send(struct boot_link* l, int from, uint16_t type, uint32_t tag, const void* payload,
                   uint32_t len, const struct deadline* dl, const _Atomic int* abort_flag);
/* Takes the link's send_lock, waiting no longer than the deadline: 0 or
 * ETIMEDOUT. */
int boot_link_lock(struct boot_link* l, const struct deadline* dl);
/* Sends one message; the caller holds the send_lock. 0 or a sock_* error. */
int boot_link_send_locked(struct boot_link* l, int from, uint16_t type, uint32_t tag,
                          const void* payload, uint32_t len, const struct deadline* dl,
                          const struct sock_stop* stop);
/* Between socket addresses and their wire form. */
void boot_addr_pack(const union sock_addr* a, struct boot_addr* out);
void boot_addr_unpack(const struct boot_addr* a, union sock_addr* out);
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

/* boot_tree.c */
/* Rank 0: every rank is in; sends table (boot_table_len bytes) to its tree
 * children and a welcome to every other rank. A rank that cannot be
 * reached is reported as failed. */
loomResult_t boot_tree_root(struct bootstrap* b, const uint8_t* table, uint64_t comm_hash,
                            const struct deadline* dl);
/* Another rank, with its watcher running: takes the table (table NULL:
 * waits for it from the tree parent; else the one rank 0 sent), fills
 * peers and b->addrs, publishes comm->peers, and passes the table on to
 * this rank's children. */
loomResult_t boot_tree_pass(struct bootstrap* b, const uint8_t* table, struct peer_info* peers,
                            const struct deadline* dl);

/* Every rank has the table once rank 0 has heard so from each: each rank
 * tells rank 0, rank 0 answers all (BOOT_TAG_INIT). Only then may a rank
 * leave init. */
loomResult_t boot_tree_done(struct bootstrap* b, const struct deadline* dl);

/* boot_link.c */
/* The arrays of links (none on rank 0, nor with two ranks): 0 or -1 (out
 * of memory). */
int boot_links_alloc(struct bootstrap* b);
/* Closes and frees every link, the listener and its pending set, and
 * b->addrs; the watcher has stopped. */
void boot_links_free(struct bootstrap* b);
/* A rank other than 0: opens this rank's listener for links on the
 * interface of *local (the local end of its connection to rank 0) and
 * fills b->lsn_addr. */
loomResult_t boot_link_listen(struct bootstrap* b, const union sock_addr* local);
/* Sends one message of type (BOOT_P2P, BOOT_TABLE) to peer: over the star
 * when either end is rank 0, else over the out-link, dialled first if
 * need be. Fails as boot_send. */
loomResult_t boot_peer_send(struct bootstrap* b, int peer, uint16_t type, uint32_t tag,
                            const void* buf, size_t len, const char* what,
                            const struct deadline* dl);
/* Makes the listener's pending set (b->lsn_set), which the watcher runs. */
loomResult_t boot_link_accept_start(struct bootstrap* b);
/* The watcher: accepts links and reads their hellos. Never blocks. */
void boot_link_accept(struct bootstrap* b);
/* 1 when nothing more can come from peer to this rank: its in-link (if
 * any) has closed or said goodbye. Star peers: 1 (their goodbye follows
 * their messages on the one socket). Lock-free. */
int boot_link_quiet(const struct bootstrap* b, int peer);

/* boot_mail.c */
/* Files a message (the watcher) and wakes its waiters. */
void boot_mail_put(struct bootstrap* b, struct boot_mail* m);
/* Wakes every mailbox waiter (a failure, a departure). */
void boot_mail_wake(struct bootstrap* b);
/* Takes the message (type, tag, from), waiting for it until the deadline,
 * the abort flag, the communicator's failure or from's departure (what
 * names it in messages: "all-gather #3 data"). */
loomResult_t boot_mail_wait(struct bootstrap* b, uint16_t type, uint32_t tag, int from,
                            const char* what, const struct deadline* dl, struct boot_mail** out);
/* The same, but a failure of the communicator (and a parent's, during a
 * split: COMM_ABORT_PARENT) does not end the wait, only from's departure or
 * known failure, the deadline or loomCommAbort: for a message whose sender
 * decides alone whether it comes (init's last barrier, a shrink's id). */
loomResult_t boot_mail_wait_sender(struct bootstrap* b, uint16_t type, uint32_t tag, int from,
                                   const char* what, const struct deadline* dl,
                                   struct boot_mail** out);
/* peer left the communicator while this rank still needed it (doing:
 * "rank 1 still waited for all-gather #3 data"): records the failure (rank
 * 0: tells everyone) and returns it. */
loomResult_t boot_peer_left_error(struct bootstrap* b, int peer, const char* doing);
/* A send of what to peer failed with err (a sock_* value): the cause the
 * communicator learns within a moment (the peer died, or left) wins over
 * the socket's errno. */
loomResult_t boot_send_error(struct bootstrap* b, int err, const char* what, int peer);

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
