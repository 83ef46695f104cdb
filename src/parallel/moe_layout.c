/* moe_layout.c - loomMoeLayoutCreate (PARALLEL.md section 5): the routing checks, capacity
 * with its two drop policies, the one count exchange, and the receive layout; GetInfo and
 * HandleDestroy; and the argument checks of the handle calls (section 8), whose messages name
 * the call, the argument and the values and go to the handle's communicator.
 *
 * Capacity is applied by each sender alone (C is computed from this rank's T_r), so it needs
 * no communication: the pairs are sorted by expert (then token), and an expert holding more
 * than C of them keeps the first C by token (ByPosition) or the C largest weights, ties to the
 * smaller token (ByWeight). The kept pairs, in that same (expert, token) order, are the send
 * order of moe.h. The count exchange is one loomAlltoAll of the kept pairs per (rank, local
 * expert), int64: rank r sends its counts for experts [q*El, (q+1)*El) to rank q, and gets back
 * recv_cnt[q*El + j], from which the receive layout follows with no further talk.
 *
 * Readings of the contract: K (topkIdx.shape[1]) may be 0; a NaN capacityFactor is misuse like
 * a negative one; a capacity too large for int64 saturates; a negative minCapacity acts as 0;
 * ByWeight orders a NaN weight below every number. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"

static const char k_create[] = "loomMoeLayoutCreate";

static void handle_free(struct loomMoeHandle* h) {
  if (h == NULL) return;
  int64_t* arrays[] = {h->counts,   h->offsets,  h->send_rows, h->recv_rows,
                       h->send_cnt, h->send_off, h->send_pair, h->slot,
                       h->recv_cnt, h->recv_at,  h->self_row};
  for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) free(arrays[i]);
  moe_cache_free(h);
  free(h);
}

static int64_t* i64_alloc(int64_t n) {
  return calloc(n > 0 ? (size_t)n : 1, sizeof(int64_t));
}

/* ---- Checks ------------------------------------------------------------------------------ */

static loomResult_t opts_check(loomComm_t ep, const loomMoeOpts* o, int n) {
  if (o->numExperts <= 0)
    return par_err(ep, k_create, "opts.numExperts is %d; it must be set, above 0", o->numExperts);
  if (o->numExperts % n != 0)
    return par_err(ep, k_create, "opts.numExperts is %d, not a multiple of the EP size %d",
                   o->numExperts, n);
  if (o->expertAlignment < 1)
    return par_err(ep, k_create, "opts.expertAlignment is %lld, below 1",
                   (long long)o->expertAlignment);
  if (!(o->capacityFactor >= 0 && o->capacityFactor <= DBL_MAX))
    return par_err(ep, k_create,
                   "opts.capacityFactor is %g, not a finite value >= 0 (0 is dropless)",
                   o->capacityFactor);
  if (o->dropPolicy != loomMoeDropByPosition && o->dropPolicy != loomMoeDropByWeight)
    return par_err(ep, k_create, "opts.dropPolicy is %d, not a loomMoeDropPolicy_t",
                   (int)o->dropPolicy);
  return loomSuccess;
}

static loomResult_t routing_check(loomComm_t ep, const loomTensor* idx, const loomTensor* w,
                                  const loomMoeOpts* o) {
  MOE_TRY(par_check(ep, k_create, "topkIdx", idx));
  if (idx->ndim != 2)
    return par_err(ep, k_create, "topkIdx.ndim is %d but topkIdx is [T_r, K] (ndim 2)", idx->ndim);
  if (idx->dtype != loomInt32 && idx->dtype != loomInt64)
    return par_err(ep, k_create, "topkIdx.dtype is %s, not int32 or int64",
                   par_dtype_name(idx->dtype));
  if (idx->shape[1] > 1 << 30)
    return par_err(ep, k_create, "topkIdx.shape[1] (K) is %lld, above 2^30",
                   (long long)idx->shape[1]);
  if (w == NULL) {
    if (o->dropPolicy == loomMoeDropByWeight && o->capacityFactor > 0)
      return par_err(ep, k_create,
                     "topkWeights is NULL but opts.dropPolicy is loomMoeDropByWeight with "
                     "capacityFactor %g (dropping by weight needs the weights)",
                     o->capacityFactor);
    return loomSuccess;
  }
  MOE_TRY(par_check(ep, k_create, "topkWeights", w));
  if (w->dtype != loomFloat32 && w->dtype != loomFloat64)
    return par_err(ep, k_create, "topkWeights.dtype is %s, not float32 or float64",
                   par_dtype_name(w->dtype));
  int bad;
  if (!par_shapes_agree(w, idx, -1, &bad)) {
    char ws[160], is[160];
    return par_err(ep, k_create, "topkWeights is %s but topkIdx is %s",
                   par_shape_str(w, ws, sizeof(ws)), par_shape_str(idx, is, sizeof(is)));
  }
  return loomSuccess;
}

