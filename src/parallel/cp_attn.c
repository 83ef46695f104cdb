/* cp_attn.c - loomCpAttentionForward and loomCpAttentionBackward (PARALLEL.md section 4): the
 * checks of section 8, all made before any communication and with the outputs untouched, then
 * the algorithm the options name (cp_ring.c, cp_gather.c). */
#include <math.h>
#include <string.h>

#include "cp.h"

/* ---- Options ----------------------------------------------------------------------------- */

static loomResult_t opts_take(const char* fn, const loomAttnOpts* opts, loomComm_t cp,
                              struct cp_call* c) {
  static const loomAttnOpts defaults = LOOM_ATTN_OPTS_INIT;
  const loomAttnOpts* o = opts != NULL ? opts : &defaults;
  if (o->layout != loomCpContiguous && o->layout != loomCpZigzag)
    return par_err(cp, fn, "opts->layout is %d; takes loomCpContiguous (0) or loomCpZigzag (1)",
                   (int)o->layout);
  if (o->algo != loomCpRing && o->algo != loomCpAllGatherKv && o->algo != loomCpUlysses)
    return par_err(cp, fn,
                   "opts->algo is %d; takes loomCpRing (0), loomCpAllGatherKv (1) or "
                   "loomCpUlysses (2)",
                   (int)o->algo);
  if (!isfinite(o->softmaxScale))
    return par_err(cp, fn, "opts->softmaxScale is %g; must be finite (0: 1/sqrt(D))",
                   o->softmaxScale);
  if (o->kernel != NULL && (o->kernel->forward == NULL || o->kernel->backward == NULL))
    return par_err(cp, fn, "opts->kernel has a NULL forward (%s) or backward (%s)",
                   o->kernel->forward == NULL ? "NULL" : "set",
                   o->kernel->backward == NULL ? "NULL" : "set");
  c->causal = o->causal != 0;
  c->layout = o->layout;
  c->algo = o->algo;
  c->scale = o->softmaxScale;
  c->kern = o->kernel != NULL ? o->kernel : loomAttnKernelReference();
  return loomSuccess;
}

/* ---- Tensors ----------------------------------------------------------------------------- */

/* t is valid (an output: not overlapping itself), of shape e (3 dims when e[3] < 0) and dtype
 * dt, with a last-dim stride of 1 when it has 4 dims. */
static loomResult_t tensor_take(const struct cp_call* c, const char* name, const loomTensor* t,
                                int out, loomDataType_t dt, const int64_t e[4]) {
  if (t == NULL) return par_err(c->comm, c->fn, "%s is NULL", name);
  loomResult_t r =
      out ? par_check_out(c->comm, c->fn, name, t) : par_check(c->comm, c->fn, name, t);
  if (r != loomSuccess) return r;
  int nd = e[3] < 0 ? 3 : 4, bad = 0;
  char want[96], got[96];
  loomTensor w = {NULL, dt, nd, {e[0], e[1], e[2], e[3]}, {0}};
  if (t->ndim != nd || !par_shapes_agree(t, &w, -1, &bad))
    return par_err(c->comm, c->fn, "%s is %s but must be %s", name,
                   par_shape_str(t, got, sizeof got), par_shape_str(&w, want, sizeof want));
  if (t->dtype != dt)
    return par_err(c->comm, c->fn, "%s is %s but must be %s", name, par_dtype_name(t->dtype),
                   par_dtype_name(dt));
  if (nd == 4 && t->strides[3] != 1 && t->shape[3] > 1)
    return par_err(c->comm, c->fn, "%s.strides[3] is %lld; the last dim needs stride 1", name,
                   (long long)t->strides[3]);
  return loomSuccess;
}

