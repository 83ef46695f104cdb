/* tree.c - double binary tree all-reduce, broadcast and reduce as plans.
 *
 * The trees. Two binary trees over the same ranks, each carrying half of the
 * buffer, built so that (for n > 2) no rank is a leaf in both: a leaf only
 * sends up and receives down, so each rank does the work of an interior node
 * in at most one tree and both halves move at full width.
 *
 * The brick is the in-order tree over a run of integer labels a..a+m-1: the
 * root of a range is its label with the most trailing zero bits, and the
 * labels left and right of it form its two subtrees. Odd labels are exactly
 * its leaves (an odd label's range holds nothing else, since a range of two
 * or more holds an even label), and every even label but a has a left child
 * (a, when even, has a right one). Position p of the m ranks gets label a+p
 * in tree 0; tree 1 flips the parity of every label, which makes each leaf
 * of tree 0 interior in tree 1:
 *  - m even, a odd: tree 1 is the mirror, position p gets a + m - 1 - p;
 *    every rank is interior in exactly one tree.
 *  - m odd, a even: tree 1 is rotated by one, position p gets a + p - 1 and
 *    position 0 gets a + m - 1. Position 0 is even in both, so interior in
 *    both. (Disjoint leaves allow at most m/2 leaves per tree, so with m odd
 *    some node has one child; NCCL's shifted tree 1 does the same.)
 * The offset a shapes the tree: with a = 1 and m = 64 the root 64 has one
 * child above a perfect tree of 63, while a = 3 puts 64 above two subtrees
 * of different heights, which the schedule below handles better. Among
 * a = 1 and 2^j (+1 for even m) we take the offset whose tree finishes an
 * all-reduce of one slice soonest (up time plus height); it is never worse
 * than trying every offset (checked offline to m = 300); O(m log m).
 * The depth stays within floor(log2 m) .. ceil(log2 m).
 *
 * All-reduce uses the pair over all n ranks. Broadcast and reduce put the
 * user's root on top of both trees, one child in each, above the pair over
 * the other n - 1 ranks numbered from root + 1.
 *
 * The schedule is a global clock: every transfer is placed at one step
 * number, the same at both ends, so under rendezvous semantics the lowest
 * unfinished step always has both ends of each of its transfers posted and
 * no plan can deadlock (ranks with nothing to do at a step just skip it).
 * Within a step, ops of tree 0 come before those of tree 1 and each tree
 * has at most one op per direction and peer, so the k-th send of a pair
 * always meets the k-th receive.
 *
 * Each half is cut into slices of at most slice_elems. Up the tree, a node
 * sends slice s to its parent at up + s, where `up` is its own offset. A
 * parent adds its children's slices into one accumulator with recv_reduce,
 * and two receives into the same slice cannot share a step (they would
 * write the same range at once), so the child whose subtree finishes later
 * arrives one step after its sibling: a node with two children of equal
 * height pays two steps per level on the way up, one otherwise. The root
 * has the sum of slice s one step after its last receive of it; down the
 * tree every level forwards slice s one step after receiving it. Within one
 * step a node touches a different slice per op (newer ones coming up from
 * each child, an older one going up, older still coming and going down), so
 * steps have no hazards, and the reduce of new slices overlaps the
 * broadcast of old ones. One slice takes up time plus height rounds through
 * an all-reduce (7 at n = 8, 13 at n = 32, 16 at n = 64), the height
 * through a broadcast (7 at n = 64), the up time plus one through a reduce
 * (10 at n = 64); each further slice adds one round, premul and avg one
 * local step each.
 *
 * Buffers. All-reduce accumulates in RECV (after premul, the input is RECV
 * too). Reduce accumulates in SCRATCH at non-roots (RECV may be NULL there)
 * and in RECV at the root; premul writes SCRATCH. Broadcast non-roots
 * receive into RECV and forward from it; only the root reads SEND. The
 * first child's receive adds the local input (src = input, dst =
 * accumulator), the second adds onto the accumulator, so each input element
 * is read once, in the step that first writes its accumulator: safe in
 * place. */
#include <stdlib.h>

#include "collectives/plan.h"
#include "core/checks.h"

struct tnode {
  int parent;   /* rank; -1 at the root */
  int child[2]; /* ranks; child[0] arrives first in the reduce */
  int nchild;
  size_t up;   /* step at which slice 0 goes to the parent */
  size_t down; /* step at which slice 0 goes to the children */
};

struct tree {
  int root;
  struct tnode* node; /* by rank */
};

/* A run of m consecutive ranks base, base + 1, ... (mod n). */
struct span {
  int base, m, n;
};

static int span_rank(const struct span* sp, int p) {
  return (sp->base + p) % sp->n;
}

