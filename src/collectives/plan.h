/* plan.h - an algorithm as data.
 *
 * A plan is, for one rank, an ordered list of steps; each step is a set of
 * ops that run concurrently (all of a step's sends and receives are posted
 * together and the step ends when all are done). An op reads and writes
 * element ranges of three symbolic buffers (the user's send and receive
 * buffers, and a scratch buffer the executor allocates). Offsets and counts
 * are in elements, so one plan serves every datatype of that element count.
 *
 * Rules every generator keeps (the checker proves them):
 *  - ops of one step never depend on each other: a send reads only data that
 *    earlier steps produced, and no two ops of a step write overlapping
 *    ranges or read a range another op of the step writes;
 *  - for each ordered pair (src, dst), the k-th send from src to dst matches
 *    the k-th receive of dst from src, with the same count;
 *  - the plan is deadlock-free even when a send completes only once its
 *    receiver has taken it (rendezvous), which is what zero-copy transports
 *    do;
 *  - direct plans (peer ops) read a peer's buffers only between two syncs,
 *    never a range that peer writes between the same two syncs, and never
 *    after the last sync (the peer may have returned);
 *  - plans with lines (OP_LINES_*) put once, read each peer's lines (or
 *    wait to see its put: OP_LINES_SEEN) in a step of its own, and read or
 *    see every other rank's lines (which is what lets a rank reuse an area
 *    TP_LINES_AREAS calls later: see lines.c).
 */
#ifndef LOOM_COLL_PLAN_H
#define LOOM_COLL_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "core/colls.h"
#include "loom.h"

enum plan_buf { PB_SEND = 0, PB_RECV = 1, PB_SCRATCH = 2, PB_COUNT };

enum plan_op_kind {
  OP_SEND = 0,    /* send src[0..count) to peer */
  OP_RECV,        /* receive count elements from peer into dst */
  OP_RECV_REDUCE, /* dst = src op (what peer sends); dst may equal src */
  OP_COPY,        /* dst = src, local */
  OP_REDUCE,      /* dst = dst op src, local */
  OP_PREMUL,      /* dst = src * the PreMulSum scalar, local */
  OP_DIV,         /* dst = src / nranks (loomAvg's final step), local */
  /* Direct access to a peer on this host (src/collectives/direct.c): src
   * names the peer's buffer, dst is local. Only between OP_SYNCs. */
  OP_PEER_COPY,   /* dst = peer's src */
  OP_PEER_REDUCE, /* dst = dst op peer's src */
  OP_SYNC,        /* every rank arrives before any leaves; peer -1, count 1 */
  /* Low-latency lines (src/collectives/lines.c): every rank has an area of
   * lines in its rank segment where each 56 bytes of data travel in one
   * 64-byte line with the call's sequence number (kernels/cpu/cpu_lines.h),
   * so a reader polls the line itself: no sync, no separate flag, no system
   * call. The area is named by
   * PB_LINES; its offsets are elements, as elsewhere. */
  OP_LINES_PUT,    /* this rank's lines[dst.off..) = src; peer -1 */
  OP_LINES_COPY,   /* dst = peer's lines[src.off..), once this call's are there */
  OP_LINES_REDUCE, /* dst = dst op peer's lines[src.off..), likewise */
  /* Waits until peer has put lines of call seq - (TP_LINES_AREAS - 2) or a
   * later one, seq being this call's: reads and writes nothing (src and dst
   * are lines[0..1) by convention). What lets a rank that reads no data of
   * peer (a broadcast's root) reuse its areas; see lines.c. */
  OP_LINES_SEEN,
  OP_KIND_COUNT
};

/* The lines area in a plan_ref (OP_LINES_*): not a buffer of the plan. */
#define PB_LINES UINT32_MAX

struct plan_ref {
  uint32_t buf; /* enum plan_buf, or PB_COUNT + k for a p2p plan's k-th user buffer */
  size_t off;   /* elements */
};

struct plan_op {
  uint8_t kind; /* enum plan_op_kind */
  int32_t peer; /* OP_SEND, OP_RECV, OP_RECV_REDUCE; -1 otherwise */
  struct plan_ref src;
  struct plan_ref dst;
  size_t count; /* elements, > 0 */
};