/* q fixes dtype and extents; k and v must agree with it and each other. */
static loomResult_t inputs_take(struct cp_call* c, const struct cp_io* io) {
  const loomTensor *q = io->q, *k = io->k, *v = io->v;
  if (q == NULL || k == NULL || v == NULL)
    return par_err(c->comm, c->fn, "q (%p), k (%p) and v (%p) must not be NULL", (const void*)q,
                   (const void*)k, (const void*)v);
  loomResult_t r = par_check(c->comm, c->fn, "q", q);
  if (r != loomSuccess) return r;
  if (q->ndim != 4) return par_err(c->comm, c->fn, "q.ndim is %d; q is [B, Sq, Hq, D]", q->ndim);
  if (!par_dtype_is_compute(q->dtype))
    return par_err(c->comm, c->fn, "q is %s; takes float16, bfloat16, float32, float64",
                   par_dtype_name(q->dtype));
  if (k->ndim != 4 || v->ndim != 4)
    return par_err(c->comm, c->fn, "k.ndim is %d and v.ndim is %d; both must be 4", k->ndim,
                   v->ndim);
  c->dt = q->dtype, c->acc = q->dtype == loomFloat64 ? loomFloat64 : loomFloat32;
  c->es = par_dtype_size(c->dt), c->as = par_dtype_size(c->acc);
  c->B = q->shape[0], c->Sq = q->shape[1], c->Hq = q->shape[2], c->D = q->shape[3];
  c->Skv = k->shape[1], c->Hkv = k->shape[2], c->Dv = v->shape[3];
  if (v->shape[1] != c->Skv)
    return par_err(c->comm, c->fn, "k.shape[1] (Skv) is %lld but v.shape[1] is %lld",
                   (long long)c->Skv, (long long)v->shape[1]);
  int64_t eq[4] = {c->B, c->Sq, c->Hq, c->D}, ek[4] = {c->B, c->Skv, c->Hkv, c->D},
          ev[4] = {c->B, c->Skv, c->Hkv, c->Dv};
  r = tensor_take(c, "q", q, 0, c->dt, eq);
  if (r == loomSuccess) r = tensor_take(c, "k", k, 0, c->dt, ek);
  if (r == loomSuccess) r = tensor_take(c, "v", v, 0, c->dt, ev);
  return r;
}

/* The attention rules: heads, layout lengths, causal lengths, Ulysses heads. */
static loomResult_t rules_check(const struct cp_call* c) {
  if (c->Hkv < 1 || c->Hq % c->Hkv != 0)
    return par_err(c->comm, c->fn, "Hq %% Hkv != 0: q has %lld heads, k and v %lld",
                   (long long)c->Hq, (long long)c->Hkv);
  if (c->layout == loomCpZigzag && (c->Sq % 2 != 0 || c->Skv % 2 != 0))
    return par_err(c->comm, c->fn,
                   "zigzag needs each global length divisible by 2P = %d, but local Sq %lld and "
                   "Skv %lld give %lld and %lld",
                   2 * c->P, (long long)c->Sq, (long long)c->Skv, (long long)(c->Sq * c->P),
                   (long long)(c->Skv * c->P));
  if (c->causal && c->Sq != c->Skv)
    return par_err(c->comm, c->fn, "causal needs global Sq == Skv, but they are %lld and %lld",
                   (long long)(c->Sq * c->P), (long long)(c->Skv * c->P));
  if (c->algo == loomCpUlysses && (c->Hq % c->P != 0 || c->Hkv % c->P != 0))
    return par_err(c->comm, c->fn,
                   "loomCpUlysses needs Hq %% P == Hkv %% P == 0, but Hq %lld, Hkv %lld, P %d",
                   (long long)c->Hq, (long long)c->Hkv, c->P);
  return loomSuccess;
}

/* Each output against every input and every other output. */
static loomResult_t overlaps_check(const struct cp_call* c, const loomTensor* const* in,
                                   const char* const* in_names, int nin, loomTensor* const* out,
                                   const char* const* out_names, int nout) {
  for (int o = 0; o < nout; o++) {
    if (out[o] == NULL) continue;
    for (int i = 0; i < nin; i++)
      if (in[i] != NULL && par_overlap(out[o], in[i]))
        return par_err(c->comm, c->fn, "output %s overlaps input %s", out_names[o], in_names[i]);
    for (int p = 0; p < o; p++)
      if (out[p] != NULL && par_overlap(out[o], out[p]))
        return par_err(c->comm, c->fn, "outputs %s and %s overlap", out_names[o], out_names[p]);
  }
  return loomSuccess;
}

