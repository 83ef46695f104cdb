/* direct.c - direct plans: ranks read their peers' buffers instead of
 * passing messages (src/transport/peer.c moves the bytes: a plain load for
 * thread ranks and loomMemAlloc memory, cross-memory attach otherwise).
 *
 * Every direct plan has the same shape: local ops that prepare what peers
 * will read (PreMulSum's scaled input lives in PB_SCRATCH), a sync, the
 * reads, a sync, and local ops that only touch this rank's own buffers. The
 * first sync publishes the buffers (the executor hands the peers their
 * addresses before it); the last one keeps every rank in the call until no
 * peer reads its buffers any more. Peers only ever read, so a rank's buffers
 * are written by that rank alone.
 *
 * Why each is safe in place: between two syncs a rank never writes a range
 * a peer reads (the checker proves it). Where the output would overwrite
 * what peers still read (one-shot all-reduce, all-to-all), the result is
 * staged in PB_SCRATCH and copied out after the last sync. Reductions run
 * slice by slice over all peers, so the partial result of a slice stays in
 * cache while every peer's share is added to it. */
#include "collectives/plan.h"
#include "core/checks.h"
#include "core/util.h"

static struct plan_ref ref(enum plan_buf b, size_t off) {
  return plan_ref_make(b, off);
}

static void sync_step(struct plan* p) {
  plan_step_begin(p);
  plan_add(p, OP_SYNC, -1, ref(PB_SCRATCH, 0), ref(PB_SCRATCH, 0), 1);
}

/* dst[0..len) = own in[off..) op every peer's in[off..), slice by slice. */
static void reduce_all(const struct coll_args* a, struct plan* p, enum plan_buf in, size_t off,
                       struct plan_ref dst, size_t len) {
  for (size_t lo = 0; lo < len; lo += a->slice_elems) {
    size_t m = LOOM_MIN(a->slice_elems, len - lo);
    struct plan_ref d = ref((enum plan_buf)dst.buf, dst.off + lo);
    plan_step_begin(p);
    plan_add(p, OP_COPY, -1, ref(in, off + lo), d, m);
    for (int k = 1; k < a->nranks; k++) {
      plan_step_begin(p);
      plan_add(p, OP_PEER_REDUCE, (a->rank + k) % a->nranks, ref(in, off + lo), d, m);
    }
  }
}

loomResult_t oneshot_allreduce_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count, acc = a->premul ? c : 0; /* the sum lands at scratch[acc..) */
  out->buf_count[PB_SEND] = c;
  out->buf_count[PB_RECV] = c;
  out->buf_count[PB_SCRATCH] = acc + c;
  if (c == 0) return plan_finish(out);
  enum plan_buf in = plan_premul_input(a, out, c);
  sync_step(out);
  reduce_all(a, out, in, 0, ref(PB_SCRATCH, acc), c);
  sync_step(out);
  plan_step_begin(out);
  plan_add(out, a->avg ? OP_DIV : OP_COPY, -1, ref(PB_SCRATCH, acc), ref(PB_RECV, 0), c);
  return plan_finish(out);
}

loomResult_t twoshot_allreduce_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count;
  int n = a->nranks, r = a->rank;
  out->buf_count[PB_SEND] = c;
  out->buf_count[PB_RECV] = c;
  out->buf_count[PB_SCRATCH] = a->premul ? c : 0;
  if (c == 0) return plan_finish(out);
  enum plan_buf in = plan_premul_input(a, out, c);
  sync_step(out);
  /* Reduce-scatter: block r of RECV gets everyone's block r. */
  size_t lo = part_begin(c, n, r), len = part_begin(c, n, r + 1) - lo;
  if (len > 0) {
    reduce_all(a, out, in, lo, ref(PB_RECV, lo), len);
    if (a->avg) {
      plan_step_begin(out);
      plan_add(out, OP_DIV, -1, ref(PB_RECV, lo), ref(PB_RECV, lo), len);
    }
  }
  sync_step(out);
  /* All-gather: every other block from its owner's RECV. */
  plan_step_begin(out);
  for (int k = 1; k < n; k++) {
    int q = (r + k) % n;
    size_t qlo = part_begin(c, n, q);
    plan_add(out, OP_PEER_COPY, q, ref(PB_RECV, qlo), ref(PB_RECV, qlo),
             part_begin(c, n, q + 1) - qlo);
  }
  sync_step(out);
  return plan_finish(out);
}

