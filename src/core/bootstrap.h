/* bootstrap.h - rendezvous over TCP and the out-of-band channel of a
 * communicator: peer table exchange, barrier, all-gather, rank-to-rank
 * messages, and failure detection (a rank whose socket closes without a
 * goodbye has failed). docs/bootstrap.md has the picture and the costs.
 *
 * Topology: a star around rank 0, plus links between other ranks. Every
 * rank keeps one socket to rank 0 for the communicator's whole life; a
 * watcher thread per rank reads it (rank 0 reads all), so a dead peer is
 * noticed within milliseconds even while the ranks compute or wait on
 * shared memory. Rank 0 tells every rank when any rank fails. The peer
 * table goes out along a binomial tree: rank 0 sends it to its ceil(log2 n)
 * children over the star, each of them on to its own over links. A link is
 * a TCP connection a rank opens to a peer (not rank 0) the first time it
 * sends it something (boot_send, the tree), one per direction. */
#ifndef LOOM_CORE_BOOTSTRAP_H
#define LOOM_CORE_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/util.h"
#include "loom.h"

/* The layout of loomUniqueId's 128 bytes. */
struct boot_id {
  uint32_t magic;   /* BOOT_ID_MAGIC */
  uint16_t version; /* BOOT_WIRE_VERSION */
  uint16_t family;  /* AF_INET or AF_INET6 */
  uint16_t port;    /* network order */
  uint16_t pad;
  uint8_t addr[16]; /* IPv4 in the first 4 bytes, or IPv6 */
  uint64_t secret;  /* a connection must present it */
  uint8_t reserved[128 - 40];
};
#define BOOT_ID_MAGIC 0x6c6d4944u /* "lmID" */
#define BOOT_WIRE_VERSION 3

/* ---- Wire format (exposed for the unit tests of the parser) ---- */
#define BOOT_MSG_MAGIC 0x4c4d5747u /* "LMWG" */
#define BOOT_MAX_PAYLOAD (64u << 20)
enum boot_msg_type {
  BOOT_HELLO = 1, /* rank -> root: struct boot_hello */
  BOOT_TABLE,     /* tree parent -> child (root: over the star; others: over a link): the
                     peer table, boot_table_len(nranks) bytes (boot_table_parse) */
  BOOT_DATA,      /* over the star, either way: a piece of an all-gather, tag = its sequence
                     number (from 1); tag BOOT_TAG_INIT, empty: init's closing handshake */
  BOOT_BYE,       /* either way: clean goodbye, closing is not a failure */
  BOOT_FAILED,    /* payload struct boot_failed; root -> rank: peer failed; rank -> root:
                     this rank saw peer fail, tell everyone (boot_report_failure) */
  BOOT_REFUSED,   /* root -> rank: payload is a text saying why */
  BOOT_PING,      /* either way, no payload: I am alive (heartbeat) */
  BOOT_LEFT,      /* root -> rank: int32 rank that said goodbye (left the communicator) */
  BOOT_WELCOME,   /* root -> a rank that is not its tree child: uint64 comm_hash; every rank
                     is in, and the table comes from the rank's tree parent */
  BOOT_LINK,      /* first on a link, from the rank that dialled: struct boot_link_hello */
  BOOT_LINK_OK,   /* the answer to BOOT_LINK (else BOOT_REFUSED), no payload: the link is up */
  BOOT_P2P,       /* on a link or the star: a boot_send message, tag = the caller's */
  BOOT_TYPE_MAX
};
/* The tag of the empty BOOT_DATA messages that end init: each rank tells
 * rank 0 it has the table, rank 0 tells each rank that all have it. */
#define BOOT_TAG_INIT 0u
struct boot_hdr {
  uint32_t magic;
  uint16_t type;
  uint16_t version;
  uint32_t length; /* payload bytes after the header */
  uint32_t tag;
  int32_t from; /* sender's rank */
  uint32_t pad;
};
/* An address as it goes on the wire: where a rank listens for links.
 * family 0: none (rank 0, whose links are the star; two-rank
 * communicators, which need no links). */
struct boot_addr {
  uint16_t family; /* AF_INET or AF_INET6 */
  uint16_t port;   /* network order */
  uint32_t pad;
  uint8_t addr[16]; /* IPv4 in the first 4 bytes, or IPv6 */
};
struct boot_hello {
  uint64_t secret;
  int32_t nranks;
  int32_t rank;
  struct peer_info info;
  struct boot_addr link; /* where peers dial this rank */
};
/* The first message on a link, from the rank that dialled it. */
struct boot_link_hello {
  uint64_t secret;
  uint64_t comm_hash;
  int32_t nranks;
  int32_t from; /* the rank that dialled */
  int32_t to;   /* the rank it meant to reach */
  int32_t pad;
};
struct boot_failed {
  int32_t rank;
  int32_t code; /* loomResult_t */
  char why[200];
};

