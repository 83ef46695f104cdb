/* moe_move.c - the four MoE moves over a layout (PARALLEL.md section 5): Dispatch, Combine,
 * DispatchBackward and CombineBackward.
 *
 * Dispatch direction (Dispatch, CombineBackward's dY): every row is written once, in the send
 * order, either straight to its final row of the output when it stays on this rank, or into
 * one exchange buffer that holds the other ranks' segments back to back; one group of
 * messages (moe_rows.c) then lands each segment at its final rows on its receiver. Padding
 * rows are zeroed in place. Combine direction (Combine, DispatchBackward, CombineBackward's
 * dTopkWeights): the receivers send their rows back, segment by segment, into a buffer in
 * send order; each token then sums its pairs in slot order k = 0..K-1, reading this rank's own
 * rows where they lie. DispatchBackward's dx is Combine's code with no weights, so the two
 * agree bitwise, as the contract asks. */
#include <stdlib.h>
#include <string.h>

#include "moe.h"

/* Where slot s's row goes in the dispatch direction. */
static char* fwd_dst(const struct loomMoeHandle* h, int64_t s, char* buf, char* out, size_t rb) {
  int64_t lo = moe_self_lo(h);
  if (s >= lo && s < moe_self_hi(h)) return out + h->self_row[s - lo] * rb;
  return buf + moe_buf_row(h, s) * rb;
}

/* Each slot's row of rows (token t's), scaled by w[t][k] when w is given, in send order. */
static void fwd_pack_rows(const struct loomMoeHandle* h, const struct moe_rows* src,
                          loomDataType_t dt, const loomTensor* w, char* buf, char* out) {
  if (src->rb == 0) return;
  for (int64_t s = 0; s < h->send_off[h->E]; s++) {
    int64_t pair = h->send_pair[s], t = pair / h->K;
    char* dst = fwd_dst(h, s, buf, out, src->rb);
    if (w == NULL)
      memcpy(dst, src->base + t * src->rb, src->rb);
    else
      moe_row_scale(src->base + t * src->rb, dst, dt, src->elems,
                    moe_weight_get(w, t, (int)(pair % h->K)));
  }
}

/* Each slot's weight w[t][k], in w's dtype, in send order. */
static void fwd_pack_weights(const struct loomMoeHandle* h, const loomTensor* w, char* buf,
                             char* out) {
  size_t es = par_dtype_size(w->dtype);
  for (int64_t s = 0; s < h->send_off[h->E]; s++) {
    int64_t pair = h->send_pair[s];
    double v = moe_weight_get(w, pair / h->K, (int)(pair % h->K));
    char* dst = fwd_dst(h, s, buf, out, es);
    if (es == 4) {
      float f = (float)v;
      memcpy(dst, &f, 4);
    } else {
      memcpy(dst, &v, 8);
    }
  }
}

/* ---- Dispatch ---------------------------------------------------------------------------- */

static loomResult_t dispatch_check(const struct loomMoeHandle* h, const char* fn,
                                   const loomTensor* x, const loomTensor* w, const loomTensor* rx,
                                   const loomTensor* rw) {
  MOE_TRY(moe_check_rows(h, fn, "x", x, h->T, "T_r", 0));
  MOE_TRY(moe_check_rows(h, fn, "recvX", rx, h->R, "R", 1));
  MOE_TRY(moe_check_like(h, fn, "recvX", rx, "x", x));
  MOE_TRY(moe_check_pair(h, fn, "topkWeights", w, "recvWeights", rw));
  if (w != NULL) {
    MOE_TRY(moe_check_weights(h, fn, "topkWeights", w, 0, 0));
    MOE_TRY(moe_check_weights(h, fn, "recvWeights", rw, 1, 1));
    if (rw->dtype != w->dtype)
      return par_err(h->comm, fn, "recvWeights.dtype is %s but topkWeights.dtype is %s",
                     par_dtype_name(rw->dtype), par_dtype_name(w->dtype));
  }
  const loomTensor* outs[] = {rx, rw};
  const loomTensor* ins[] = {x, w};
  const char* on[] = {"recvX", "recvWeights"};
  const char* in[] = {"x", "topkWeights"};
  return moe_check_disjoint(h, fn, 2, outs, on, 2, ins, in);
}

