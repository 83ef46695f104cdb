/* hier.c - all-reduce in two levels, for ranks on several hosts.
 *
 * With H hosts of L ranks each, a flat ring sends 2(N-1)/N of the buffer
 * out of a host for every one of its edges that leaves it, and every step
 * of it waits on the network. Here the network carries less and waits less:
 *
 *  1. Inside each host, a ring reduce-scatter over its L ranks (in rank
 *     order): the buffer is cut into L parts (part_begin) and local rank l
 *     ends with part l summed over its host, in RECV.
 *  2. Across hosts, the H ranks of local index l (one per host) all-reduce
 *     part l: the plan of a->cross_algo (ring, tree, rhd or doubling) for H ranks,
 *     built for the part alone and spliced in with its ranks and offsets
 *     mapped. All L parts cross at once, each on its own connections, so a
 *     host sends 2(H-1)/H of the buffer in all, whatever L is.
 *  3. Inside each host, a ring all-gather of the L parts.
 *
 * Phase 1 is ring.c's reduce-scatter on uneven parts: in step j of a slice,
 * local rank l sends part l - j - 1 (its input at j = 0, else the partial
 * it received the step before) and receives part l - j - 2, adding its
 * input, into RECV; after L - 1 steps part l is complete. Part l - 1 is
 * never received, and every other part is written once, in the step that
 * reads its input element for element, so sendbuff == recvbuff is safe.
 * Phase 2 runs on RECV alone (its plan's send and receive buffers both map
 * to RECV, the in-place form every all-reduce plan is proven for), and
 * phase 3 only moves finished parts within RECV. Premul scales the input
 * into RECV first; avg divides the result last.
 *
 * The layout must be even (every host holds L ranks); the tuner offers this
 * plan only then. Ranks need not be numbered host by host: groups follow
 * host_of. */
#include <stdlib.h>

#include "collectives/plan.h"
#include "core/checks.h"
#include "core/util.h"
#include "topo/tune.h"

struct hier {
  const struct coll_args* a;
  struct plan* p;
  int L, H;
  int li, hi; /* this rank's index inside its host, and its host */
  int* local; /* L ranks: this host's, in rank order */
  int* cross; /* H ranks: local index li of every host */
  enum plan_buf in;
};

static int mod(int x, int n) {
  return ((x % n) + n) % n;
}

/* Slice s of part c: [*off, *off + *n), *n possibly 0 for shorter parts. */
static void part_slice(const struct hier* g, int c, size_t s, size_t* off, size_t* n) {
  size_t begin = part_begin(g->a->count, g->L, c), end = part_begin(g->a->count, g->L, c + 1);
  size_t lo = begin + s * g->a->slice_elems;
  size_t left = lo < end ? end - lo : 0;
  *off = lo;
  *n = left < g->a->slice_elems ? left : g->a->slice_elems;
}

static size_t part_slices(const struct hier* g) {
  size_t largest = part_begin(g->a->count, g->L, 1); /* part 0 is never shorter */
  return largest / g->a->slice_elems + (largest % g->a->slice_elems != 0);
}

/* One ring phase inside the host. Reduce-scatter (gather == 0): in step j
 * send part l - j - 1 (the input at j = 0, else the partial received the
 * step before) and receive part l - j - 2, adding the input. All-gather:
 * send part l - j and receive part l - j - 1, finished parts in RECV. */
static void intra_ring(struct hier* g, int gather) {
  int L = g->L, l = g->li, next = g->local[mod(l + 1, L)], prev = g->local[mod(l - 1, L)];
  int shift = gather ? 0 : 1;
  size_t ns = part_slices(g);
  for (size_t s = 0; s < ns; s++)
    for (int j = 0; j < L - 1; j++) {
      size_t so, sn, ro, rn;
      part_slice(g, mod(l - j - shift, L), s, &so, &sn);
      part_slice(g, mod(l - j - shift - 1, L), s, &ro, &rn);
      struct plan_ref from = plan_ref_make(!gather && j == 0 ? g->in : PB_RECV, so);
      struct plan_ref to = plan_ref_make(PB_RECV, ro);
      plan_step_begin(g->p);
      plan_add(g->p, OP_SEND, next, from, from, sn);
      if (gather)
        plan_add(g->p, OP_RECV, prev, to, to, rn);
      else
        plan_add(g->p, OP_RECV_REDUCE, prev, plan_ref_make(g->in, ro), to, rn);
    }
}

/* Maps a reference of the cross-host plan: its SEND and RECV are part li
 * of RECV, its scratch is ours. */
static struct plan_ref cross_ref(struct plan_ref r, size_t base) {
  if (r.buf == PB_SCRATCH) return r;
  return plan_ref_make(PB_RECV, base + r.off);
}

