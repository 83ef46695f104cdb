/* transport.h - how bytes move between two ranks.
 *
 * A connection is one direction, from a sender rank to a receiver rank, of
 * one communicator. Each transport is one const table of functions. Posted
 * transfers on a connection complete in the order they were posted, and the
 * k-th send matches the peer's k-th receive. Nothing here blocks: waiting is
 * the executor's job (it sleeps on the rank's doorbell, which every transport
 * rings when it makes progress possible for that rank).
 */
#ifndef LOOM_TRANSPORT_H
#define LOOM_TRANSPORT_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/memkind.h"
#include "core/util.h"
#include "loom.h"

struct conn;
struct fifo_desc;
struct xfer;

/* The executor's reduction, which a transport with caps.fused_reduce
 * applies to each piece of a receive as it arrives: dst[at, at + n) =
 * src[at, at + n) op in[0, n). at and n are multiples of the element size
 * (dtype_size(x->dtype)). Transports move bytes and never reduce by
 * themselves; this is how the executor lends them its reduction. Never
 * blocks. */
typedef void (*xfer_reduce_fn)(const struct xfer* x, size_t at, const void* in, size_t n);

/* One posted transfer. Owned by the caller, who must keep it (and the
 * buffers it names) alive until test() reports it done or the connection is
 * closed. */
struct xfer {
  /* Set by the caller before posting. */
  void* dst;       /* receive: where the data lands */
  const void* src; /* send: the data. receive with reduce: the local operand */
  size_t bytes;    /* the message size; both ends must agree */
  /* Receive only. NULL: dst = incoming. Otherwise dst = src op incoming,
   * each piece through this function (caps.fused_reduce only). */
  xfer_reduce_fn reduce;
  int mem; /* enum mem_kind of dst and src (caps.mem_kinds) */
  loomDataType_t dtype;
  loomRedOp_t op; /* built-in op for the reduce (loomAvg reduces as sum) */
  void* user;     /* the caller's; transports never touch it */
  /* Transport state. */
  struct conn* conn;
  size_t done;       /* bytes completed so far */
  int state;         /* transport private */
  uint32_t slot;     /* transport private */
  struct xfer* next; /* the connection's queue */
};

/* What a transport can do, for the layers that choose one. */
struct tp_caps {
  unsigned mem_kinds; /* MEM_KIND_BIT of each memory kind its transfers may name */
  /* 1: a send completes only once the receiver has taken the data (the
   * sender's buffer is read in place); 0: the data is copied out (eager,
   * with flow control), so a send may complete before its receive is
   * posted. Plans are proved deadlock-free for rendezvous either way. */
  int rendezvous;
  /* 1: recv_post takes a transfer with a reduce function (dst = src op
   * incoming) and applies it to each piece as it arrives, fused with the
   * receive; measured faster than a receive into a staging buffer and a
   * separate reduction on host memory (docs/PERFORMANCE.md). 0: the
   * executor stages and reduces itself. */
  int fused_reduce;
  /* 1: memory a transfer names must be registered first (mem_reg: pinning,
   * keys a NIC needs); loomCommRegister registers with every such
   * transport of the communicator, through the registration cache
   * (regcache.h). 0: mem_reg is the stub. */
  int registers;
};

/* Every slot is set: one a transport does not support points to a shared
 * stub (tp_mem_reg_none, tp_idle_none, ...) that says so. tp_comm_init
 * refuses a table with a NULL slot or of another size. */
