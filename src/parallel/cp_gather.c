/* cp_gather.c - the two CP algorithms built on collectives (PARALLEL.md section 4): all-gather
 * K/V (loomCpAllGatherKv) and Ulysses (loomCpUlysses).
 *
 * All-gather: every rank's K and V are all-gathered in one call (packed K then V per rank), then
 * laid out in position order: under zig-zag the gathered order is by rank (chunks 0, 2P-1, 1, 2P-2,
 * ...), so each rank's two chunks go to their positions. The local queries then meet the whole
 * sequence as one block per run of queries (two under zig-zag), cut after the run's last
 * position when causal. Backward reduce-scatters dK/dV in the accumulation type, rank by rank
 * in the same layout, and converts once. */
#include <stdlib.h>

#include "cp.h"

/* One shard's K and V inside a packed buffer of dtype dt. */
static void shard_views(const struct cp_call* c, void* buf, loomDataType_t dt, loomTensor* k,
                        loomTensor* v) {
  size_t nk = (size_t)(c->B * c->Skv * c->Hkv * c->D);
  *k = cp_dense(buf, dt, c->B, c->Skv, c->Hkv, c->D);
  *v = cp_dense((char*)buf + nk * par_dtype_size(dt), dt, c->B, c->Skv, c->Hkv, c->Dv);
}

/* Between rank s's shard (rows by local index) and the whole sequence (rows by position). */
static void shard_move(const struct cp_call* c, int s, const loomTensor* shard,
                       const loomTensor* full, int to_full) {
  struct cp_seg segs[2];
  int n = cp_segs(c->layout, s, c->P, c->Skv, segs);
  for (int i = 0; i < n; i++) {
    loomTensor a = cp_slice(shard, 1, segs[i].loc, segs[i].len),
               b = cp_slice(full, 1, segs[i].pos, segs[i].len);
    if (to_full)
      par_copy(&a, &b);
    else
      par_copy(&b, &a);
  }
}

/* kf [B, S, Hkv, D] and vf [B, S, Hkv, Dv]: every rank's K and V in position order. */
static loomResult_t kv_gather(const struct cp_call* c, const struct cp_io* io, struct cp_mem* m,
                              loomTensor* kf, loomTensor* vf) {
  size_t per = (size_t)(c->B * c->Skv * c->Hkv * (c->D + c->Dv));
  int64_t S = c->Skv * c->P;
  char *send = cp_alloc(c, m, per * c->es), *all = cp_alloc(c, m, per * c->es * (size_t)c->P);
  void *kd = cp_alloc(c, m, (size_t)(c->B * S * c->Hkv * c->D) * c->es),
       *vd = cp_alloc(c, m, (size_t)(c->B * S * c->Hkv * c->Dv) * c->es);
  if (send == NULL || all == NULL || kd == NULL || vd == NULL) return loomSystemError;
  loomTensor k, v;
  shard_views(c, send, c->dt, &k, &v);
  par_copy(io->k, &k);
  par_copy(io->v, &v);
  loomResult_t r = loomAllGather(send, all, per, c->dt, c->comm, NULL);
  if (r != loomSuccess) return r;
  *kf = cp_dense(kd, c->dt, c->B, S, c->Hkv, c->D);
  *vf = cp_dense(vd, c->dt, c->B, S, c->Hkv, c->Dv);
  for (int s = 0; s < c->P; s++) {
    shard_views(c, all + (size_t)s * per * c->es, c->dt, &k, &v);
    shard_move(c, s, &k, kf, 1);
    shard_move(c, s, &v, vf, 1);
  }
  return loomSuccess;
}

