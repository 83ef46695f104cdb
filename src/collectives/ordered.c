/* ordered.c - reductions in rank order (LOOM_DETERMINISTIC): all-reduce,
 * reduce-scatter and reduce whose every element is
 *
 *     acc = x_0;  acc = acc op x_1;  ...;  acc = acc op x_{n-1}
 *
 * with x_q rank q's input (premultiplied first for PreMulSum) and each op
 * computed as Loom's kernels compute one (the 16- and 8-bit floats widened to
 * float and rounded back), then divided by n for loomAvg. The result is the
 * same bits whatever the message size, the slice size, the transport or the
 * rank count's factors: nothing is reduced before every input of an element
 * is in one place.
 *
 * Rank r owns part r of the vector (reduce-scatter: block r; all-reduce and
 * reduce: part_begin's split). Each part is cut into pieces of at most
 * slice_elems. For piece t, every rank sends piece t of part q to rank q and
 * receives piece t of its own part from everyone, into slot q of a scratch
 * bank (its own input copied into slot r); then folds the slots in rank
 * order into the result. Two banks alternate, so the exchange of piece t + 1
 * runs in the step that starts folding piece t. All-reduce then hands each
 * part to every rank; reduce sends the parts to the root.
 *
 * Cost: every input crosses once, as in a ring's reduce-scatter ((n-1)/n of
 * the buffer per rank), and the all-gather phase as a ring's; but n - 1 fold
 * steps per piece and n - 1 connections at once (docs/PERFORMANCE.md).
 *
 * In place (all-reduce SEND == RECV; reduce-scatter RECV == SEND + r * c):
 * the fold writes only piece t of rank r's own part, whose input was copied
 * into the bank by the exchange of piece t, and no later exchange reads it. */
#include "collectives/plan.h"
#include "core/checks.h"
#include "core/util.h"

struct ordered {
  const struct coll_args* a;
  struct plan* p;
  int rs;                /* reduce-scatter: part q is block q of count elements */
  size_t slots;          /* scratch offset of the banks (reduce folds at 0, before them) */
  enum plan_buf acc_buf; /* where the fold writes: RECV, or SCRATCH for reduce */
  size_t npieces;
  size_t stride; /* elements between slots: a slice, or less for a small vector */
  size_t outs;   /* PreMulSum: scratch offset of the outgoing banks */
};

/* Part q: reduce-scatter's block q, else part_begin's split of the vector. */
static size_t part_lo(const struct coll_args* a, int rs, int q) {
  return rs ? (size_t)q * a->count : part_begin(a->count, a->nranks, q);
}
static size_t part_len(const struct coll_args* a, int rs, int q) {
  return rs ? a->count : part_begin(a->count, a->nranks, q + 1) - part_lo(a, rs, q);
}

/* Piece t of part q: its offset in the vector and its length (0 past the
 * part's end: both ends of a transfer skip it alike). */
static size_t piece_len(const struct ordered* g, int q, size_t t) {
  size_t lo = t * g->a->slice_elems, len = part_len(g->a, g->rs, q);
  size_t left = lo < len ? len - lo : 0;
  return left < g->a->slice_elems ? left : g->a->slice_elems;
}
static size_t piece_off(const struct ordered* g, int q, size_t t) {
  return part_lo(g->a, g->rs, q) + t * g->a->slice_elems;
}

/* Slot q of piece t's bank in the banks at scratch offset base. */
static struct plan_ref bank_slot(const struct ordered* g, size_t base, size_t t, int q) {
  size_t bank = t % 2, n = (size_t)g->a->nranks;
  return plan_ref_make(PB_SCRATCH, base + (bank * n + (size_t)q) * g->stride);
}
/* Where piece t from rank q is received (folded from). */
static struct plan_ref slot(const struct ordered* g, size_t t, int q) {
  return bank_slot(g, g->slots, t, q);
}
/* PreMulSum: where piece t of part q waits, premultiplied, to be sent. */
static struct plan_ref out_slot(const struct ordered* g, size_t t, int q) {
  return bank_slot(g, g->outs, t, q);
}

/* Where piece t of this rank's part is folded. */
static struct plan_ref acc_ref(const struct ordered* g, size_t t) {
  size_t off = t * g->a->slice_elems;
  /* Reduce-scatter's RECV is this rank's block alone. */
  if (g->acc_buf == PB_SCRATCH) return plan_ref_make(PB_SCRATCH, off);
  return plan_ref_make(PB_RECV, g->rs ? off : part_lo(g->a, 0, g->a->rank) + off);
}

/* PreMulSum, in a step of its own before the exchange of piece t: each rank
 * scales its own input (as the checker requires, and as every family does),
 * its own piece straight into its slot. */
static void premul_step(struct ordered* g, size_t t) {
  int n = g->a->nranks, r = g->a->rank;
  plan_step_begin(g->p);
  for (int q = 0; q < n; q++)
    plan_add(g->p, OP_PREMUL, -1, plan_ref_make(PB_SEND, piece_off(g, q, t)),
             q == r ? slot(g, t, r) : out_slot(g, t, q), piece_len(g, q, t));
}

