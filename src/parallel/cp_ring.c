/* cp_ring.c - ring attention (loomCpRing, PARALLEL.md section 4).
 *
 * Forward: each rank packs its K and V into one buffer. At step t it holds the K/V of rank
 * r - t; it posts the transfer of that buffer to r + 1 and the receive of the next one from
 * r - 1 on the side stream (par_side_stream), runs the kernel on the blocks it holds meanwhile,
 * then waits for the transfer. Two buffers alternate, so the one being sent is never the one
 * being received. Partial results merge into float32/float64 accumulators in a fixed order
 * (r, r-1, ..., r+1), so the same inputs and P give the same bits.
 *
 * Backward: K/V circulate again, and a second ring carries the dK/dV accumulator of the shard
 * held: at step t the accumulator of step t-1 goes to r + 1 while the next one comes from r - 1,
 * both beside the compute; this step's contributions land in a separate sum added once the
 * accumulator is here. After P steps one more transfer brings every accumulator home. */
#include <stdlib.h>
#include <string.h>

#include "cp.h"

/* Send `n` elements of dt at `send` to r + 1 and receive as many from r - 1 into `recv`, and
 * the same for a second pair when n2 > 0; one group, on stream s (NULL: blocking). */
static loomResult_t ring_post(const struct cp_call* c, const void* send, void* recv, size_t n,
                              loomDataType_t dt, const void* send2, void* recv2, size_t n2,
                              loomDataType_t dt2, loomStream_t s) {
  int to = (c->rank + 1) % c->P, from = (c->rank - 1 + c->P) % c->P;
  loomResult_t g = loomGroupStart(), r = loomSuccess;
  if (g != loomSuccess) return g;
  if (n > 0) r = loomSend(send, n, dt, to, c->comm, s);
  if (r == loomSuccess && n > 0) r = loomRecv(recv, n, dt, from, c->comm, s);
  if (r == loomSuccess && n2 > 0) r = loomSend(send2, n2, dt2, to, c->comm, s);
  if (r == loomSuccess && n2 > 0) r = loomRecv(recv2, n2, dt2, from, c->comm, s);
  g = loomGroupEnd();
  return r != loomSuccess ? r : g;
}

/* Waits for a posted transfer; res is the compute's result, which wins over the wait's. */
static loomResult_t ring_wait(loomStream_t side, int posted, loomResult_t res) {
  loomResult_t w = posted && side != NULL ? loomStreamSynchronize(side) : loomSuccess;
  return res != loomSuccess ? res : w;
}

/* K and V of one shard, packed in buf: [B, Skv, Hkv, D] then [B, Skv, Hkv, Dv]. */
static void kv_views(const struct cp_call* c, void* buf, loomDataType_t dt, loomTensor* k,
                     loomTensor* v) {
  *k = cp_dense(buf, dt, c->B, c->Skv, c->Hkv, c->D);
  *v = cp_dense((char*)buf + (size_t)(c->B * c->Skv * c->Hkv * c->D) * par_dtype_size(dt), dt, c->B,
                c->Skv, c->Hkv, c->Dv);
}

static void kv_pack(const struct cp_call* c, const struct cp_io* io, void* buf) {
  loomTensor k, v;
  kv_views(c, buf, c->dt, &k, &v);
  par_copy(io->k, &k);
  par_copy(io->v, &v);
}

loomResult_t cp_ring_forward(const struct cp_call* c, const struct cp_io* io) {
  struct cp_mem m = {{0}, 0};
  struct cp_blk_ws w = {0};
  loomStream_t side = c->P > 1 ? par_side_stream() : NULL;
  size_t nkv = (size_t)(c->B * c->Skv * c->Hkv * (c->D + c->Dv));
  int64_t no = c->B * c->Sq * c->Hq * c->Dv, nl = c->B * c->Hq * c->Sq;
  void* kv[2] = {cp_alloc(c, &m, nkv * c->es), cp_alloc(c, &m, nkv * c->es)};
  void *oacc = cp_alloc(c, &m, (size_t)no * c->as), *lacc = cp_alloc(c, &m, (size_t)nl * c->as);
  loomResult_t res = loomSystemError;
  if (kv[0] == NULL || kv[1] == NULL || oacc == NULL || lacc == NULL ||
      cp_blk_ws_make(c, 0, c->Skv, &w) != loomSuccess)
    goto out;
  kv_pack(c, io, kv[0]);
  cp_zero(c->acc, oacc, no);
  cp_fill_neg_inf(c->acc, lacc, nl);
  struct cp_seg qs[2], ks[2];
  int nq = cp_segs(c->layout, c->rank, c->P, c->Sq, qs);
  res = loomSuccess;
  for (int t = 0; t < c->P && res == loomSuccess; t++) {
    int cur = t % 2, post = t < c->P - 1;
    if (post) res = ring_post(c, kv[cur], kv[1 - cur], nkv, c->dt, NULL, NULL, 0, c->dt, side);
    if (res != loomSuccess) break;
    loomTensor k, v;
    kv_views(c, kv[cur], c->dt, &k, &v);
    int nk = cp_segs(c->layout, (c->rank - t + c->P) % c->P, c->P, c->Skv, ks);
    res = cp_blocks_forward(c, io->q, qs, nq, &k, &v, ks, nk, oacc, lacc, &w);
    res = ring_wait(side, post, res);
  }
  if (res == loomSuccess) {
    loomTensor o = cp_dense(oacc, c->acc, c->B, c->Sq, c->Hq, c->Dv);
    cp_cast(&o, io->o);
    if (io->l != NULL) {
      loomTensor l = cp_dense(lacc, c->acc, c->B, c->Hq, c->Sq, -1);
      par_copy(&l, io->l);
    }
  }
out:
  /* A failed post or compute may leave transfers queued on the buffers freed here. */
  if (res != loomSuccess && side != NULL) (void)loomStreamSynchronize(side);
  free(w.mem);
  cp_mem_free(&m);
  return res;
}