static loomResult_t cross_allreduce(struct hier* g) {
  size_t base = part_begin(g->a->count, g->L, g->li);
  size_t len = part_begin(g->a->count, g->L, g->li + 1) - base;
  if (len == 0) return loomSuccess; /* the same on every host: nothing crosses */
  struct coll_args sub = {0};
  sub.nranks = g->H;
  sub.rank = g->hi;
  sub.count = len;
  sub.slice_elems = g->a->slice_elems;
  struct plan q;
  plan_init(&q, g->hi, g->H, "cross");
  loomResult_t r;
  switch (g->a->cross_algo) {
    case TUNE_TREE:
      r = tree_allreduce_build(&sub, &q);
      break;
    case TUNE_RHD:
      r = rhd_allreduce_build(&sub, &q);
      break;
    case TUNE_DOUBLING:
      r = doubling_allreduce_build(&sub, &q);
      break;
    default:
      r = ring_allreduce_build(&sub, &q);
      break;
  }
  for (uint32_t s = 0; r == loomSuccess && s < q.nsteps; s++) {
    plan_step_begin(g->p);
    for (uint32_t o = q.steps[s].op_begin; o < q.steps[s].op_end; o++) {
      const struct plan_op* op = &q.ops[o];
      int peer = op->peer >= 0 ? g->cross[op->peer] : -1;
      plan_add(g->p, (enum plan_op_kind)op->kind, peer, cross_ref(op->src, base),
               cross_ref(op->dst, base), op->count);
    }
  }
  if (r == loomSuccess && q.buf_count[PB_SCRATCH] > g->p->buf_count[PB_SCRATCH])
    g->p->buf_count[PB_SCRATCH] = q.buf_count[PB_SCRATCH];
  plan_free(&q);
  return r;
}

/* Fills g's groups from host_of; fails on an uneven layout. */
static loomResult_t hier_groups(struct hier* g, int* mem) {
  const struct coll_args* a = g->a;
  int n = a->nranks, me = a->rank, H = 0, L = 0;
  for (int r = 0; r < n; r++) H = LOOM_MAX(H, a->host_of[r] + 1);
  for (int r = 0; r < n; r++) L += a->host_of[r] == a->host_of[me];
  if (H < 1 || L * H != n)
    return err_set_sub(
        NULL, SUB_COLL, loomInvalidArgument,
        "hierarchical all-reduce: %d ranks on %d hosts are not the same number per host", n, H);
  g->H = H;
  g->L = L;
  g->local = mem;
  g->cross = mem + L;
  int* seen = mem + L + H; /* per host, ranks met so far; L + 2H <= 2n + 1 when L * H = n */
  for (int h = 0; h < H; h++) seen[h] = 0;
  g->li = -1;
  for (int r = 0; r < n; r++) {
    int h = a->host_of[r];
    if (h < 0 || h >= H || seen[h] >= L)
      return err_set_sub(NULL, SUB_COLL, loomInvalidArgument,
                         "hierarchical all-reduce: host %d holds more than %d ranks", h, L);
    if (h == a->host_of[me]) {
      if (r == me) g->li = seen[h];
      g->local[seen[h]] = r;
    }
    seen[h]++;
  }
  for (int h = 0; h < H; h++) seen[h] = 0;
  for (int r = 0; r < n; r++) {
    int h = a->host_of[r];
    if (seen[h]++ == g->li) g->cross[h] = r;
  }
  g->hi = a->host_of[me];
  return loomSuccess;
}

loomResult_t hier_allreduce_build(const struct coll_args* a, struct plan* out) {
  if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->slice_elems == 0 || !a->host_of)
    return err_set_sub(
        NULL, SUB_COLL, loomInvalidArgument,
        "hierarchical all-reduce: bad arguments (rank %d of %d, slice of %zu elements%s)", a->rank,
        a->nranks, a->slice_elems, a->host_of ? "" : ", no host map");
  plan_reset(out);
  out->rank = a->rank;
  out->nranks = a->nranks;
  out->algo = "hier";
  out->buf_count[PB_SEND] = a->count;
  out->buf_count[PB_RECV] = a->count;
  out->buf_count[PB_SCRATCH] = 0;
  int* mem = malloc((size_t)(2 * a->nranks + 1) * sizeof(int));
  if (!mem) return err_set_sub(NULL, SUB_COLL, loomSystemError, "out of memory");
  struct hier g = {a, out, 0, 0, 0, 0, NULL, NULL, PB_SEND};
  loomResult_t r = hier_groups(&g, mem);
  if (r == loomSuccess) {
    if (a->premul) {
      plan_step_begin(out);
      plan_add(out, OP_PREMUL, -1, plan_ref_make(PB_SEND, 0), plan_ref_make(PB_RECV, 0), a->count);
      g.in = PB_RECV;
    } else if (g.L == 1) {
      /* No reduce-scatter to carry the input into RECV (a no-op in place). */
      plan_step_begin(out);
      plan_add(out, OP_COPY, -1, plan_ref_make(PB_SEND, 0), plan_ref_make(PB_RECV, 0), a->count);
    }
    intra_ring(&g, 0);
    r = cross_allreduce(&g);
  }
  if (r == loomSuccess) {
    intra_ring(&g, 1);
    if (a->avg) {
      plan_step_begin(out);
      plan_add(out, OP_DIV, -1, plan_ref_make(PB_RECV, 0), plan_ref_make(PB_RECV, 0), a->count);
    }
    r = plan_finish(out);
  }
  free(mem);
  return r;
}