static loomResult_t dispatch_run(const struct loomMoeHandle* h, const char* fn, const loomTensor* x,
                                 const loomTensor* w, const loomTensor* rx, const loomTensor* rw) {
  struct moe_rows xr, outr, wr = {0};
  char *buf = NULL, *wbuf = NULL;
  MOE_TRY(moe_rows_in(h, fn, x, &xr));
  loomResult_t r = moe_rows_out(h, fn, rx, &outr);
  if (r == loomSuccess && w != NULL) r = moe_rows_out(h, fn, rw, &wr);
  if (r == loomSuccess && ((buf = moe_buf(h, fn, MOE_SCRATCH_ROWS, xr.rb)) == NULL ||
                           (w != NULL && (wbuf = moe_buf(h, fn, MOE_SCRATCH_AUX, wr.rb)) == NULL)))
    r = loomSystemError;
  if (r == loomSuccess) {
    moe_zero_padding(h, outr.base, outr.rb);
    fwd_pack_rows(h, &xr, x->dtype, NULL, buf, outr.base);
    r = moe_forward(h, fn, buf, outr.base, outr.rb);
  }
  if (r == loomSuccess && w != NULL) {
    moe_zero_padding(h, wr.base, wr.rb);
    fwd_pack_weights(h, w, wbuf, wr.base);
    r = moe_forward(h, fn, wbuf, wr.base, wr.rb);
  }
  moe_rows_finish(x, &xr, 0);
  moe_rows_finish(rx, &outr, r == loomSuccess);
  if (w != NULL) moe_rows_finish(rw, &wr, r == loomSuccess);
  return r;
}

loomResult_t loomMoeDispatch(loomMoeHandle_t handle, const loomTensor* x,
                             const loomTensor* topkWeights, loomTensor* recvX,
                             loomTensor* recvWeights, loomStream_t stream) {
  static const char fn[] = "loomMoeDispatch";
  MOE_TRY(moe_check_handle(handle, fn));
  MOE_TRY(dispatch_check(handle, fn, x, topkWeights, recvX, recvWeights));
  MOE_TRY(par_enter(handle->comm, fn, stream));
  return dispatch_run(handle, fn, x, topkWeights, recvX, recvWeights);
}

/* ---- Combine ----------------------------------------------------------------------------- */

/* out[t] = sum over the pairs of t, k ascending, of (w[t][k] *) row(t, k). */
static loomResult_t combine_sum(const struct loomMoeHandle* h, const char* fn,
                                const struct moe_rows* yr, const char* back, loomDataType_t dt,
                                const loomTensor* w, const struct moe_rows* outr) {
  if (yr->elems == 0) return loomSuccess; /* rows of no elements: out has none either */
  void* acc = par_scratch(h->comm, fn, (size_t)yr->elems * moe_acc_size(dt));
  if (acc == NULL) return loomSystemError;
  for (int64_t t = 0; t < h->T; t++) {
    memset(acc, 0, (size_t)yr->elems * moe_acc_size(dt));
    for (int k = 0; k < h->K; k++) {
      int64_t s = h->slot[t * h->K + k];
      if (s < 0) continue;
      const char* row = moe_slot_row(h, s, yr->base, back, yr->rb);
      moe_acc_add(acc, row, dt, yr->elems, w != NULL, w ? moe_weight_get(w, t, k) : 1.0);
    }
    moe_acc_store(acc, outr->base + t * outr->rb, dt, outr->elems);
  }
  free(acc);
  return loomSuccess;
}

/* The reverse exchange of y's rows, then the per-token sums into out. */
static loomResult_t combine_run(const struct loomMoeHandle* h, const char* fn, const loomTensor* y,
                                const loomTensor* w, const loomTensor* out) {
  struct moe_rows yr, outr;
  char* back = NULL;
  MOE_TRY(moe_rows_in(h, fn, y, &yr));
  loomResult_t r = moe_rows_out(h, fn, out, &outr);
  if (r == loomSuccess && (back = moe_buf(h, fn, MOE_SCRATCH_ROWS, yr.rb)) == NULL)
    r = loomSystemError;
  if (r == loomSuccess) r = moe_reverse(h, fn, yr.base, back, yr.rb);
  if (r == loomSuccess) r = combine_sum(h, fn, &yr, back, y->dtype, w, &outr);
  moe_rows_finish(y, &yr, 0);
  moe_rows_finish(out, &outr, r == loomSuccess);
  return r;
}

/* y [R, ...] and out [T_r, ...] of one float dtype. */
static loomResult_t combine_check(const struct loomMoeHandle* h, const char* fn, const char* y_name,
                                  const loomTensor* y, const char* out_name,
                                  const loomTensor* out) {
  MOE_TRY(moe_check_rows(h, fn, y_name, y, h->R, "R", 0));
  MOE_TRY(moe_check_float(h, fn, y_name, y));
  MOE_TRY(moe_check_rows(h, fn, out_name, out, h->T, "T_r", 1));
  return moe_check_like(h, fn, out_name, out, y_name, y);
}