/* Checks a header read from the wire: magic, version, known type, length
 * bounded by max_len. Returns loomSuccess or loomRemoteError with a text in
 * why_out (size why_len) naming the problem. Pure. */
loomResult_t boot_hdr_check(const struct boot_hdr* h, uint32_t max_len, char* why_out,
                            size_t why_len);
/* Checks a hello against the expected secret and nranks. Pure. Returns
 * loomRemoteError for what a stranger sends (short hello, wrong secret):
 * rank 0 just closes; loomInvalidUsage for a rank that knows the secret but
 * cannot join (nranks mismatch, rank out of 1..nranks-1): rank 0 answers
 * BOOT_REFUSED with the reason. */
loomResult_t boot_hello_check(const struct boot_hello* h, size_t len, uint64_t secret, int nranks,
                              char* why_out, size_t why_len);

/* Checks a link hello arriving at rank self. Pure. Returns loomRemoteError
 * for what a stranger sends (short, wrong secret): closed without a word;
 * loomInvalidUsage for a rank that knows the secret but is wrong here
 * (another communicator, a rank out of range, meant for another rank): it
 * is answered BOOT_REFUSED with the reason. */
loomResult_t boot_link_hello_check(const struct boot_link_hello* h, size_t len, uint64_t secret,
                                   uint64_t comm_hash, int nranks, int self, char* why_out,
                                   size_t why_len);

/* The peer table on the wire: comm_hash, then nranks peer_info rows, then
 * nranks link addresses (so that rows land in place, no copy). */
size_t boot_table_len(int nranks);
/* Splits a table of boot_table_len(nranks) bytes; NULL outputs are skipped.
 * Pure. */
void boot_table_parse(const void* table, int nranks, uint64_t* hash_out,
                      struct peer_info* peers_out, struct boot_addr* addrs_out);

/* The binomial tree the table travels along, rooted at rank 0: rank r's
 * parent is r without its highest set bit (-1 for rank 0); its children
 * are r + 2^k for every 2^k > r below nranks, the biggest subtree first.
 * Depth ceil(log2 nranks); rank 0 has ceil(log2 nranks) children. Pure. */
int boot_tree_parent(int rank);
/* Writes at most cap children of rank into out, in the order to serve
 * them; returns how many there are (may exceed cap). */
int boot_tree_children(int rank, int nranks, int* out, int cap);

/* ---- Rendezvous ---- */

/* Creates an id: a new secret, registered with this process's listening
 * socket for LOOM_SOCKET_IFNAME or the first usable interface, which every
 * id made here on that interface shares (opened by the first, closed when no
 * id made here waits for its rank 0 any more). Thread-safe. */
loomResult_t boot_id_create(struct boot_id* id_out);
/* 0 when id can be a unique id of this build (magic, version, an address family);
 * otherwise -1 with why. Pure (the fuzz harness calls it on outside input). */
int boot_id_check(const struct boot_id* id, char* why, size_t len);
/* Makes an id from "host:port" and a secret (loomCommInitFromEnv). With
 * listen != 0 (rank 0) also opens a listening socket for it on that address
 * (on the wildcard address when host is not local, e.g. behind NAT).
 * Without it, rank 0's boot_init binds the address itself. */
loomResult_t boot_id_from_addr(const char* hostport, uint64_t secret, int listen,
                               struct boot_id* id_out);

/* Forgets an id made in this process whose rank 0 has not taken it (a
 * rank-0 init that failed before joining): connections waiting for it
 * close, and its listener when no other id uses it. */
void boot_id_release(const struct boot_id* id);

/* Joins the communicator: connects to rank 0 (retrying until the deadline),
 * proves the secret, exchanges peer_info; rank 0 accepts the others. Fills
 * comm->peers and comm->comm_hash and starts the watcher. Gives up after
 * comm->timeout_ms (loomTimeout) or when comm->aborted is set
 * (loomInvalidUsage); a refused rank gets loomInvalidUsage with the reason.
 * On failure it has released what it made (comm->boot stays NULL). */
loomResult_t boot_init(struct loom_comm* comm, const struct boot_id* id,
                       const struct peer_info* self);
/* Every rank contributes len bytes; out receives nranks * len bytes in rank
 * order. Collective. Honours the deadline and failures. */
loomResult_t boot_allgather(struct loom_comm* comm, const void* in, size_t len, void* out,
                            const struct deadline* dl);
