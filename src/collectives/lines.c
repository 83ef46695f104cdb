/* lines.c - plans of one exchange through low-latency lines (the family
 * "lines"; src/transport/lines.c moves the bytes).
 *
 * Every rank puts what its peers need into its own lines once, then reads
 * every rank's lines, its own included, each read waiting until that rank's
 * lines hold this call's data: no sync, no message, no system call. Small
 * messages among the ranks of one host pay one hand-off between cores
 * instead of a pipeline step per exchange.
 *
 * Reductions fold in rank order (rank 0's data, then rank 1's, ...), so
 * every rank computes the same bits, whatever the datatype.
 *
 * When a rank may overwrite its lines. Calls use K = TP_LINES_AREAS areas
 * in turn, so the put of call m overwrites the lines of call m - K, which
 * is safe once every other rank has put call m - K + 1: a rank puts a call
 * only after it has finished the one before. Every plan keeps this rule:
 * by the end of call m, this rank has seen every other rank's put of call
 * m - (K - 2) or a later one. Then the put of call m + 1 finds every rank
 * past call m + 1 - K. A plan sees a peer's put by reading its data of the
 * same call (all-reduce, all-gather and reduce-scatter read every rank's)
 * or, where it reads none, by waiting for the peer's put of call
 * m - (K - 2) (OP_LINES_SEEN, at the end of the plan).
 *
 * Broadcast is the one that needs the second way: its readers read only the
 * root, and the root no one. Reading only the ranks that read one's own
 * would not do: with the root moving from call to call, a reader could
 * overwrite its lines of call k while call k's root still has them to
 * read. Waiting for a call K - 2 back, not this one, is what lets the root
 * run ahead of its readers as a FIFO's sender does: each call costs it its
 * put and a glance at counters already there, until it is K - 2 calls
 * ahead of the slowest reader.
 *
 * The checker proves the plans' half of this: each rank puts exactly once a
 * call, and reads or sees every other rank's lines. */
#include "collectives/plan.h"
#include "core/checks.h"

static struct plan_ref ref(enum plan_buf b, size_t off) {
  return plan_ref_make(b, off);
}
static struct plan_ref lines_at(size_t off) {
  struct plan_ref r = {PB_LINES, off};
  return r;
}

/* Puts in[0..len) (PreMulSum: scaled into scratch first) into the lines. */
static void put_input(const struct coll_args* a, struct plan* p, size_t len) {
  enum plan_buf in = plan_premul_input(a, p, len);
  p->lines_count = len;
  plan_step_begin(p);
  plan_add(p, OP_LINES_PUT, -1, ref(in, 0), lines_at(0), len);
}

/* dst[0..len) = every rank's lines[off..off+len), folded in rank order;
 * each read alone in its step. */
static void fold_all(const struct coll_args* a, struct plan* p, size_t off, struct plan_ref dst,
                     size_t len) {
  for (int q = 0; q < a->nranks; q++) {
    plan_step_begin(p);
    plan_add(p, q == 0 ? OP_LINES_COPY : OP_LINES_REDUCE, q, lines_at(off), dst, len);
  }
  if (a->avg) {
    plan_step_begin(p);
    plan_add(p, OP_DIV, -1, dst, dst, len);
  }
}

loomResult_t lines_allreduce_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count;
  out->buf_count[PB_SEND] = c;
  out->buf_count[PB_RECV] = c;
  out->buf_count[PB_SCRATCH] = a->premul ? c : 0;
  if (c == 0) return plan_finish(out);
  put_input(a, out, c);
  fold_all(a, out, 0, ref(PB_RECV, 0), c);
  return plan_finish(out);
}

loomResult_t lines_reducescatter_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count, total = c * (size_t)a->nranks;
  out->buf_count[PB_SEND] = total;
  out->buf_count[PB_RECV] = c;
  out->buf_count[PB_SCRATCH] = a->premul ? total : 0;
  if (c == 0) return plan_finish(out);
  put_input(a, out, total);
  fold_all(a, out, (size_t)a->rank * c, ref(PB_RECV, 0), c);
  return plan_finish(out);
}

