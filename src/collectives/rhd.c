/* rhd.c - recursive halving and doubling as plans.
 *
 * All-reduce is Rabenseifner's: a reduce-scatter by recursive halving, then
 * an all-gather by recursive doubling, over p, the largest power of two not
 * above n ranks. The buffer is cut into p blocks (part_begin); at distance
 * m = p/2, p/4, ..., 1 each active rank v exchanges half of the blocks it
 * still holds with v ^ m, keeping the half that holds block v, so after
 * log2 p steps it owns block v fully reduced; doubling runs the same steps
 * backwards. That is 2 log2 p steps, each moving a pairwise exchange, and
 * every rank sends and receives 2 (p - 1) / p of the buffer in all.
 *
 * The fold, for n that is not a power of two (rem = n - p): the first
 * 2 * rem ranks pair up as (2i, 2i + 1). The even one sends its whole input
 * to the odd one, which reduces it into its own and stands in for both as
 * active rank i; ranks from 2 * rem on are active ranks r - rem. When the
 * active ranks are done, each odd one sends the result (for reduce-scatter,
 * its partner's block) back. Active rank v therefore speaks for the real
 * ranks fold_first(v) .. fold_first(v + 1) - 1, a contiguous run, which is
 * what lets reduce-scatter use blocks of whole ranks.
 *
 * Reduce-scatter is the halving alone, over blocks of real ranks (active
 * rank v's block is the c elements of each real rank it speaks for).
 * Partials live in PB_SCRATCH at their offset in SEND, except those of the
 * rank's own block, which go straight to RECV: transfers are cut where the
 * receiver's own block starts and ends, so both ends see the same pieces.
 *
 * All-gather is recursive doubling (the halving's mirror) when n is a power
 * of two. Otherwise it is Bruck-style: at distance d = 1, 2, 4, ... rank r
 * sends the min(d, n - d) blocks r, r + 1, ... (mod n) it has to r - d and
 * receives blocks r + d, ... from r + d, ceil(log2 n) steps in all. Every
 * block is written at its final place in RECV, so no rotation is needed.
 *
 * Every transfer is cut into pieces of at most slice_elems, all of one
 * exchange posted in the same step, which keeps the log-step shape. Steps
 * that send or receive: all-reduce 2 log2 p (+ 2 on the odd ranks of the
 * fold, 2 in all on the even ones); reduce-scatter log2 p (the same + 2, or
 * 2); all-gather ceil(log2 n). PreMulSum scales the input first (into RECV
 * for all-reduce, PB_SCRATCH for reduce-scatter); loomAvg divides each
 * final value once: in all-reduce each active rank its own block, between
 * the phases, in reduce-scatter each rank its RECV at the end. Only
 * reduce-scatter uses PB_SCRATCH: n * c elements on ranks that fold or
 * pre-multiply, at most half of that on the others (rhd_finish).
 *
 * In place: all-reduce reads SEND only in its first exchange (the halves it
 * gives away, and the src of the receive that reduces into the same
 * elements of RECV). In reduce-scatter an active rank writes RECV (its own
 * block of SEND) only by receives that reduce into it the very elements they
 * read (or, after PreMulSum, their scaled copy), and a folded-away rank only
 * after the fold step sent all its input.
 * All-gather copies its block into RECV in a step of its own (a no-op in
 * place) before anything reads it there. */
#include "collectives/plan.h"
#include "core/checks.h"
#include "core/util.h"

enum rhd_mode { RHD_ALLREDUCE, RHD_REDUCESCATTER, RHD_ALLGATHER };

struct rhd {
  const struct coll_args* a;
  struct plan* p;
  enum rhd_mode mode;
  int p2;             /* largest power of two <= nranks */
  int rem;            /* nranks - p2: ranks folded away */
  int vrank;          /* among the p2 active ranks; -1 when folded away */
  struct plan_ref in; /* where the input starts: SEND, or the premul's copy */
  int reduced;        /* partials exist: sends read them, not the input */
};

/* ---- The fold ---- */

/* The active rank that stands for real rank r, or -1 for a folded one. */
static int fold_vrank(int r, int rem) {
  if (r >= 2 * rem) return r - rem;
  return r % 2 ? r / 2 : -1;
}