loomResult_t cp_gather_forward(const struct cp_call* c, const struct cp_io* io) {
  struct cp_mem m = {{0}, 0};
  struct cp_blk_ws w = {0};
  int64_t no = c->B * c->Sq * c->Hq * c->Dv, nl = c->B * c->Hq * c->Sq, S = c->Skv * c->P;
  loomTensor kf, vf;
  void *oacc = cp_alloc(c, &m, (size_t)no * c->as), *lacc = cp_alloc(c, &m, (size_t)nl * c->as);
  loomResult_t res =
      oacc == NULL || lacc == NULL ? loomSystemError : kv_gather(c, io, &m, &kf, &vf);
  if (res == loomSuccess) res = cp_blk_ws_make(c, 0, S, &w);
  if (res == loomSuccess) {
    struct cp_seg qs[2], all = {0, 0, S};
    int nq = cp_segs(c->layout, c->rank, c->P, c->Sq, qs);
    cp_zero(c->acc, oacc, no);
    cp_fill_neg_inf(c->acc, lacc, nl);
    res = cp_blocks_forward(c, io->q, qs, nq, &kf, &vf, &all, 1, oacc, lacc, &w);
  }
  if (res == loomSuccess) {
    loomTensor o = cp_dense(oacc, c->acc, c->B, c->Sq, c->Hq, c->Dv);
    cp_cast(&o, io->o);
    if (io->l != NULL) {
      loomTensor l = cp_dense(lacc, c->acc, c->B, c->Hq, c->Sq, -1);
      par_copy(&l, io->l);
    }
  }
  free(w.mem);
  cp_mem_free(&m);
  return res;
}

/* dK/dV of the whole sequence (acc type, rows by position) summed over ranks, each rank
 * receiving its own shard's rows; then converted into io's dk, dv. */
static loomResult_t dkv_scatter(const struct cp_call* c, const struct cp_io* io, struct cp_mem* m,
                                const loomTensor* dkf, const loomTensor* dvf) {
  size_t per = (size_t)(c->B * c->Skv * c->Hkv * (c->D + c->Dv));
  char *send = cp_alloc(c, m, per * c->as * (size_t)c->P), *recv = cp_alloc(c, m, per * c->as);
  if (send == NULL || recv == NULL) return loomSystemError;
  loomTensor k, v;
  for (int s = 0; s < c->P; s++) {
    shard_views(c, send + (size_t)s * per * c->as, c->acc, &k, &v);
    shard_move(c, s, &k, dkf, 0);
    shard_move(c, s, &v, dvf, 0);
  }
  loomResult_t r = loomReduceScatter(send, recv, per, c->acc, loomSum, c->comm, NULL);
  if (r != loomSuccess) return r;
  shard_views(c, recv, c->acc, &k, &v);
  cp_cast(&k, io->dk);
  cp_cast(&v, io->dv);
  return loomSuccess;
}

loomResult_t cp_gather_backward(const struct cp_call* c, const struct cp_io* io) {
  struct cp_mem m = {{0}, 0};
  struct cp_blk_ws w = {0};
  int64_t S = c->Skv * c->P, nq = c->B * c->Sq * c->Hq * c->D;
  int64_t nk = c->B * S * c->Hkv * c->D, nv = c->B * S * c->Hkv * c->Dv;
  loomTensor kf, vf;
  void* dqacc = cp_alloc(c, &m, (size_t)nq * c->as);
  void *dk = cp_alloc(c, &m, (size_t)nk * c->as), *dv = cp_alloc(c, &m, (size_t)nv * c->as);
  loomResult_t res =
      dqacc == NULL || dk == NULL || dv == NULL ? loomSystemError : kv_gather(c, io, &m, &kf, &vf);
  if (res == loomSuccess) res = cp_blk_ws_make(c, 1, S, &w);
  if (res == loomSuccess) {
    struct cp_seg qs[2], all = {0, 0, S};
    int n = cp_segs(c->layout, c->rank, c->P, c->Sq, qs);
    cp_zero(c->acc, dqacc, nq);
    cp_zero(c->acc, dk, nk);
    cp_zero(c->acc, dv, nv);
    res = cp_blocks_backward(c, io, qs, n, &kf, &vf, &all, 1, dqacc, dk, dv, &w);
  }
  if (res == loomSuccess) {
    loomTensor dkf = cp_dense(dk, c->acc, c->B, S, c->Hkv, c->D),
               dvf = cp_dense(dv, c->acc, c->B, S, c->Hkv, c->Dv);
    res = dkv_scatter(c, io, &m, &dkf, &dvf);
  }
  if (res == loomSuccess) {
    loomTensor dq = cp_dense(dqacc, c->acc, c->B, c->Sq, c->Hq, c->D);
    cp_cast(&dq, io->dq);
  }
  free(w.mem);
  cp_mem_free(&m);
  return res;
}