static void tree_link(struct tree* t, int parent, int r) {
  t->node[r].parent = parent;
  if (parent < 0) {
    t->root = r;
    return;
  }
  struct tnode* p = &t->node[parent];
  p->child[p->nchild++] = r;
}

/* When a node can first send slice 0 up, given when its children can:
 * siblings' slices arrive in different steps, the earlier subtree first. */
static size_t ready_after(int nchild, size_t a, size_t b) {
  size_t first = a < b ? a : b, second = a < b ? b : a;
  if (nchild == 0) return 0;
  if (nchild == 1) return a + 1;
  return (second > first ? second : first + 1) + 1;
}

/* The root of the in-order tree over labels [lo, hi]. */
static unsigned long range_root(unsigned long lo, unsigned long hi) {
  if (lo == hi) return lo;
  unsigned long top = 1ul << (63 - __builtin_clzl(lo ^ hi));
  return hi & ~(top - 1);
}

/* Up time (ready_after) and height of the in-order tree over [lo, hi]. */
static void shape_cost(unsigned long lo, unsigned long hi, size_t* ready_out, size_t* height_out) {
  unsigned long mid = range_root(lo, hi);
  size_t ready[2] = {0, 0}, height[2] = {0, 0};
  int n = 0;
  if (mid > lo) shape_cost(lo, mid - 1, &ready[n], &height[n]), n++;
  if (mid < hi) shape_cost(mid + 1, hi, &ready[n], &height[n]), n++;
  *ready_out = ready_after(n, ready[0], ready[1]);
  *height_out = n == 0 ? 0 : 1 + (height[0] > height[1] ? height[0] : height[1]);
}

/* The label offset for m positions (see the top of the file). */
static unsigned long pair_offset(int m) {
  unsigned long best_a = m % 2 ? 2 : 1;
  size_t best = SIZE_MAX;
  int bits = 32 - __builtin_clz((unsigned)m);
  for (int j = m % 2; j <= bits + 1; j++) {
    unsigned long a = m % 2 ? 1ul << j : j ? (1ul << j) + 1 : 1;
    size_t ready, height;
    shape_cost(a, a + (unsigned long)m - 1, &ready, &height);
    if (ready + height < best) {
      best = ready + height;
      best_a = a;
    }
  }
  return best_a;
}

/* The position (0..m-1) of label x in tree k. */
static int label_pos(int m, unsigned long a, int k, unsigned long x) {
  int p = (int)(x - a);
  if (k == 0) return p;
  return m % 2 ? (p + 1) % m : m - 1 - p;
}

/* Links tree k's in-order tree over labels [lo, hi] below parent. */
static void inorder_link(struct tree* t, const struct span* sp, int k, unsigned long a,
                         unsigned long lo, unsigned long hi, int parent) {
  unsigned long mid = range_root(lo, hi);
  int r = span_rank(sp, label_pos(sp->m, a, k, mid));
  tree_link(t, parent, r);
  if (mid > lo) inorder_link(t, sp, k, a, lo, mid - 1, r);
  if (mid < hi) inorder_link(t, sp, k, a, mid + 1, hi, r);
}

/* The complementary pair over sp, hung below parent (-1: sp holds the roots). */
static void pair_link(struct tree t[2], struct span sp, int parent) {
  if (sp.m == 0) return;
  unsigned long a = pair_offset(sp.m);
  for (int k = 0; k < 2; k++)
    inorder_link(&t[k], &sp, k, a, a, a + (unsigned long)sp.m - 1, parent);
}

/* Up offsets below r (see the top of the file); returns the first step at
 * which r could send slice 0 up. Recursion depth is the tree's depth. */
static size_t tree_time_up(struct tree* t, int r) {
  struct tnode* x = &t->node[r];
  size_t ready[2] = {0, 0};
  for (int i = 0; i < x->nchild; i++) ready[i] = tree_time_up(t, x->child[i]);
  if (x->nchild == 2 && ready[1] < ready[0]) { /* the earlier subtree arrives first */
    int c = x->child[0];
    x->child[0] = x->child[1];
    x->child[1] = c;
    size_t f = ready[0];
    ready[0] = ready[1];
    ready[1] = f;
  }
  size_t done = ready_after(x->nchild, ready[0], ready[1]);
  if (x->nchild > 0) t->node[x->child[0]].up = ready[0];
  if (x->nchild == 2) t->node[x->child[1]].up = done - 1; /* its last step before done */
  return done;
}

static void tree_time_down(struct tree* t, int r, size_t down) {
  struct tnode* x = &t->node[r];
  x->down = down;
  for (int i = 0; i < x->nchild; i++) tree_time_down(t, x->child[i], down + 1);
}

/* Builds both trees: root < 0 for all-reduce's pair over every rank, else
 * both rooted at root. Times are set for an up phase when up (down then
 * starts as soon as the root holds a slice), else for a broadcast. */
