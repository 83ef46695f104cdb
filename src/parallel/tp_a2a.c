/* tp_a2a.c - loomAlltoAllDim (PARALLEL.md section 3.1): the Ulysses exchange of sequence for
 * heads, and any pair of dims with any splits and strides.
 *
 * Rank r sends rank q the rows [soffs[q], soffs[q+1]) of x's scatter-first order, one block;
 * it receives from rank q a block in the same (scatter-first) order of the sender's dims, which
 * is y's slice [goffs[q], goffs[q+1]) along gatherDim with scatterDim moved to the front. x is
 * packed once unless its memory already is scatter-first; the blocks land in y directly when
 * each of them is contiguous there at its place, else in a scratch unpacked once. */
#include <stdlib.h>
#include <string.h>

#include "tp_coll.h"

/* The call's shape: offsets along both dims and the element counts of the exchange. */
struct a2a {
  int rank, n;
  int s, g;               /* scatterDim, gatherDim */
  int64_t *soffs, *goffs; /* n + 1 each */
  int64_t other;          /* elements per (scatter row, gather row) pair: the other dims */
  size_t* v;              /* sendcounts, sdispls, recvcounts, rdispls: n each */
};

static void a2a_free(struct a2a* a) {
  free(a->soffs);
  free(a->goffs);
  free(a->v);
}

/* The sizes of the dims and splits, then any overlap (there is no in-place form). */
static loomResult_t a2a_check_splits(loomComm_t comm, const char* fn, const loomTensor* x,
                                     const loomTensor* y, const int64_t* scatterSplits,
                                     const int64_t* gatherSplits, struct a2a* a) {
  TP_TRY(tp_offsets(comm, fn, "scatterSplits", scatterSplits, a->n, "x", x, a->s, &a->soffs));
  TP_TRY(tp_offsets(comm, fn, "gatherSplits", gatherSplits, a->n, "y", y, a->g, &a->goffs));
  TP_TRY(tp_check_part(comm, fn, "gatherSplits", gatherSplits, a->rank, a->goffs, "x", x, a->g));
  TP_TRY(tp_check_part(comm, fn, "scatterSplits", scatterSplits, a->rank, a->soffs, "y", y, a->s));
  if (par_overlap(x, y))
    return par_err(comm, fn, "x and y overlap (loomAlltoAllDim has no in-place form)");
  return loomSuccess;
}

static loomResult_t a2a_check(loomComm_t comm, const char* fn, const loomTensor* x,
                              const loomTensor* y, const int64_t* scatterSplits,
                              const int64_t* gatherSplits, struct a2a* a) {
  TP_TRY(par_comm(comm, fn, "comm", &a->rank, &a->n));
  TP_TRY(par_check(comm, fn, "x", x));
  TP_TRY(par_check_out(comm, fn, "y", y));
  TP_TRY(tp_check_kinds(comm, fn, x, y));
  TP_TRY(tp_check_dim(comm, fn, "scatterDim", a->s, "x", x));
  TP_TRY(tp_check_dim(comm, fn, "gatherDim", a->g, "x", x));
  if (a->s == a->g)
    return par_err(comm, fn, "scatterDim and gatherDim are both %d (they must differ)", a->s);
  TP_TRY(tp_check_shapes(comm, fn, x, y, a->s, a->g));
  return a2a_check_splits(comm, fn, x, y, scatterSplits, gatherSplits, a);
}

/* Counts and displacements of the exchange, in elements (they fit: each is at most the
 * element count of x or y). */
static loomResult_t a2a_counts(loomComm_t comm, const char* fn, const loomTensor* y,
                               struct a2a* a) {
  int n = a->n;
  if ((a->v = malloc(4 * (size_t)n * sizeof(size_t))) == NULL)
    return par_fail(comm, loomSystemError, fn, "out of memory for %d counts", 4 * n);
  a->other = tp_inner(y, a->s, a->g);
  int64_t mine_g = a->goffs[a->rank + 1] - a->goffs[a->rank]; /* x.shape[g] */
  int64_t mine_s = a->soffs[a->rank + 1] - a->soffs[a->rank]; /* y.shape[s] */
  for (int q = 0; q < n; q++) {
    a->v[q] = (size_t)((a->soffs[q + 1] - a->soffs[q]) * mine_g * a->other);
    a->v[n + q] = (size_t)(a->soffs[q] * mine_g * a->other);
    a->v[2 * n + q] = (size_t)(mine_s * (a->goffs[q + 1] - a->goffs[q]) * a->other);
    a->v[3 * n + q] = (size_t)(mine_s * a->goffs[q] * a->other);
  }
  return loomSuccess;
}