static int64_t idx_get(const loomTensor* t, int64_t i, int64_t k) {
  int64_t off = i * t->strides[0] + k * t->strides[1];
  if (t->dtype == loomInt32) return ((const int32_t*)t->data)[off];
  return ((const int64_t*)t->data)[off];
}

/* Reads topkIdx into a dense int64 [T*K], checking every entry: in [-1, E), none twice in a
 * row (seen[e] holds 1 + the last row that named e, and at[e] its slot). */
static loomResult_t idx_read(loomComm_t ep, const loomTensor* t, int E, int64_t** out) {
  int64_t T = t->shape[0], K = t->shape[1];
  int64_t* idx = i64_alloc(T * K);
  int64_t *seen = i64_alloc(E), *at = i64_alloc(E);
  loomResult_t r = loomSuccess;
  if (idx == NULL || seen == NULL || at == NULL)
    r = par_fail(ep, loomSystemError, k_create, "out of memory for %lld routing entries",
                 (long long)(T * K));
  for (int64_t i = 0; i < T && r == loomSuccess; i++)
    for (int64_t k = 0; k < K && r == loomSuccess; k++) {
      int64_t e = idx[i * K + k] = idx_get(t, i, k);
      if (e < -1 || e >= E)
        r = par_err(ep, k_create, "topkIdx[%lld][%lld] is %lld, outside [-1, %d)", (long long)i,
                    (long long)k, (long long)e, E);
      else if (e >= 0 && seen[e] == i + 1)
        r = par_err(ep, k_create, "topkIdx[%lld] names expert %lld twice (slots %lld and %lld)",
                    (long long)i, (long long)e, (long long)at[e], (long long)k);
      else if (e >= 0)
        seen[e] = i + 1, at[e] = k;
    }
  free(seen);
  free(at);
  if (r != loomSuccess) free(idx);
  if (r == loomSuccess) *out = idx;
  return r;
}

/* ---- Capacity ---------------------------------------------------------------------------- */

/* Counting sort of the pairs of idx by expert, tokens ascending within one: cnt[E], off[E+1]
 * and pair[off[E]] (t*K + k). */
static void pairs_by_expert(const int64_t* idx, int64_t T, int K, int E, int64_t* cnt, int64_t* off,
                            int64_t* pair) {
  memset(cnt, 0, (size_t)E * sizeof(int64_t));
  for (int64_t p = 0; p < T * K; p++)
    if (idx[p] >= 0) cnt[idx[p]]++;
  off[0] = 0;
  for (int e = 0; e < E; e++) off[e + 1] = off[e] + cnt[e];
  memset(cnt, 0, (size_t)E * sizeof(int64_t));
  for (int64_t p = 0; p < T * K; p++)
    if (idx[p] >= 0) pair[off[idx[p]] + cnt[idx[p]]++] = p;
}

/* C = max(minCapacity, ceil(capacityFactor * T_r * K / E)), in double. */
static int64_t capacity_of(const loomMoeOpts* o, int64_t T, int K) {
  double c = ceil(o->capacityFactor * (double)T * (double)K / (double)o->numExperts);
  int64_t C = c >= 9.2e18 ? INT64_MAX : (int64_t)c;
  return C > o->minCapacity ? C : o->minCapacity;
}

struct ranked {
  double w;
  int64_t pair;
};

/* Larger weights first, then the smaller token (pair order is token order in one expert). */
static int ranked_cmp(const void* a, const void* b) {
  const struct ranked *x = a, *y = b;
  double wx = isnan(x->w) ? -INFINITY : x->w, wy = isnan(y->w) ? -INFINITY : y->w;
  if (wx != wy) return wx > wy ? -1 : 1;
  return (x->pair > y->pair) - (x->pair < y->pair);
}