struct loom_transport {
  size_t size;      /* sizeof(struct loom_transport): a table built for another layout is refused */
  const char* name; /* "local", "shm", ... */
  struct tp_caps caps;
  /* 1 when a transfer with a peer that closed its end (it left the
   * communicator) fails by itself once everything the peer sent has
   * arrived (sockets: the close follows the last byte on each stream). 0
   * when the executor must watch for the peer's departure itself (a
   * receiver that never attached cannot mark a FIFO closed). */
  int sees_close;
  /* Pure query, no side effects: can this transport join self to peer? */
  loomResult_t (*can_connect)(const struct peer_info* self, const struct peer_info* peer,
                              int* ok_out);
  /* Starts a connection to peer in one direction (is_send: self -> peer).
   * Never blocks: the sender side creates what is shared, the receiver side
   * attaches to it as soon as it exists. */
  loomResult_t (*connect)(struct loom_comm* comm, int peer, int is_send, int lane,
                          struct conn** conn_out);
  /* loomSuccess once the connection is up, loomInProgress before. Never
   * blocks. */
  loomResult_t (*connect_test)(struct conn* c);
  /* Queue a transfer. Never blocks; may start moving data. */
  loomResult_t (*send_post)(struct conn* c, struct xfer* x);
  loomResult_t (*recv_post)(struct conn* c, struct xfer* x);
  /* Moves data of the connection's queue as far as possible without waiting,
   * then tells whether x is done. Returns loomRemoteError when the peer went
   * away or sent something that does not match. Never blocks. */
  loomResult_t (*test)(struct xfer* x, int* done_out);
  /* Withdraws transfers still queued (after an error) so that no peer reads
   * or writes their buffers afterwards; waits at most briefly for a peer that
   * is mid-copy. The connection stays (its communicator is in error). */
  loomResult_t (*cancel)(struct conn* c);
  /* Withdraws what is queued as cancel does, then releases the connection.
   * Never blocks on peers. */
  loomResult_t (*close)(struct conn* c);
  /* Once per communicator at init, after the rank's doorbell exists, on every
   * rank in the same order. used: some pair of ranks of comm will connect
   * over this transport (the same on every rank, computed from the peer
   * table), so a transport that needs a collective exchange (boot_allgather)
   * does it only then. May block, up to comm->timeout_ms. Keeps its state in
   * *tp_comm_state(comm, tp). */
  loomResult_t (*comm_init)(struct loom_comm* comm, int used);
  /* Once per communicator at teardown, after every connection is closed:
   * releases what the transport shares for it (names a failed peer may have
   * left behind). failed: the communicator is in error. Never blocks. */
  void (*comm_fini)(struct loom_comm* comm, int failed);
  /* The executor of comm is about to sleep on its doorbell: what the
   * transport must have watched while nobody polls, is watched from now on.
   * Cheap when there is nothing to hand over (tp_idle_none). Clients of the
   * progress engine need none: tp_idle hands their descriptors over. */
  void (*idle)(struct loom_comm* comm);
  /* Registers [buf, buf + bytes) of memory kind kind for transfers over
   * this transport on comm (pinning, keys a NIC needs); *handle_out is
   * passed back to mem_dereg. tp_mem_reg_none: loomInvalidUsage saying the
   * transport registers nothing (its transfers need no registration). */
  loomResult_t (*mem_reg)(struct loom_comm* comm, void* buf, size_t bytes, int kind,
                          void** handle_out);
  loomResult_t (*mem_dereg)(struct loom_comm* comm, void* handle);
  /* Describes this side of connection c's FIFO as plain data (fifo.h's
   * struct fifo_desc), for a kernel or proxy that drives it without the
   * transport's code; valid until c is closed. loomInProgress while c is not
   * up yet. Never blocks. tp_fifo_describe_none: loomInvalidUsage saying the
   * transport keeps no FIFO in memory (sockets). */
  loomResult_t (*fifo_describe)(struct conn* c, struct fifo_desc* out);
};

/* The most transports one build has (a table index bound). */
#define TP_MAX_TRANSPORTS 8

/* The stubs of unsupported slots. */
void tp_idle_none(struct loom_comm* comm);
loomResult_t tp_mem_reg_none(struct loom_comm* comm, void* buf, size_t bytes, int kind,
                             void** handle_out);
loomResult_t tp_mem_dereg_none(struct loom_comm* comm, void* handle);
loomResult_t tp_fifo_describe_none(struct conn* c, struct fifo_desc* out);
/* loomSuccess when t is a complete table of this build's layout; otherwise
 * loomInternalError naming the transport and the first missing slot. */
loomResult_t tp_table_check(const struct loom_transport* t);

/* Fields every connection starts with; transports embed it first. */
struct conn {
  const struct loom_transport* tp;
  struct loom_comm* comm;
  int peer;
  int is_send;
  int lane;
  struct xfer* head; /* posted, not yet done, in order */
  struct xfer* tail;
};

/* ---- Per-communicator transport state (src/transport/transport.c) ---- */

/* Sets up what every transport needs for comm (the rank's doorbell shared
 * with peers on this host), after the bootstrap. Collective. */
loomResult_t tp_comm_init(struct loom_comm* comm);
/* Closes every connection and releases the shared state. Never blocks on
 * peers. Unlinks every shared name this rank may have been party to. */
void tp_comm_fini(struct loom_comm* comm);
/* Lanes: independent connections between the same two ranks, so that
 * collectives and point-to-point traffic of one group progress side by side
 * without their messages interleaving on one FIFO. */
enum { LANE_COLL = 0, LANE_P2P = 1, LANE_COUNT };

/* The connection to peer in one direction on a lane, connecting on first use
 * with the first transport of LOOM_TRANSPORTS that can. Never blocks: the connection
 * may still be coming up (use conn's connect_test). */
loomResult_t tp_conn_get(struct loom_comm* comm, int peer, int is_send, int lane,
                         struct conn** conn_out);
