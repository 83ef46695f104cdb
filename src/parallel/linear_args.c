/* linear_args.c - the argument checks of the parallel linear layers (linear_args.h). */
#include "linear_args.h"

#include <stdlib.h>
#include <string.h>

void lin_call_fini(struct lin_call* c) {
  free(c->offs);
  c->offs = NULL;
}

/* ---- Pieces every check uses ------------------------------------------------------------- */

static loomResult_t call_init(const char* fn, const loomLinearOpts* opts, loomComm_t comm,
                              loomStream_t stream, struct lin_call* c) {
  static const loomLinearOpts defaults = LOOM_LINEAR_OPTS_INIT;
  memset(c, 0, sizeof(*c));
  c->comm = comm;
  c->stream = stream;
  c->opts = opts != NULL ? *opts : defaults;
  c->gemm = c->opts.gemm != NULL ? c->opts.gemm : loomGemmDefault();
  c->rank = 0;
  c->nranks = 1;
  if (c->gemm->fn == NULL) return par_err(comm, fn, "opts->gemm->fn is NULL");
  if (c->opts.sequenceParallel != 0 && c->opts.sequenceParallel != 1)
    return par_err(comm, fn, "opts->sequenceParallel is %d, not 0 or 1", c->opts.sequenceParallel);
  if (c->opts.overlap < -1 || c->opts.overlap > 1)
    return par_err(comm, fn, "opts->overlap is %d, not -1, 0 or 1", c->opts.overlap);
  c->sp = c->opts.sequenceParallel;
  c->seq_dim = c->opts.seqDim;
  return loomSuccess;
}

/* A tensor of the call's dtype (the first one checked sets it). */
static loomResult_t tensor_in(struct lin_call* c, const char* fn, const char* name,
                              const loomTensor* t, int out) {
  loomResult_t r = out ? par_check_out(c->comm, fn, name, t) : par_check(c->comm, fn, name, t);
  if (r != loomSuccess) return r;
  if (!par_dtype_is_compute(t->dtype))
    return par_err(c->comm, fn,
                   "%s.dtype is %s; linear layers take float16, bfloat16, float32 or float64", name,
                   par_dtype_name(t->dtype));
  if (!c->have_dtype) {
    c->dtype = t->dtype;
    c->have_dtype = 1;
  }
  if (t->dtype != c->dtype)
    return par_err(c->comm, fn, "%s.dtype is %s but the call's is %s", name,
                   par_dtype_name(t->dtype), par_dtype_name(c->dtype));
  return loomSuccess;
}

static loomResult_t matrix_of(struct lin_call* c, const char* fn, const char* name,
                              const loomTensor* t, struct lin_mat* m) {
  if (!par_matrix(t, &m->rows, &m->cols, &m->ld))
    return par_err(c->comm, fn,
                   "%s is not matrix-viewable (last-dim stride 1, leading dims "
                   "contiguous over one another)",
                   name);
  m->data = t->data;
  return loomSuccess;
}

/* A weight [rows, cols] as a matrix. */
static loomResult_t weight_of(struct lin_call* c, const char* fn, const char* name,
                              const loomTensor* w, struct lin_mat* m) {
  if (w->ndim != 2)
    return par_err(c->comm, fn, "%s.ndim is %d, expected 2 ([out, in])", name, w->ndim);
  return matrix_of(c, fn, name, w, m);
}

static loomResult_t bias_check(struct lin_call* c, const char* fn, const char* name,
                               const loomTensor* b, int64_t n) {
  if (b == NULL) return loomSuccess;
  loomResult_t r = tensor_in(c, fn, name, b, 0);
  if (r != loomSuccess) return r;
  if (b->ndim != 1 || b->shape[0] != n) {
    char s[160];
    return par_err(c->comm, fn, "%s has shape %s, expected [%lld]", name,
                   par_shape_str(b, s, sizeof(s)), (long long)n);
  }
  return loomSuccess;
}

/* out must not overlap in (an output never shares bytes with an input here). */
static loomResult_t apart(struct lin_call* c, const char* fn, const char* out_name,
                          const loomTensor* out, const char* in_name, const loomTensor* in) {
  if (out == NULL || in == NULL || !par_overlap(out, in)) return loomSuccess;
  return par_err(c->comm, fn, "%s overlaps %s", out_name, in_name);
}

