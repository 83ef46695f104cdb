/* moe.h - what the MoE expert-parallel files (PARALLEL.md section 5) share: the layout a
 * handle records and the argument checks of the handle calls (moe_layout.c), and the rows,
 * exchanges and arithmetic the moves (moe_move.c) are built of (moe_rows.c).
 *
 * A rank's kept pairs, sorted by global expert and then by token, are its *send order*: the
 * order every receiver needs them in, since global expert e = q*El + j goes to rank q as its
 * local expert j and the receive layout is expert-major, then source rank, then token. Slot s
 * of the send order is the pair send_pair[s] (t*K + k); the pairs to rank q are the slots
 * [send_off[q*El], send_off[(q+1)*El]), one segment per local expert of q. Segment (q, j) of
 * the receive side, the rows rank q sends for local expert j, starts at row recv_at[q*El + j]. */
#ifndef LOOM_MOE_H
#define LOOM_MOE_H

#include "par.h"

/* Returns from the calling function when call fails. */
#define MOE_TRY(call)                         \
  do {                                        \
    loomResult_t moe_r_ = (call);             \
    if (moe_r_ != loomSuccess) return moe_r_; \
  } while (0)

struct loomMoeHandle {
  loomComm_t comm; /* the EP group; the handle's calls are collective over it */
  int rank, n;     /* this rank and P */
  int E, El, K;
  int64_t T;                      /* T_r */
  int64_t R;                      /* receive rows, padding included */
  int64_t dropped;                /* slots dropped for capacity */
  int64_t capacity;               /* C, or -1 */
  int64_t* counts;                /* [El] pairs received per local expert */
  int64_t* offsets;               /* [El + 1] */
  int64_t *send_rows, *recv_rows; /* [P] each */
  int64_t* send_cnt;              /* [E] kept pairs of this rank per global expert */
  int64_t* send_off;              /* [E + 1] their first slot in the send order */
  int64_t* send_pair;             /* [send_off[E]] t*K + k of each slot */
  int64_t* slot;                  /* [T*K] the slot of each pair, -1 off pairs */
  int64_t* recv_cnt;              /* [P*El] rows from rank q for local expert j, at q*El + j */
  int64_t* recv_at;               /* [P*El] the first row of that segment */
  int64_t* self_row;       /* [self_hi - self_lo] the receive row of each slot kept on this rank */
  struct moe_cache* cache; /* scratch the moves reuse (moe_rows.c) */
};

/* The send-order slots [self_lo, self_hi) stay on this rank; the exchange buffers hold only the
 * others, so slot s sits at row moe_buf_row(h, s) of them. */
static inline int64_t moe_self_lo(const struct loomMoeHandle* h) {
  return h->send_off[h->rank * h->El];
}
static inline int64_t moe_self_hi(const struct loomMoeHandle* h) {
  return h->send_off[(h->rank + 1) * h->El];
}
static inline int64_t moe_buf_row(const struct loomMoeHandle* h, int64_t s) {
  return s < moe_self_lo(h) ? s : s - (moe_self_hi(h) - moe_self_lo(h));
}
/* Rows of the exchange buffers: the pairs this rank sends to other ranks. */
static inline int64_t moe_buf_rows(const struct loomMoeHandle* h) {
  return h->send_off[h->E] - (moe_self_hi(h) - moe_self_lo(h));
}

/* ---- Argument checks of the handle calls (moe_layout.c) ---------------------------------- */

/* name is [rows, ...] (ndim >= 1): "x.shape[0] is 5 but the layout has T_r = 6". what names
 * rows ("T_r", "R"); out: the output rules as well. */
loomResult_t moe_check_rows(const struct loomMoeHandle* h, const char* fn, const char* name,
                            const loomTensor* t, int64_t rows, const char* what, int out);
/* name has like's dtype, ndim and extents past dim 0. */
loomResult_t moe_check_like(const struct loomMoeHandle* h, const char* fn, const char* name,
                            const loomTensor* t, const char* like_name, const loomTensor* like);
/* A compute dtype (float16, bfloat16, float32, float64). */
loomResult_t moe_check_float(const struct loomMoeHandle* h, const char* fn, const char* name,
                             const loomTensor* t);
/* A [T_r, K] (cols 0) or [R] (cols -1) tensor of float32 or float64. */
loomResult_t moe_check_weights(const struct loomMoeHandle* h, const char* fn, const char* name,
                               const loomTensor* t, int out, int by_row);