/* The real rank that runs active rank v. */
static int fold_real(int v, int rem) {
  return v < rem ? 2 * v + 1 : v + rem;
}

/* The first real rank active rank v speaks for; fold_first(p2) == nranks. */
static int fold_first(int v, int rem) {
  return v < rem ? 2 * v : v + rem;
}

/* ---- Where data lives ---- */

/* First element of active rank v's block, in SEND's coordinates. */
static size_t edge(const struct rhd* g, int v) {
  if (g->mode == RHD_ALLREDUCE) return part_begin(g->a->count, g->p2, v);
  return (size_t)fold_first(v, g->rem) * g->a->count;
}

/* Where this rank keeps the partial (or final value) of element off. */
static struct plan_ref at(const struct rhd* g, size_t off) {
  if (g->mode == RHD_REDUCESCATTER) {
    size_t own = (size_t)g->a->rank * g->a->count;
    if (off >= own && off - own < g->a->count) return plan_ref_make(PB_RECV, off - own);
    return plan_ref_make(PB_SCRATCH, off);
  }
  return plan_ref_make(PB_RECV, off);
}

/* What this rank sends or reduces with for element off. */
static struct plan_ref source(const struct rhd* g, size_t off) {
  if (g->reduced) return at(g, off);
  return plan_ref_make((enum plan_buf)g->in.buf, g->in.off + off);
}

/* The end of the piece of [off, hi) that starts at off, when receiver is
 * the rank that takes it: at most slice_elems, and in reduce-scatter never
 * across the edge of the receiver's own block. Both ends of a transfer call
 * it with the same arguments, so they cut the same pieces. */
static size_t piece_end(const struct rhd* g, size_t off, size_t hi, int receiver) {
  size_t end = hi;
  if (g->mode == RHD_REDUCESCATTER) {
    size_t own = (size_t)receiver * g->a->count, own_end = own + g->a->count;
    if (off < own && own < end) end = own;
    if (off < own_end && own_end < end) end = own_end;
  }
  if (end - off > g->a->slice_elems) end = off + g->a->slice_elems;
  return end;
}

/* ---- Transfers ---- */

static void send_range(struct rhd* g, int peer, size_t lo, size_t hi) {
  for (size_t off = lo, end; off < hi; off = end) {
    end = piece_end(g, off, hi, peer);
    struct plan_ref src = source(g, off);
    plan_add(g->p, OP_SEND, peer, src, src, end - off);
  }
}

/* reduce: at(off) = source(off) + incoming; else at(off) = incoming. */
static void recv_range(struct rhd* g, int peer, int reduce, size_t lo, size_t hi) {
  for (size_t off = lo, end; off < hi; off = end) {
    end = piece_end(g, off, hi, g->a->rank);
    struct plan_ref dst = at(g, off);
    if (reduce)
      plan_add(g->p, OP_RECV_REDUCE, peer, source(g, off), dst, end - off);
    else
      plan_add(g->p, OP_RECV, peer, dst, dst, end - off);
  }
}

/* A local op on count elements in a step of its own. */
static void local_step(struct plan* p, enum plan_op_kind kind, struct plan_ref src,
                       struct plan_ref dst, size_t count) {
  plan_step_begin(p);
  plan_add(p, kind, -1, src, dst, count);
}

/* ---- The phases ---- */

/* Active rank v holds blocks [lo, lo + 2m); it keeps the half with block v
 * and reduces the partner's contribution into it. */
static void halving(struct rhd* g) {
  int v = g->vrank, lo = 0;
  for (int m = g->p2 / 2; m >= 1; m /= 2) {
    int partner = v ^ m, peer = fold_real(partner, g->rem);
    int keep = lo + (v & m), give = lo + (partner & m);
    plan_step_begin(g->p);
    send_range(g, peer, edge(g, give), edge(g, give + m));
    recv_range(g, peer, 1, edge(g, keep), edge(g, keep + m));
    g->reduced = 1;
    lo = keep;
  }
}