/* t's shape with dims other than except (and the last when skip_last) equal to ref's. */
static loomResult_t shape_like(struct lin_call* c, const char* fn, const char* name,
                               const loomTensor* t, const char* ref_name, const loomTensor* ref,
                               int except, int skip_last) {
  char s1[160], s2[160];
  int ok = t->ndim == ref->ndim;
  for (int d = 0; ok && d < t->ndim; d++)
    if (d != except && !(skip_last && d == t->ndim - 1) && t->shape[d] != ref->shape[d]) ok = 0;
  if (ok) return loomSuccess;
  return par_err(c->comm, fn, "%s has shape %s, which does not agree with %s %s", name,
                 par_shape_str(t, s1, sizeof(s1)), ref_name, par_shape_str(ref, s2, sizeof(s2)));
}

/* Sequence parallel: seqDim in range and seqSplits over the full extent; the local extent is
 * local_ext (or, full_known, the full one is full_ext). */
static loomResult_t seq_setup(struct lin_call* c, const char* fn, int ndim, int64_t local_ext,
                              int64_t full_ext, int full_known, int64_t* full_out) {
  if (c->seq_dim < 0 || c->seq_dim >= ndim - 1)
    return par_err(c->comm, fn,
                   "opts->seqDim is %d, outside [0, %d) (the last dim is the feature dim)",
                   c->seq_dim, ndim - 1);
  int64_t full = full_ext;
  const int64_t* sp = c->opts.seqSplits;
  if (!full_known) {
    if (sp == NULL) {
      full = local_ext * c->nranks;
    } else {
      full = 0;
      for (int r = 0; r < c->nranks; r++) {
        if (sp[r] < 0)
          return par_err(c->comm, fn, "opts->seqSplits[%d] is %lld, below 0", r, (long long)sp[r]);
        full += sp[r];
      }
      if (sp[c->rank] != local_ext)
        return par_err(c->comm, fn,
                       "opts->seqSplits[%d] is %lld but this rank's extent along seqDim %d is %lld",
                       c->rank, (long long)sp[c->rank], c->seq_dim, (long long)local_ext);
    }
  }
  c->offs = malloc(sizeof(int64_t) * (size_t)(c->nranks + 1));
  if (c->offs == NULL) return par_fail(c->comm, loomSystemError, fn, "out of memory for splits");
  loomResult_t r = par_splits(c->comm, fn, "opts->seqSplits", sp, c->nranks, full, c->offs);
  if (r != loomSuccess) return r;
  int64_t mine = c->offs[c->rank + 1] - c->offs[c->rank];
  if (full_known && mine != local_ext)
    return par_err(c->comm, fn,
                   "this rank's part along seqDim %d is %lld of %lld, but the tensor has %lld",
                   c->seq_dim, (long long)mine, (long long)full, (long long)local_ext);
  *full_out = full;
  return loomSuccess;
}

/* rows and bytes of a dense tensor of t's shape */
static size_t dense_bytes(const loomTensor* t) {
  return (size_t)par_numel(t) * par_dtype_size(t->dtype);
}

static size_t round64(size_t n) {
  return (n + 63) & ~(size_t)63;
}

static loomResult_t comm_of(struct lin_call* c, const char* fn, loomComm_t tp) {
  return par_comm(tp, fn, "tp", &c->rank, &c->nranks);
}

/* ---- Column forward ---------------------------------------------------------------------- */

