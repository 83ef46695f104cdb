/* ring.c - ring plans: all-reduce, reduce-scatter, all-gather, and the
 * pipelined chains of broadcast and reduce. Every plan reads the input where
 * the user left it, never writes PB_SEND, and keeps whatever a rank may not
 * put in a user buffer in PB_SCRATCH; each generator says why it is safe in
 * place. Slices are the unit of a transfer, at most slice_elems elements.
 *
 * All-reduce: rank r sends to next = r + 1 and receives from prev = r - 1 (mod n). The
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

static loomResult_t ring_args_check(const struct coll_args* a, const char* what, int rooted) {
  if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->slice_elems == 0 ||
      (rooted && (a->root < 0 || a->root >= a->nranks))) {
    return err_set_sub(NULL, SUB_COLL, loomInvalidArgument,
                       "ring %s: bad arguments (rank %d of %d, root %d, slice of %zu elements)",
                       what, a->rank, a->nranks, a->root, a->slice_elems);
  }
  return loomSuccess;
}

/* Empties out and names it; the caller sets the buffer sizes. */
static void ring_start(const struct coll_args* a, struct plan* out) {
  plan_reset(out);
  out->rank = a->rank;
  out->nranks = a->nranks;
  out->algo = "ring";
}

/* out: a plan from plan_init, or zeroed memory; it is reset and refilled,
 * keeping its storage. */
loomResult_t ring_allreduce_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(ring_args_check(a, "all-reduce", 0));
  ring_start(a, out);
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

/* ---- Whole-block collectives: every block is count elements ----
 *
 * Slice k of a block covers [k * slice, min(count, (k + 1) * slice)). */

static size_t nslices_of(const struct coll_args* a) {
  return a->count / a->slice_elems + (a->count % a->slice_elems != 0);
}
static size_t slice_off(const struct coll_args* a, size_t k) {
  return k * a->slice_elems;
}
static size_t slice_len(const struct coll_args* a, size_t k) {
  size_t left = a->count - k * a->slice_elems;
  return left < a->slice_elems ? left : a->slice_elems;
}
/* The largest slice: what one scratch slot holds. */
static size_t slot_len(const struct coll_args* a) {
  return a->count < a->slice_elems ? a->count : a->slice_elems;
}
static struct plan_ref ref(enum plan_buf b, size_t off) {
  return plan_ref_make(b, off);
}
static void local_step(struct plan* p, enum plan_op_kind kind, struct plan_ref src,
                       struct plan_ref dst, size_t count) {
  plan_step_begin(p);
  plan_add(p, kind, -1, src, dst, count);
}

/* Reduce-scatter: in step j of a slice, rank r sends block r - j - 1 (its
 * raw input at j = 0, else the partial it received the step before) and
 * receives block r - j - 2 from prev, adding its input. The last step
 * (j = n - 2) receives block r itself, complete, straight into RECV; the
 * other partials alternate between two scratch slots. Rank r reads its
 * input of block r only in that last step, element for element with the
 * write, so RECV == SEND + r * count (in place) is safe. Premul scales the
 * whole input into scratch first (SEND is read-only and RECV too small). */
loomResult_t ring_reducescatter_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(ring_args_check(a, "reduce-scatter", 0));
  ring_start(a, out);
  int n = a->nranks, r = a->rank, next = mod(r + 1, n), prev = mod(r - 1, n);
  size_t c = a->count, total = c * (size_t)n;
  out->buf_count[PB_SEND] = total;
  out->buf_count[PB_RECV] = c;
  enum plan_buf in = PB_SEND;
  size_t slots = 0; /* where the two partial slots start in scratch */
  if (a->premul && n > 1) {
    local_step(out, OP_PREMUL, ref(PB_SEND, 0), ref(PB_SCRATCH, 0), total);
    in = PB_SCRATCH;
    slots = total;
  }
  out->buf_count[PB_SCRATCH] = n > 2 ? slots + 2 * slot_len(a) : slots;
  if (n == 1) {
    local_step(out, a->premul ? OP_PREMUL : OP_COPY, ref(PB_SEND, 0), ref(PB_RECV, 0), c);
  } else {
    size_t ns = nslices_of(a);
    for (size_t k = 0; k < ns; k++) {
      size_t off = slice_off(a, k), len = slice_len(a, k);
      for (int j = 0; j < n - 1; j++) {
        size_t sb = (size_t)mod(r - j - 1, n) * c + off; /* block sent */
        size_t rb = (size_t)mod(r - j - 2, n) * c + off; /* block received */
        struct plan_ref from =
            j == 0 ? ref(in, sb) : ref(PB_SCRATCH, slots + (size_t)((j - 1) % 2) * slot_len(a));
        struct plan_ref to =
            j == n - 2 ? ref(PB_RECV, off) : ref(PB_SCRATCH, slots + (size_t)(j % 2) * slot_len(a));
        plan_step_begin(out);
        plan_add(out, OP_SEND, next, from, from, len);
        plan_add(out, OP_RECV_REDUCE, prev, ref(in, rb), to, len);
      }
    }
  }
  if (a->avg) local_step(out, OP_DIV, ref(PB_RECV, 0), ref(PB_RECV, 0), c);
  return plan_finish(out);
}

/* All-gather: rank r first copies its block to RECV + r * count (a no-op in
 * place), then in step j of a slice sends block r - j and receives block
 * r - j - 1, both in RECV. */