loomResult_t boot_barrier(struct loom_comm* comm, const struct deadline* dl);
/* Init's last barrier: once rank 0 has every rank's arrival, every rank's
 * init succeeds. A rank other than 0 waits for rank 0's word only (rank 0's
 * departure or failure, the deadline or loomCommAbort end the wait; a
 * failure another peer reports, or a split's parent failing, do not): a
 * peer that returned from init and failed at once is the next operation's
 * error, not init's, on every rank. A failing rank 0 tears down, which its
 * peers see, and they return the cause it reported. */
loomResult_t boot_barrier_init_done(struct loom_comm* comm, const struct deadline* dl);

/* ---- Rank to rank (what a connection-oriented transport swaps endpoint
 * addresses with) ---- */

/* Sends len bytes (at most BOOT_MAX_PAYLOAD; buf may be NULL when len is 0)
 * to peer, for peer's boot_recv(comm, this rank, tag). Messages of one
 * (peer, tag) arrive in the order one thread sent them. The first message
 * to a peer opens the link to it (rank 0 and messages to rank 0: the star).
 * Blocks until the bytes are with this host's kernel, not until the peer
 * receives them: the peer's watcher takes every message in as it comes, so
 * a send never waits for the matching receive and two ranks may both send
 * first. Gives up at the deadline (NULL: comm->timeout_ms from now) with
 * loomTimeout; with loomRemoteError when the communicator has failed (the
 * text names the rank that did) or peer has left it; loomInvalidUsage when
 * comm is aborted. A message to this rank itself is delivered locally.
 * Thread-safe: threads of one rank may send to different peers, or on
 * different tags, at once. */
loomResult_t boot_send(struct loom_comm* comm, int peer, uint32_t tag, const void* buf, size_t len,
                       const struct deadline* dl);
/* Receives the next message of (peer, tag) into buf. got_out NULL: the
 * message must have exactly len bytes; else up to len, and *got_out says
 * how many. A message of the wrong size is consumed and the call fails with
 * loomInvalidUsage saying both sizes. Blocks until the message is there, at
 * most to the deadline (NULL: comm->timeout_ms from now); fails as
 * boot_send does, and at once with loomRemoteError when peer left the
 * communicator without sending it. Thread-safe as boot_send. */
loomResult_t boot_recv(struct loom_comm* comm, int peer, uint32_t tag, void* buf, size_t len,
                       size_t* got_out, const struct deadline* dl);
/* boot_send and boot_recv for a shrink, among the ranks that are left of a
 * communicator that may have failed: its failure does not stop them, only
 * an abort, the deadline, or the peer's departure or known failure. */
loomResult_t boot_survivor_send(struct loom_comm* comm, int peer, uint32_t tag, const void* buf,
                                size_t len, const struct deadline* dl);
loomResult_t boot_survivor_recv(struct loom_comm* comm, int peer, uint32_t tag, void* buf,
                                size_t len, const struct deadline* dl);
/* The communicator's secret: what every connection of it must present
 * (transports check it in their own handshakes). Pure. */
uint64_t boot_secret(const struct loom_comm* comm);
/* The local address of this rank's bootstrap connection to rank 0 (rank 0:
 * of its connection from the lowest rank), i.e. the interface on the route
 * to the root; the port means nothing. Returns 0, or -1 when there is no
 * such connection (one rank). Logs nothing; never blocks. */
union sock_addr;
int boot_route_addr(const struct loom_comm* comm, union sock_addr* addr_out);
/* 1 when peer has left the communicator cleanly (it said goodbye: it
 * destroyed its communicator), as this rank has learnt so far: from the
 * peer's own goodbye (rank 0, and every rank about rank 0) or from rank 0's
 * BOOT_LEFT notice. A wait on such a peer will never end. Lock-free. */
int boot_peer_left(const struct loom_comm* comm, int peer);
/* How many peers have left (0 on the fast path). Lock-free. */
int boot_left_count(const struct loom_comm* comm);
/* An operation of this rank failed because of peer (it left, say), and the
 * caller has recorded it (comm_set_failed): has rank 0 tell every rank, so
 * that ranks waiting on this one fail at once too, naming peer, instead of
 * at their deadline (on rank 0 itself, records and tells at once). Sends a
 * whole notice or none, waiting at most BOOT_NOTIFY_MS for the link. */
void boot_report_failure(struct loom_comm* comm, int peer, const char* why);
/* Says goodbye (clean == 1) or just closes (abort), stops the watcher and
 * frees. Never blocks on peers. */
void boot_fini(struct loom_comm* comm, int clean);

#endif
