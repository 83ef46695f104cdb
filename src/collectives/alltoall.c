/* alltoall.c - all-to-all, all-to-all-v, gather and scatter as plans.
 *
 * Pairwise exchange (all-to-all for large blocks, and all-to-all-v). In a
 * step of offset k, rank r sends its block for r + k and receives the block
 * of r - k: each step is a permutation, both ends of every transfer sit in
 * the same step, and so the plan cannot deadlock even under rendezvous. The
 * offsets run 1, n-1, 2, n-2, ... and n/2 last when n is even; each block is
 * cut into slices of at most slice_elems, slice s of offset k being followed
 * by slice s of offset n - k. Steps are named by (offset, slice), the same on
 * every rank, and a rank only leaves out the ones where it has nothing to do.
 *
 * In place. The plan cannot tell whether sendbuff == recvbuff, so it is right
 * both ways: a receive goes straight into RECV unless, were SEND the same
 * memory, it would overwrite send data that this or a later step still
 * reads. Such a receive lands in PB_SCRATCH instead, and a copy in the step
 * after that last read moves it into place. In all-to-all, the block that
 * offset k brings (from r - k) is the one rank r sends itself at offset
 * n - k, the very next step: so the blocks of offsets 1 .. n/2 go through
 * scratch (one slice at a time, in two slots), the others never do; that
 * is the price of not knowing, paid only in place: an out-of-place call
 * (coll_args.distinct) has a plan that stages nothing. The rule works range
 * by range on any layout, but all-to-all-v has no in-place form (its send
 * and receive layouts differ), so it stages nothing (inplace_safe = 0) and
 * pays nothing.
 *
 * Bruck's all-to-all (small blocks). Block i of the rotated input is the one
 * for rank r + i. In exchange step k, every block whose index has bit k set
 * moves on to rank r + 2^k, packed into one message; after ceil(log2 n)
 * steps block i holds what rank r - i sent to r. All of it happens in
 * scratch: T keeps blocks 1..n-1 between steps, P packs the outgoing
 * message, Q takes the incoming one. A local step between exchanges
 * unpacks Q and packs the next P (reading Q directly for blocks that move
 * again, so nothing in a step reads what the step writes); the first pack
 * reads SEND directly (the rotation costs no copy) and the last local step
 * writes RECV, after every read of SEND, which makes it safe in place.
 *
 * Gather and scatter: the root posts one transfer per rank in a single step
 * and copies its own block; in place that copy is onto itself. */
#include <stdlib.h>

#include "collectives/plan.h"
#include "core/checks.h"
#include "core/util.h"

/* ---- Shared ---- */

static loomResult_t args_check(const struct coll_args* a, const char* what, int rooted) {
  if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->slice_elems == 0 ||
      (rooted && (a->root < 0 || a->root >= a->nranks))) {
    return err_set_sub(NULL, SUB_COLL, loomInvalidArgument,
                       "%s: bad arguments (rank %d of %d, root %d, slice of %zu elements)", what,
                       a->rank, a->nranks, a->root, a->slice_elems);
  }
  return loomSuccess;
}

static void plan_head(struct plan* p, const struct coll_args* a, const char* algo, size_t send,
                      size_t recv) {
  plan_reset(p);
  p->rank = a->rank;
  p->nranks = a->nranks;
  p->algo = algo;
  p->buf_count[PB_SEND] = send;
  p->buf_count[PB_RECV] = recv;
  p->buf_count[PB_SCRATCH] = 0;
}

static struct plan_ref ref(enum plan_buf b, size_t off) {
  return plan_ref_make(b, off);
}

/* A local copy that extends the step's previous copy when both of its ranges
 * continue that copy's: a run of blocks then costs one op. */
static void add_copy(struct plan* p, struct plan_ref src, struct plan_ref dst, size_t count) {
  if (count == 0 || p->failed) return;
  if (p->nsteps > 0 && p->nops > p->steps[p->nsteps - 1].op_begin) {
    struct plan_op* last = &p->ops[p->nops - 1];
    if (last->kind == OP_COPY && last->src.buf == src.buf && last->dst.buf == dst.buf &&
        last->src.off + last->count == src.off && last->dst.off + last->count == dst.off) {
      last->count += count;
      return;
    }
  }
  plan_add(p, OP_COPY, -1, src, dst, count);
}

static loomResult_t out_of_memory(const char* what, int rank) {
  return err_set_sub(NULL, SUB_COLL | SUB_ALLOC, loomSystemError,
                     "rank %d: out of memory building the %s plan", rank, what);
}