/* Cancels every connection of comm (after an operation on it failed), so
 * that no peer touches the buffers of the interrupted transfers. */
void tp_comm_cancel(struct loom_comm* comm);
/* This rank's doorbell: every transport rings it when this rank may be able
 * to make progress. */
struct bell* tp_self_bell(struct loom_comm* comm);
/* rank's device area (devarea.h) as this rank maps it, NULL where rank is on
 * another host; the area's bytes; rank's index among this host's ranks (-1
 * on another host). */
struct dev_pub;
struct dev_pub* tp_dev_area(struct loom_comm* comm, int rank);
size_t tp_dev_area_bytes(struct loom_comm* comm);
int tp_local_index(struct loom_comm* comm, int rank);
/* Peer's doorbell (peers on this host). */
struct bell* tp_peer_bell(struct loom_comm* comm, int peer);
/* Where transport t keeps its per-communicator state (NULL until its
 * comm_init sets it). */
void** tp_comm_state(struct loom_comm* comm, const struct loom_transport* t);
/* A thread runs for this rank beside its executors (the progress engine's,
 * when it starts): the waiters then spin less, so as not to starve it.
 * Before comm_init returns, to count. */
void tp_helper_thread_add(struct loom_comm* comm);
/* The network progress engine of comm (transport/progress.h), made at the
 * first call; shared by every transport that needs a thread. From
 * comm_init only (the executor reads it unlocked afterwards). Freed by
 * tp_comm_fini after every transport's comm_fini. */
struct progress;
loomResult_t tp_progress_get(struct loom_comm* comm, struct progress** out);
/* The executor of comm is about to sleep: the progress engine's idle
 * hand-over, then each transport's idle hook. */
void tp_idle(struct loom_comm* comm);
/* Registers [buf, buf + bytes) with every transport allowed on comm that
 * needs registration (caps.registers), each one's handle in
 * handles[its index] (room for TP_MAX_TRANSPORTS); on failure deregisters
 * what it registered. The other slots stay NULL. */
loomResult_t tp_mem_reg_used(struct loom_comm* comm, void* buf, size_t bytes, int kind,
                             void** handles);
/* Undoes tp_mem_reg_used (NULL slots skipped, then cleared). Never blocks. */
void tp_mem_dereg_used(struct loom_comm* comm, void** handles);
/* The shared comm_init of transports with nothing to set up per
 * communicator. */
loomResult_t tp_comm_init_none(struct loom_comm* comm, int used);
/* How many polls a waiter should spin before sleeping. */
int tp_spin_count(struct loom_comm* comm);
/* Called by the thread that drives a plan: the first time, it moves to a CPU
 * of its own among the machine's ranks (LOOM_SPREAD). */
void tp_thread_spread(struct loom_comm* comm);
/* The CPU for place index among a machine's ranks: the (index mod count)th
 * of mask, or -1 when mask has fewer than two or index < 0. */
int tp_spread_cpu(const cpu_set_t* mask, int index);
/* Moves the calling thread to cpu (one of its mask) and gives it its mask
 * back; the CPU it ran on in between (cpu), or -1 on failure. */
int tp_thread_move(int cpu);
/* Names of the transports usable here (loom_info). */
const char* tp_list_available(void);

/* ---- Direct access to the buffers of peers on this host (peer.c) ----
 *
 * For direct plans: ranks publish their buffers' addresses, meet at syncs,
 * and read each other's buffers in between: a plain load for thread ranks
 * and for loomMemAlloc memory (mapped by the peer), cross-memory attach
 * (process_vm_readv) for any other memory. Peers only read. */

/* loomSuccess when every name of LOOM_TRANSPORTS's value list is a
 * transport of this build; otherwise loomInvalidArgument naming it
 * (params_reject). */
loomResult_t tp_transports_check(const char* list);
/* 1 when LOOM_TRANSPORTS allows the transport of that name. */
int tp_transport_allowed(const char* name);
/* 1 when every rank of comm is on this host and can read every other's
 * memory (agreed by all ranks at init, so all plan alike), and LOOM_DIRECT
 * allows it. */
int tp_direct_ok(struct loom_comm* comm);
/* 1 when every rank of comm is a thread of this process: direct plans then
 * read with plain loads (else, mostly, by cross-memory attach). */
int tp_direct_loads(struct loom_comm* comm);
/* Publishes the buffers of this rank's next direct plan (PEER_NBUFS of
 * them: send, receive, scratch; NULL and 0 where absent). Call before the
 * plan's first sync. */