struct plan_step {
  uint32_t op_begin; /* index into ops */
  uint32_t op_end;   /* one past the last */
};

struct plan {
  int rank;
  int nranks;
  const char* algo;           /* "ring", "p2p", ... static text */
  size_t buf_count[PB_COUNT]; /* elements each buffer holds (bounds) */
  size_t lines_count;         /* elements of this rank's lines the plan puts */
  struct plan_step* steps;
  uint32_t nsteps, steps_cap;
  struct plan_op* ops;
  uint32_t nops, ops_cap;
  int failed; /* an allocation failed while building */
};

/* ---- Building (src/collectives/plan.c) ---- */
void plan_init(struct plan* p, int rank, int nranks, const char* algo);
void plan_free(struct plan* p);
void plan_reset(struct plan* p); /* empty it, keep the storage */
/* Opens a new step; ops added after it belong to it. An empty step is
 * dropped when the next one opens or the plan ends. */
void plan_step_begin(struct plan* p);
/* Adds an op to the current step; count == 0 adds nothing. */
void plan_add(struct plan* p, enum plan_op_kind kind, int peer, struct plan_ref src,
              struct plan_ref dst, size_t count);
/* Ends building: drops a trailing empty step. Returns loomSuccess, or
 * loomSystemError if an allocation failed. */
loomResult_t plan_finish(struct plan* p);
static inline struct plan_ref plan_ref_make(enum plan_buf b, size_t off) {
  struct plan_ref r = {(uint32_t)b, off};
  return r;
}
/* PreMulSum: a step that scales the rank's input SEND[0..len) into
 * SCRATCH[0..len) (which the plan must size), so that what peers read or
 * the plan sends is scaled. Returns where the input now is: PB_SCRATCH, or
 * PB_SEND when the op is not PreMulSum. */
struct coll_args;
enum plan_buf plan_premul_input(const struct coll_args* a, struct plan* p, size_t len);
/* Writes a readable listing of the plan (for LOOM_DEBUG=TRACE and tests). */
void plan_print(const struct plan* p, char* buf, size_t len);
/* Names for messages: "send", "recv_reduce", ...; "recv", "scratch", and
 * "user" for the executor's own buffers past PB_COUNT. Static text. */
const char* plan_op_name(unsigned kind);
const char* plan_buf_name(unsigned buf);

/* ---- Generators (one file per algorithm family) ---- */

/* The even split of count elements into n parts: part i is
 * [part_begin(count, n, i), part_begin(count, n, i + 1)). */
static inline size_t part_begin(size_t count, int n, int i) {
  size_t base = count / (size_t)n, extra = count % (size_t)n;
  return base * (size_t)i + ((size_t)i < extra ? (size_t)i : extra);
}

/* What a collective asks of its plan.
 *
 * Buffers per collective, in elements (c = count), as the public API defines
 * them; "in place" is where the user may put sendbuff relative to recvbuff:
 *   all-reduce       SEND c,   RECV c;   in place: SEND == RECV
 *   broadcast        SEND c (root only), RECV c;     in place: SEND == RECV at root
 *   reduce           SEND c,   RECV c (root only);   in place: SEND == RECV at root
 *   all-gather       SEND c,   RECV n*c; in place: SEND == RECV + rank*c
 *   reduce-scatter   SEND n*c, RECV c;   in place: RECV == SEND + rank*c
 *   all-to-all       SEND n*c, RECV n*c; (c elements to and from each peer)
 *   all-to-all-v     SEND/RECV by counts and displacements per peer
 *   gather           SEND c,   RECV n*c (root only); in place at root: SEND == RECV + root*c
 *   scatter          SEND n*c (root only), RECV c;   in place at root: RECV == SEND + root*c
 * A buffer that is "root only" may be NULL elsewhere: plans never touch it
 * there (partial results live in PB_SCRATCH, whose size the plan sets in
 * buf_count[PB_SCRATCH]). Plans never write PB_SEND. */
