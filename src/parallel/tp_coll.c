/* tp_coll.c - the conjugate collectives of tensor and sequence parallelism (PARALLEL.md
 * section 3.1): loomAllReduceTensor, loomAllGatherDim, loomReduceScatterDim, loomSplitDim, and
 * the helpers of tp_coll.h (loomAlltoAllDim is in tp_a2a.c).
 *
 * Which core collective a call issues depends only on what every rank agrees on (the splits,
 * the full shape), never on a rank's own layout or on whether it is in place, so every rank
 * issues the same one. A rank's layout decides only whether it packs and unpacks. */
#include "tp_coll.h"

#include <stdlib.h>
#include <string.h>

/* ---- Shared helpers (tp_coll.h) ----------------------------------------------------------- */

void tp_dim_first(const loomTensor* t, int dim, loomTensor* out) {
  *out = *t;
  out->shape[0] = t->shape[dim];
  out->strides[0] = t->strides[dim];
  for (int d = 0; d < dim; d++) {
    out->shape[d + 1] = t->shape[d];
    out->strides[d + 1] = t->strides[d];
  }
}

int64_t tp_inner(const loomTensor* t, int a, int b) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    if (d != a && d != b) n *= t->shape[d];
  return n;
}

int tp_even(const int64_t* offs, int n) {
  for (int q = 1; q < n; q++)
    if (offs[q + 1] - offs[q] != offs[1] - offs[0]) return 0;
  return 1;
}

void* tp_scratch(loomComm_t comm, const char* fn, const loomTensor* t) {
  size_t bytes;
  if (__builtin_mul_overflow((size_t)par_numel(t), par_dtype_size(t->dtype), &bytes)) {
    par_fail(comm, loomSystemError, fn, "%lld elements of scratch do not fit in memory",
             (long long)par_numel(t));
    return NULL;
  }
  return par_scratch(comm, fn, bytes);
}

loomResult_t tp_check_dim(loomComm_t comm, const char* fn, const char* what, int dim,
                          const char* name, const loomTensor* t) {
  if (dim < 0 || dim >= t->ndim)
    return par_err(comm, fn, "%s is %d, outside [0, %d) (%s.ndim)", what, dim, t->ndim, name);
  return loomSuccess;
}

loomResult_t tp_check_kinds(loomComm_t comm, const char* fn, const loomTensor* x,
                            const loomTensor* y) {
  if (x->dtype != y->dtype)
    return par_err(comm, fn, "y.dtype is %s but x.dtype is %s", par_dtype_name(y->dtype),
                   par_dtype_name(x->dtype));
  if (x->ndim != y->ndim)
    return par_err(comm, fn, "y.ndim is %d but x.ndim is %d", y->ndim, x->ndim);
  return loomSuccess;
}

loomResult_t tp_check_shapes(loomComm_t comm, const char* fn, const loomTensor* x,
                             const loomTensor* y, int a, int b) {
  for (int d = 0; d < x->ndim; d++)
    if (d != a && d != b && x->shape[d] != y->shape[d]) {
      char xs[160], ys[160];
      return par_err(comm, fn, "x.shape[%d] is %lld but y.shape[%d] is %lld (x %s, y %s)", d,
                     (long long)x->shape[d], d, (long long)y->shape[d],
                     par_shape_str(x, xs, sizeof(xs)), par_shape_str(y, ys, sizeof(ys)));
    }
  return loomSuccess;
}

/* Fills offs[0..n] from splits, checked against extent (name.shape[dim]). */
static loomResult_t offsets_fill(loomComm_t comm, const char* fn, const char* what,
                                 const int64_t* splits, int n, const char* name, int dim,
                                 int64_t extent, int64_t* offs) {
  offs[0] = 0;
  if (splits == NULL) {
    if (extent % n != 0)
      return par_err(comm, fn,
                     "%s is NULL (even) but %s.shape[%d] = %lld is not divisible by %d ranks", what,
                     name, dim, (long long)extent, n);
    for (int q = 0; q < n; q++) offs[q + 1] = offs[q] + extent / n;
    return loomSuccess;
  }
  int64_t sum = 0;
  int big = 0; /* the sum passed INT64_MAX: report it as such */
  for (int q = 0; q < n; q++) {
    if (splits[q] < 0)
      return par_err(comm, fn, "%s[%d] is %lld, below 0", what, q, (long long)splits[q]);
    big |= __builtin_add_overflow(sum, splits[q], &sum);
    offs[q + 1] = sum;
  }
  if (big)
    return par_err(comm, fn, "%s sum past 2^63 but %s.shape[%d] is %lld", what, name, dim,
                   (long long)extent);
  if (sum != extent)
    return par_err(comm, fn, "%s sum to %lld but %s.shape[%d] is %lld", what, (long long)sum, name,
                   dim, (long long)extent);
  return loomSuccess;
}

