/* linear.c - column- and row-parallel linear layers (PARALLEL.md 3.2): y = x * w^T + b with
 * w stored [out, in], the input-gradient passes and the local weight-gradient pass.
 *
 * The GEMM is pluggable (opts->gemm) and called only as y = x*w^T (transB), dx = dy*w and
 * dw = dy^T*x (transA). Under sequence parallelism the column forward gathers the input
 * slab by slab around a ring on a side stream while the GEMM of the slab already here runs
 * (lin_ring_forward); the other passes gather or reduce-scatter through section 3.1's calls.
 * The arguments are checked in linear_args.c. */
#include <stdlib.h>
#include <string.h>

#include "linear_args.h"
#include "par.h"

/* ---- GEMM and bias on matrix views ------------------------------------------------------- */

static loomResult_t lin_gemm(const struct lin_call* c, int ta, int tb, int64_t m, int64_t n,
                             int64_t k, const void* A, int64_t lda, const void* B, int64_t ldb,
                             double beta, void* C, int64_t ldc) {
  return c->gemm->fn(c->gemm->ctx, ta, tb, m, n, k, 1.0, A, lda, B, ldb, beta, C, ldc, c->dtype,
                     c->stream);
}

/* C = op(A) * op(B) (+ beta * C) over k, as lin_gemm; an empty C calls nothing, and with no
 * k the product is zero: C is zeroed (beta 0) or left as it is (beta 1). */
static loomResult_t lin_product(const struct lin_call* c, int ta, int tb, const struct lin_mat* C,
                                int64_t k, const void* A, int64_t lda, const void* B, int64_t ldb,
                                double beta) {
  size_t es = par_dtype_size(c->dtype);
  if (C->rows == 0 || C->cols == 0) return loomSuccess;
  if (k > 0) return lin_gemm(c, ta, tb, C->rows, C->cols, k, A, lda, B, ldb, beta, C->data, C->ld);
  for (int64_t i = 0; beta == 0.0 && i < C->rows; i++)
    memset((char*)C->data + i * C->ld * (int64_t)es, 0, (size_t)C->cols * es);
  return loomSuccess;
}

/* Every row of the rows x cols matrix at C (leading dimension ldc) becomes b, so that a GEMM
 * with beta = 1 adds the product to the bias with one rounding. */
static void bias_fill(const loomTensor* b, void* C, int64_t rows, int64_t cols, int64_t ldc) {
  size_t es = par_dtype_size(b->dtype);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++)
      memcpy((char*)C + (i * ldc + j) * (int64_t)es,
             (const char*)b->data + j * b->strides[0] * (int64_t)es, es);
}

/* C += b on every row, in the accumulation type, one rounding per element. */
static void bias_add(const loomTensor* b, void* C, int64_t rows, int64_t cols, int64_t ldc) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      double v = par_get(C, i * ldc + j, b->dtype) + par_get(b->data, j * b->strides[0], b->dtype);
      par_put(C, i * ldc + j, b->dtype, b->dtype == loomFloat64 ? v : (double)(float)v);
    }
}

/* ---- Column-parallel forward ------------------------------------------------------------- */

/* y rows [r0, r0 + nrows) = x rows of the same range times w^T (+ b). */
static loomResult_t col_rows(const struct lin_call* c, const struct lin_mat* x,
                             const struct lin_mat* w, const loomTensor* b, const struct lin_mat* y,
                             int64_t r0, int64_t nrows) {
  if (nrows == 0 || y->cols == 0) return loomSuccess;
  size_t es = par_dtype_size(c->dtype);
  void* yp = (char*)y->data + r0 * y->ld * (int64_t)es;
  if (b != NULL) bias_fill(b, yp, nrows, y->cols, y->ld);
  return lin_gemm(c, 0, 1, nrows, y->cols, x->cols, (const char*)x->data + r0 * x->ld * (int64_t)es,
                  x->ld, w->data, w->ld, b != NULL ? 1.0 : 0.0, yp, y->ld);
}

/* Sequence parallel, each rank's slab one block of rows of a dense xFull: step t sends the
 * slab that arrived last to rank + 1 and receives the next from rank - 1 on the side stream,
 * while the calling thread multiplies the slab it has. */