static loomResult_t trees_make(int n, int root, int up, struct tree t[2]) {
  t[0].node = calloc((size_t)n, sizeof(struct tnode));
  t[1].node = calloc((size_t)n, sizeof(struct tnode));
  if (t[0].node == NULL || t[1].node == NULL) {
    free(t[0].node);
    free(t[1].node);
    return err_set_sub(NULL, SUB_COLL | SUB_ALLOC, loomSystemError,
                       "tree: out of memory for the trees of %d ranks", n);
  }
  if (root < 0) {
    pair_link(t, (struct span){0, n, n}, -1);
  } else {
    tree_link(&t[0], -1, root);
    tree_link(&t[1], -1, root);
    pair_link(t, (struct span){(root + 1) % n, n - 1, n}, root);
  }
  for (int k = 0; k < 2; k++)
    tree_time_down(&t[k], t[k].root, up ? tree_time_up(&t[k], t[k].root) : 0);
  return loomSuccess;
}

static void trees_free(struct tree t[2]) {
  free(t[0].node);
  free(t[1].node);
}

/* ---- Emitting one rank's plan ---- */

struct gen {
  const struct coll_args* a;
  struct plan* p;
  struct tree t[2];
  size_t lo[2], hi[2], nslices[2]; /* each tree's half */
  int do_up, do_down;
  enum plan_buf in;        /* this rank's input: SEND, or where premul put it */
  enum plan_buf acc;       /* where this rank adds its children's slices */
  enum plan_buf down_from; /* where the root's broadcast reads */
};

/* Slice s of tree k's half; *n_out is 0 past the half's end. */
static size_t slice_at(const struct gen* g, int k, size_t s, size_t* n_out) {
  size_t off = g->lo[k] + s * g->a->slice_elems;
  size_t left = off < g->hi[k] ? g->hi[k] - off : 0;
  *n_out = left < g->a->slice_elems ? left : g->a->slice_elems;
  return off;
}

/* Slice that a role starting at base moves at step t, or SIZE_MAX if none. */
static size_t slice_of(const struct gen* g, int k, size_t base, size_t t) {
  return t >= base && t - base < g->nslices[k] ? t - base : SIZE_MAX;
}

static void add_xfer(struct gen* g, int k, size_t s, enum plan_op_kind kind, int peer,
                     enum plan_buf src, enum plan_buf dst) {
  if (s == SIZE_MAX) return;
  size_t n, off = slice_at(g, k, s, &n);
  plan_add(g->p, kind, peer, plan_ref_make(src, off), plan_ref_make(dst, off), n);
}

/* What this rank does in tree k at step t. */
static void emit_tree_step(struct gen* g, int k, size_t t) {
  const struct tree* tr = &g->t[k];
  const struct tnode* x = &tr->node[g->a->rank];
  if (g->do_up) {
    for (int i = 0; i < x->nchild; i++) {
      int c = x->child[i];
      add_xfer(g, k, slice_of(g, k, tr->node[c].up, t), OP_RECV_REDUCE, c, i ? g->acc : g->in,
               g->acc);
    }
    if (x->parent >= 0)
      add_xfer(g, k, slice_of(g, k, x->up, t), OP_SEND, x->parent, x->nchild ? g->acc : g->in,
               x->nchild ? g->acc : g->in);
  }
  if (g->do_down) {
    if (x->parent >= 0)
      add_xfer(g, k, slice_of(g, k, x->down - 1, t), OP_RECV, x->parent, PB_RECV, PB_RECV);
    enum plan_buf from = x->parent >= 0 ? PB_RECV : g->down_from;
    for (int i = 0; i < x->nchild; i++)
      add_xfer(g, k, slice_of(g, k, x->down, t), OP_SEND, x->child[i], from, from);
  }
}

/* The last step at which this rank moves anything, plus one. */
static size_t gen_end(const struct gen* g) {
  size_t end = 0;
  for (int k = 0; k < 2; k++) {
    const struct tnode* x = &g->t[k].node[g->a->rank];
    size_t last = 0;
    if (g->nslices[k] == 0) continue;
    if (g->do_up && x->parent >= 0) last = x->up + 1;
    if (g->do_up && x->nchild) { /* the later child arrives last */
      size_t c = g->t[k].node[x->child[x->nchild - 1]].up + 1;
      last = c > last ? c : last;
    }
    if (g->do_down && (x->parent >= 0 || x->nchild)) {
      size_t d = x->nchild ? x->down + 1 : x->down;
      last = d > last ? d : last;
    }
    last += g->nslices[k] - 1;
    end = last > end ? last : end;
  }
  return end;
}