/* Adds, to the current step, the exchange of piece t into its bank. */
static void exchange(struct ordered* g, size_t t) {
  int n = g->a->nranks, r = g->a->rank;
  size_t mine = piece_len(g, r, t);
  for (int q = 0; q < n; q++) {
    if (q == r) continue;
    struct plan_ref out =
        g->a->premul ? out_slot(g, t, q) : plan_ref_make(PB_SEND, piece_off(g, q, t));
    plan_add(g->p, OP_SEND, q, out, out, piece_len(g, q, t));
    plan_add(g->p, OP_RECV, q, slot(g, t, q), slot(g, t, q), mine);
  }
  if (!g->a->premul)
    plan_add(g->p, OP_COPY, -1, plan_ref_make(PB_SEND, piece_off(g, r, t)), slot(g, t, r), mine);
}

/* Folds piece t's bank into its result in rank order; the first step also
 * carries the exchange of piece t + 1. */
static void fold(struct ordered* g, size_t t) {
  int n = g->a->nranks;
  size_t mine = piece_len(g, g->a->rank, t);
  if (g->a->premul && t + 1 < g->npieces) premul_step(g, t + 1);
  plan_step_begin(g->p);
  plan_add(g->p, OP_COPY, -1, slot(g, t, 0), acc_ref(g, t), mine);
  if (t + 1 < g->npieces) exchange(g, t + 1);
  for (int q = 1; q < n; q++) {
    plan_step_begin(g->p);
    plan_add(g->p, OP_REDUCE, -1, slot(g, t, q), acc_ref(g, t), mine);
  }
  if (g->a->avg) {
    plan_step_begin(g->p);
    plan_add(g->p, OP_DIV, -1, acc_ref(g, t), acc_ref(g, t), mine);
  }
}

/* The exchange and the fold of every piece; the caller adds what follows and
 * finishes the plan. */
static loomResult_t ordered_build(const struct coll_args* a, struct plan* out, int rs,
                                  enum plan_buf acc_buf, const char* what) {
  if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->slice_elems == 0 ||
      (acc_buf == PB_SCRATCH && (a->root < 0 || a->root >= a->nranks)))
    return err_set_sub(NULL, SUB_COLL, loomInvalidArgument,
                       "ordered %s: bad arguments (rank %d of %d, root %d, slice of %zu "
                       "elements)",
                       what, a->rank, a->nranks, a->root, a->slice_elems);
  struct ordered g = {.a = a, .p = out, .rs = rs, .acc_buf = acc_buf};
  size_t n = (size_t)a->nranks, largest = part_len(a, rs, 0); /* part 0 is never shorter */
  g.npieces = largest / a->slice_elems + (largest % a->slice_elems != 0);
  g.stride = LOOM_MIN(largest, a->slice_elems);
  /* Reduce folds into scratch, before the banks: RECV exists at the root only. */
  g.slots = acc_buf == PB_SCRATCH ? largest : 0;
  plan_reset(out);
  out->rank = a->rank;
  out->nranks = a->nranks;
  out->algo = "ordered";
  out->buf_count[PB_SEND] = rs ? n * a->count : a->count;
  out->buf_count[PB_RECV] = a->count;
  g.outs = g.slots + 2 * n * g.stride;
  out->buf_count[PB_SCRATCH] = g.outs + (a->premul ? 2 * n * g.stride : 0);
  if (g.npieces == 0) return loomSuccess;
  if (a->premul) premul_step(&g, 0);
  plan_step_begin(out);
  exchange(&g, 0);
  for (size_t t = 0; t < g.npieces; t++) fold(&g, t);
  return loomSuccess;
}

loomResult_t ordered_reducescatter_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(ordered_build(a, out, 1, PB_RECV, "reduce-scatter"));
  return plan_finish(out);
}

/* Then every rank sends its folded part to every other. */
loomResult_t ordered_allreduce_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(ordered_build(a, out, 0, PB_RECV, "all-reduce"));
  int n = a->nranks, r = a->rank;
  plan_step_begin(out);
  for (int q = 0; q < n; q++) {
    if (q == r) continue;
    struct plan_ref mine = plan_ref_make(PB_RECV, part_lo(a, 0, r));
    struct plan_ref theirs = plan_ref_make(PB_RECV, part_lo(a, 0, q));
    plan_add(out, OP_SEND, q, mine, mine, part_len(a, 0, r));
    plan_add(out, OP_RECV, q, theirs, theirs, part_len(a, 0, q));
  }
  return plan_finish(out);
}

/* Then every rank sends its folded part to the root. */
loomResult_t ordered_reduce_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(ordered_build(a, out, 0, PB_SCRATCH, "reduce"));
  int n = a->nranks, r = a->rank, root = a->root;
  struct plan_ref acc = plan_ref_make(PB_SCRATCH, 0);
  plan_step_begin(out);
  if (r != root) {
    plan_add(out, OP_SEND, root, acc, acc, part_len(a, 0, r));
    return plan_finish(out);
  }
  plan_add(out, OP_COPY, -1, acc, plan_ref_make(PB_RECV, part_lo(a, 0, r)), part_len(a, 0, r));
  for (int q = 0; q < n; q++) {
    if (q == r) continue;
    struct plan_ref dst = plan_ref_make(PB_RECV, part_lo(a, 0, q));
    plan_add(out, OP_RECV, q, dst, dst, part_len(a, 0, q));
  }
  return plan_finish(out);
}