loomResult_t tp_offsets(loomComm_t comm, const char* fn, const char* what, const int64_t* splits,
                        int n, const char* name, const loomTensor* t, int dim, int64_t** offs_out) {
  int64_t* offs = malloc(((size_t)n + 1) * sizeof(*offs));
  if (offs == NULL)
    return par_fail(comm, loomSystemError, fn, "out of memory for %d offsets", n + 1);
  loomResult_t r = offsets_fill(comm, fn, what, splits, n, name, dim, t->shape[dim], offs);
  if (r != loomSuccess) {
    free(offs);
    return r;
  }
  *offs_out = offs;
  return loomSuccess;
}

loomResult_t tp_check_part(loomComm_t comm, const char* fn, const char* what, const int64_t* splits,
                           int rank, const int64_t* offs, const char* name, const loomTensor* t,
                           int dim) {
  int64_t want = offs[rank + 1] - offs[rank];
  if (t->shape[dim] == want) return loomSuccess;
  if (splits != NULL)
    return par_err(comm, fn, "%s.shape[%d] is %lld but %s[%d] is %lld (this rank's part)", name,
                   dim, (long long)t->shape[dim], what, rank, (long long)want);
  return par_err(comm, fn, "%s.shape[%d] is %lld but %s is NULL (even): this rank's part is %lld",
                 name, dim, (long long)t->shape[dim], what, (long long)want);
}

/* ---- Local helpers ------------------------------------------------------------------------ */

/* 1 when t's elements fill [data, data + numel) exactly, in some order of its dims (element
 * (0,...,0) is the lowest: strides are >= 0). */
static int dense(const loomTensor* t) {
  int64_t st[LOOM_TENSOR_MAX_DIMS], ex[LOOM_TENSOR_MAX_DIMS];
  int k = 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] > 1) {
      int i = k++; /* insertion by stride */
      for (; i > 0 && st[i - 1] > t->strides[d]; i--) {
        st[i] = st[i - 1];
        ex[i] = ex[i - 1];
      }
      st[i] = t->strides[d];
      ex[i] = t->shape[d];
    }
  int64_t expect = 1;
  for (int i = 0; i < k; i++) {
    if (st[i] != expect) return 0;
    expect *= ex[i];
  }
  return 1;
}

/* Equal shapes: the same element sits at the same offset in both. */
static int same_strides(const loomTensor* a, const loomTensor* b) {
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] > 1 && a->strides[d] != b->strides[d]) return 0;
  return 1;
}

/* 1 when part is exactly full's slice [off, off + part.shape[dim]) along dim. */
static int slice_of(const loomTensor* part, const loomTensor* full, int dim, int64_t off) {
  loomTensor s = *full;
  s.shape[dim] = part->shape[dim];
  if (s.shape[dim] > 0)
    s.data = (char*)full->data + off * full->strides[dim] * (int64_t)par_dtype_size(full->dtype);
  return par_same_view(part, &s);
}

/* Every op the core takes for dt: the five built-ins, and a live PreMulSum op of comm made for
 * dt, which only the core can tell (a count-0 all-reduce checks the op and moves nothing). */
static loomResult_t check_op(loomComm_t comm, const char* fn, loomRedOp_t op, loomDataType_t dt) {
  if ((int)op < 0) return par_err(comm, fn, "op is %d, not a reduction op", (int)op);
  if ((int)op < (int)loomNumOps) return loomSuccess;
  loomResult_t r = loomAllReduce(NULL, NULL, 0, dt, op, comm, NULL);
  if (r == loomInvalidArgument)
    return par_err(comm, fn,
                   "op is %d, neither loomSum..loomAvg nor a live PreMulSum op of comm made for %s",
                   (int)op, par_dtype_name(dt));
  return r;
}