struct coll_args {
  int nranks;
  int rank;
  size_t count;       /* c above */
  size_t slice_elems; /* largest piece one pipeline step moves, > 0 */
  int premul;         /* PreMulSum: scale the input first */
  int avg;            /* loomAvg: divide by nranks at the end */
  int root;           /* broadcast, reduce, gather, scatter */
  /* all-to-all-v, this rank's view, nranks entries each (elements). */
  const size_t* sendcounts;
  const size_t* sdispls;
  const size_t* recvcounts;
  const size_t* rdispls;
  /* Hierarchical plans (hier.c): the host of each rank (nranks entries,
   * numbered 0.. in order of first appearance; NULL: one host), and the
   * all-reduce family (enum tune_algo: ring, tree, rhd or doubling) across hosts. */
  const int* host_of;
  int cross_algo;
  /* 1: SEND and RECV are distinct (an out-of-place call); a plan may then
   * write RECV while peers read SEND. 0: they may be one buffer. Only the
   * kinds whose plans differ set it (all-to-all: alltoall_distinct). */
  int distinct;
};

/* ---- Generators: each fills out (already plan_init'ed) for one rank. ---- */

/* src/collectives/ring.c: the ring rank -> rank + 1, chunks pipelined in
 * slices. All-reduce is reduce-scatter then all-gather. Broadcast and reduce
 * are a pipelined chain starting (ending) at the root. */
loomResult_t ring_allreduce_build(const struct coll_args* a, struct plan* out);
loomResult_t ring_reducescatter_build(const struct coll_args* a, struct plan* out);
loomResult_t ring_allgather_build(const struct coll_args* a, struct plan* out);
loomResult_t ring_broadcast_build(const struct coll_args* a, struct plan* out);
loomResult_t ring_reduce_build(const struct coll_args* a, struct plan* out);

/* src/collectives/tree.c: a double binary tree (two complementary trees, each
 * carrying half of the data, as NCCL does across nodes), pipelined in
 * slices: reduce up the trees, broadcast down them. */
loomResult_t tree_allreduce_build(const struct coll_args* a, struct plan* out);
loomResult_t tree_broadcast_build(const struct coll_args* a, struct plan* out);
loomResult_t tree_reduce_build(const struct coll_args* a, struct plan* out);

/* src/collectives/rhd.c: recursive halving and doubling (Rabenseifner) with
 * the usual fold for rank counts that are not powers of two; recursive
 * doubling for (small) all-gather. */
loomResult_t rhd_allreduce_build(const struct coll_args* a, struct plan* out);
loomResult_t rhd_reducescatter_build(const struct coll_args* a, struct plan* out);
loomResult_t rhd_allgather_build(const struct coll_args* a, struct plan* out);
/* Recursive doubling all-reduce: log2 n exchanges of the whole buffer (with
 * rhd's fold), the fewest steps, for small buffers. */
loomResult_t doubling_allreduce_build(const struct coll_args* a, struct plan* out);

/* src/collectives/alltoall.c: pairwise exchange (large messages), Bruck's
 * algorithm (small ones, through PB_SCRATCH), pairwise all-to-all-v, and
 * the direct gather and scatter (root exchanges with every rank at once). */
loomResult_t pairwise_alltoall_build(const struct coll_args* a, struct plan* out);
loomResult_t bruck_alltoall_build(const struct coll_args* a, struct plan* out);
loomResult_t pairwise_alltoallv_build(const struct coll_args* a, struct plan* out);
loomResult_t direct_gather_build(const struct coll_args* a, struct plan* out);
loomResult_t direct_scatter_build(const struct coll_args* a, struct plan* out);

/* src/collectives/direct.c: direct plans for ranks that can read each
 * other's buffers (threads of one process, or processes of one host with
 * loomMemAlloc memory or cross-memory attach). No FIFO: each rank reads what
 * it needs from its peers, between syncs. One-shot all-reduce (every rank
 * reduces everything; small sizes), two-shot (each reduces its block, then
 * copies the others'), and single-read all-gather, reduce-scatter,
 * broadcast and all-to-all. */