loomResult_t lines_allgather_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count;
  int n = a->nranks, r = a->rank;
  out->buf_count[PB_SEND] = c;
  out->buf_count[PB_RECV] = c * (size_t)n;
  out->buf_count[PB_SCRATCH] = 0;
  if (c == 0) return plan_finish(out);
  put_input(a, out, c);
  /* In place this copy is a no-op. */
  plan_step_begin(out);
  plan_add(out, OP_COPY, -1, ref(PB_SEND, 0), ref(PB_RECV, (size_t)r * c), c);
  for (int k = 1; k < n; k++) {
    int q = (r + k) % n;
    plan_step_begin(out);
    plan_add(out, OP_LINES_COPY, q, lines_at(0), ref(PB_RECV, (size_t)q * c), c);
  }
  return plan_finish(out);
}

/* All-to-all: every rank puts its whole input, then takes block r of every
 * peer's lines (reading every rank's, as the rule above asks). In place the
 * put has saved the input before the reads overwrite it, and the copy of
 * this rank's own block is a no-op. */
loomResult_t lines_alltoall_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count, total = c * (size_t)a->nranks;
  int n = a->nranks, r = a->rank;
  out->buf_count[PB_SEND] = total;
  out->buf_count[PB_RECV] = total;
  out->buf_count[PB_SCRATCH] = 0;
  if (c == 0) return plan_finish(out);
  out->lines_count = total;
  plan_step_begin(out);
  plan_add(out, OP_LINES_PUT, -1, ref(PB_SEND, 0), lines_at(0), total);
  plan_step_begin(out);
  plan_add(out, OP_COPY, -1, ref(PB_SEND, (size_t)r * c), ref(PB_RECV, (size_t)r * c), c);
  for (int k = 1; k < n; k++) {
    int q = (r + k) % n;
    plan_step_begin(out);
    plan_add(out, OP_LINES_COPY, q, lines_at((size_t)r * c), ref(PB_RECV, (size_t)q * c), c);
  }
  return plan_finish(out);
}

/* Waits to have seen every other rank but skip's put of a call K - 2 back
 * (the rule above), for plans that read no data of theirs. */
static void see_others(const struct coll_args* a, struct plan* p, int skip) {
  for (int k = 1; k < a->nranks; k++) {
    int q = (a->rank + k) % a->nranks;
    if (q == skip) continue;
    plan_step_begin(p);
    plan_add(p, OP_LINES_SEEN, q, lines_at(0), lines_at(0), 1);
  }
}

/* Reduce: every rank puts its input; the root folds every rank's lines in
 * rank order, and the others read nothing: they only see every other
 * rank's put of a call K - 2 back, so they run ahead of the root as a
 * broadcast's root runs ahead of its readers. */
loomResult_t lines_reduce_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count;
  out->buf_count[PB_SEND] = c;
  out->buf_count[PB_RECV] = a->rank == a->root ? c : 0;
  out->buf_count[PB_SCRATCH] = a->premul ? c : 0;
  if (c == 0) return plan_finish(out);
  put_input(a, out, c);
  if (a->rank == a->root)
    fold_all(a, out, 0, ref(PB_RECV, 0), c);
  else
    see_others(a, out, -1);
  return plan_finish(out);
}

/* Broadcast: the root puts the data and every other rank reads it; each of
 * those puts one element (what its receive buffer holds: a token, never
 * used as data, which publishes its call number), and every rank then
 * waits to have seen every other rank's put of a call K - 2 back (the rule
 * above). */
loomResult_t lines_broadcast_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count;
  int r = a->rank, root = a->root;
  out->buf_count[PB_SEND] = r == root ? c : 0;
  out->buf_count[PB_RECV] = c;
  out->buf_count[PB_SCRATCH] = 0;
  if (c == 0) return plan_finish(out);
  out->lines_count = r == root ? c : 1;
  plan_step_begin(out);
  if (r == root) {
    plan_add(out, OP_LINES_PUT, -1, ref(PB_SEND, 0), lines_at(0), c);
    plan_step_begin(out);
    plan_add(out, OP_COPY, -1, ref(PB_SEND, 0), ref(PB_RECV, 0), c); /* in place: a no-op */
  } else {
    plan_add(out, OP_LINES_PUT, -1, ref(PB_RECV, 0), lines_at(0), 1);
    plan_step_begin(out);
    plan_add(out, OP_LINES_COPY, root, lines_at(0), ref(PB_RECV, 0), c);
  }
  see_others(a, out, root); /* a reader has seen the root's put: it read its data */
  return plan_finish(out);
}

int plan_has_lines(const struct plan* p) {
  for (uint32_t i = 0; i < p->nops; i++)
    if (p->ops[i].kind >= OP_LINES_PUT && p->ops[i].kind <= OP_LINES_SEEN) return 1;
  return 0;
}
