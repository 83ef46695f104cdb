/* bootstrap.h - rendezvous over TCP and the out-of-band channel of a
 * communicator: peer table exchange, barrier, all-gather, and failure
 * detection (a rank whose socket closes without a goodbye has failed).
 *
 * Topology: a star around rank 0. Every rank keeps one socket to rank 0 for
 * the communicator's whole life; a watcher thread per rank reads it (rank 0
 * reads all), so a dead peer is noticed within milliseconds even while the
 * ranks compute or wait on shared memory. Rank 0 tells every rank when any
 * rank fails. */
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
#define BOOT_WIRE_VERSION 2

/* ---- Wire format (exposed for the unit tests of the parser) ---- */
#define BOOT_MSG_MAGIC 0x4c4d5747u /* "LMWG" */
#define BOOT_MAX_PAYLOAD (64u << 20)
enum boot_msg_type {
  BOOT_HELLO = 1, /* rank -> root: struct boot_hello */
  BOOT_TABLE,     /* root -> rank: comm_hash + nranks peer_info rows */
  BOOT_DATA,      /* either way: a piece of an all-gather, tag = sequence */
  BOOT_BYE,       /* either way: clean goodbye, closing is not a failure */
  BOOT_FAILED,    /* payload struct boot_failed; root -> rank: peer failed; rank -> root:
                     this rank saw peer fail, tell everyone (boot_report_failure) */
  BOOT_REFUSED,   /* root -> rank: payload is a text saying why */
  BOOT_PING,      /* either way, no payload: I am alive (heartbeat) */
  BOOT_LEFT,      /* root -> rank: int32 rank that said goodbye (left the communicator) */
  BOOT_TYPE_MAX
};
struct boot_hdr {
  uint32_t magic;
  uint16_t type;
  uint16_t version;
  uint32_t length; /* payload bytes after the header */
  uint32_t tag;
  int32_t from; /* sender's rank */
  uint32_t pad;
};
struct boot_hello {
  uint64_t secret;
  int32_t nranks;
  int32_t rank;
  struct peer_info info;
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

/* ---- Rendezvous ---- */

/* Creates an id: a new secret, registered with this process's listening
 * socket for LOOM_SOCKET_IFNAME or the first usable interface, which every
 * id made here on that interface shares (opened by the first, closed when no
 * id made here waits for its rank 0 any more). Thread-safe. */
loomResult_t boot_id_create(struct boot_id* id_out);
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