/* ---- Pairwise exchange ---- */

struct a2a_block { /* a peer's send range, for the in-place analysis */
  size_t start, end;
  size_t max_end; /* the largest end of this block and all before it */
  int peer;
};

struct a2a_stage { /* a receive parked in scratch until it may enter RECV */
  size_t off, room, len, recv_off;
  uint32_t copy_step;
};

struct a2a {
  struct plan* p;
  int n, r;
  size_t se; /* slice_elems */
  const size_t *scount, *sdispl, *rcount, *rdispl;
  size_t* send_first;       /* peer -> index of its slice 0 in send_step */
  uint32_t* send_step;      /* the step that sends each slice */
  struct a2a_block* blocks; /* sorted by start */
  int nblocks;
  struct a2a_stage* live; /* sorted by off */
  size_t nlive, live_cap;
  size_t unit;      /* the largest slice received: every stage takes that much room */
  size_t scratch;   /* high-water mark of PB_SCRATCH */
  uint64_t step;    /* steps seen so far */
  int inplace_safe; /* 0: SEND and RECV never share memory, stage nothing */
  int oom;
};

static size_t nslices(const struct a2a* g, size_t count) {
  return count / g->se + (count % g->se != 0);
}

typedef void (*a2a_visit_fn)(struct a2a* g, int to, int from, size_t s);

/* Calls visit for the step (offset, slice s) unless this rank has nothing in
 * it; to or from is -1 where only the other transfer exists. */
static void a2a_visit(struct a2a* g, a2a_visit_fn visit, int to, int from, size_t s) {
  int t = s < nslices(g, g->scount[to]) ? to : -1;
  int f = s < nslices(g, g->rcount[from]) ? from : -1;
  if (t >= 0 || f >= 0) visit(g, t, f, s);
}

/* Every step in plan order (see the top of the file). */
static void a2a_walk(struct a2a* g, a2a_visit_fn visit) {
  int n = g->n, r = g->r;
  for (int k = 1; 2 * k <= n; k++) {
    int up = (r + k) % n, down = (r - k + n) % n; /* equal when 2k == n */
    size_t ns = LOOM_MAX(nslices(g, g->scount[up]), nslices(g, g->rcount[down]));
    ns = LOOM_MAX(ns, LOOM_MAX(nslices(g, g->scount[down]), nslices(g, g->rcount[up])));
    for (size_t s = 0; s < ns; s++) {
      a2a_visit(g, visit, up, down, s);                /* offset k */
      if (2 * k < n) a2a_visit(g, visit, down, up, s); /* offset n - k */
    }
  }
}

static void a2a_record(struct a2a* g, int to, int from, size_t s) {
  (void)from;
  if (to >= 0) g->send_step[g->send_first[to] + s] = (uint32_t)g->step;
  g->step++;
}

/* The last step that reads SEND[off, off + len), or -1: were SEND and RECV
 * one buffer, RECV[off, off + len) may be written only after it. The own
 * block is read in step 0; skip_own leaves it out. */
static int64_t a2a_last_read(const struct a2a* g, size_t off, size_t len, int skip_own) {
  if (!g->inplace_safe) return -1;
  size_t end = off + len;
  int lo = 0, hi = g->nblocks;
  while (lo < hi) { /* the first block starting at or past end */
    int mid = lo + (hi - lo) / 2;
    if (g->blocks[mid].start < end)
      lo = mid + 1;
    else
      hi = mid;
  }
  int64_t last = -1;
  for (int i = lo - 1; i >= 0 && g->blocks[i].max_end > off; i--) {
    const struct a2a_block* b = &g->blocks[i];
    if (b->end <= off) continue;
    if (b->peer == g->r) {
      if (!skip_own) last = LOOM_MAX(last, 0);
      continue;
    }
    size_t hi_elem = LOOM_MIN(end, b->end) - 1 - b->start; /* last overlapping element */
    last = LOOM_MAX(last, (int64_t)g->send_step[g->send_first[b->peer] + hi_elem / g->se]);
  }
  return last;
}

/* Room for len elements from step t until copy_step, first fit; regions
 * copied out before step t are free again. Each takes at least a whole
 * unit, so that short last slices leave no holes that a full slice cannot
 * fill. Returns the scratch offset. */