/* Both or neither: "topkWeights is given but recvWeights is NULL (pass both or neither)". */
loomResult_t moe_check_pair(const struct loomMoeHandle* h, const char* fn, const char* a_name,
                            const void* a, const char* b_name, const void* b);
/* No output overlaps an input or another output (names[i] for t[i], NULL tensors skipped). */
loomResult_t moe_check_disjoint(const struct loomMoeHandle* h, const char* fn, int n_out,
                                const loomTensor* const* outs, const char* const* out_names,
                                int n_in, const loomTensor* const* ins,
                                const char* const* in_names);
/* handle non-NULL: the error goes to the thread's last error. */
loomResult_t moe_check_handle(const struct loomMoeHandle* h, const char* fn);

/* ---- Rows and exchanges (moe_rows.c) ----------------------------------------------------- */

/* A tensor as dense rows: its own memory when contiguous, else a scratch copy (an input is
 * packed into it; an output is unpacked from it by moe_rows_finish). */
struct moe_rows {
  char* base;
  size_t rb;     /* bytes of a row */
  int64_t elems; /* elements of a row */
  void* scratch;
};
loomResult_t moe_rows_in(const struct loomMoeHandle* h, const char* fn, const loomTensor* t,
                         struct moe_rows* rows);
loomResult_t moe_rows_out(const struct loomMoeHandle* h, const char* fn, const loomTensor* t,
                          struct moe_rows* rows);
/* Unpacks an output's scratch into t (ok: the work succeeded) and frees the scratch. */
void moe_rows_finish(const loomTensor* t, struct moe_rows* rows, int ok);

/* Scratch owned by the handle, grown on demand and kept for the next call (a handle serves one
 * thread at a time), so that a move does not map and fault in fresh pages each time; NULL with
 * an error set when it cannot grow. A move uses at most two exchange buffers at once. */
enum { MOE_SCRATCH_ROWS, MOE_SCRATCH_AUX, MOE_SCRATCH_SLOTS };
char* moe_scratch(const struct loomMoeHandle* h, const char* fn, int slot, size_t bytes);
/* An exchange buffer for the other ranks' rows of rb bytes, in slot. */
char* moe_buf(const struct loomMoeHandle* h, const char* fn, int slot, size_t rb);
loomResult_t moe_cache_make(struct loomMoeHandle* h);
void moe_cache_free(struct loomMoeHandle* h);

/* The dispatch direction: the segments of buf (send order, the other ranks' rows of rb bytes)
 * to their ranks, landing at their final rows of out. Collective. */
loomResult_t moe_forward(const struct loomMoeHandle* h, const char* fn, const char* buf, char* out,
                         size_t rb);
/* The combine direction: the other ranks' segments of rows (the receive layout) back to them,
 * landing in back in send order. Collective. */
loomResult_t moe_reverse(const struct loomMoeHandle* h, const char* fn, const char* rows,
                         char* back, size_t rb);

/* Zeroes the padding rows of the receive layout in out (rows of rb bytes). */
void moe_zero_padding(const struct loomMoeHandle* h, char* out, size_t rb);
/* Where slot s's row is after a reverse exchange: in rows (this rank's own) or in back. */
const char* moe_slot_row(const struct loomMoeHandle* h, int64_t s, const char* rows,
                         const char* back, size_t rb);
/* Element (t, k) of a float32/float64 [T_r, K] tensor, and its store. */
double moe_weight_get(const loomTensor* w, int64_t t, int k);
void moe_weight_set(const loomTensor* w, int64_t t, int k, double v);

/* ---- Arithmetic (moe_rows.c) -------------------------------------------------------------- */
/* The accumulation type of a float dtype: float32 for float16, bfloat16 and float32 (4 bytes),
 * float64 for float64 (8). A weight is converted to it before it multiplies. */
size_t moe_acc_size(loomDataType_t dt);
/* acc[0..n) += w * row[0..n) (weighted) or += row (not), in the accumulation type. */
void moe_acc_add(void* acc, const char* row, loomDataType_t dt, int64_t n, int weighted, double w);
/* dst = acc, rounded once to dt. */
void moe_acc_store(const void* acc, char* dst, loomDataType_t dt, int64_t n);
/* dst = w * src, computed in the accumulation type and rounded once. */
void moe_row_scale(const char* src, char* dst, loomDataType_t dt, int64_t n, double w);
/* <a, b> over n elements in index order, in the accumulation type. */
double moe_row_dot(const char* a, const char* b, loomDataType_t dt, int64_t n);

#endif