/* ---- Ulysses (loomCpUlysses) ----------------------------------------------------------------
 *
 * An all-to-all turns each rank's [B, Sl, H, E] (all heads, its positions) into [B, S, H/P, E]
 * (its heads, every position): rank p receives heads [p*H/P, (p+1)*H/P) of every rank and lays
 * their rows out in position order (under zig-zag each sender's two chunks go to their
 * positions). Then one block covers the whole sequence on H/P heads; query head j of rank p
 * still uses key/value head j / (Hq/Hkv), since Hq/P is a multiple of Hq/Hkv. out, lse (and in
 * backward dq, dk, dv) go back by the reverse all-to-all. lse [B, H, S] is the same with its
 * sequence and head dims swapped. Half outputs are rounded once, before they travel. */

/* x [.., Sl, .., H, ..] (seq_dim, head_dim) of this rank -> full, dense [.., S, .., H/P, ..] */
static loomResult_t heads_move(const struct cp_call* c, const loomTensor* x, int seq_dim,
                               int head_dim, const loomTensor* full, struct cp_mem* m) {
  int64_t Hp = x->shape[head_dim] / c->P, per = par_numel(x) / c->P;
  size_t es = par_dtype_size(x->dtype);
  char *send = cp_alloc(c, m, (size_t)per * es * (size_t)c->P),
       *recv = cp_alloc(c, m, (size_t)per * es * (size_t)c->P);
  if (send == NULL || recv == NULL) return loomSystemError;
  for (int p = 0; p < c->P; p++) {
    loomTensor src = cp_slice(x, head_dim, p * Hp, Hp), dst;
    par_dense_like(&src, send + (size_t)(p * per) * es, &dst);
    par_copy(&src, &dst);
  }
  loomResult_t r = loomAlltoAll(send, recv, (size_t)per, x->dtype, c->comm, NULL);
  if (r != loomSuccess) return r;
  loomTensor shape = cp_slice(x, head_dim, 0, Hp);
  for (int s = 0; s < c->P; s++) {
    loomTensor blk;
    par_dense_like(&shape, recv + (size_t)(s * per) * es, &blk);
    struct cp_seg segs[2];
    int n = cp_segs(c->layout, s, c->P, x->shape[seq_dim], segs);
    for (int i = 0; i < n; i++) {
      loomTensor a = cp_slice(&blk, seq_dim, segs[i].loc, segs[i].len),
                 b = cp_slice(full, seq_dim, segs[i].pos, segs[i].len);
      par_copy(&a, &b);
    }
  }
  return loomSuccess;
}

/* The reverse: full (dense, this rank's heads, every position) -> x (all heads, its positions). */
static loomResult_t seq_move(const struct cp_call* c, const loomTensor* full, int seq_dim,
                             int head_dim, const loomTensor* x, struct cp_mem* m) {
  int64_t Hp = x->shape[head_dim] / c->P, per = par_numel(x) / c->P;
  size_t es = par_dtype_size(x->dtype);
  char *send = cp_alloc(c, m, (size_t)per * es * (size_t)c->P),
       *recv = cp_alloc(c, m, (size_t)per * es * (size_t)c->P);
  if (send == NULL || recv == NULL) return loomSystemError;
  loomTensor shape = cp_slice(x, head_dim, 0, Hp);
  for (int s = 0; s < c->P; s++) {
    loomTensor blk;
    par_dense_like(&shape, send + (size_t)(s * per) * es, &blk);
    struct cp_seg segs[2];
    int n = cp_segs(c->layout, s, c->P, x->shape[seq_dim], segs);
    for (int i = 0; i < n; i++) {
      loomTensor a = cp_slice(full, seq_dim, segs[i].pos, segs[i].len),
                 b = cp_slice(&blk, seq_dim, segs[i].loc, segs[i].len);
      par_copy(&a, &b);
    }
  }
  loomResult_t r = loomAlltoAll(send, recv, (size_t)per, x->dtype, c->comm, NULL);
  if (r != loomSuccess) return r;
  for (int p = 0; p < c->P; p++) {
    loomTensor dst = cp_slice(x, head_dim, p * Hp, Hp), src;
    par_dense_like(&dst, recv + (size_t)(p * per) * es, &src);
    par_copy(&src, &dst);
  }
  return loomSuccess;
}