static size_t stage_alloc(struct a2a* g, uint32_t t, size_t recv_off, size_t len,
                          uint32_t copy_step) {
  size_t keep = 0, at = 0, pos, room = LOOM_MAX(len, g->unit);
  for (size_t i = 0; i < g->nlive; i++)
    if (g->live[i].copy_step >= t) g->live[keep++] = g->live[i];
  g->nlive = keep;
  for (pos = 0; pos < g->nlive && g->live[pos].off < at + room; pos++)
    at = LOOM_MAX(at, g->live[pos].off + g->live[pos].room);
  if (g->nlive == g->live_cap) {
    size_t cap = g->live_cap ? 2 * g->live_cap : 16;
    struct a2a_stage* nl = realloc(g->live, cap * sizeof(*nl));
    if (nl == NULL) {
      g->oom = 1;
      return 0;
    }
    g->live = nl;
    g->live_cap = cap;
  }
  for (size_t i = g->nlive; i > pos; i--) g->live[i] = g->live[i - 1];
  g->live[pos] = (struct a2a_stage){at, room, len, recv_off, copy_step};
  g->nlive++;
  g->scratch = LOOM_MAX(g->scratch, at + room);
  return at;
}

/* Moves into RECV what may enter it in step t. */
static void stage_flush(struct a2a* g, uint32_t t) {
  for (size_t i = 0; i < g->nlive; i++)
    if (g->live[i].copy_step == t)
      add_copy(g->p, ref(PB_SCRATCH, g->live[i].off), ref(PB_RECV, g->live[i].recv_off),
               g->live[i].len);
}

/* The own block: a local copy in step 0, through scratch when RECV's range
 * is still to be read (in place, with displacements that differ). */
static void a2a_own(struct a2a* g) {
  size_t len = g->scount[g->r], from = g->sdispl[g->r], to = g->rdispl[g->r];
  if (len == 0) return;
  int64_t last = a2a_last_read(g, to, len, 1);
  int partial = from != to && from < to + len && to < from + len;
  if (g->inplace_safe && partial) last = LOOM_MAX(last, 0);
  if (last < 0) {
    add_copy(g->p, ref(PB_SEND, from), ref(PB_RECV, to), len);
    return;
  }
  size_t at = stage_alloc(g, 0, to, len, (uint32_t)last + 1);
  add_copy(g->p, ref(PB_SEND, from), ref(PB_SCRATCH, at), len);
}

static void a2a_emit(struct a2a* g, int to, int from, size_t s) {
  uint32_t t = (uint32_t)g->step++;
  size_t lo = s * g->se;
  plan_step_begin(g->p);
  stage_flush(g, t);
  if (t == 0) a2a_own(g);
  if (to >= 0) {
    struct plan_ref src = ref(PB_SEND, g->sdispl[to] + lo);
    plan_add(g->p, OP_SEND, to, src, src, LOOM_MIN(g->se, g->scount[to] - lo));
  }
  if (from >= 0) {
    size_t len = LOOM_MIN(g->se, g->rcount[from] - lo), at = g->rdispl[from] + lo;
    int64_t last = a2a_last_read(g, at, len, 0);
    struct plan_ref dst = last < (int64_t)t
                              ? ref(PB_RECV, at)
                              : ref(PB_SCRATCH, stage_alloc(g, t, at, len, (uint32_t)last + 1));
    plan_add(g->p, OP_RECV, from, dst, dst, len);
  }
}

static int block_order(const void* x, const void* y) {
  const struct a2a_block *a = x, *b = y;
  return (a->start > b->start) - (a->start < b->start);
}

/* The send blocks sorted by start, and room for the step of every slice. */
static int a2a_setup(struct a2a* g) {
  size_t nsend = 0;
  g->send_first = malloc((size_t)g->n * sizeof(*g->send_first));
  g->blocks = malloc((size_t)g->n * sizeof(*g->blocks));
  if (g->send_first == NULL || g->blocks == NULL) return -1;
  for (int q = 0; q < g->n; q++) {
    g->send_first[q] = nsend;
    if (q != g->r) nsend += nslices(g, g->scount[q]);
    g->unit = LOOM_MAX(g->unit, LOOM_MIN(g->se, g->rcount[q]));
    if (g->scount[q] > 0)
      g->blocks[g->nblocks++] = (struct a2a_block){g->sdispl[q], g->sdispl[q] + g->scount[q], 0, q};
  }
  qsort(g->blocks, (size_t)g->nblocks, sizeof(*g->blocks), block_order);
  for (int i = 0; i < g->nblocks; i++)
    g->blocks[i].max_end = LOOM_MAX(g->blocks[i].end, i ? g->blocks[i - 1].max_end : 0);
  g->send_step = malloc((nsend + 1) * sizeof(*g->send_step));
  return g->send_step == NULL ? -1 : 0;
}