static loomResult_t col_fwd_shapes(const char* fn, const loomTensor* x, const loomTensor* y,
                                   const loomTensor* xFull, struct lin_call* c,
                                   struct lin_col_fwd* a, int64_t out_r, int64_t in) {
  loomResult_t r;
  if (x->ndim < 1 || x->shape[x->ndim - 1] != in)
    return par_err(c->comm, fn, "x's last extent is %lld but w has %lld input features",
                   x->ndim < 1 ? 0LL : (long long)x->shape[x->ndim - 1], (long long)in);
  loomTensor full = *x;
  if (c->sp) {
    int64_t ext;
    if ((r = seq_setup(c, fn, x->ndim, x->shape[c->seq_dim], 0, 0, &ext)) != loomSuccess) return r;
    full.shape[c->seq_dim] = ext;
  }
  if (xFull != NULL) {
    if (!c->sp) return par_err(c->comm, fn, "xFull is given without sequence parallelism");
    if ((r = shape_like(c, fn, "xFull", xFull, "the gathered x", &full, -1, 0)) != loomSuccess)
      return r;
  }
  int64_t ycols = c->opts.gatherOutput ? out_r * c->nranks : out_r;
  if ((r = shape_like(c, fn, "y", y, "the full x", &full, -1, 1)) != loomSuccess) return r;
  if (y->shape[y->ndim - 1] != ycols)
    return par_err(c->comm, fn, "y's last extent is %lld, expected %lld%s",
                   (long long)y->shape[y->ndim - 1], (long long)ycols,
                   c->opts.gatherOutput ? " (out_r times the tp size, gatherOutput)" : " (out_r)");
  struct lin_mat ym;
  if ((r = matrix_of(c, fn, "y", y, &ym)) != loomSuccess) return r;
  if (c->sp)
    a->xfull_t = xFull != NULL ? *xFull : full;
  else
    a->xfull_t = *x;
  a->xfull_scratch = c->sp && xFull == NULL;
  if (a->xfull_scratch) {
    par_dense_like(&full, NULL, &a->xfull_t);
    a->scratch_bytes += round64(dense_bytes(&full));
  } else if ((r = matrix_of(c, fn, c->sp ? "xFull" : "x", &a->xfull_t, &a->xf)) != loomSuccess) {
    return r;
  }
  a->ylocal_scratch = c->opts.gatherOutput && c->nranks > 1;
  a->ylocal_t = *y;
  if (a->ylocal_scratch) {
    a->ylocal_t.shape[y->ndim - 1] = out_r;
    par_dense_like(&a->ylocal_t, NULL, &a->ylocal_t);
    a->scratch_bytes += round64(dense_bytes(&a->ylocal_t));
  } else {
    a->ylocal = ym;
  }
  if (c->sp && c->nranks > 1) { /* the ring needs each slab as one block of dense rows */
    int lead1 = 1;
    for (int d = 0; d < c->seq_dim; d++) lead1 &= full.shape[d] <= 1;
    c->inner_rows = 1;
    for (int d = c->seq_dim + 1; d < full.ndim - 1; d++) c->inner_rows *= full.shape[d];
    /* Host memory: the ring only when asked for (opts->overlap, loom_parallel.h). */
    a->ring = c->opts.overlap == 1 && lead1 && par_contiguous(x) && par_contiguous(&a->xfull_t);
  }
  return loomSuccess;
}

loomResult_t lin_col_fwd_args(const char* fn, const loomTensor* x, const loomTensor* w,
                              const loomTensor* b, const loomTensor* y, const loomTensor* xFull,
                              const loomLinearOpts* opts, loomComm_t tp, loomStream_t stream,
                              struct lin_call* c, struct lin_col_fwd* a) {
  memset(a, 0, sizeof(*a));
  loomResult_t r = call_init(fn, opts, tp, stream, c);
  if (r == loomSuccess) r = comm_of(c, fn, tp);
  if (r == loomSuccess) r = tensor_in(c, fn, "x", x, 0);
  if (r == loomSuccess) r = tensor_in(c, fn, "w", w, 0);
  if (r == loomSuccess) r = tensor_in(c, fn, "y", y, 1);
  if (r == loomSuccess && xFull != NULL) r = tensor_in(c, fn, "xFull", xFull, 1);
  if (r == loomSuccess) r = weight_of(c, fn, "w", w, &a->w);
  if (r == loomSuccess) r = bias_check(c, fn, "b", b, a->w.rows);
  if (r == loomSuccess) r = col_fwd_shapes(fn, x, y, xFull, c, a, a->w.rows, a->w.cols);
  const loomTensor* ins[3] = {x, w, b};
  const char* in_names[3] = {"x", "w", "b"};
  for (int i = 0; i < 3 && r == loomSuccess; i++) {
    r = apart(c, fn, "y", y, in_names[i], ins[i]);
    if (r == loomSuccess) r = apart(c, fn, "xFull", xFull, in_names[i], ins[i]);
  }
  if (r == loomSuccess) r = apart(c, fn, "y", y, "xFull", xFull);
  if (r != loomSuccess) lin_call_fini(c);
  return r;
}

void lin_col_fwd_place(const struct lin_call* c, struct lin_col_fwd* a, void* scratch) {
  char* p = scratch;
  if (a->xfull_scratch) {
    a->xfull_t.data = p;
    p += round64(dense_bytes(&a->xfull_t));
    par_matrix(&a->xfull_t, &a->xf.rows, &a->xf.cols, &a->xf.ld);
    a->xf.data = a->xfull_t.data;
  }
  if (a->ylocal_scratch) {
    a->ylocal_t.data = p;
    par_matrix(&a->ylocal_t, &a->ylocal.rows, &a->ylocal.cols, &a->ylocal.ld);
    a->ylocal.data = p;
  }
}