/* Active rank v holds blocks [v & ~(m - 1), + m) and swaps them for the
 * partner's, doubling what it holds. */
static void doubling(struct rhd* g) {
  int v = g->vrank;
  for (int m = 1; m < g->p2; m *= 2) {
    int partner = v ^ m, peer = fold_real(partner, g->rem);
    int mine = v & ~(m - 1), theirs = partner & ~(m - 1);
    plan_step_begin(g->p);
    send_range(g, peer, edge(g, mine), edge(g, mine + m));
    recv_range(g, peer, 0, edge(g, theirs), edge(g, theirs + m));
  }
}

/* Blocks [first, first + nblocks) mod nranks: one or two ranges. */
static void bruck_blocks(struct rhd* g, int peer, int is_send, int first, int nblocks) {
  int n = g->a->nranks;
  size_t c = g->a->count;
  int end = first + nblocks, wrap = end > n ? end - n : 0;
  size_t lo[2] = {(size_t)first * c, 0}, hi[2] = {(size_t)(end - wrap) * c, (size_t)wrap * c};
  for (int k = 0; k < 2; k++) {
    if (is_send)
      send_range(g, peer, lo[k], hi[k]);
    else
      recv_range(g, peer, 0, lo[k], hi[k]);
  }
}

static void bruck(struct rhd* g) {
  int n = g->a->nranks, r = g->a->rank;
  for (int d = 1; d < n; d *= 2) {
    int nblocks = d < n - d ? d : n - d;
    plan_step_begin(g->p);
    bruck_blocks(g, (r - d + n) % n, 1, r, nblocks);
    bruck_blocks(g, (r + d) % n, 0, (r + d) % n, nblocks);
  }
}

/* ---- Setup ---- */

static loomResult_t rhd_start(const struct coll_args* a, enum rhd_mode mode, struct plan* out,
                              struct rhd* g_out) {
  if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->slice_elems == 0 ||
      a->count > SIZE_MAX / (size_t)(a->nranks > 0 ? a->nranks : 1)) {
    return err_set_sub(NULL, SUB_COLL, loomInvalidArgument,
                       "rhd: bad arguments (rank %d of %d, count %zu, slice of %zu elements)",
                       a->rank, a->nranks, a->count, a->slice_elems);
  }
  plan_reset(out);
  out->rank = a->rank;
  out->nranks = a->nranks;
  out->algo = "rhd";
  size_t whole = a->count * (size_t)a->nranks;
  out->buf_count[PB_SEND] = mode == RHD_REDUCESCATTER ? whole : a->count;
  out->buf_count[PB_RECV] = mode == RHD_ALLGATHER ? whole : a->count;
  int p2 = 1;
  while (p2 <= a->nranks / 2) p2 *= 2;
  struct rhd g = {a, out, mode, p2, a->nranks - p2, -1, plan_ref_make(PB_SEND, 0), 0};
  g.vrank = fold_vrank(a->rank, g.rem);
  *g_out = g;
  return loomSuccess;
}

/* Sizes PB_SCRATCH to the span of it the ops touch, moved to start at 0
 * (partials are placed at their offset in SEND, and a rank that neither
 * folds nor pre-multiplies touches only the half it keeps), then ends the
 * plan. */
static loomResult_t rhd_finish(struct plan* p) {
  size_t lo = SIZE_MAX, hi = 0;
  for (uint32_t i = 0; i < p->nops; i++) {
    const struct plan_ref* refs[2] = {&p->ops[i].src, &p->ops[i].dst};
    for (int k = 0; k < 2; k++) {
      if (refs[k]->buf != PB_SCRATCH) continue;
      if (refs[k]->off < lo) lo = refs[k]->off;
      if (refs[k]->off + p->ops[i].count > hi) hi = refs[k]->off + p->ops[i].count;
    }
  }
  for (uint32_t i = 0; i < p->nops && hi > 0; i++) {
    if (p->ops[i].src.buf == PB_SCRATCH) p->ops[i].src.off -= lo;
    if (p->ops[i].dst.buf == PB_SCRATCH) p->ops[i].dst.off -= lo;
  }
  p->buf_count[PB_SCRATCH] = hi > 0 ? hi - lo : 0;
  return plan_finish(p);
}