loomResult_t read_allgather_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count;
  int n = a->nranks, r = a->rank;
  out->buf_count[PB_SEND] = c;
  out->buf_count[PB_RECV] = c * (size_t)n;
  out->buf_count[PB_SCRATCH] = 0;
  if (c == 0) return plan_finish(out);
  sync_step(out);
  plan_step_begin(out);
  for (int k = 1; k < n; k++) {
    int q = (r + k) % n;
    plan_add(out, OP_PEER_COPY, q, ref(PB_SEND, 0), ref(PB_RECV, (size_t)q * c), c);
  }
  sync_step(out);
  /* In place this copy is a no-op; after the sync it cannot race a reader. */
  plan_step_begin(out);
  plan_add(out, OP_COPY, -1, ref(PB_SEND, 0), ref(PB_RECV, (size_t)r * c), c);
  return plan_finish(out);
}

loomResult_t read_reducescatter_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count, total = c * (size_t)a->nranks;
  out->buf_count[PB_SEND] = total;
  out->buf_count[PB_RECV] = c;
  out->buf_count[PB_SCRATCH] = a->premul ? total : 0;
  if (c == 0) return plan_finish(out);
  enum plan_buf in = plan_premul_input(a, out, total);
  sync_step(out);
  reduce_all(a, out, in, (size_t)a->rank * c, ref(PB_RECV, 0), c);
  if (a->avg) {
    plan_step_begin(out);
    plan_add(out, OP_DIV, -1, ref(PB_RECV, 0), ref(PB_RECV, 0), c);
  }
  sync_step(out);
  return plan_finish(out);
}

loomResult_t read_broadcast_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count;
  int root = a->root;
  out->buf_count[PB_SEND] = a->rank == root ? c : 0;
  out->buf_count[PB_RECV] = c;
  out->buf_count[PB_SCRATCH] = 0;
  if (c == 0) return plan_finish(out);
  sync_step(out);
  if (a->rank != root) {
    plan_step_begin(out);
    plan_add(out, OP_PEER_COPY, root, ref(PB_SEND, 0), ref(PB_RECV, 0), c);
  }
  sync_step(out);
  if (a->rank == root) {
    plan_step_begin(out);
    plan_add(out, OP_COPY, -1, ref(PB_SEND, 0), ref(PB_RECV, 0), c);
  }
  return plan_finish(out);
}

/* In place the receive buffer is the send buffer peers read: the peers'
 * blocks are staged in scratch and copied out after the last sync, and the
 * own block stays where it is (its copy is a no-op in place; no peer reads
 * block r of this rank's SEND, so out of place it may land at once). Out of
 * place (a->distinct) each block goes straight to its place in RECV: one
 * copy. */
loomResult_t read_alltoall_build(const struct coll_args* a, struct plan* out) {
  size_t c = a->count, total = c * (size_t)a->nranks;
  int n = a->nranks, r = a->rank;
  enum plan_buf land = a->distinct ? PB_RECV : PB_SCRATCH;
  out->buf_count[PB_SEND] = total;
  out->buf_count[PB_RECV] = total;
  out->buf_count[PB_SCRATCH] = a->distinct ? 0 : total;
  if (c == 0) return plan_finish(out);
  sync_step(out);
  plan_step_begin(out);
  plan_add(out, OP_COPY, -1, ref(PB_SEND, (size_t)r * c), ref(PB_RECV, (size_t)r * c), c);
  for (int k = 1; k < n; k++) {
    int q = (r + k) % n;
    plan_add(out, OP_PEER_COPY, q, ref(PB_SEND, (size_t)r * c), ref(land, (size_t)q * c), c);
  }
  sync_step(out);
  if (!a->distinct) { /* the blocks before the own one, then those after it */
    plan_step_begin(out);
    if (r > 0) plan_add(out, OP_COPY, -1, ref(PB_SCRATCH, 0), ref(PB_RECV, 0), (size_t)r * c);
    if (r + 1 < n)
      plan_add(out, OP_COPY, -1, ref(PB_SCRATCH, (size_t)(r + 1) * c),
               ref(PB_RECV, (size_t)(r + 1) * c), total - (size_t)(r + 1) * c);
  }
  return plan_finish(out);
}

int plan_is_direct(const struct plan* p) {
  for (uint32_t i = 0; i < p->nops; i++)
    if (p->ops[i].kind == OP_SYNC) return 1;
  return 0;
}