/* ---- loomAllReduceTensor ------------------------------------------------------------------ */

/* y = op over ranks of x, with at most one pack and one unpack. */
static loomResult_t allreduce_run(const loomTensor* x, const loomTensor* y, loomRedOp_t op,
                                  loomComm_t comm, const char* fn) {
  size_t count = (size_t)par_numel(y);
  loomDataType_t dt = y->dtype;
  int xd = dense(x);
  if (xd && same_strides(x, y)) return loomAllReduce(x->data, y->data, count, dt, op, comm, NULL);
  if (dense(y)) { /* x into y's order (they do not overlap here), then reduce in place */
    par_copy(x, y);
    return loomAllReduce(y->data, y->data, count, dt, op, comm, NULL);
  }
  void* tmp = tp_scratch(comm, fn, y);
  if (tmp == NULL) return loomSystemError;
  loomTensor t = *x; /* the scratch in x's own order when x is dense, else row-major */
  t.data = tmp;
  if (!xd) {
    par_dense_like(x, tmp, &t);
    par_copy(x, &t);
  }
  loomResult_t r = loomAllReduce(xd ? x->data : tmp, tmp, count, dt, op, comm, NULL);
  if (r == loomSuccess) par_copy(&t, y);
  free(tmp);
  return r;
}

loomResult_t loomAllReduceTensor(const loomTensor* x, loomTensor* y, loomRedOp_t op,
                                 loomComm_t comm, loomStream_t stream) {
  static const char fn[] = "loomAllReduceTensor";
  int rank, n;
  TP_TRY(par_comm(comm, fn, "comm", &rank, &n));
  TP_TRY(par_check(comm, fn, "x", x));
  TP_TRY(par_check_out(comm, fn, "y", y));
  TP_TRY(tp_check_kinds(comm, fn, x, y));
  TP_TRY(tp_check_shapes(comm, fn, x, y, -1, -1));
  TP_TRY(check_op(comm, fn, op, x->dtype));
  if (par_overlap(x, y) && !par_same_view(x, y))
    return par_err(comm, fn, "x and y overlap without being the same view (the in-place form)");
  TP_TRY(par_enter(comm, fn, stream));
  if (par_numel(y) == 0) return loomSuccess;
  return allreduce_run(x, y, op, comm, fn);
}

/* ---- The checks of the dim calls ---------------------------------------------------------- */

/* The three dim calls: which of x and y is the full tensor (the whole extent along dim) and
 * which this rank's part, and whether the part may be the full tensor's slice (in place). */
enum dim_role { DIM_GATHER, DIM_SCATTER, DIM_SPLIT };

struct dim_call {
  int rank, n;
  int64_t* offs; /* n + 1 entries; the caller frees them */
};

/* x and y overlap: only the stated in-place form passes. */
static loomResult_t dim_overlap_check(loomComm_t comm, const char* fn, const loomTensor* part,
                                      const loomTensor* full, int dim, enum dim_role role,
                                      int64_t off) {
  if (role == DIM_SPLIT)
    return par_err(comm, fn, "x and y overlap (loomSplitDim has no in-place form)");
  if (slice_of(part, full, dim, off)) return loomSuccess;
  return par_err(
      comm, fn, "x and y overlap but %s is not %s's slice at %lld along dim %d (the in-place form)",
      role == DIM_GATHER ? "x" : "y", role == DIM_GATHER ? "y" : "x", (long long)off, dim);
}