/* y's slice along gatherDim that rank q's block fills, scatterDim first: the block's order. */
static void a2a_block_view(const loomTensor* y, const struct a2a* a, int q, loomTensor* out) {
  loomTensor b = *y;
  b.shape[a->g] = a->goffs[q + 1] - a->goffs[q];
  if (b.shape[a->g] > 0 && par_numel(y) > 0)
    b.data = (char*)y->data + a->goffs[q] * y->strides[a->g] * (int64_t)par_dtype_size(y->dtype);
  tp_dim_first(&b, a->s, out);
}

/* 1 when every block is contiguous in y at the displacement the exchange writes it to. */
static int a2a_lands_in_place(const loomTensor* y, const struct a2a* a) {
  size_t es = par_dtype_size(y->dtype);
  for (int q = 0; q < a->n; q++) {
    loomTensor b;
    a2a_block_view(y, a, q, &b);
    if (par_numel(&b) == 0) continue;
    if (!par_contiguous(&b) || (char*)b.data != (char*)y->data + a->v[3 * a->n + q] * es) return 0;
  }
  return 1;
}

/* The exchange itself. Even splits on both dims make every count equal: the core's
 * all-to-all; otherwise its all-to-all-v. Both tests use only what every rank agrees on. */
static loomResult_t a2a_exchange(const void* send, void* recv, const loomTensor* y,
                                 const struct a2a* a, loomComm_t comm) {
  int n = a->n;
  if (tp_even(a->soffs, n) && tp_even(a->goffs, n))
    return loomAlltoAll(send, recv, a->v[0], y->dtype, comm, NULL);
  return loomAlltoAllv(send, a->v, a->v + n, recv, a->v + 2 * n, a->v + 3 * n, y->dtype, comm,
                       NULL);
}

static loomResult_t a2a_run(const loomTensor* x, const loomTensor* y, const struct a2a* a,
                            loomComm_t comm, const char* fn) {
  loomTensor px;
  tp_dim_first(x, a->s, &px);
  char *send_tmp = NULL, *recv_tmp = NULL;
  const void* send = x->data;
  if (!par_contiguous(&px)) {
    if ((send = send_tmp = tp_scratch(comm, fn, x)) == NULL) return loomSystemError;
    par_pack(&px, send_tmp);
  }
  void* recv = y->data;
  if (!a2a_lands_in_place(y, a) && (recv = recv_tmp = tp_scratch(comm, fn, y)) == NULL) {
    free(send_tmp);
    return loomSystemError;
  }
  loomResult_t r = a2a_exchange(send, recv, y, a, comm);
  size_t es = par_dtype_size(y->dtype);
  for (int q = 0; q < a->n && r == loomSuccess && recv_tmp != NULL; q++) {
    loomTensor b;
    a2a_block_view(y, a, q, &b);
    par_unpack(recv_tmp + a->v[3 * a->n + q] * es, &b);
  }
  free(send_tmp);
  free(recv_tmp);
  return r;
}

loomResult_t loomAlltoAllDim(const loomTensor* x, loomTensor* y, int scatterDim, int gatherDim,
                             const int64_t* scatterSplits, const int64_t* gatherSplits,
                             loomComm_t comm, loomStream_t stream) {
  static const char fn[] = "loomAlltoAllDim";
  struct a2a a;
  memset(&a, 0, sizeof(a));
  a.s = scatterDim;
  a.g = gatherDim;
  loomResult_t r = a2a_check(comm, fn, x, y, scatterSplits, gatherSplits, &a);
  if (r == loomSuccess) r = par_enter(comm, fn, stream);
  if (r == loomSuccess && a.n == 1) {
    par_copy(x, y); /* one rank: y's shape is x's */
  } else if (r == loomSuccess && (par_numel(x) > 0 || par_numel(y) > 0)) {
    r = a2a_counts(comm, fn, y, &a);
    if (r == loomSuccess) r = a2a_run(x, y, &a, comm, fn);
  }
  a2a_free(&a);
  return r;
}