/* Marks the dropped pairs of one expert's n pairs (token order) as -1 in idx. */
static loomResult_t expert_drop(const int64_t* pair, int64_t n, int64_t C, const loomTensor* w,
                                const loomMoeOpts* o, int K, int64_t* idx) {
  if (o->dropPolicy == loomMoeDropByPosition) {
    for (int64_t i = C; i < n; i++) idx[pair[i]] = -1;
    return loomSuccess;
  }
  struct ranked* v = malloc((size_t)n * sizeof(*v));
  if (v == NULL) return loomSystemError;
  for (int64_t i = 0; i < n; i++) {
    v[i].pair = pair[i];
    v[i].w = moe_weight_get(w, pair[i] / K, (int)(pair[i] % K));
  }
  qsort(v, (size_t)n, sizeof(*v), ranked_cmp);
  for (int64_t i = C; i < n; i++) idx[v[i].pair] = -1;
  free(v);
  return loomSuccess;
}

static loomResult_t capacity_apply(struct loomMoeHandle* h, const loomMoeOpts* o,
                                   const loomTensor* w, int64_t* idx) {
  h->capacity = capacity_of(o, h->T, h->K);
  int64_t* pair = i64_alloc(h->T * h->K);
  if (pair == NULL) return par_fail(h->comm, loomSystemError, k_create, "out of memory");
  pairs_by_expert(idx, h->T, h->K, h->E, h->send_cnt, h->send_off, pair);
  loomResult_t r = loomSuccess;
  for (int e = 0; e < h->E && r == loomSuccess; e++) {
    int64_t n = h->send_cnt[e];
    if (n <= h->capacity) continue;
    h->dropped += n - h->capacity;
    if (expert_drop(pair + h->send_off[e], n, h->capacity, w, o, h->K, idx) != loomSuccess)
      r = par_fail(h->comm, loomSystemError, k_create, "out of memory ranking %lld pairs",
                   (long long)n);
  }
  free(pair);
  return r;
}

/* ---- The layout -------------------------------------------------------------------------- */

static loomResult_t handle_alloc(struct loomMoeHandle* h) {
  int64_t n = h->n, E = h->E, El = h->El;
  h->counts = i64_alloc(El);
  h->offsets = i64_alloc(El + 1);
  h->send_rows = i64_alloc(n);
  h->recv_rows = i64_alloc(n);
  h->send_cnt = i64_alloc(E);
  h->send_off = i64_alloc(E + 1);
  h->send_pair = i64_alloc(h->T * h->K);
  h->slot = i64_alloc(h->T * h->K);
  h->recv_cnt = i64_alloc(E);
  h->recv_at = i64_alloc(E);
  if (!h->counts || !h->offsets || !h->send_rows || !h->recv_rows || !h->send_cnt || !h->send_off ||
      !h->send_pair || !h->slot || !h->recv_cnt || !h->recv_at || moe_cache_make(h) != loomSuccess)
    return par_fail(h->comm, loomSystemError, k_create, "out of memory for the layout");
  return loomSuccess;
}

/* The send order of the kept pairs and each pair's slot in it. */
static void send_order_build(struct loomMoeHandle* h, const int64_t* idx) {
  pairs_by_expert(idx, h->T, h->K, h->E, h->send_cnt, h->send_off, h->send_pair);
  for (int64_t p = 0; p < h->T * h->K; p++) h->slot[p] = -1;
  for (int64_t s = 0; s < h->send_off[h->E]; s++) h->slot[h->send_pair[s]] = s;
  for (int q = 0; q < h->n; q++)
    h->send_rows[q] = h->send_off[(q + 1) * h->El] - h->send_off[q * h->El];
}