loomResult_t loomMoeCombine(loomMoeHandle_t handle, const loomTensor* y,
                            const loomTensor* topkWeights, loomTensor* out, loomStream_t stream) {
  static const char fn[] = "loomMoeCombine";
  MOE_TRY(moe_check_handle(handle, fn));
  MOE_TRY(combine_check(handle, fn, "y", y, "out", out));
  if (topkWeights != NULL) MOE_TRY(moe_check_weights(handle, fn, "topkWeights", topkWeights, 0, 0));
  const loomTensor* outs[] = {out};
  const loomTensor* ins[] = {y, topkWeights};
  const char* on[] = {"out"};
  const char* in[] = {"y", "topkWeights"};
  MOE_TRY(moe_check_disjoint(handle, fn, 1, outs, on, 2, ins, in));
  MOE_TRY(par_enter(handle->comm, fn, stream));
  return combine_run(handle, fn, y, topkWeights, out);
}

/* ---- DispatchBackward -------------------------------------------------------------------- */

/* dTopkWeights[t][k] = dRecvWeights[row(t, k)], 0 off pairs: the reverse of the weights. */
static loomResult_t weights_back(const struct loomMoeHandle* h, const char* fn,
                                 const loomTensor* drw, const loomTensor* dtw) {
  struct moe_rows wr;
  char* back = NULL;
  MOE_TRY(moe_rows_in(h, fn, drw, &wr));
  loomResult_t r = (back = moe_buf(h, fn, MOE_SCRATCH_AUX, wr.rb)) ? loomSuccess : loomSystemError;
  if (r == loomSuccess) r = moe_reverse(h, fn, wr.base, back, wr.rb);
  for (int64_t t = 0; t < h->T && r == loomSuccess; t++)
    for (int k = 0; k < h->K; k++) {
      int64_t s = h->slot[t * h->K + k];
      double v = 0;
      if (s >= 0) {
        const char* p = moe_slot_row(h, s, wr.base, back, wr.rb);
        v = wr.rb == 4 ? (double)*(const float*)p : *(const double*)p;
      }
      moe_weight_set(dtw, t, k, v);
    }
  moe_rows_finish(drw, &wr, 0);
  return r;
}

loomResult_t loomMoeDispatchBackward(loomMoeHandle_t handle, const loomTensor* dRecvX,
                                     const loomTensor* dRecvWeights, loomTensor* dx,
                                     loomTensor* dTopkWeights, loomStream_t stream) {
  static const char fn[] = "loomMoeDispatchBackward";
  const struct loomMoeHandle* h = handle;
  MOE_TRY(moe_check_handle(h, fn));
  MOE_TRY(combine_check(h, fn, "dRecvX", dRecvX, "dx", dx));
  MOE_TRY(moe_check_pair(h, fn, "dRecvWeights", dRecvWeights, "dTopkWeights", dTopkWeights));
  if (dRecvWeights != NULL) {
    MOE_TRY(moe_check_weights(h, fn, "dRecvWeights", dRecvWeights, 0, 1));
    MOE_TRY(moe_check_weights(h, fn, "dTopkWeights", dTopkWeights, 1, 0));
    if (dTopkWeights->dtype != dRecvWeights->dtype)
      return par_err(h->comm, fn, "dTopkWeights.dtype is %s but dRecvWeights.dtype is %s",
                     par_dtype_name(dTopkWeights->dtype), par_dtype_name(dRecvWeights->dtype));
  }
  const loomTensor* outs[] = {dx, dTopkWeights};
  const loomTensor* ins[] = {dRecvX, dRecvWeights};
  const char* on[] = {"dx", "dTopkWeights"};
  const char* in[] = {"dRecvX", "dRecvWeights"};
  MOE_TRY(moe_check_disjoint(h, fn, 2, outs, on, 2, ins, in));
  MOE_TRY(par_enter(h->comm, fn, stream));
  MOE_TRY(combine_run(h, fn, dRecvX, NULL, dx));
  return dRecvWeights ? weights_back(h, fn, dRecvWeights, dTopkWeights) : loomSuccess;
}

/* ---- CombineBackward --------------------------------------------------------------------- */

