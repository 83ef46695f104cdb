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
 *    do.
 */
#ifndef LOOM_COLL_PLAN_H
#define LOOM_COLL_PLAN_H

#include <stddef.h>
#include <stdint.h>

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
  OP_KIND_COUNT
};

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
  const char* algo;          /* "ring", "p2p", ... static text */
  size_t buf_count[PB_COUNT]; /* elements each buffer holds (bounds) */
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

/* What a collective asks of its plan. */
struct coll_args {
  int nranks;
  int rank;
  size_t count;       /* elements of the receive buffer for all-reduce */
  size_t slice_elems; /* largest piece one pipeline step moves, > 0 */
  int premul;         /* PreMulSum: scale the input first */
  int avg;            /* loomAvg: divide by nranks at the end */
};

/* Ring all-reduce (src/collectives/ring.c): reduce-scatter then all-gather
 * around the ring rank -> rank + 1, each chunk pipelined in slices. The
 * input is read from PB_SEND (or from PB_RECV after the pre-multiply) and
 * never written. */
loomResult_t ring_allreduce_build(const struct coll_args* a, struct plan* out);

/* ---- Checker (src/collectives/check.c) ---- */

/* What a collective must leave: for each rank and element of its receive
 * buffer, which ranks' contributions (bit r = rank r) of which source element
 * index it must hold. */
enum check_kind { CHECK_ALLREDUCE = 0 };

/* Simulates the plans of all nranks ranks symbolically (no transport, no
 * data), following each contribution. Proves: ops within bounds; steps free
 * of internal hazards; every send matched by a receive of the same count in
 * order; no deadlock under rendezvous semantics; no contribution counted
 * twice; and that each rank ends with exactly what kind requires. nranks <=
 * 64. Returns 0 when the plans are correct, else -1 with a reason in
 * why_out. */
int plan_check(enum check_kind kind, int nranks, size_t count, const struct plan* plans,
               char* why_out, size_t why_len);

#endif
