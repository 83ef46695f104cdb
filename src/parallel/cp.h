/* cp.h - what the files of context-parallel attention share (PARALLEL.md section 4): a call's
 * checked arguments, the runs of positions a rank holds under a layout, and the block loop that
 * calls the attention kernel and merges its partial results. */
#ifndef LOOM_CP_H
#define LOOM_CP_H

#include "par.h"

/* One contiguous run of a rank's local sequence: local rows [loc, loc + len) hold the global
 * positions [pos, pos + len). */
struct cp_seg {
  int64_t loc, pos, len;
};

/* The runs of rank `rank` of P holding `local` rows: 1 (contiguous) or 2 (zig-zag, chunks r
 * and 2P-1-r in that order); returns how many. */
int cp_segs(loomCpLayout_t layout, int rank, int P, int64_t local, struct cp_seg segs[2]);

/* A checked call: the extents are local ones (Sq, Skv of this rank). */
struct cp_call {
  const char* fn;
  loomComm_t comm;
  int rank, P;
  int causal;
  double scale;
  loomCpLayout_t layout;
  loomCpAlgo_t algo;
  const loomAttnKernel* kern;
  loomDataType_t dt, acc; /* inputs' dtype; float32, or float64 for float64 */
  size_t es, as;          /* their sizes */
  int64_t B, Sq, Skv, Hq, Hkv, D, Dv;
};

/* The tensors of a call: forward fills o (and l when not NULL); backward reads out, dout and
 * lse and fills dq, dk, dv. */
struct cp_io {
  const loomTensor *q, *k, *v;
  const loomTensor *out, *dout, *lse;
  loomTensor *o, *l;
  loomTensor *dq, *dk, *dv;
};

/* ---- Tensors (cp_block.c) -------------------------------------------------------------------- */

/* A dense tensor over data: [e0, e1, e2] or, with e3 >= 0, [e0, e1, e2, e3]. */
loomTensor cp_dense(void* data, loomDataType_t dt, int64_t e0, int64_t e1, int64_t e2, int64_t e3);
/* The view of rows [start, start + len) of t along dim. */
loomTensor cp_slice(const loomTensor* t, int dim, int64_t start, int64_t len);
/* dst = src converted (float16, bfloat16, float32, float64 either way; rounded to nearest-even
 * once); equal shapes, any strides. */
void cp_cast(const loomTensor* src, const loomTensor* dst);
/* Dense acc-type x[n] += y[n]; x[n] = 0; x[n] = -inf. */
void cp_add(loomDataType_t acc, void* x, const void* y, int64_t n);
void cp_zero(loomDataType_t acc, void* x, int64_t n);
void cp_fill_neg_inf(loomDataType_t acc, void* x, int64_t n);

/* The scratch of one call: up to CP_MEM_MAX pieces, all freed at once. cp_alloc returns NULL
 * (with the error set) when memory runs out. */
#define CP_MEM_MAX 16
struct cp_mem {
  void* p[CP_MEM_MAX];
  int n;
};
void* cp_alloc(const struct cp_call* c, struct cp_mem* m, size_t bytes);
void cp_mem_free(struct cp_mem* m);

/* ---- Blocks (cp_block.c) --------------------------------------------------------------------- */

/* Scratch for one block's results: up to c->Sq queries and lk keys; free(w->mem) after. */
struct cp_blk_ws {
  void *out, *lse, *dq, *dk, *dv;
  void* mem;
};
loomResult_t cp_blk_ws_make(const struct cp_call* c, int bwd, int64_t lk, struct cp_blk_ws* w);

/* Forward of the local queries (runs qs[0..nq)) against one shard of keys (k, v: [B, Lk, Hkv,
 * D|Dv] with runs ks[0..nk)), merged into dense acc-type oacc [B, Sq, Hq, Dv] and lacc
 * [B, Hq, Sq] (which start at 0 and -inf). Fully masked pairs are skipped. */
loomResult_t cp_blocks_forward(const struct cp_call* c, const loomTensor* q,
                               const struct cp_seg* qs, int nq, const loomTensor* k,
                               const loomTensor* v, const struct cp_seg* ks, int nk, void* oacc,
                               void* lacc, struct cp_blk_ws* w);
/* Backward of the same pairs: adds into dense acc-type dqacc [B, Sq, Hq, D] and dkacc, dvacc
 * [B, Lk, Hkv, D|Dv]. out, dout, lse are io's (rows as q's). */
loomResult_t cp_blocks_backward(const struct cp_call* c, const struct cp_io* io,
                                const struct cp_seg* qs, int nq, const loomTensor* k,
                                const loomTensor* v, const struct cp_seg* ks, int nk, void* dqacc,
                                void* dkacc, void* dvacc, struct cp_blk_ws* w);

/* ---- The algorithms (cp_ring.c, cp_gather.c) ------------------------------------------------- */

loomResult_t cp_ring_forward(const struct cp_call* c, const struct cp_io* io);
loomResult_t cp_ring_backward(const struct cp_call* c, const struct cp_io* io);
loomResult_t cp_gather_forward(const struct cp_call* c, const struct cp_io* io);
loomResult_t cp_gather_backward(const struct cp_call* c, const struct cp_io* io);
loomResult_t cp_ulysses_forward(const struct cp_call* c, const struct cp_io* io);
loomResult_t cp_ulysses_backward(const struct cp_call* c, const struct cp_io* io);

#endif