/* ---- Generators ---- */

/* out: a plan from plan_init, or zeroed memory; it is reset and refilled,
 * keeping its storage. */
loomResult_t rhd_allreduce_build(const struct coll_args* a, struct plan* out) {
  struct rhd g;
  LOOM_CHECK(rhd_start(a, RHD_ALLREDUCE, out, &g));
  size_t c = a->count;
  int r = a->rank;
  if (a->premul) {
    g.in = plan_ref_make(PB_RECV, 0);
    local_step(out, OP_PREMUL, plan_ref_make(PB_SEND, 0), g.in, c);
  }
  if (a->nranks == 1) {
    struct plan_ref recv0 = plan_ref_make(PB_RECV, 0);
    if (!a->premul) local_step(out, OP_COPY, plan_ref_make(PB_SEND, 0), recv0, c);
    if (a->avg) local_step(out, OP_DIV, recv0, recv0, c);
    return rhd_finish(out);
  }
  if (g.vrank < 0) { /* folded away: hand the input over, take the result back */
    plan_step_begin(out);
    send_range(&g, r + 1, 0, c);
    plan_step_begin(out);
    recv_range(&g, r + 1, 0, 0, c);
    return rhd_finish(out);
  }
  if (r < 2 * g.rem) {
    plan_step_begin(out);
    recv_range(&g, r - 1, 1, 0, c);
    g.reduced = 1;
  }
  halving(&g);
  /* Divide the block this rank owns once, before it is handed on. */
  size_t lo = edge(&g, g.vrank), hi = edge(&g, g.vrank + 1);
  if (a->avg) local_step(out, OP_DIV, at(&g, lo), at(&g, lo), hi - lo);
  doubling(&g);
  if (r < 2 * g.rem) {
    plan_step_begin(out);
    send_range(&g, r - 1, 0, c);
  }
  return rhd_finish(out);
}

loomResult_t rhd_reducescatter_build(const struct coll_args* a, struct plan* out) {
  struct rhd g;
  LOOM_CHECK(rhd_start(a, RHD_REDUCESCATTER, out, &g));
  size_t c = a->count, whole = c * (size_t)a->nranks, own = (size_t)a->rank * c;
  int r = a->rank;
  struct plan_ref send0 = plan_ref_make(PB_SEND, 0), recv0 = plan_ref_make(PB_RECV, 0);
  if (a->nranks == 1) {
    local_step(out, a->premul ? OP_PREMUL : OP_COPY, send0, recv0, c);
    if (a->avg) local_step(out, OP_DIV, recv0, recv0, c);
    return rhd_finish(out);
  }
  if (a->premul) {
    g.in = plan_ref_make(PB_SCRATCH, 0);
    local_step(out, OP_PREMUL, send0, g.in, whole);
  }
  if (g.vrank < 0) {
    plan_step_begin(out);
    send_range(&g, r + 1, 0, whole);
    plan_step_begin(out);
    recv_range(&g, r + 1, 0, own, own + c);
    if (a->avg) local_step(out, OP_DIV, recv0, recv0, c);
    return rhd_finish(out);
  }
  if (r < 2 * g.rem) {
    plan_step_begin(out);
    recv_range(&g, r - 1, 1, 0, whole);
    g.reduced = 1;
  }
  halving(&g);
  plan_step_begin(out);
  if (r < 2 * g.rem) send_range(&g, r - 1, own - c, own);
  /* After the send is posted: the division overlaps it (different buffers). */
  if (a->avg) plan_add(out, OP_DIV, -1, recv0, recv0, c);
  return rhd_finish(out);
}

loomResult_t rhd_allgather_build(const struct coll_args* a, struct plan* out) {
  struct rhd g;
  LOOM_CHECK(rhd_start(a, RHD_ALLGATHER, out, &g));
  size_t own = (size_t)a->rank * a->count;
  /* Sends read the own block from RECV, so it gets there first (in place
   * the executor skips the copy, and the checker sees no hazard). */
  local_step(out, OP_COPY, plan_ref_make(PB_SEND, 0), plan_ref_make(PB_RECV, own), a->count);
  g.reduced = 1;
  if (g.rem == 0)
    doubling(&g);
  else
    bruck(&g);
  return rhd_finish(out);
}

