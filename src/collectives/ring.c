/* ring.c - ring all-reduce as a plan.
 *
 * Rank r sends to next = r + 1 and receives from prev = r - 1 (mod n). The
 * buffer is split into n chunks (part_begin); each chunk is cut into slices
 * of at most slice_elems, and each slice goes once around the ring twice:
 * n - 1 reduce-scatter steps, after which rank r owns chunk r + 1 fully
 * reduced, then n - 1 all-gather steps that hand the reduced chunks on.
 *
 * Why it is safe in place (sendbuff == recvbuff): rank r writes each chunk
 * of RECV at most once per phase, and reduce-scatter reads the input of a
 * chunk only in the step that first writes that chunk (as the src of the
 * same recv_reduce, element for element), so no input is read after it was
 * overwritten. Each step's send and receive touch different chunks, so no
 * step has an internal hazard. */
#include "collectives/plan.h"

#include "core/checks.h"

struct ring {
  const struct coll_args* a;
  struct plan* p;
  int next, prev;
  enum plan_buf in; /* where the input lives: SEND, or RECV after premul */
};

static int mod(int x, int n) {
  return ((x % n) + n) % n;
}

/* The part of chunk c that slice s covers; *n_out may be 0 when chunk c is
 * shorter than the largest one. Both ends of a transfer compute the same
 * range, so an empty piece is skipped consistently. */
static void slice_range(const struct coll_args* a, int c, size_t s, size_t* off_out,
                        size_t* n_out) {
  size_t begin = part_begin(a->count, a->nranks, c);
  size_t end = part_begin(a->count, a->nranks, c + 1);
  size_t lo = begin + s * a->slice_elems; /* s * slice_elems < largest chunk: no overflow */
  *off_out = lo;
  size_t left = lo < end ? end - lo : 0;
  *n_out = left < a->slice_elems ? left : a->slice_elems;
}

static void add_send(struct ring* g, enum plan_buf buf, int c, size_t s) {
  size_t off, n;
  slice_range(g->a, c, s, &off, &n);
  struct plan_ref r = plan_ref_make(buf, off);
  plan_add(g->p, OP_SEND, g->next, r, r, n);
}

/* Receives chunk c of slice s into RECV; reduce adds the local input. */
static void add_recv(struct ring* g, int reduce, int c, size_t s) {
  size_t off, n;
  slice_range(g->a, c, s, &off, &n);
  struct plan_ref dst = plan_ref_make(PB_RECV, off);
  if (reduce)
    plan_add(g->p, OP_RECV_REDUCE, g->prev, plan_ref_make(g->in, off), dst, n);
  else
    plan_add(g->p, OP_RECV, g->prev, dst, dst, n);
}

/* Reduce-scatter then all-gather of slice s. */
static void ring_slice(struct ring* g, size_t s) {
  int n = g->a->nranks, r = g->a->rank;
  for (int j = 0; j < n - 1; j++) {
    plan_step_begin(g->p);
    /* Step 0 forwards raw input; later steps forward what the last one reduced. */
    add_send(g, j == 0 ? g->in : PB_RECV, mod(r - j, n), s);
    add_recv(g, 1, mod(r - j - 1, n), s);
  }
  for (int k = 0; k < n - 1; k++) {
    plan_step_begin(g->p);
    add_send(g, PB_RECV, mod(r + 1 - k, n), s);
    add_recv(g, 0, mod(r - k, n), s);
  }
}

/* A whole-buffer local op in a step of its own (it reads what earlier steps wrote). */
static void whole_step(struct plan* p, enum plan_op_kind kind, enum plan_buf src, size_t count) {
  plan_step_begin(p);
  plan_add(p, kind, -1, plan_ref_make(src, 0), plan_ref_make(PB_RECV, 0), count);
}

static loomResult_t ring_args_check(const struct coll_args* a) {
  if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->slice_elems == 0) {
    return err_set_sub(NULL, SUB_COLL, loomInvalidArgument,
                       "ring all-reduce: bad arguments (rank %d of %d, slice of %zu elements)",
                       a->rank, a->nranks, a->slice_elems);
  }
  return loomSuccess;
}

/* out: a plan from plan_init, or zeroed memory; it is reset and refilled,
 * keeping its storage. */
loomResult_t ring_allreduce_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(ring_args_check(a));
  plan_reset(out);
  out->rank = a->rank;
  out->nranks = a->nranks;
  out->algo = "ring";
  out->buf_count[PB_SEND] = a->count;
  out->buf_count[PB_RECV] = a->count;
  out->buf_count[PB_SCRATCH] = 0;

  struct ring g = {a, out, mod(a->rank + 1, a->nranks), mod(a->rank - 1, a->nranks), PB_SEND};
  if (a->premul) {
    whole_step(out, OP_PREMUL, PB_SEND, a->count);
    g.in = PB_RECV;
  }
  if (a->nranks == 1) {
    /* Premul already left the result in RECV; otherwise copy (the executor
     * skips a copy onto itself when the call is in place). */
    if (!a->premul) whole_step(out, OP_COPY, PB_SEND, a->count);
  } else {
    size_t largest = part_begin(a->count, a->nranks, 1); /* chunk 0 is never shorter */
    size_t nslices = largest / a->slice_elems + (largest % a->slice_elems != 0);
    for (size_t s = 0; s < nslices; s++) ring_slice(&g, s);
  }
  if (a->avg) whole_step(out, OP_DIV, PB_RECV, a->count);
  return plan_finish(out);
}