/* ---- Column backward (input) ------------------------------------------------------------- */

loomResult_t lin_col_bwd_args(const char* fn, const loomTensor* dy, const loomTensor* w,
                              const loomTensor* dx, const loomLinearOpts* opts, loomComm_t tp,
                              loomStream_t stream, struct lin_call* c, struct lin_col_bwd* a) {
  memset(a, 0, sizeof(*a));
  loomResult_t r = call_init(fn, opts, tp, stream, c);
  if (r == loomSuccess) r = comm_of(c, fn, tp);
  if (r == loomSuccess) r = tensor_in(c, fn, "dy", dy, 0);
  if (r == loomSuccess) r = tensor_in(c, fn, "w", w, 0);
  if (r == loomSuccess) r = tensor_in(c, fn, "dx", dx, 1);
  if (r == loomSuccess) r = weight_of(c, fn, "w", w, &a->w);
  if (r == loomSuccess) r = apart(c, fn, "dx", dx, "dy", dy);
  if (r == loomSuccess) r = apart(c, fn, "dx", dx, "w", w);
  if (r != loomSuccess) goto fail;
  int64_t out_r = a->w.rows, in = a->w.cols;
  int64_t dycols = c->opts.gatherOutput ? out_r * c->nranks : out_r;
  if (dy->ndim < 1 || dy->shape[dy->ndim - 1] != dycols) {
    r = par_err(c->comm, fn, "dy's last extent is %lld, expected %lld",
                dy->ndim < 1 ? 0LL : (long long)dy->shape[dy->ndim - 1], (long long)dycols);
    goto fail;
  }
  loomTensor dyr = *dy;
  if (c->opts.gatherOutput) {
    dyr.shape[dy->ndim - 1] = out_r;
    if (out_r > 0)
      dyr.data = (char*)dy->data +
                 c->rank * out_r * dy->strides[dy->ndim - 1] * (int64_t)par_dtype_size(dy->dtype);
  }
  if ((r = matrix_of(c, fn, "dy", &dyr, &a->dyr)) != loomSuccess) goto fail;
  loomTensor full = *dy; /* the full token set, in features */
  full.shape[full.ndim - 1] = in;
  if ((r = shape_like(c, fn, "dx", dx, "dy", &full, c->sp ? c->seq_dim : -1, 1)) != loomSuccess)
    goto fail;
  if (dx->shape[dx->ndim - 1] != in) {
    r = par_err(c->comm, fn, "dx's last extent is %lld but w has %lld input features",
                (long long)dx->shape[dx->ndim - 1], (long long)in);
    goto fail;
  }
  if (c->sp) {
    int64_t ext;
    if ((r = seq_setup(c, fn, dy->ndim, dx->shape[c->seq_dim], dy->shape[c->seq_dim], 1, &ext)) !=
        loomSuccess)
      goto fail;
    par_dense_like(&full, NULL, &a->partial_t);
    a->scratch_bytes = dense_bytes(&full);
  } else {
    a->partial_t = *dx;
    if ((r = matrix_of(c, fn, "dx", dx, &a->partial)) != loomSuccess) goto fail;
  }
  return loomSuccess;
fail:
  lin_call_fini(c);
  return r;
}

void lin_col_bwd_place(struct lin_col_bwd* a, void* scratch) {
  if (scratch == NULL) return;
  a->partial_t.data = scratch;
  par_matrix(&a->partial_t, &a->partial.rows, &a->partial.cols, &a->partial.ld);
  a->partial.data = scratch;
}

/* ---- Row forward ------------------------------------------------------------------------- */