loomResult_t oneshot_allreduce_build(const struct coll_args* a, struct plan* out);
loomResult_t twoshot_allreduce_build(const struct coll_args* a, struct plan* out);
loomResult_t read_allgather_build(const struct coll_args* a, struct plan* out);
loomResult_t read_reducescatter_build(const struct coll_args* a, struct plan* out);
/* src/collectives/lines.c: one exchange through the ranks' low-latency
 * lines, for small messages among the ranks of one host: every rank puts
 * its data once and reads every rank's, its own included, reducing in rank
 * order (so every rank ends with the same bits). */
loomResult_t lines_allreduce_build(const struct coll_args* a, struct plan* out);
loomResult_t lines_allgather_build(const struct coll_args* a, struct plan* out);
loomResult_t lines_reducescatter_build(const struct coll_args* a, struct plan* out);
loomResult_t lines_broadcast_build(const struct coll_args* a, struct plan* out);
loomResult_t lines_reduce_build(const struct coll_args* a, struct plan* out);
loomResult_t lines_alltoall_build(const struct coll_args* a, struct plan* out);
/* 1 when p uses lines. */
int plan_has_lines(const struct plan* p);
loomResult_t read_broadcast_build(const struct coll_args* a, struct plan* out);
loomResult_t read_alltoall_build(const struct coll_args* a, struct plan* out);
/* src/collectives/ordered.c: reductions folded in rank order 0..n-1 whatever
 * the size and slice (LOOM_DETERMINISTIC): each rank gathers every rank's
 * piece of its part and folds them in order; all-reduce then all-gathers the
 * parts, reduce sends them to the root. */
loomResult_t ordered_allreduce_build(const struct coll_args* a, struct plan* out);
loomResult_t ordered_reducescatter_build(const struct coll_args* a, struct plan* out);
loomResult_t ordered_reduce_build(const struct coll_args* a, struct plan* out);
/* src/collectives/hier.c: all-reduce in two levels for ranks on several
 * hosts, the same number on each: a ring reduce-scatter among each host's
 * ranks (shared memory), then every rank all-reduces its part with the
 * ranks of the other hosts that hold the same part (a->cross_algo's plan
 * over those ranks), then a ring all-gather inside each host. */
loomResult_t hier_allreduce_build(const struct coll_args* a, struct plan* out);
/* 1 when the plan holds peer ops (it needs the peers' buffer addresses). */
int plan_is_direct(const struct plan* p);

/* ---- Checker (src/collectives/check.c) ---- */

/* What a collective must leave, per rank and element of its receive buffer:
 * which ranks' contributions (bit r = rank r) of which source element. */
enum check_kind {
#define COLL(id, token, text, flags) CHECK_##id,
#include "core/colls.def"
#undef COLL
  CHECK_KIND_COUNT
};

/* Everything the checker needs to know about the call besides the plans. */
struct check_spec {
  enum check_kind kind;
  int nranks;
  size_t count;
  int root;
  /* CHECK_ALLTOALLV: counts[src * nranks + dst] elements from src to dst;
   * each rank's send displacement for dst and receive displacement for src
   * are the running sums in rank order (what the tests build). */
  const size_t* a2av_counts;
  /* 1: the plans were built for distinct SEND and RECV (coll_args.distinct)
   * and are proven out of place only. */
  int distinct;
};

/* Simulates the plans of all nranks ranks symbolically (no transport, no
 * data), following each contribution. Proves: ops within bounds; steps free
 * of internal hazards; every send matched by a receive of the same count in
 * order; no deadlock under rendezvous semantics; no contribution counted
 * twice; and that each rank ends with exactly what the collective requires,
 * out of place and in place. nranks <= 64. Returns 0 when the plans are
 * correct, else -1 with a reason in why_out. */
int plan_check_spec(const struct check_spec* spec, const struct plan* plans, char* why_out,
                    size_t why_len);
/* plan_check_spec for the collectives without a root or counts. */
int plan_check(enum check_kind kind, int nranks, size_t count, const struct plan* plans,
               char* why_out, size_t why_len);

#endif