static loomResult_t lin_ring_forward(const struct lin_call* c, const loomTensor* x,
                                     const struct lin_mat* xf, const struct lin_mat* w,
                                     const loomTensor* b, const struct lin_mat* y,
                                     loomStream_t side) {
  int P = c->nranks, r = c->rank;
  size_t es = par_dtype_size(c->dtype);
  int64_t rows_per = c->inner_rows; /* matrix rows per position along seqDim */
  char* base = xf->data;
  size_t mine = (size_t)((c->offs[r + 1] - c->offs[r]) * rows_per * xf->cols) * es;
  if (mine > 0) /* x->data may be NULL when this rank has no slab */
    memcpy(base + c->offs[r] * rows_per * xf->cols * (int64_t)es, x->data, mine);
  for (int t = 0; t < P; t++) {
    int have = (r - t + P) % P, next = (r - t - 1 + P) % P;
    if (t < P - 1) {
      size_t n_have = (size_t)((c->offs[have + 1] - c->offs[have]) * rows_per * xf->cols);
      size_t n_next = (size_t)((c->offs[next + 1] - c->offs[next]) * rows_per * xf->cols);
      loomResult_t g = loomGroupStart();
      if (g != loomSuccess) return g;
      loomResult_t s1 = loomSend(base + c->offs[have] * rows_per * xf->cols * (int64_t)es, n_have,
                                 c->dtype, (r + 1) % P, c->comm, side);
      loomResult_t s2 = loomRecv(base + c->offs[next] * rows_per * xf->cols * (int64_t)es, n_next,
                                 c->dtype, (r - 1 + P) % P, c->comm, side);
      g = loomGroupEnd();
      if (s1 != loomSuccess) return s1;
      if (s2 != loomSuccess) return s2;
      if (g != loomSuccess) return g;
    }
    loomResult_t res = col_rows(c, xf, w, b, y, c->offs[have] * rows_per,
                                (c->offs[have + 1] - c->offs[have]) * rows_per);
    loomResult_t sync = t < P - 1 ? loomStreamSynchronize(side) : loomSuccess;
    if (res != loomSuccess) return res;
    if (sync != loomSuccess) return sync;
  }
  return loomSuccess;
}

loomResult_t loomColumnLinearForward(const loomTensor* x, const loomTensor* w, const loomTensor* b,
                                     loomTensor* y, loomTensor* xFull, const loomLinearOpts* opts,
                                     loomComm_t tp, loomStream_t stream) {
  static const char fn[] = "loomColumnLinearForward";
  struct lin_call c;
  struct lin_col_fwd a;
  loomResult_t res = lin_col_fwd_args(fn, x, w, b, y, xFull, opts, tp, stream, &c, &a);
  if (res != loomSuccess) return res;
  res = par_enter(tp, fn, stream);
  void* scratch = NULL;
  if (res == loomSuccess && a.scratch_bytes > 0 &&
      (scratch = par_scratch(tp, fn, a.scratch_bytes)) == NULL)
    res = loomSystemError;
  if (res != loomSuccess) {
    lin_call_fini(&c);
    return res;
  }
  lin_col_fwd_place(&c, &a, scratch);
  loomStream_t side = c.sp && c.nranks > 1 && a.ring ? par_side_stream() : NULL;
  if (c.sp && !(a.ring && side != NULL)) /* gather first, then one GEMM */
    res = loomAllGatherDim(x, &a.xfull_t, c.seq_dim, c.opts.seqSplits, tp, NULL);
  if (res == loomSuccess && c.sp && a.ring && side != NULL)
    res = lin_ring_forward(&c, x, &a.xf, &a.w, b, &a.ylocal, side);
  else if (res == loomSuccess)
    res = col_rows(&c, &a.xf, &a.w, b, &a.ylocal, 0, a.xf.rows);
  if (res == loomSuccess && c.opts.gatherOutput && c.nranks > 1)
    res = loomAllGatherDim(&a.ylocal_t, y, y->ndim - 1, NULL, tp, NULL);
  free(scratch);
  lin_call_fini(&c);
  return res;
}

/* ---- Input gradients --------------------------------------------------------------------- */

loomResult_t loomColumnLinearBackwardInput(const loomTensor* dy, const loomTensor* w,
                                           loomTensor* dx, const loomLinearOpts* opts,
                                           loomComm_t tp, loomStream_t stream) {
  static const char fn[] = "loomColumnLinearBackwardInput";
  struct lin_call c;
  struct lin_col_bwd a;
  loomResult_t res = lin_col_bwd_args(fn, dy, w, dx, opts, tp, stream, &c, &a);
  if (res != loomSuccess) return res;
  res = par_enter(tp, fn, stream);
  void* scratch = NULL;
  if (res == loomSuccess && a.scratch_bytes > 0 &&
      (scratch = par_scratch(tp, fn, a.scratch_bytes)) == NULL)
    res = loomSystemError;
  if (res != loomSuccess) {
    lin_call_fini(&c);
    return res;
  }
  lin_col_bwd_place(&a, scratch);
  /* The partial sum dy_r * w_r over every token, then summed over the ranks. */
  res = lin_product(&c, 0, 0, &a.partial, a.dyr.cols, a.dyr.data, a.dyr.ld, a.w.data, a.w.ld, 0.0);
  if (res == loomSuccess && c.sp)
    res = loomReduceScatterDim(&a.partial_t, dx, c.seq_dim, c.opts.seqSplits, loomSum, tp, NULL);
  else if (res == loomSuccess)
    res = loomAllReduceTensor(dx, dx, loomSum, tp, NULL);
  free(scratch);
  lin_call_fini(&c);
  return res;
}