static loomResult_t a2a_build(struct a2a* g, const char* what) {
  loomResult_t res = loomSuccess;
  if (a2a_setup(g)) {
    res = out_of_memory(what, g->r);
    goto out;
  }
  a2a_walk(g, a2a_record);
  if (g->step >= UINT32_MAX) {
    res = err_set_sub(NULL, SUB_COLL, loomInvalidArgument,
                      "rank %d: %s needs %llu steps, more than a plan holds", g->r, what,
                      (unsigned long long)g->step);
    goto out;
  }
  g->step = 0;
  a2a_walk(g, a2a_emit);
  if (g->step == 0) { /* nothing to exchange: step 0 is the own copy alone */
    plan_step_begin(g->p);
    a2a_own(g);
    g->step = 1;
  }
  plan_step_begin(g->p); /* copies due after the last exchange */
  stage_flush(g, (uint32_t)g->step);
  g->p->buf_count[PB_SCRATCH] = g->scratch;
  res = g->oom ? out_of_memory(what, g->r) : plan_finish(g->p);
out:
  free(g->live);
  free(g->send_step);
  free(g->blocks);
  free(g->send_first);
  return res;
}

loomResult_t pairwise_alltoall_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(args_check(a, "pairwise all-to-all", 0));
  int n = a->nranks;
  size_t c = a->count;
  plan_head(out, a, "pairwise", (size_t)n * c, (size_t)n * c);
  if (c == 0) return plan_finish(out);
  /* The uniform case of all-to-all-v: c elements at q * c for every peer q. */
  size_t* v = malloc(2 * (size_t)n * sizeof(*v));
  if (v == NULL) return out_of_memory("pairwise all-to-all", a->rank);
  for (int q = 0; q < n; q++) {
    v[q] = c;
    v[n + q] = (size_t)q * c;
  }
  /* Out of place (a->distinct) nothing is staged: every receive goes
   * straight into RECV, one copy fewer for half the blocks (all of them at
   * 2 ranks). The exchanges are the same either way, so ranks of one call
   * that differ in it still match. */
  struct a2a g = {
      .p = out, .n = n, .r = a->rank, .se = a->slice_elems, .inplace_safe = !a->distinct};
  g.scount = g.rcount = v;
  g.sdispl = g.rdispl = v + n;
  loomResult_t res = a2a_build(&g, "pairwise all-to-all");
  free(v);
  return res;
}

loomResult_t pairwise_alltoallv_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(args_check(a, "pairwise all-to-all-v", 0));
  int n = a->nranks, r = a->rank;
  if (!a->sendcounts || !a->sdispls || !a->recvcounts || !a->rdispls ||
      a->sendcounts[r] != a->recvcounts[r]) {
    return err_set_sub(NULL, SUB_COLL, loomInvalidArgument,
                       "rank %d: all-to-all-v needs four arrays of counts and displacements, "
                       "with as much sent to itself as received from itself",
                       r);
  }
  size_t send = 0, recv = 0;
  for (int q = 0; q < n; q++) {
    if (a->sendcounts[q]) send = LOOM_MAX(send, a->sdispls[q] + a->sendcounts[q]);
    if (a->recvcounts[q]) recv = LOOM_MAX(recv, a->rdispls[q] + a->recvcounts[q]);
  }
  plan_head(out, a, "pairwise", send, recv);
  struct a2a g = {.p = out, .n = n, .r = r, .se = a->slice_elems};
  g.scount = a->sendcounts;
  g.sdispl = a->sdispls;
  g.rcount = a->recvcounts;
  g.rdispl = a->rdispls;
  return a2a_build(&g, "pairwise all-to-all-v");
}

/* ---- Bruck ---- */

struct bruck {
  struct plan* p;
  int n, r;
  size_t c;
  size_t t, pk, q; /* scratch offsets of T (blocks 1..n-1), P and Q */
};

/* How many of the indices 0 .. i-1 have bit k set; for an index with bit k
 * set, its place in step k's packed message. */
static size_t bit_rank(unsigned k, size_t i) {
  size_t run = (size_t)1 << k, within = i & (2 * run - 1);
  return (i >> (k + 1) << k) + (within > run ? within - run : 0);
}

/* Where block i is while the local step before exchange k runs. */
static struct plan_ref bruck_loc(const struct bruck* g, size_t i, unsigned k) {
  if (k > 0 && (i >> (k - 1) & 1)) return ref(PB_SCRATCH, g->q + bit_rank(k - 1, i) * g->c);
  if (k > 1 && (i & (((size_t)1 << (k - 1)) - 1))) return ref(PB_SCRATCH, g->t + (i - 1) * g->c);
  return ref(PB_SEND, ((size_t)g->r + i) % (size_t)g->n * g->c);
}