loomResult_t lin_row_fwd_args(const char* fn, const loomTensor* x, const loomTensor* w,
                              const loomTensor* b, const loomTensor* y, const loomLinearOpts* opts,
                              loomComm_t tp, loomStream_t stream, struct lin_call* c,
                              struct lin_row_fwd* a) {
  memset(a, 0, sizeof(*a));
  loomResult_t r = call_init(fn, opts, tp, stream, c);
  if (r == loomSuccess) r = comm_of(c, fn, tp);
  if (r == loomSuccess && c->opts.gatherOutput)
    r = par_err(c->comm, fn, "opts->gatherOutput is for column-parallel layers only");
  if (r == loomSuccess) r = tensor_in(c, fn, "x", x, 0);
  if (r == loomSuccess) r = tensor_in(c, fn, "w", w, 0);
  if (r == loomSuccess) r = tensor_in(c, fn, "y", y, 1);
  if (r == loomSuccess) r = weight_of(c, fn, "w", w, &a->w);
  if (r == loomSuccess) r = bias_check(c, fn, "b", b, a->w.rows);
  if (r == loomSuccess) r = matrix_of(c, fn, "x", x, &a->x);
  if (r == loomSuccess) r = matrix_of(c, fn, "y", y, &a->y);
  if (r == loomSuccess) r = apart(c, fn, "y", y, "x", x);
  if (r == loomSuccess) r = apart(c, fn, "y", y, "w", w);
  if (r == loomSuccess) r = apart(c, fn, "y", y, "b", b);
  if (r != loomSuccess) goto fail;
  int64_t out = a->w.rows, in_r = a->w.cols;
  if (x->shape[x->ndim - 1] != in_r) {
    r = par_err(c->comm, fn, "x's last extent is %lld but w has %lld input features",
                (long long)x->shape[x->ndim - 1], (long long)in_r);
    goto fail;
  }
  loomTensor full = *x;
  full.shape[full.ndim - 1] = out;
  if ((r = shape_like(c, fn, "y", y, "x", &full, c->sp ? c->seq_dim : -1, 0)) != loomSuccess)
    goto fail;
  if (c->sp) {
    int64_t ext;
    if ((r = seq_setup(c, fn, x->ndim, y->shape[c->seq_dim], x->shape[c->seq_dim], 1, &ext)) !=
        loomSuccess)
      goto fail;
    par_dense_like(&full, NULL, &a->partial_t);
    a->scratch_bytes = dense_bytes(&full);
  } else {
    a->partial_t = *y;
    a->partial = a->y;
  }
  return loomSuccess;
fail:
  lin_call_fini(c);
  return r;
}

void lin_row_fwd_place(const struct lin_call* c, struct lin_row_fwd* a, void* scratch) {
  if (!c->sp || scratch == NULL) return;
  a->partial_t.data = scratch;
  par_matrix(&a->partial_t, &a->partial.rows, &a->partial.cols, &a->partial.ld);
  a->partial.data = scratch;
}

/* ---- Row backward (input) ---------------------------------------------------------------- */

loomResult_t lin_row_bwd_args(const char* fn, const loomTensor* dy, const loomTensor* w,
                              const loomTensor* dx, const loomTensor* dyFull,
                              const loomLinearOpts* opts, loomComm_t tp, loomStream_t stream,
                              struct lin_call* c, struct lin_row_bwd* a) {
  memset(a, 0, sizeof(*a));
  loomResult_t r = call_init(fn, opts, tp, stream, c);
  if (r == loomSuccess) r = comm_of(c, fn, tp);
  if (r == loomSuccess) r = tensor_in(c, fn, "dy", dy, 0);
  if (r == loomSuccess) r = tensor_in(c, fn, "w", w, 0);
  if (r == loomSuccess) r = tensor_in(c, fn, "dx", dx, 1);
  if (r == loomSuccess && dyFull != NULL) r = tensor_in(c, fn, "dyFull", dyFull, 1);
  if (r == loomSuccess && dyFull != NULL && !c->sp)
    r = par_err(c->comm, fn, "dyFull is given without sequence parallelism");
  if (r == loomSuccess) r = weight_of(c, fn, "w", w, &a->w);
  if (r == loomSuccess) r = matrix_of(c, fn, "dx", dx, &a->dx);
  if (r == loomSuccess) r = apart(c, fn, "dx", dx, "dy", dy);
  if (r == loomSuccess) r = apart(c, fn, "dx", dx, "w", w);
  if (r == loomSuccess) r = apart(c, fn, "dyFull", dyFull, "dy", dy);
  if (r == loomSuccess) r = apart(c, fn, "dyFull", dyFull, "w", w);
  if (r == loomSuccess) r = apart(c, fn, "dx", dx, "dyFull", dyFull);
  if (r != loomSuccess) goto fail;
  int64_t out = a->w.rows, in_r = a->w.cols;
  if (dy->ndim < 1 || dy->shape[dy->ndim - 1] != out) {
    r = par_err(c->comm, fn, "dy's last extent is %lld but w has %lld output features",
                dy->ndim < 1 ? 0LL : (long long)dy->shape[dy->ndim - 1], (long long)out);
    goto fail;
  }
  if (dx->shape[dx->ndim - 1] != in_r) {
    r = par_err(c->comm, fn, "dx's last extent is %lld but w has %lld input features",
                (long long)dx->shape[dx->ndim - 1], (long long)in_r);
    goto fail;
  }
  loomTensor full = *dx; /* every token, out features */
  full.shape[full.ndim - 1] = out;
  full.dtype = dy->dtype;
  if ((r = shape_like(c, fn, "dy", dy, "dx", &full, c->sp ? c->seq_dim : -1, 1)) != loomSuccess)
    goto fail;
  if (c->sp) {
    int64_t ext;
    if ((r = seq_setup(c, fn, dy->ndim, dy->shape[c->seq_dim], dx->shape[c->seq_dim], 1, &ext)) !=
        loomSuccess)
      goto fail;
    if (dyFull != NULL &&
        (r = shape_like(c, fn, "dyFull", dyFull, "the gathered dy", &full, -1, 0)) != loomSuccess)
      goto fail;
    a->dyfull_scratch = dyFull == NULL;
    if (a->dyfull_scratch) {
      par_dense_like(&full, NULL, &a->dyfull_t);
      a->scratch_bytes = dense_bytes(&full);
    } else {
      a->dyfull_t = *dyFull;
      if ((r = matrix_of(c, fn, "dyFull", dyFull, &a->dyf)) != loomSuccess) goto fail;
    }
  } else if ((r = matrix_of(c, fn, "dy", dy, &a->dyf)) != loomSuccess) {
    goto fail;
  }
  return loomSuccess;
fail:
  lin_call_fini(c);
  return r;
}

