/* linear_args.h - the argument checks of the parallel linear layers (linear.c) and what they
 * work out: matrix views, the full token shape, splits, and where scratch goes. Every check
 * runs before any communication; a failure names the function, the argument and the values. */
#ifndef LOOM_PAR_LINEAR_ARGS_H
#define LOOM_PAR_LINEAR_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "par.h"

/* A row-major matrix view: rows x cols, leading dimension ld (elements). */
struct lin_mat {
  void* data;
  int64_t rows, cols, ld;
};

/* What every linear call shares. */
struct lin_call {
  loomComm_t comm; /* NULL for the weight gradient */
  loomStream_t stream;
  loomDataType_t dtype; /* of the first tensor checked (have_dtype) */
  int have_dtype;
  const loomGemm* gemm;
  loomLinearOpts opts;
  int rank, nranks;
  int sp, seq_dim;
  int64_t* offs;      /* sp: nranks + 1 offsets along seq_dim (malloc'd; lin_call_fini) */
  int64_t inner_rows; /* matrix rows per position along seq_dim */
};
void lin_call_fini(struct lin_call* c);

struct lin_col_fwd {
  struct lin_mat xf, w, ylocal; /* xf: the full input (x itself without sp) */
  loomTensor xfull_t, ylocal_t; /* tensors of xf and ylocal */
  int xfull_scratch, ylocal_scratch;
  int ring; /* sp with each rank's slab one block of rows of a dense xf */
  size_t scratch_bytes;
};
loomResult_t lin_col_fwd_args(const char* fn, const loomTensor* x, const loomTensor* w,
                              const loomTensor* b, const loomTensor* y, const loomTensor* xFull,
                              const loomLinearOpts* opts, loomComm_t tp, loomStream_t stream,
                              struct lin_call* c, struct lin_col_fwd* a);
void lin_col_fwd_place(const struct lin_call* c, struct lin_col_fwd* a, void* scratch);

struct lin_col_bwd {
  struct lin_mat dyr, w, partial; /* dyr: the rank's columns of dy */
  loomTensor partial_t;           /* sp: full-shape scratch; else dx */
  size_t scratch_bytes;
};
loomResult_t lin_col_bwd_args(const char* fn, const loomTensor* dy, const loomTensor* w,
                              const loomTensor* dx, const loomLinearOpts* opts, loomComm_t tp,
                              loomStream_t stream, struct lin_call* c, struct lin_col_bwd* a);
void lin_col_bwd_place(struct lin_col_bwd* a, void* scratch);

struct lin_row_fwd {
  struct lin_mat x, w, partial, y;
  loomTensor partial_t; /* sp: full-shape scratch; else y */
  size_t scratch_bytes;
};
loomResult_t lin_row_fwd_args(const char* fn, const loomTensor* x, const loomTensor* w,
                              const loomTensor* b, const loomTensor* y, const loomLinearOpts* opts,
                              loomComm_t tp, loomStream_t stream, struct lin_call* c,
                              struct lin_row_fwd* a);
void lin_row_fwd_place(const struct lin_call* c, struct lin_row_fwd* a, void* scratch);

struct lin_row_bwd {
  struct lin_mat dyf, w, dx;
  loomTensor dyfull_t; /* sp: dyFull or full-shape scratch */
  int dyfull_scratch;
  size_t scratch_bytes;
};
loomResult_t lin_row_bwd_args(const char* fn, const loomTensor* dy, const loomTensor* w,
                              const loomTensor* dx, const loomTensor* dyFull,
                              const loomLinearOpts* opts, loomComm_t tp, loomStream_t stream,
                              struct lin_call* c, struct lin_row_bwd* a);
void lin_row_bwd_place(struct lin_row_bwd* a, void* scratch);

struct lin_wgrad {
  struct lin_mat x, dy, dw;
};
loomResult_t lin_wgrad_args(const char* fn, const loomTensor* x, const loomTensor* dy,
                            const loomTensor* dw, const loomTensor* db, const loomLinearOpts* opts,
                            loomStream_t stream, struct lin_call* c, struct lin_wgrad* a);

#endif