/* The local step before exchange k: settles what exchange k - 1 brought
 * and will not move again, and packs the blocks of exchange k. */
static void bruck_local(struct bruck* g, unsigned k) {
  for (size_t i = 1; k > 0 && i < (size_t)g->n; i++)
    if ((i >> (k - 1) & 1) && !(i >> k & 1))
      add_copy(g->p, bruck_loc(g, i, k), ref(PB_SCRATCH, g->t + (i - 1) * g->c), g->c);
  for (size_t i = 1; i < (size_t)g->n; i++)
    if (i >> k & 1)
      add_copy(g->p, bruck_loc(g, i, k), ref(PB_SCRATCH, g->pk + bit_rank(k, i) * g->c), g->c);
}

/* After the last exchange: RECV block d is index r - d (the inverse rotation). */
static void bruck_final(struct bruck* g, unsigned nsteps) {
  for (int d = 0; d < g->n; d++) {
    size_t i = (size_t)((g->r - d + g->n) % g->n);
    add_copy(g->p, bruck_loc(g, i, nsteps), ref(PB_RECV, (size_t)d * g->c), g->c);
  }
}

loomResult_t bruck_alltoall_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(args_check(a, "bruck all-to-all", 0));
  int n = a->nranks;
  size_t c = a->count, half = (size_t)n / 2; /* no exchange carries more blocks */
  unsigned nsteps = 0;
  while (((size_t)1 << nsteps) < (size_t)n) nsteps++;
  plan_head(out, a, "bruck", (size_t)n * c, (size_t)n * c);
  if (c == 0) return plan_finish(out);
  struct bruck g = {out, n, a->rank, c, 0, (size_t)(n - 1) * c, (size_t)(n - 1) * c + half * c};
  out->buf_count[PB_SCRATCH] = (size_t)(n - 1) * c + 2 * half * c;
  for (unsigned k = 0; k < nsteps; k++) {
    size_t dist = (size_t)1 << k, len = bit_rank(k, (size_t)n) * c;
    plan_step_begin(out);
    bruck_local(&g, k);
    plan_step_begin(out);
    plan_add(out, OP_SEND, (int)(((size_t)a->rank + dist) % (size_t)n), ref(PB_SCRATCH, g.pk),
             ref(PB_SCRATCH, g.pk), len);
    plan_add(out, OP_RECV, (int)(((size_t)a->rank + (size_t)n - dist) % (size_t)n),
             ref(PB_SCRATCH, g.q), ref(PB_SCRATCH, g.q), len);
  }
  plan_step_begin(out);
  bruck_final(&g, nsteps);
  return plan_finish(out);
}

/* ---- Gather and scatter ---- */

loomResult_t direct_gather_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(args_check(a, "direct gather", 1));
  int n = a->nranks, root = a->root;
  size_t c = a->count;
  plan_head(out, a, "direct", c, (size_t)n * c);
  plan_step_begin(out);
  if (a->rank != root) {
    plan_add(out, OP_SEND, root, ref(PB_SEND, 0), ref(PB_SEND, 0), c);
    return plan_finish(out);
  }
  add_copy(out, ref(PB_SEND, 0), ref(PB_RECV, (size_t)root * c), c);
  for (int k = 1; k < n; k++) { /* from root + 1 on, so that ranks are served in turn */
    int q = (root + k) % n;
    plan_add(out, OP_RECV, q, ref(PB_RECV, (size_t)q * c), ref(PB_RECV, (size_t)q * c), c);
  }
  return plan_finish(out);
}

loomResult_t direct_scatter_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(args_check(a, "direct scatter", 1));
  int n = a->nranks, root = a->root;
  size_t c = a->count;
  plan_head(out, a, "direct", (size_t)n * c, c);
  plan_step_begin(out);
  if (a->rank != root) {
    plan_add(out, OP_RECV, root, ref(PB_RECV, 0), ref(PB_RECV, 0), c);
    return plan_finish(out);
  }
  add_copy(out, ref(PB_SEND, (size_t)root * c), ref(PB_RECV, 0), c);
  for (int k = 1; k < n; k++) {
    int q = (root + k) % n;
    plan_add(out, OP_SEND, q, ref(PB_SEND, (size_t)q * c), ref(PB_SEND, (size_t)q * c), c);
  }
  return plan_finish(out);
}
