/* cp_shard.c - loomCpShard, loomCpUnshard and loomCpPositions (PARALLEL.md section 4): a
 * rank's positions of a sequence under a layout, as a copy, gathered back, or as numbers. Any
 * dtype: these move bytes. */
#include <stdlib.h>

#include "cp.h"

/* layout, cpSize, cpRank and a global length seq that the layout can split. */
static loomResult_t layout_check(loomComm_t comm, const char* fn, loomCpLayout_t layout, int rank,
                                 int P, int64_t seq, const char* seq_name) {
  if (layout != loomCpContiguous && layout != loomCpZigzag)
    return par_err(comm, fn, "layout is %d; takes loomCpContiguous (0) or loomCpZigzag (1)",
                   (int)layout);
  if (P < 1 || rank < 0 || rank >= P)
    return par_err(comm, fn, "cpRank is %d and cpSize %d; needs 0 <= cpRank < cpSize", rank, P);
  int64_t div = layout == loomCpZigzag ? 2 * (int64_t)P : P;
  if (seq < 0 || seq % div != 0)
    return par_err(comm, fn, "%s is %lld; %s needs a multiple of %s = %lld", seq_name,
                   (long long)seq, layout == loomCpZigzag ? "zigzag" : "contiguous",
                   layout == loomCpZigzag ? "2P" : "P", (long long)div);
  return loomSuccess;
}

/* full and local valid, equal dtypes, seqDim a dim, shapes equal but along seqDim where local
 * holds 1/P of full; the output does not overlap the input. */
static loomResult_t pair_check(loomComm_t comm, const char* fn, const loomTensor* full,
                               const loomTensor* local, int seq_dim, int P, int full_is_out) {
  loomResult_t r =
      full_is_out ? par_check_out(comm, fn, "full", full) : par_check(comm, fn, "full", full);
  if (r == loomSuccess)
    r = full_is_out ? par_check(comm, fn, "local", local) : par_check_out(comm, fn, "local", local);
  if (r != loomSuccess) return r;
  if (seq_dim < 0 || seq_dim >= full->ndim)
    return par_err(comm, fn, "seqDim is %d but full.ndim is %d", seq_dim, full->ndim);
  if (local->dtype != full->dtype)
    return par_err(comm, fn, "local is %s but full is %s", par_dtype_name(local->dtype),
                   par_dtype_name(full->dtype));
  int bad = 0;
  char a[96], b[96];
  if (!par_shapes_agree(full, local, seq_dim, &bad) ||
      full->shape[seq_dim] != local->shape[seq_dim] * P)
    return par_err(comm, fn,
                   "local is %s and full %s; local must be full with seqDim %d cut to "
                   "1/%d",
                   par_shape_str(local, a, sizeof a), par_shape_str(full, b, sizeof b), seq_dim, P);
  if (par_overlap(full, local)) return par_err(comm, fn, "local and full overlap");
  return loomSuccess;
}

/* Rank `rank`'s runs between local (rows by local index) and full (rows by position). */
static void runs_copy(const loomTensor* full, const loomTensor* local, int seq_dim,
                      loomCpLayout_t layout, int rank, int P, int to_full) {
  struct cp_seg segs[2];
  int n = cp_segs(layout, rank, P, local->shape[seq_dim], segs);
  for (int i = 0; i < n; i++) {
    loomTensor l = cp_slice(local, seq_dim, segs[i].loc, segs[i].len),
               f = cp_slice(full, seq_dim, segs[i].pos, segs[i].len);
    if (to_full)
      par_copy(&l, &f);
    else
      par_copy(&f, &l);
  }
}

loomResult_t loomCpShard(const loomTensor* full, int seqDim, loomCpLayout_t layout, int cpRank,
                         int cpSize, loomTensor* local, loomStream_t stream) {
  static const char fn[] = "loomCpShard";
  if (full == NULL || local == NULL)
    return par_err(NULL, fn, "full (%p) and local (%p) must not be NULL", (const void*)full,
                   (void*)local);
  loomResult_t r = par_check(NULL, fn, "full", full);
  if (r != loomSuccess) return r;
  if (seqDim < 0 || seqDim >= full->ndim)
    return par_err(NULL, fn, "seqDim is %d but full.ndim is %d", seqDim, full->ndim);
  r = layout_check(NULL, fn, layout, cpRank, cpSize, full->shape[seqDim], "full.shape[seqDim]");
  if (r == loomSuccess) r = pair_check(NULL, fn, full, local, seqDim, cpSize, 0);
  if (r == loomSuccess) r = par_enter(NULL, fn, stream);
  if (r != loomSuccess) return r;
  runs_copy(full, local, seqDim, layout, cpRank, cpSize, 0);
  return loomSuccess;
}

loomResult_t loomCpUnshard(const loomTensor* local, int seqDim, loomCpLayout_t layout,
                           loomTensor* full, loomComm_t cp, loomStream_t stream) {
  static const char fn[] = "loomCpUnshard";
  int rank = 0, P = 1;
  loomResult_t r = par_comm(cp, fn, "cp", &rank, &P);
  if (r != loomSuccess) return r;
  if (full == NULL || local == NULL)
    return par_err(cp, fn, "full (%p) and local (%p) must not be NULL", (void*)full,
                   (const void*)local);
  r = par_check_out(cp, fn, "full", full);
  if (r != loomSuccess) return r;
  if (seqDim < 0 || seqDim >= full->ndim)
    return par_err(cp, fn, "seqDim is %d but full.ndim is %d", seqDim, full->ndim);
  r = layout_check(cp, fn, layout, rank, P, full->shape[seqDim], "full.shape[seqDim]");
  if (r == loomSuccess) r = pair_check(cp, fn, full, local, seqDim, P, 1);
  if (r == loomSuccess) r = par_enter(cp, fn, stream);
  if (r != loomSuccess) return r;
  size_t per = (size_t)par_numel(local) * par_dtype_size(local->dtype);
  char *send = par_scratch(cp, fn, per), *all = par_scratch(cp, fn, per * (size_t)P);
  if (send == NULL || all == NULL) r = loomSystemError;
  if (r == loomSuccess) {
    par_pack(local, send);
    r = loomAllGather(send, all, per, loomUint8, cp, NULL);
  }
  for (int s = 0; s < P && r == loomSuccess; s++) {
    loomTensor blk;
    par_dense_like(local, all + (size_t)s * per, &blk);
    runs_copy(full, &blk, seqDim, layout, s, P, 1);
  }
  free(send);
  free(all);
  return r;
}

loomResult_t loomCpPositions(int64_t seqLen, loomCpLayout_t layout, int cpRank, int cpSize,
                             int64_t positions[]) {
  static const char fn[] = "loomCpPositions";
  loomResult_t r = layout_check(NULL, fn, layout, cpRank, cpSize, seqLen, "seqLen");
  if (r != loomSuccess) return r;
  int64_t local = seqLen / cpSize;
  if (positions == NULL && local > 0)
    return par_err(NULL, fn, "positions is NULL but rank %d holds %lld positions", cpRank,
                   (long long)local);
  struct cp_seg segs[2];
  int n = cp_segs(layout, cpRank, cpSize, local, segs);
  for (int i = 0; i < n; i++)
    for (int64_t j = 0; j < segs[i].len; j++) positions[segs[i].loc + j] = segs[i].pos + j;
  return loomSuccess;
}