static loomResult_t call_take(const char* fn, const struct cp_io* io, const loomAttnOpts* opts,
                              loomComm_t cp, int bwd, struct cp_call* c) {
  memset(c, 0, sizeof *c);
  c->fn = fn;
  loomResult_t r = par_comm(cp, fn, "cp", &c->rank, &c->P);
  if (r != loomSuccess) return r;
  c->comm = cp;
  r = opts_take(fn, opts, cp, c);
  if (r == loomSuccess) r = inputs_take(c, io);
  if (r == loomSuccess) r = rules_check(c);
  if (r != loomSuccess) return r;
  if (c->scale == 0) c->scale = 1.0 / sqrt((double)PAR_MAX(c->D, 1));
  int64_t eo[4] = {c->B, c->Sq, c->Hq, c->Dv}, el[4] = {c->B, c->Hq, c->Sq, -1};
  if (!bwd) {
    r = tensor_take(c, "out", io->o, 1, c->dt, eo);
    if (r == loomSuccess && io->l != NULL) r = tensor_take(c, "lse", io->l, 1, c->acc, el);
    const loomTensor* in[3] = {io->q, io->k, io->v};
    const char* in_n[3] = {"q", "k", "v"};
    loomTensor* out[2] = {io->o, io->l};
    const char* out_n[2] = {"out", "lse"};
    return r == loomSuccess ? overlaps_check(c, in, in_n, 3, out, out_n, 2) : r;
  }
  int64_t eq[4] = {c->B, c->Sq, c->Hq, c->D}, ek[4] = {c->B, c->Skv, c->Hkv, c->D},
          ev[4] = {c->B, c->Skv, c->Hkv, c->Dv};
  r = tensor_take(c, "out", io->out, 0, c->dt, eo);
  if (r == loomSuccess) r = tensor_take(c, "dout", io->dout, 0, c->dt, eo);
  if (r == loomSuccess) r = tensor_take(c, "lse", io->lse, 0, c->acc, el);
  if (r == loomSuccess) r = tensor_take(c, "dq", io->dq, 1, c->dt, eq);
  if (r == loomSuccess) r = tensor_take(c, "dk", io->dk, 1, c->dt, ek);
  if (r == loomSuccess) r = tensor_take(c, "dv", io->dv, 1, c->dt, ev);
  const loomTensor* in[6] = {io->q, io->k, io->v, io->out, io->dout, io->lse};
  const char* in_n[6] = {"q", "k", "v", "out", "dout", "lse"};
  loomTensor* out[3] = {io->dq, io->dk, io->dv};
  const char* out_n[3] = {"dq", "dk", "dv"};
  return r == loomSuccess ? overlaps_check(c, in, in_n, 6, out, out_n, 3) : r;
}

/* ---- The calls --------------------------------------------------------------------------- */

loomResult_t loomCpAttentionForward(const loomTensor* q, const loomTensor* k, const loomTensor* v,
                                    loomTensor* out, loomTensor* lse, const loomAttnOpts* opts,
                                    loomComm_t cp, loomStream_t stream) {
  static const char fn[] = "loomCpAttentionForward";
  struct cp_call c;
  struct cp_io io = {.q = q, .k = k, .v = v, .o = out, .l = lse};
  loomResult_t r = call_take(fn, &io, opts, cp, 0, &c);
  if (r == loomSuccess) r = par_enter(cp, fn, stream);
  if (r != loomSuccess) return r;
  if (c.algo == loomCpAllGatherKv) return cp_gather_forward(&c, &io);
  if (c.algo == loomCpUlysses) return cp_ulysses_forward(&c, &io);
  return cp_ring_forward(&c, &io);
}

loomResult_t loomCpAttentionBackward(const loomTensor* q, const loomTensor* k, const loomTensor* v,
                                     const loomTensor* out, const loomTensor* dout,
                                     const loomTensor* lse, loomTensor* dq, loomTensor* dk,
                                     loomTensor* dv, const loomAttnOpts* opts, loomComm_t cp,
                                     loomStream_t stream) {
  static const char fn[] = "loomCpAttentionBackward";
  struct cp_call c;
  struct cp_io io = {
      .q = q, .k = k, .v = v, .out = out, .dout = dout, .lse = lse, .dq = dq, .dk = dk, .dv = dv};
  loomResult_t r = call_take(fn, &io, opts, cp, 1, &c);
  if (r == loomSuccess) r = par_enter(cp, fn, stream);
  if (r != loomSuccess) return r;
  if (c.algo == loomCpAllGatherKv) return cp_gather_backward(&c, &io);
  if (c.algo == loomCpUlysses) return cp_ulysses_backward(&c, &io);
  return cp_ring_backward(&c, &io);
}
