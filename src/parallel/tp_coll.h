/* tp_coll.h - what the conjugate collectives (PARALLEL.md section 3.1) share between
 * tp_coll.c (all-reduce, all-gather, reduce-scatter, split) and tp_a2a.c (all-to-all).
 *
 * The layout they all use: along dim d, rank q's part of the full tensor is one contiguous
 * block of the tensor's dim-first order (d moved to the front, the other dims kept in their
 * order), rows [offs[q], offs[q+1]) of it. Where a tensor's memory already is that order, the
 * core collective works on it in place; otherwise it is packed into that order once. */
#ifndef LOOM_TP_COLL_H
#define LOOM_TP_COLL_H

#include "par.h"

/* Returns from the calling function when call fails. */
#define TP_TRY(call)                        \
  do {                                      \
    loomResult_t tp_r_ = (call);            \
    if (tp_r_ != loomSuccess) return tp_r_; \
  } while (0)

/* The view of t with dim moved to the front (no copy). */
void tp_dim_first(const loomTensor* t, int dim, loomTensor* out);
/* The product of t's extents except along the dims a and b (-1: none). */
int64_t tp_inner(const loomTensor* t, int a, int b);
/* 1 when every rank's extent (offs[q+1] - offs[q]) is the same. */
int tp_even(const int64_t* offs, int n);
/* Scratch for t's elements (the count checked against size_t); NULL with an error set. */
void* tp_scratch(loomComm_t comm, const char* fn, const loomTensor* t);

/* dim names a dim of t ("dim is 4, outside [0, 3) (x.ndim)"). */
loomResult_t tp_check_dim(loomComm_t comm, const char* fn, const char* what, int dim,
                          const char* name, const loomTensor* t);
/* x and y have one dtype and ndim (checked before any dim argument is). */
loomResult_t tp_check_kinds(loomComm_t comm, const char* fn, const loomTensor* x,
                            const loomTensor* y);
/* x and y have equal extents off the dims a and b (-1: none). */
loomResult_t tp_check_shapes(loomComm_t comm, const char* fn, const loomTensor* x,
                             const loomTensor* y, int a, int b);
/* Checks splits (NULL: even) against name.shape[dim] over n ranks and returns offs[0..n]
 * (malloc'd, the caller frees it): "splits sum to 10 but y.shape[1] is 12". */
loomResult_t tp_offsets(loomComm_t comm, const char* fn, const char* what, const int64_t* splits,
                        int n, const char* name, const loomTensor* t, int dim, int64_t** offs_out);
/* name.shape[dim] is rank's extent: "x.shape[1] is 3 but splits[2] is 4". */
loomResult_t tp_check_part(loomComm_t comm, const char* fn, const char* what, const int64_t* splits,
                           int rank, const int64_t* offs, const char* name, const loomTensor* t,
                           int dim);

#endif