loomResult_t loomRowLinearBackwardInput(const loomTensor* dy, const loomTensor* w, loomTensor* dx,
                                        loomTensor* dyFull, const loomLinearOpts* opts,
                                        loomComm_t tp, loomStream_t stream) {
  static const char fn[] = "loomRowLinearBackwardInput";
  struct lin_call c;
  struct lin_row_bwd a;
  loomResult_t res = lin_row_bwd_args(fn, dy, w, dx, dyFull, opts, tp, stream, &c, &a);
  if (res != loomSuccess) return res;
  res = par_enter(tp, fn, stream);
  void* scratch = NULL;
  if (res == loomSuccess && a.scratch_bytes > 0 &&
      (scratch = par_scratch(tp, fn, a.scratch_bytes)) == NULL)
    res = loomSystemError;
  if (res != loomSuccess) {
    lin_call_fini(&c);
    return res;
  }
  lin_row_bwd_place(&a, scratch);
  if (c.sp) res = loomAllGatherDim(dy, &a.dyfull_t, c.seq_dim, c.opts.seqSplits, tp, NULL);
  if (res == loomSuccess)
    res = lin_product(&c, 0, 0, &a.dx, a.dyf.cols, a.dyf.data, a.dyf.ld, a.w.data, a.w.ld, 0.0);
  free(scratch);
  lin_call_fini(&c);
  return res;
}

/* ---- Row-parallel forward ---------------------------------------------------------------- */

loomResult_t loomRowLinearForward(const loomTensor* x, const loomTensor* w, const loomTensor* b,
                                  loomTensor* y, const loomLinearOpts* opts, loomComm_t tp,
                                  loomStream_t stream) {
  static const char fn[] = "loomRowLinearForward";
  struct lin_call c;
  struct lin_row_fwd a;
  loomResult_t res = lin_row_fwd_args(fn, x, w, b, y, opts, tp, stream, &c, &a);
  if (res != loomSuccess) return res;
  res = par_enter(tp, fn, stream);
  void* scratch = NULL;
  if (res == loomSuccess && a.scratch_bytes > 0 &&
      (scratch = par_scratch(tp, fn, a.scratch_bytes)) == NULL)
    res = loomSystemError;
  if (res != loomSuccess) {
    lin_call_fini(&c);
    return res;
  }
  lin_row_fwd_place(&c, &a, scratch);
  res = lin_product(&c, 0, 1, &a.partial, a.x.cols, a.x.data, a.x.ld, a.w.data, a.w.ld, 0.0);
  if (res == loomSuccess && c.sp)
    res = loomReduceScatterDim(&a.partial_t, y, c.seq_dim, c.opts.seqSplits, loomSum, tp, NULL);
  else if (res == loomSuccess)
    res = loomAllReduceTensor(y, y, loomSum, tp, NULL);
  if (res == loomSuccess && b != NULL) bias_add(b, a.y.data, a.y.rows, a.y.cols, a.y.ld);
  free(scratch);
  lin_call_fini(&c);
  return res;
}

/* ---- Weight gradient (local) ------------------------------------------------------------- */

loomResult_t loomLinearBackwardWeight(const loomTensor* x, const loomTensor* dy, loomTensor* dw,
                                      loomTensor* db, const loomLinearOpts* opts,
                                      loomStream_t stream) {
  static const char fn[] = "loomLinearBackwardWeight";
  struct lin_call c;
  struct lin_wgrad a;
  loomResult_t res = lin_wgrad_args(fn, x, dy, dw, db, opts, stream, &c, &a);
  if (res != loomSuccess) return res;
  res = par_enter(NULL, fn, stream);
  if (res != loomSuccess) return res;
  double beta = c.opts.accumulate ? 1.0 : 0.0;
  res = lin_product(&c, 1, 0, &a.dw, a.x.rows, a.dy.data, a.dy.ld, a.x.data, a.x.ld, beta);
  if (res != loomSuccess || db == NULL) return res;
  /* db = sum over rows of dy, in the accumulation type, in row order. */
  for (int64_t j = 0; j < a.dy.cols; j++) {
    double s = c.opts.accumulate ? par_get(db->data, j * db->strides[0], c.dtype) : 0.0;
    if (c.dtype == loomFloat64) {
      for (int64_t i = 0; i < a.dy.rows; i++) s += par_get(a.dy.data, i * a.dy.ld + j, c.dtype);
    } else {
      float f = (float)s;
      for (int64_t i = 0; i < a.dy.rows; i++)
        f += (float)par_get(a.dy.data, i * a.dy.ld + j, c.dtype);
      s = f;
    }
    par_put(db->data, j * db->strides[0], c.dtype, s);
  }
  return loomSuccess;
}