loomResult_t ring_allgather_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(ring_args_check(a, "all-gather", 0));
  ring_start(a, out);
  int n = a->nranks, r = a->rank, next = mod(r + 1, n), prev = mod(r - 1, n);
  size_t c = a->count;
  out->buf_count[PB_SEND] = c;
  out->buf_count[PB_RECV] = c * (size_t)n;
  local_step(out, OP_COPY, ref(PB_SEND, 0), ref(PB_RECV, (size_t)r * c), c);
  size_t ns = n > 1 ? nslices_of(a) : 0;
  for (size_t k = 0; k < ns; k++) {
    size_t off = slice_off(a, k), len = slice_len(a, k);
    for (int j = 0; j < n - 1; j++) {
      size_t sb = (size_t)mod(r - j, n) * c + off, rb = (size_t)mod(r - j - 1, n) * c + off;
      plan_step_begin(out);
      plan_add(out, OP_SEND, next, ref(PB_RECV, sb), ref(PB_RECV, sb), len);
      plan_add(out, OP_RECV, prev, ref(PB_RECV, rb), ref(PB_RECV, rb), len);
    }
  }
  return plan_finish(out);
}

/* Broadcast: the chain root, root + 1, ..., root - 1. A rank that is not the
 * root receives slice k in its step k and forwards it in step k + 1, while
 * receiving slice k + 1; the last of the chain only receives. The root
 * sends slice k in step k, from SEND, then copies SEND to RECV (a no-op in
 * place). Only the root has SEND. */
loomResult_t ring_broadcast_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(ring_args_check(a, "broadcast", 1));
  ring_start(a, out);
  int n = a->nranks, r = a->rank, next = mod(r + 1, n), prev = mod(r - 1, n);
  int d = mod(r - a->root, n); /* position in the chain */
  size_t c = a->count, ns = nslices_of(a);
  out->buf_count[PB_SEND] = d == 0 ? c : 0;
  out->buf_count[PB_RECV] = c;
  if (d == 0) {
    for (size_t k = 0; n > 1 && k < ns; k++) {
      plan_step_begin(out);
      plan_add(out, OP_SEND, next, ref(PB_SEND, slice_off(a, k)), ref(PB_SEND, slice_off(a, k)),
               slice_len(a, k));
    }
    local_step(out, OP_COPY, ref(PB_SEND, 0), ref(PB_RECV, 0), c);
    return plan_finish(out);
  }
  for (size_t k = 0; k <= ns; k++) {
    plan_step_begin(out);
    if (k < ns) {
      struct plan_ref to = ref(PB_RECV, slice_off(a, k));
      plan_add(out, OP_RECV, prev, to, to, slice_len(a, k));
    }
    if (k > 0 && d < n - 1) {
      struct plan_ref from = ref(PB_RECV, slice_off(a, k - 1));
      plan_add(out, OP_SEND, next, from, from, slice_len(a, k - 1));
    }
  }
  return plan_finish(out);
}

/* Reduce: the chain root + 1, root + 2, ..., root. The first rank sends its
 * input slice k in step k; every later rank receives slice k in step k,
 * adding its input, and (but the root) forwards it in step k + 1. Ranks
 * between keep the partials in two scratch slots; the root reduces into
 * RECV (element for element with its input, so in place is safe), which
 * only the root has. Premul scales the input first: into RECV at the root,
 * into scratch elsewhere; avg divides the root's result. */
loomResult_t ring_reduce_build(const struct coll_args* a, struct plan* out) {
  LOOM_CHECK(ring_args_check(a, "reduce", 1));
  ring_start(a, out);
  int n = a->nranks, r = a->rank, next = mod(r + 1, n), prev = mod(r - 1, n);
  int d = mod(r - a->root - 1, n); /* position in the chain; the root is n - 1 */
  int root = d == n - 1;
  size_t c = a->count, ns = nslices_of(a);
  out->buf_count[PB_SEND] = c;
  out->buf_count[PB_RECV] = root ? c : 0;
  enum plan_buf in = PB_SEND;
  size_t slots = 0; /* where the two partial slots start in scratch */
  if (a->premul) {
    in = root ? PB_RECV : PB_SCRATCH;
    local_step(out, OP_PREMUL, ref(PB_SEND, 0), ref(in, 0), c);
    if (!root) slots = c;
  }
  out->buf_count[PB_SCRATCH] = slots + (d > 0 && !root ? 2 * slot_len(a) : 0);
  if (n == 1) {
    if (!a->premul) local_step(out, OP_COPY, ref(PB_SEND, 0), ref(PB_RECV, 0), c);
  } else if (d == 0) {
    for (size_t k = 0; k < ns; k++) {
      plan_step_begin(out);
      plan_add(out, OP_SEND, next, ref(in, slice_off(a, k)), ref(in, slice_off(a, k)),
               slice_len(a, k));
    }
  } else {
    for (size_t k = 0; k <= ns; k++) {
      plan_step_begin(out);
      if (k < ns) {
        size_t off = slice_off(a, k);
        struct plan_ref to =
            root ? ref(PB_RECV, off) : ref(PB_SCRATCH, slots + (k % 2) * slot_len(a));
        plan_add(out, OP_RECV_REDUCE, prev, ref(in, off), to, slice_len(a, k));
      }
      if (k > 0 && !root) {
        struct plan_ref from = ref(PB_SCRATCH, slots + ((k - 1) % 2) * slot_len(a));
        plan_add(out, OP_SEND, next, from, from, slice_len(a, k - 1));
      }
    }
  }
  if (a->avg && root) local_step(out, OP_DIV, ref(PB_RECV, 0), ref(PB_RECV, 0), c);
  return plan_finish(out);
}