/* Expert-major, then source rank, then token; each expert padded to the alignment. */
static loomResult_t recv_layout_build(struct loomMoeHandle* h, int64_t align) {
  int El = h->El;
  for (int q = 0; q < h->n; q++)
    for (int j = 0; j < El; j++) h->recv_rows[q] += h->recv_cnt[q * El + j];
  for (int j = 0; j < El; j++) {
    int64_t at = h->offsets[j], cnt = 0, padded;
    for (int q = 0; q < h->n; q++) {
      h->recv_at[q * El + j] = at + cnt;
      cnt += h->recv_cnt[q * El + j];
    }
    h->counts[j] = cnt;
    if (__builtin_add_overflow(cnt, (align - cnt % align) % align, &padded) ||
        __builtin_add_overflow(at, padded, &h->offsets[j + 1]))
      return par_err(h->comm, k_create, "the receive rows overflow int64 (expertAlignment %lld)",
                     (long long)align);
  }
  h->R = h->offsets[El];
  int64_t lo = moe_self_lo(h), hi = moe_self_hi(h);
  if ((h->self_row = i64_alloc(hi - lo)) == NULL)
    return par_fail(h->comm, loomSystemError, k_create, "out of memory for the layout");
  for (int j = 0; j < El; j++) {
    int e = h->rank * El + j;
    for (int64_t s = h->send_off[e]; s < h->send_off[e + 1]; s++)
      h->self_row[s - lo] = h->recv_at[h->rank * El + j] + (s - h->send_off[e]);
  }
  return loomSuccess;
}

static loomResult_t layout_build(struct loomMoeHandle* h, const loomMoeOpts* o, const loomTensor* w,
                                 int64_t* idx) {
  MOE_TRY(handle_alloc(h));
  h->capacity = -1;
  if (o->capacityFactor > 0) MOE_TRY(capacity_apply(h, o, w, idx));
  send_order_build(h, idx);
  /* The one count exchange: [q][j] out, [q][j] back, El int64 per peer. */
  MOE_TRY(loomAlltoAll(h->send_cnt, h->recv_cnt, (size_t)h->El, loomInt64, h->comm, NULL));
  return recv_layout_build(h, o->expertAlignment);
}

loomResult_t loomMoeLayoutCreate(const loomTensor* topkIdx, const loomTensor* topkWeights,
                                 loomMoeHandle_t* handle, const loomMoeOpts* opts, loomComm_t ep,
                                 loomStream_t stream) {
  int rank, n;
  MOE_TRY(par_comm(ep, k_create, "ep", &rank, &n));
  if (handle == NULL) return par_err(ep, k_create, "handle is NULL");
  loomMoeOpts o = LOOM_MOE_OPTS_INIT;
  if (opts != NULL) o = *opts;
  MOE_TRY(opts_check(ep, &o, n));
  MOE_TRY(routing_check(ep, topkIdx, topkWeights, &o));
  /* The stream first: topkIdx may be written by earlier work on it, and a
   * CUDA stream's (device) topkIdx must not be read here at all. */
  MOE_TRY(par_enter(ep, k_create, stream));
  int64_t* idx = NULL;
  MOE_TRY(idx_read(ep, topkIdx, o.numExperts, &idx));
  struct loomMoeHandle* h = calloc(1, sizeof(*h));
  loomResult_t r =
      h ? loomSuccess : par_fail(ep, loomSystemError, k_create, "out of memory for the handle");
  if (r == loomSuccess) {
    *h = (struct loomMoeHandle){.comm = ep, .rank = rank, .n = n, .E = o.numExperts};
    h->El = o.numExperts / n;
    h->T = topkIdx->shape[0];
    h->K = (int)topkIdx->shape[1];
    r = layout_build(h, &o, topkWeights, idx);
  }
  free(idx);
  if (r != loomSuccess) {
    handle_free(h);
    return r;
  }
  *handle = h;
  return loomSuccess;
}

loomResult_t loomMoeGetInfo(loomMoeHandle_t handle, loomMoeInfo* info) {
  static const char fn[] = "loomMoeGetInfo";
  MOE_TRY(moe_check_handle(handle, fn));
  if (info == NULL) return par_err(handle->comm, fn, "info is NULL");
  info->numLocalExperts = handle->El;
  info->numRecvRows = handle->R;
  info->expertCounts = handle->counts;
  info->expertOffsets = handle->offsets;
  info->sendRows = handle->send_rows;
  info->recvRows = handle->recv_rows;
  info->numDropped = handle->dropped;
  info->capacity = handle->capacity;
  return loomSuccess;
}

loomResult_t loomMoeHandleDestroy(loomMoeHandle_t handle) {
  MOE_TRY(moe_check_handle(handle, "loomMoeHandleDestroy"));
  handle_free(handle);
  return loomSuccess;
}

/* ---- The handle calls' checks ------------------------------------------------------------ */