/* One backward step: the contributions of the local queries to the shard in kv[cur] (from
 * rank src) go to dqacc and to sum; the accumulator arrives meanwhile. */
static loomResult_t ring_bwd_step(const struct cp_call* c, const struct cp_io* io, int t,
                                  void* const kv[2], void* const dkv[2], void* sum, void* dqacc,
                                  struct cp_blk_ws* w, loomStream_t side) {
  int cur = t % 2, P = c->P;
  int post_kv = (t < P - 1), post_d = (t > 0);
  size_t nkv = (size_t)(c->B * c->Skv * c->Hkv * (c->D + c->Dv));
  loomResult_t res = ring_post(c, kv[cur], kv[1 - cur], post_kv ? nkv : 0, c->dt, dkv[1 - cur],
                               dkv[cur], post_d ? nkv : 0, c->acc, side);
  if (res != loomSuccess) return res;
  loomTensor k, v, dk, dv;
  kv_views(c, kv[cur], c->dt, &k, &v);
  kv_views(c, sum, c->acc, &dk, &dv);
  struct cp_seg qs[2], ks[2];
  int nq = cp_segs(c->layout, c->rank, P, c->Sq, qs);
  int nk = cp_segs(c->layout, (c->rank - t + P) % P, P, c->Skv, ks);
  cp_zero(c->acc, sum, (int64_t)nkv);
  res = cp_blocks_backward(c, io, qs, nq, &k, &v, ks, nk, dqacc, dk.data, dv.data, w);
  res = ring_wait(side, post_kv || post_d, res);
  if (res != loomSuccess) return res;
  if (t == 0)
    memcpy(dkv[cur], sum, nkv * c->as);
  else
    cp_add(c->acc, dkv[cur], sum, (int64_t)nkv);
  return loomSuccess;
}

loomResult_t cp_ring_backward(const struct cp_call* c, const struct cp_io* io) {
  struct cp_mem m = {{0}, 0};
  struct cp_blk_ws w = {0};
  loomStream_t side = c->P > 1 ? par_side_stream() : NULL;
  size_t nkv = (size_t)(c->B * c->Skv * c->Hkv * (c->D + c->Dv));
  int64_t nq = c->B * c->Sq * c->Hq * c->D;
  void* kv[2] = {cp_alloc(c, &m, nkv * c->es), cp_alloc(c, &m, nkv * c->es)};
  void* dkv[2] = {cp_alloc(c, &m, nkv * c->as), cp_alloc(c, &m, nkv * c->as)};
  void *sum = cp_alloc(c, &m, nkv * c->as), *dqacc = cp_alloc(c, &m, (size_t)nq * c->as);
  loomResult_t res = loomSystemError;
  if (kv[0] == NULL || kv[1] == NULL || dkv[0] == NULL || dkv[1] == NULL || sum == NULL ||
      dqacc == NULL || cp_blk_ws_make(c, 1, c->Skv, &w) != loomSuccess)
    goto out;
  kv_pack(c, io, kv[0]);
  cp_zero(c->acc, dqacc, nq);
  res = loomSuccess;
  for (int t = 0; t < c->P && res == loomSuccess; t++)
    res = ring_bwd_step(c, io, t, kv, dkv, sum, dqacc, &w, side);
  /* The accumulator of step P-1 is rank r+1's, complete: one last hop takes each home. */
  int home = c->P % 2;
  if (res == loomSuccess && c->P > 1)
    res = ring_post(c, dkv[1 - home], dkv[home], nkv, c->acc, NULL, NULL, 0, c->acc, NULL);
  if (res == loomSuccess) {
    loomTensor dq = cp_dense(dqacc, c->acc, c->B, c->Sq, c->Hq, c->D), dk, dv;
    kv_views(c, dkv[c->P > 1 ? home : 0], c->acc, &dk, &dv);
    cp_cast(&dq, io->dq);
    cp_cast(&dk, io->dk);
    cp_cast(&dv, io->dv);
  }
out:
  if (res != loomSuccess && side != NULL) (void)loomStreamSynchronize(side);
  free(w.mem);
  cp_mem_free(&m);
  return res;
}