static loomResult_t combine_back_check(const struct loomMoeHandle* h, const char* fn,
                                       const loomTensor* dout, const loomTensor* y,
                                       const loomTensor* w, const loomTensor* dy,
                                       const loomTensor* dw) {
  MOE_TRY(moe_check_rows(h, fn, "dOut", dout, h->T, "T_r", 0));
  MOE_TRY(moe_check_float(h, fn, "dOut", dout));
  MOE_TRY(moe_check_rows(h, fn, "dY", dy, h->R, "R", 1));
  MOE_TRY(moe_check_like(h, fn, "dY", dy, "dOut", dout));
  MOE_TRY(moe_check_pair(h, fn, "y", y, "dTopkWeights", dw));
  if (w != NULL) MOE_TRY(moe_check_weights(h, fn, "topkWeights", w, 0, 0));
  if (y != NULL) {
    MOE_TRY(moe_check_rows(h, fn, "y", y, h->R, "R", 0));
    MOE_TRY(moe_check_like(h, fn, "y", y, "dOut", dout));
    MOE_TRY(moe_check_weights(h, fn, "dTopkWeights", dw, 1, 0));
    if (w != NULL && dw->dtype != w->dtype)
      return par_err(h->comm, fn, "dTopkWeights.dtype is %s but topkWeights.dtype is %s",
                     par_dtype_name(dw->dtype), par_dtype_name(w->dtype));
  }
  const loomTensor* outs[] = {dy, dw};
  const loomTensor* ins[] = {dout, y, w};
  const char* on[] = {"dY", "dTopkWeights"};
  const char* in[] = {"dOut", "y", "topkWeights"};
  return moe_check_disjoint(h, fn, 2, outs, on, 3, ins, in);
}

/* dTopkWeights[t][k] = <dOut[t], y[row(t, k)]>, 0 off pairs. */
static void weight_grads(const struct loomMoeHandle* h, const struct moe_rows* dor,
                         const struct moe_rows* yr, const char* back, loomDataType_t dt,
                         const loomTensor* dw) {
  for (int64_t t = 0; t < h->T; t++)
    for (int k = 0; k < h->K; k++) {
      int64_t s = h->slot[t * h->K + k];
      double v = 0;
      if (s >= 0)
        v = moe_row_dot(dor->base + t * dor->rb, moe_slot_row(h, s, yr->base, back, yr->rb), dt,
                        dor->elems);
      moe_weight_set(dw, t, k, v);
    }
}

/* One group: the weighted rows of dOut out to dY (dispatch direction) and, with y, y's rows
 * back (combine direction); per peer both sides add the two in the same order. */
static loomResult_t combine_back_run(const struct loomMoeHandle* h, const char* fn,
                                     const loomTensor* dout, const loomTensor* y,
                                     const loomTensor* w, const loomTensor* dy,
                                     const loomTensor* dw) {
  struct moe_rows dor, dyr, yr = {0};
  char *buf = NULL, *back = NULL;
  MOE_TRY(moe_rows_in(h, fn, dout, &dor));
  loomResult_t r = moe_rows_out(h, fn, dy, &dyr);
  if (r == loomSuccess && y != NULL) r = moe_rows_in(h, fn, y, &yr);
  if (r == loomSuccess && ((buf = moe_buf(h, fn, MOE_SCRATCH_ROWS, dor.rb)) == NULL ||
                           (y != NULL && (back = moe_buf(h, fn, MOE_SCRATCH_AUX, yr.rb)) == NULL)))
    r = loomSystemError;
  if (r == loomSuccess) {
    moe_zero_padding(h, dyr.base, dyr.rb);
    fwd_pack_rows(h, &dor, dout->dtype, w, buf, dyr.base);
    r = moe_forward(h, fn, buf, dyr.base, dyr.rb);
  }
  if (r == loomSuccess && y != NULL) r = moe_reverse(h, fn, yr.base, back, yr.rb);
  if (r == loomSuccess && y != NULL) weight_grads(h, &dor, &yr, back, dout->dtype, dw);
  moe_rows_finish(dout, &dor, 0);
  if (y != NULL) moe_rows_finish(y, &yr, 0);
  moe_rows_finish(dy, &dyr, r == loomSuccess);
  return r;
}

loomResult_t loomMoeCombineBackward(loomMoeHandle_t handle, const loomTensor* dOut,
                                    const loomTensor* y, const loomTensor* topkWeights,
                                    loomTensor* dY, loomTensor* dTopkWeights, loomStream_t stream) {
  static const char fn[] = "loomMoeCombineBackward";
  MOE_TRY(moe_check_handle(handle, fn));
  MOE_TRY(combine_back_check(handle, fn, dOut, y, topkWeights, dY, dTopkWeights));
  MOE_TRY(par_enter(handle->comm, fn, stream));
  return combine_back_run(handle, fn, dOut, y, topkWeights, dY, dTopkWeights);
}