static void gen_emit(struct gen* g) {
  size_t end = gen_end(g);
  for (size_t t = 0; t < end; t++) {
    plan_step_begin(g->p);
    emit_tree_step(g, 0, t);
    emit_tree_step(g, 1, t);
  }
}

/* A whole-buffer local op in a step of its own (it reads what earlier steps wrote). */
static void whole_step(struct plan* p, enum plan_op_kind kind, enum plan_buf src, enum plan_buf dst,
                       size_t count) {
  plan_step_begin(p);
  plan_add(p, kind, -1, plan_ref_make(src, 0), plan_ref_make(dst, 0), count);
}

static loomResult_t tree_args_check(const struct coll_args* a, const char* what, int rooted) {
  if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->slice_elems == 0 ||
      (rooted && (a->root < 0 || a->root >= a->nranks))) {
    return err_set_sub(NULL, SUB_COLL, loomInvalidArgument,
                       "tree %s: bad arguments (rank %d of %d, root %d, slice of %zu elements)",
                       what, a->rank, a->nranks, a->root, a->slice_elems);
  }
  return loomSuccess;
}

static void plan_start(const struct coll_args* a, struct plan* out, size_t scratch) {
  plan_reset(out);
  out->rank = a->rank;
  out->nranks = a->nranks;
  out->algo = "tree";
  out->buf_count[PB_SEND] = a->count;
  out->buf_count[PB_RECV] = a->count;
  out->buf_count[PB_SCRATCH] = scratch;
}

/* Splits the buffer between the trees and emits this rank's steps. */
static loomResult_t gen_run(struct gen* g, int root, int up, int down) {
  const struct coll_args* a = g->a;
  g->do_up = up;
  g->do_down = down;
  g->lo[0] = 0;
  g->hi[0] = g->lo[1] = part_begin(a->count, 2, 1);
  g->hi[1] = a->count;
  for (int k = 0; k < 2; k++) {
    size_t len = g->hi[k] - g->lo[k];
    g->nslices[k] = len / a->slice_elems + (len % a->slice_elems != 0);
  }
  LOOM_CHECK(trees_make(a->nranks, root, up, g->t));
  gen_emit(g);
  trees_free(g->t);
  return loomSuccess;
}

/* out: a plan from plan_init, or zeroed memory; it is reset and refilled,
 * keeping its storage. */
loomResult_t tree_allreduce_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(tree_args_check(a, "all-reduce", 0));
  plan_start(a, out, 0);
  struct gen g = {.a = a, .p = out, .in = PB_SEND, .acc = PB_RECV, .down_from = PB_RECV};
  if (a->premul) {
    whole_step(out, OP_PREMUL, PB_SEND, PB_RECV, a->count);
    g.in = PB_RECV;
  }
  if (a->nranks == 1) {
    if (!a->premul) whole_step(out, OP_COPY, PB_SEND, PB_RECV, a->count);
  } else {
    LOOM_CHECK(gen_run(&g, -1, 1, 1));
  }
  if (a->avg) whole_step(out, OP_DIV, PB_RECV, PB_RECV, a->count);
  return plan_finish(out);
}

loomResult_t tree_broadcast_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(tree_args_check(a, "broadcast", 1));
  plan_start(a, out, 0);
  struct gen g = {.a = a, .p = out, .in = PB_SEND, .acc = PB_RECV, .down_from = PB_SEND};
  if (a->nranks > 1) LOOM_CHECK(gen_run(&g, a->root, 0, 1));
  /* Last, so that in place the copy onto itself shares no step with a send. */
  if (a->rank == a->root) whole_step(out, OP_COPY, PB_SEND, PB_RECV, a->count);
  return plan_finish(out);
}

loomResult_t tree_reduce_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(tree_args_check(a, "reduce", 1));
  int is_root = a->rank == a->root;
  if (a->nranks == 1) {
    plan_start(a, out, 0);
    whole_step(out, a->premul ? OP_PREMUL : OP_COPY, PB_SEND, PB_RECV, a->count);
  } else {
    struct gen g = {.a = a, .p = out, .in = PB_SEND, .acc = is_root ? PB_RECV : PB_SCRATCH};
    /* Scratch holds the scaled input and, off the root, partial sums. Every
     * non-root but a leaf of both trees (only at n == 2) adds something. */
    int scratch = a->premul || (!is_root && a->nranks > 2);
    plan_start(a, out, scratch ? a->count : 0);
    if (a->premul) {
      whole_step(out, OP_PREMUL, PB_SEND, PB_SCRATCH, a->count);
      g.in = PB_SCRATCH;
    }
    LOOM_CHECK(gen_run(&g, a->root, 1, 0));
  }
  if (a->avg && is_root) whole_step(out, OP_DIV, PB_RECV, PB_RECV, a->count);
  return plan_finish(out);
}