loomResult_t moe_check_handle(const struct loomMoeHandle* h, const char* fn) {
  if (h == NULL) return par_err(NULL, fn, "handle is NULL");
  return loomSuccess;
}

loomResult_t moe_check_rows(const struct loomMoeHandle* h, const char* fn, const char* name,
                            const loomTensor* t, int64_t rows, const char* what, int out) {
  MOE_TRY(out ? par_check_out(h->comm, fn, name, t) : par_check(h->comm, fn, name, t));
  if (t->ndim < 1)
    return par_err(h->comm, fn, "%s.ndim is 0 but %s is [%s, ...] (ndim >= 1)", name, name, what);
  if (t->shape[0] != rows)
    return par_err(h->comm, fn, "%s.shape[0] is %lld but the layout has %s = %lld", name,
                   (long long)t->shape[0], what, (long long)rows);
  return loomSuccess;
}

loomResult_t moe_check_like(const struct loomMoeHandle* h, const char* fn, const char* name,
                            const loomTensor* t, const char* like_name, const loomTensor* like) {
  if (t->dtype != like->dtype)
    return par_err(h->comm, fn, "%s.dtype is %s but %s.dtype is %s", name, par_dtype_name(t->dtype),
                   like_name, par_dtype_name(like->dtype));
  int bad;
  if (!par_shapes_agree(t, like, 0, &bad)) {
    char a[160], b[160];
    return par_err(h->comm, fn, "%s is %s but %s is %s (the shapes past dim 0 must agree)", name,
                   par_shape_str(t, a, sizeof(a)), like_name, par_shape_str(like, b, sizeof(b)));
  }
  return loomSuccess;
}

loomResult_t moe_check_float(const struct loomMoeHandle* h, const char* fn, const char* name,
                             const loomTensor* t) {
  if (!par_dtype_is_compute(t->dtype))
    return par_err(h->comm, fn, "%s.dtype is %s, not float16, bfloat16, float32 or float64", name,
                   par_dtype_name(t->dtype));
  return loomSuccess;
}

loomResult_t moe_check_weights(const struct loomMoeHandle* h, const char* fn, const char* name,
                               const loomTensor* t, int out, int by_row) {
  MOE_TRY(out ? par_check_out(h->comm, fn, name, t) : par_check(h->comm, fn, name, t));
  if (t->dtype != loomFloat32 && t->dtype != loomFloat64)
    return par_err(h->comm, fn, "%s.dtype is %s, not float32 or float64", name,
                   par_dtype_name(t->dtype));
  char s[160];
  if (by_row && (t->ndim != 1 || t->shape[0] != h->R))
    return par_err(h->comm, fn, "%s is %s but the layout needs [R] = [%lld]", name,
                   par_shape_str(t, s, sizeof(s)), (long long)h->R);
  if (!by_row && (t->ndim != 2 || t->shape[0] != h->T || t->shape[1] != h->K))
    return par_err(h->comm, fn, "%s is %s but the layout needs [T_r, K] = [%lld, %d]", name,
                   par_shape_str(t, s, sizeof(s)), (long long)h->T, h->K);
  return loomSuccess;
}

loomResult_t moe_check_pair(const struct loomMoeHandle* h, const char* fn, const char* a_name,
                            const void* a, const char* b_name, const void* b) {
  if ((a == NULL) == (b == NULL)) return loomSuccess;
  return par_err(h->comm, fn, "%s is %s but %s is %s (pass both or neither)", a_name,
                 a ? "given" : "NULL", b_name, b ? "given" : "NULL");
}

loomResult_t moe_check_disjoint(const struct loomMoeHandle* h, const char* fn, int n_out,
                                const loomTensor* const* outs, const char* const* out_names,
                                int n_in, const loomTensor* const* ins,
                                const char* const* in_names) {
  for (int i = 0; i < n_out; i++) {
    if (outs[i] == NULL) continue;
    for (int j = 0; j < n_in; j++)
      if (ins[j] != NULL && par_overlap(outs[i], ins[j]))
        return par_err(h->comm, fn, "%s overlaps %s (no MoE call works in place)", out_names[i],
                       in_names[j]);
    for (int j = i + 1; j < n_out; j++)
      if (outs[j] != NULL && par_overlap(outs[i], outs[j]))
        return par_err(h->comm, fn, "%s overlaps %s (two outputs)", out_names[i], out_names[j]);
  }
  return loomSuccess;
}