/* Every check of a dim call, in the order of PARALLEL.md section 8. */
static loomResult_t dim_call_check(loomComm_t comm, const char* fn, const loomTensor* x,
                                   const loomTensor* y, enum dim_role role, int dim,
                                   const int64_t* splits, struct dim_call* c) {
  int x_full = role != DIM_GATHER;
  const loomTensor* full = x_full ? x : y;
  const loomTensor* part = x_full ? y : x;
  TP_TRY(par_comm(comm, fn, "comm", &c->rank, &c->n));
  TP_TRY(par_check(comm, fn, "x", x));
  TP_TRY(par_check_out(comm, fn, "y", y));
  TP_TRY(tp_check_kinds(comm, fn, x, y));
  TP_TRY(tp_check_dim(comm, fn, "dim", dim, "x", x));
  TP_TRY(tp_check_shapes(comm, fn, x, y, dim, -1));
  TP_TRY(tp_offsets(comm, fn, "splits", splits, c->n, x_full ? "x" : "y", full, dim, &c->offs));
  loomResult_t r =
      tp_check_part(comm, fn, "splits", splits, c->rank, c->offs, x_full ? "y" : "x", part, dim);
  if (r == loomSuccess && par_overlap(x, y))
    r = dim_overlap_check(comm, fn, part, full, dim, role, c->offs[c->rank]);
  if (r != loomSuccess) free(c->offs);
  return r;
}

/* ---- loomAllGatherDim --------------------------------------------------------------------- */

/* Every rank's block of full (dim-first order, inner elements a row) from its send. Even
 * splits: the core's all-gather. Uneven ones: one broadcast per rank, grouped. An all-to-all-v
 * with every send count equal to one's own would move the same bytes, but the core refuses it
 * a send buffer inside the receive buffer, so an in-place caller would first copy its block;
 * the broadcasts take the in-place form at their root, and which collective runs must not
 * depend on whether a rank is in place (every rank issues the same calls). */
static loomResult_t gather_blocks(const void* send, char* full, int64_t inner, const int64_t* offs,
                                  int rank, int n, loomDataType_t dt, loomComm_t comm) {
  size_t es = par_dtype_size(dt);
  if (tp_even(offs, n))
    return loomAllGather(send, full, (size_t)((offs[1] - offs[0]) * inner), dt, comm, NULL);
  loomResult_t r = loomGroupStart();
  for (int q = 0; q < n && r == loomSuccess; q++)
    r = loomBroadcast(q == rank ? send : NULL, full + (size_t)(offs[q] * inner) * es,
                      (size_t)((offs[q + 1] - offs[q]) * inner), dt, q, comm, NULL);
  loomResult_t e = loomGroupEnd();
  return r != loomSuccess ? r : e;
}

static loomResult_t allgather_run(const loomTensor* x, const loomTensor* y, int dim,
                                  const struct dim_call* c, loomComm_t comm, const char* fn) {
  int inplace = par_overlap(x, y); /* checked: x is y's block */
  if (c->n == 1) {
    if (!inplace) par_copy(x, y);
    return loomSuccess;
  }
  size_t es = par_dtype_size(y->dtype);
  int64_t inner = tp_inner(y, dim, -1);
  loomTensor px, py;
  tp_dim_first(x, dim, &px);
  tp_dim_first(y, dim, &py);
  char* tmp = NULL;
  char* full = y->data;
  if (!par_contiguous(&py) && (full = tmp = tp_scratch(comm, fn, y)) == NULL)
    return loomSystemError;
  char* mine = full + (size_t)(c->offs[c->rank] * inner) * es;
  const void* send = mine;
  if (!inplace && par_contiguous(&px))
    send = x->data;
  else if (!(inplace && tmp == NULL)) /* in place in y, x already is y's block */
    par_pack(&px, mine);
  loomResult_t r = gather_blocks(send, full, inner, c->offs, c->rank, c->n, y->dtype, comm);
  if (r == loomSuccess && tmp != NULL) par_unpack(tmp, &py);
  free(tmp);
  return r;
}

loomResult_t loomAllGatherDim(const loomTensor* x, loomTensor* y, int dim, const int64_t* splits,
                              loomComm_t comm, loomStream_t stream) {
  static const char fn[] = "loomAllGatherDim";
  struct dim_call c;
  TP_TRY(dim_call_check(comm, fn, x, y, DIM_GATHER, dim, splits, &c));
  loomResult_t r = par_enter(comm, fn, stream);
  if (r == loomSuccess && par_numel(y) > 0) r = allgather_run(x, y, dim, &c, comm, fn);
  free(c.offs);
  return r;
}