void lin_row_bwd_place(struct lin_row_bwd* a, void* scratch) {
  if (!a->dyfull_scratch || scratch == NULL) return;
  a->dyfull_t.data = scratch;
  par_matrix(&a->dyfull_t, &a->dyf.rows, &a->dyf.cols, &a->dyf.ld);
  a->dyf.data = scratch;
}

/* ---- Weight gradient --------------------------------------------------------------------- */

loomResult_t lin_wgrad_args(const char* fn, const loomTensor* x, const loomTensor* dy,
                            const loomTensor* dw, const loomTensor* db, const loomLinearOpts* opts,
                            loomStream_t stream, struct lin_call* c, struct lin_wgrad* a) {
  memset(a, 0, sizeof(*a));
  loomResult_t r = call_init(fn, opts, NULL, stream, c);
  if (r == loomSuccess && c->opts.accumulate != 0 && c->opts.accumulate != 1)
    r = par_err(NULL, fn, "opts->accumulate is %d, not 0 or 1", c->opts.accumulate);
  if (r == loomSuccess) r = tensor_in(c, fn, "x", x, 0);
  if (r == loomSuccess) r = tensor_in(c, fn, "dy", dy, 0);
  if (r == loomSuccess) r = tensor_in(c, fn, "dw", dw, 1);
  if (r == loomSuccess && db != NULL) r = tensor_in(c, fn, "db", db, 1);
  if (r == loomSuccess) r = matrix_of(c, fn, "x", x, &a->x);
  if (r == loomSuccess) r = matrix_of(c, fn, "dy", dy, &a->dy);
  if (r == loomSuccess) r = weight_of(c, fn, "dw", dw, &a->dw);
  if (r == loomSuccess && a->x.rows != a->dy.rows)
    r = par_err(NULL, fn, "x has %lld rows but dy has %lld", (long long)a->x.rows,
                (long long)a->dy.rows);
  if (r == loomSuccess && (a->dw.rows != a->dy.cols || a->dw.cols != a->x.cols))
    r = par_err(NULL, fn, "dw is [%lld, %lld], expected [%lld, %lld] (dy's and x's features)",
                (long long)a->dw.rows, (long long)a->dw.cols, (long long)a->dy.cols,
                (long long)a->x.cols);
  if (r == loomSuccess) r = bias_check(c, fn, "db", db, a->dy.cols);
  const loomTensor* ins[2] = {x, dy};
  const char* in_names[2] = {"x", "dy"};
  for (int i = 0; i < 2 && r == loomSuccess; i++) {
    r = apart(c, fn, "dw", dw, in_names[i], ins[i]);
    if (r == loomSuccess) r = apart(c, fn, "db", db, in_names[i], ins[i]);
  }
  if (r == loomSuccess) r = apart(c, fn, "db", db, "dw", dw);
  lin_call_fini(c);
  return r;
}