/* heads_move and seq_move with their send and receive buffers freed on return. */
static loomResult_t to_heads(const struct cp_call* c, const loomTensor* x, int seq_dim,
                             int head_dim, const loomTensor* full) {
  struct cp_mem m = {{0}, 0};
  loomResult_t r = heads_move(c, x, seq_dim, head_dim, full, &m);
  cp_mem_free(&m);
  return r;
}

static loomResult_t to_seq(const struct cp_call* c, const loomTensor* full, int seq_dim,
                           int head_dim, const loomTensor* x) {
  struct cp_mem m = {{0}, 0};
  loomResult_t r = seq_move(c, full, seq_dim, head_dim, x, &m);
  cp_mem_free(&m);
  return r;
}

/* The call as seen after the all-to-all: whole sequence, H/P heads, one run each. */
static struct cp_call heads_call(const struct cp_call* c) {
  struct cp_call u = *c;
  u.Hq = c->Hq / c->P, u.Hkv = c->Hkv / c->P, u.Sq = c->Sq * c->P, u.Skv = c->Skv * c->P;
  return u;
}

/* A dense [B, L, H, E] (E >= 0) or [B, H, L] (E < 0) scratch tensor of the heads call. */
static loomTensor heads_tensor(const struct cp_call* u, struct cp_mem* m, loomDataType_t dt,
                               int64_t L, int64_t H, int64_t E) {
  int64_t n = u->B * L * H * (E < 0 ? 1 : E);
  void* p = cp_alloc(u, m, (size_t)n * par_dtype_size(dt));
  return E < 0 ? cp_dense(p, dt, u->B, H, L, -1) : cp_dense(p, dt, u->B, L, H, E);
}

static int all_there(const loomTensor* const* t, int n) {
  for (int i = 0; i < n; i++)
    if (t[i]->data == NULL && par_numel(t[i]) > 0) return 0;
  return 1;
}

loomResult_t cp_ulysses_forward(const struct cp_call* c, const struct cp_io* io) {
  struct cp_mem m = {{0}, 0};
  struct cp_blk_ws w = {0};
  struct cp_call u = heads_call(c);
  loomTensor qf = heads_tensor(&u, &m, c->dt, u.Sq, u.Hq, u.D),
             kf = heads_tensor(&u, &m, c->dt, u.Skv, u.Hkv, u.D),
             vf = heads_tensor(&u, &m, c->dt, u.Skv, u.Hkv, u.Dv),
             oacc = heads_tensor(&u, &m, c->acc, u.Sq, u.Hq, u.Dv),
             lacc = heads_tensor(&u, &m, c->acc, u.Sq, u.Hq, -1),
             of = heads_tensor(&u, &m, c->dt, u.Sq, u.Hq, u.Dv);
  const loomTensor* all[6] = {&qf, &kf, &vf, &oacc, &lacc, &of};
  loomResult_t res = all_there(all, 6) ? cp_blk_ws_make(&u, 0, u.Skv, &w) : loomSystemError;
  if (res == loomSuccess) res = to_heads(c, io->q, 1, 2, &qf);
  if (res == loomSuccess) res = to_heads(c, io->k, 1, 2, &kf);
  if (res == loomSuccess) res = to_heads(c, io->v, 1, 2, &vf);
  if (res == loomSuccess) {
    struct cp_seg qs = {0, 0, u.Sq}, ks = {0, 0, u.Skv};
    cp_zero(c->acc, oacc.data, par_numel(&oacc));
    cp_fill_neg_inf(c->acc, lacc.data, par_numel(&lacc));
    res = cp_blocks_forward(&u, &qf, &qs, 1, &kf, &vf, &ks, 1, oacc.data, lacc.data, &w);
  }
  if (res == loomSuccess) {
    cp_cast(&oacc, &of);
    res = to_seq(c, &of, 1, 2, io->o);
  }
  if (res == loomSuccess && io->l != NULL) res = to_seq(c, &lacc, 2, 1, io->l);
  free(w.mem);
  cp_mem_free(&m);
  return res;
}