/* ---- loomReduceScatterDim ----------------------------------------------------------------- */

/* recv = op over ranks of their block rank of full. Even splits: the core's reduce-scatter;
 * uneven ones: one reduce per rank, grouped (copy-free, and in place at the root when recv is
 * the rank's own block of full). */
static loomResult_t reduce_blocks(const char* full, void* recv, int64_t inner, const int64_t* offs,
                                  int rank, int n, loomDataType_t dt, loomRedOp_t op,
                                  loomComm_t comm) {
  size_t es = par_dtype_size(dt);
  if (tp_even(offs, n))
    return loomReduceScatter(full, recv, (size_t)((offs[1] - offs[0]) * inner), dt, op, comm, NULL);
  loomResult_t r = loomGroupStart();
  for (int q = 0; q < n && r == loomSuccess; q++)
    r = loomReduce(full + (size_t)(offs[q] * inner) * es, q == rank ? recv : NULL,
                   (size_t)((offs[q + 1] - offs[q]) * inner), dt, op, q, comm, NULL);
  loomResult_t e = loomGroupEnd();
  return r != loomSuccess ? r : e;
}

static loomResult_t reduce_scatter_run(const loomTensor* x, const loomTensor* y, int dim,
                                       loomRedOp_t op, const struct dim_call* c, loomComm_t comm,
                                       const char* fn) {
  size_t es = par_dtype_size(x->dtype);
  int64_t inner = tp_inner(x, dim, -1);
  loomTensor px, py;
  tp_dim_first(x, dim, &px);
  tp_dim_first(y, dim, &py);
  char *in_tmp = NULL, *out_tmp = NULL;
  char* full = x->data;
  if (!par_contiguous(&px)) {
    if ((full = in_tmp = tp_scratch(comm, fn, x)) == NULL) return loomSystemError;
    par_pack(&px, in_tmp);
  }
  /* y itself when it is in order; else the rank's block of the packed x (in place), or, when x
   * needed no packing, a scratch of y's size. */
  void* recv = y->data;
  if (!par_contiguous(&py) && in_tmp != NULL) {
    recv = full + (size_t)(c->offs[c->rank] * inner) * es;
  } else if (!par_contiguous(&py) && (recv = out_tmp = tp_scratch(comm, fn, y)) == NULL) {
    return loomSystemError;
  }
  loomResult_t r = reduce_blocks(full, recv, inner, c->offs, c->rank, c->n, x->dtype, op, comm);
  if (r == loomSuccess && recv != y->data) par_unpack(recv, &py);
  free(in_tmp);
  free(out_tmp);
  return r;
}

loomResult_t loomReduceScatterDim(const loomTensor* x, loomTensor* y, int dim,
                                  const int64_t* splits, loomRedOp_t op, loomComm_t comm,
                                  loomStream_t stream) {
  static const char fn[] = "loomReduceScatterDim";
  struct dim_call c;
  TP_TRY(dim_call_check(comm, fn, x, y, DIM_SCATTER, dim, splits, &c));
  loomResult_t r = check_op(comm, fn, op, x->dtype);
  if (r == loomSuccess) r = par_enter(comm, fn, stream);
  if (r == loomSuccess && par_numel(x) > 0) r = reduce_scatter_run(x, y, dim, op, &c, comm, fn);
  free(c.offs);
  return r;
}

/* ---- loomSplitDim ------------------------------------------------------------------------- */

loomResult_t loomSplitDim(const loomTensor* x, loomTensor* y, int dim, const int64_t* splits,
                          loomComm_t comm, loomStream_t stream) {
  static const char fn[] = "loomSplitDim";
  struct dim_call c;
  TP_TRY(dim_call_check(comm, fn, x, y, DIM_SPLIT, dim, splits, &c));
  loomResult_t r = par_enter(comm, fn, stream);
  if (r == loomSuccess && par_numel(y) > 0) {
    loomTensor s = *x;
    s.shape[dim] = y->shape[dim];
    s.data = (char*)x->data + c.offs[c.rank] * x->strides[dim] * (int64_t)par_dtype_size(x->dtype);
    par_copy(&s, y);
  }
  free(c.offs);
  return r;
}