/* ---- Recursive doubling all-reduce ("doubling") ----
 *
 * For small buffers, where steps cost more than bytes: every active rank
 * exchanges its whole partial with v ^ m for m = 1, 2, ..., p/2 and reduces
 * what it receives, so after log2 p steps every active rank holds the sum
 * (half the steps of rhd, each moving the whole buffer instead of a
 * shrinking half). The fold is rhd's: an even rank of the first 2 * rem
 * sends its input to the odd one beside it and, at the end, receives the
 * result from it. Both ends of an exchange reduce the same two values
 * (a op b on one, b op a on the other), and every built-in op commutes, so
 * all ranks end with the same bits.
 *
 * A step may not write what it sends, so partials alternate between
 * PB_SCRATCH and RECV; the first reduce never targets RECV while the input
 * is still SEND, which makes sendbuff == recvbuff safe. A result left in
 * scratch is copied to RECV. Each slice of at most slice_elems runs the
 * whole schedule in turn. */
/* Where a partial goes next: never the buffer it is read from. */
static enum plan_buf acc_next(enum plan_buf b) {
  return b == PB_SCRATCH ? PB_RECV : PB_SCRATCH;
}

loomResult_t doubling_allreduce_build(const struct coll_args* a, struct plan* out) {
  struct rhd g;
  LOOM_CHECK(rhd_start(a, RHD_ALLREDUCE, out, &g));
  out->algo = "doubling";
  size_t c = a->count;
  int r = a->rank;
  enum plan_buf in = PB_SEND;
  if (a->premul) {
    plan_step_begin(out);
    plan_add(out, OP_PREMUL, -1, plan_ref_make(PB_SEND, 0), plan_ref_make(PB_RECV, 0), c);
    in = PB_RECV;
  }
  size_t ns = c / a->slice_elems + (c % a->slice_elems != 0);
  for (size_t k = 0; k < ns; k++) {
    size_t off = k * a->slice_elems, len = LOOM_MIN(a->slice_elems, c - off);
    enum plan_buf acc = in;
    if (g.vrank < 0) { /* folded away: give the input, take the result */
      plan_step_begin(out);
      plan_add(out, OP_SEND, r + 1, plan_ref_make(in, off), plan_ref_make(in, off), len);
      plan_step_begin(out);
      plan_add(out, OP_RECV, r + 1, plan_ref_make(PB_RECV, off), plan_ref_make(PB_RECV, off), len);
      continue;
    }
    if (r < 2 * g.rem) { /* takes its even neighbour's input */
      plan_step_begin(out);
      plan_add(out, OP_RECV_REDUCE, r - 1, plan_ref_make(acc, off),
               plan_ref_make(acc_next(acc), off), len);
      acc = acc_next(acc);
    }
    for (int m = 1; m < g.p2; m *= 2) {
      int peer = fold_real(g.vrank ^ m, g.rem);
      enum plan_buf to = acc_next(acc);
      plan_step_begin(out);
      plan_add(out, OP_SEND, peer, plan_ref_make(acc, off), plan_ref_make(acc, off), len);
      plan_add(out, OP_RECV_REDUCE, peer, plan_ref_make(acc, off), plan_ref_make(to, off), len);
      acc = to;
    }
    if (r < 2 * g.rem) {
      plan_step_begin(out);
      plan_add(out, OP_SEND, r - 1, plan_ref_make(acc, off), plan_ref_make(acc, off), len);
    }
    if (acc != PB_RECV) {
      plan_step_begin(out);
      plan_add(out, OP_COPY, -1, plan_ref_make(acc, off), plan_ref_make(PB_RECV, off), len);
    }
  }
  if (a->avg) {
    plan_step_begin(out);
    plan_add(out, OP_DIV, -1, plan_ref_make(PB_RECV, 0), plan_ref_make(PB_RECV, 0), c);
  }
  out->buf_count[PB_SCRATCH] = a->nranks > 1 ? c : 0;
  return plan_finish(out);
}