void tp_peer_publish(struct loom_comm* comm, void* const* bufs, const size_t* bytes);
/* Arrives at the next sync and rings the peers. Never blocks. */
void tp_sync_arrive(struct loom_comm* comm);
/* 1 once every peer has arrived at this rank's latest sync. Never blocks. */
int tp_sync_done(struct loom_comm* comm);
/* 1 when peer has not arrived at this rank's latest sync yet. */
int tp_sync_missing(struct loom_comm* comm, int peer);
/* dst = bytes at offset off of peer's published buffer buf. Checks the
 * range against what the peer published (a mismatch of the ranks'
 * arguments is loomInvalidUsage naming the peer); loomRemoteError when the
 * peer's memory cannot be read (it died). Blocks only while copying. */
loomResult_t tp_peer_copy(struct loom_comm* comm, int peer, unsigned buf, size_t off, void* dst,
                          size_t bytes);
/* Hands the bytes at offset off of peer's published buffer buf to use(),
 * piece by piece in order (use(arg, at, data, n): data holds the bytes at
 * offset off + at; n is a multiple of unit): in place where this process
 * can load the peer's memory, else through a bounce buffer read by
 * cross-memory attach. The executor reduces what it is given. Checks the
 * range as tp_peer_copy does. Blocks only while reading. */
typedef void (*tp_peer_use_fn)(void* arg, size_t at, const void* data, size_t n);
loomResult_t tp_peer_read(struct loom_comm* comm, int peer, unsigned buf, size_t off, size_t bytes,
                          size_t unit, tp_peer_use_fn use, void* arg);

/* Bytes of data one rank's lines carry in one call (tune.h's
 * TUNE_LINES_BYTES, which algos.c checks is the same). */
#define TP_LINES_BYTES (16u << 10)
/* Low-latency lines (lines.c): each rank of a host has, in its rank
 * segment, TP_LINES_AREAS areas of 64-byte lines, used by its calls in turn;
 * a line carries 56 bytes of data and the call's sequence number, stored
 * last with release, so a reader that sees the number sees the data
 * (kernels/cpu/cpu_lines.h). A rank
 * may overwrite the area of call k in call k + TP_LINES_AREAS, once every
 * other rank has put call k + 1 (collectives/lines.c says how the plans
 * make sure of it); a broadcast's root may so run TP_LINES_AREAS - 2 calls
 * ahead of its slowest reader. A power of two. */
#define TP_LINES_AREAS 16u
/* 1 when every rank of comm is on this host with its segment mapped,
 * LOOM_TRANSPORTS allows shared memory and LOOM_DIRECT does not say 0 (all
 * agreed at init). */
int tp_lines_ok(struct loom_comm* comm);
/* The sequence number of this rank's next call with lines; every rank
 * counts the same calls. */
uint64_t tp_lines_next(struct loom_comm* comm);
/* Writes bytes of src into this rank's lines of call seq at byte offset off
 * (a multiple of 4; off + bytes at most TP_LINES_BYTES), then rings the
 * peers' doorbells. Never blocks. */
void tp_lines_put(struct loom_comm* comm, uint64_t seq, size_t off, const void* src, size_t bytes);
/* When peer's lines of call seq hold bytes [off, off + bytes): hands them to
 * use() piece by piece (as tp_peer_read; each piece a multiple of unit) and
 * returns 1; else 0, having handed nothing. *checked keeps how far earlier
 * tries found the words there (0 on the first try). Never blocks. */
int tp_lines_read(struct loom_comm* comm, int peer, uint64_t seq, size_t off, size_t bytes,
                  size_t unit, size_t* checked, tp_peer_use_fn use, void* arg);
/* As tp_lines_read, decoding straight into dst[0..bytes). */
int tp_lines_copy(struct loom_comm* comm, int peer, uint64_t seq, size_t off, size_t bytes,
                  void* dst, size_t* checked);
/* 1 once peer has put its lines of call seq - (TP_LINES_AREAS - 2) or a
 * later one (at once where there is no such call), so has finished every
 * call before it; else 0. Never blocks. */
int tp_lines_seen(struct loom_comm* comm, int peer, uint64_t seq);

/* loomMemAlloc memory (mem.c): shared (memfd) mappings that peers on this
 * host map too, so direct plans read them with plain loads. Thread safe. */
loomResult_t tp_mem_alloc(size_t size, void** ptr_out);
/* loomInvalidArgument when ptr is not the start of a live allocation. */
loomResult_t tp_mem_free(void* ptr);

/* Helpers for the connection queue. */
void conn_queue_push(struct conn* c, struct xfer* x);
void conn_queue_pop(struct conn* c); /* drops the head */

extern const struct loom_transport loom_transport_local;
extern const struct loom_transport loom_transport_shm;
extern const struct loom_transport loom_transport_socket;

#endif