/* q, k, v, out, dout and lse with this rank's heads over the whole sequence. */
static loomResult_t bwd_inputs(const struct cp_call* c, const struct cp_io* io,
                               const loomTensor* f) {
  loomResult_t r = to_heads(c, io->q, 1, 2, &f[0]);
  if (r == loomSuccess) r = to_heads(c, io->k, 1, 2, &f[1]);
  if (r == loomSuccess) r = to_heads(c, io->v, 1, 2, &f[2]);
  if (r == loomSuccess) r = to_heads(c, io->out, 1, 2, &f[3]);
  if (r == loomSuccess) r = to_heads(c, io->dout, 1, 2, &f[4]);
  if (r == loomSuccess) r = to_heads(c, io->lse, 2, 1, &f[5]);
  return r;
}

loomResult_t cp_ulysses_backward(const struct cp_call* c, const struct cp_io* io) {
  struct cp_mem m = {{0}, 0}, m2 = {{0}, 0};
  struct cp_blk_ws w = {0};
  struct cp_call u = heads_call(c);
  loomTensor f[6] = {heads_tensor(&u, &m, c->dt, u.Sq, u.Hq, u.D),
                     heads_tensor(&u, &m, c->dt, u.Skv, u.Hkv, u.D),
                     heads_tensor(&u, &m, c->dt, u.Skv, u.Hkv, u.Dv),
                     heads_tensor(&u, &m, c->dt, u.Sq, u.Hq, u.Dv),
                     heads_tensor(&u, &m, c->dt, u.Sq, u.Hq, u.Dv),
                     heads_tensor(&u, &m, c->acc, u.Sq, u.Hq, -1)};
  loomTensor d[3] = {heads_tensor(&u, &m2, c->acc, u.Sq, u.Hq, u.D),
                     heads_tensor(&u, &m2, c->acc, u.Skv, u.Hkv, u.D),
                     heads_tensor(&u, &m2, c->acc, u.Skv, u.Hkv, u.Dv)};
  const loomTensor* all[9] = {&f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &d[0], &d[1], &d[2]};
  loomResult_t res = all_there(all, 9) ? cp_blk_ws_make(&u, 1, u.Skv, &w) : loomSystemError;
  if (res == loomSuccess) res = bwd_inputs(c, io, f);
  if (res == loomSuccess) {
    struct cp_io hio = {
        .q = &f[0], .k = &f[1], .v = &f[2], .out = &f[3], .dout = &f[4], .lse = &f[5]};
    struct cp_seg qs = {0, 0, u.Sq}, ks = {0, 0, u.Skv};
    for (int i = 0; i < 3; i++) cp_zero(c->acc, d[i].data, par_numel(&d[i]));
    res = cp_blocks_backward(&u, &hio, &qs, 1, &f[1], &f[2], &ks, 1, d[0].data, d[1].data,
                             d[2].data, &w);
  }
  /* Each gradient rounded once into its input's dtype (q's, k's, v's scratch reused). */
  loomTensor* outs[3] = {io->dq, io->dk, io->dv};
  for (int i = 0; i < 3 && res == loomSuccess; i++) {
    cp_cast(&d[i], &f[i]);
    res = to_seq(c, &f[i], 1, 2, outs[i]);
  }
  free(w.mem);
  cp_mem_free(&m);
  cp_mem_free(&m2);
  return res;
}
