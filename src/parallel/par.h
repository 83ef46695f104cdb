/* par.h - what the files of libloom_parallel share: argument errors, dtypes and their
 * conversions, tensor views (spans, overlap, matrix views, strided copies), splits, and the
 * entry of a call (its stream and memory). Built on the public headers only (loom.h and
 * loom_parallel.h); nothing here reaches Loom's internals. */
#ifndef LOOM_PAR_H
#define LOOM_PAR_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "loom_parallel.h"

/* ---- Errors ----------------------------------------------------------------------------- */

/* Formats "fn: text", makes it the last error of comm (NULL: the calling thread's) and
 * returns loomInvalidArgument: the misuse reports of PARALLEL.md section 8. */
loomResult_t par_err(loomComm_t comm, const char* fn, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same with another code (loomSystemError for memory, loomInternalError). */
loomResult_t par_fail(loomComm_t comm, loomResult_t code, const char* fn, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- Data types -------------------------------------------------------------------------- */

size_t par_dtype_size(loomDataType_t dt); /* 0: not a Loom dtype */
const char* par_dtype_name(loomDataType_t dt);
/* float16, bfloat16, float32, float64: the dtypes compute calls take. */
int par_dtype_is_compute(loomDataType_t dt);

/* Half types, inline so that the loops that convert vectorize. bfloat16 is the top half of a
 * float32. */
static inline float par_bf16_to_float(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, sizeof(f));
  return f;
}

/* Exact (a subnormal m * 2^-24 is exact in float32). */
static inline float par_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
  }
  uint32_t x = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112u) << 23) | (m << 13);
  float f;
  memcpy(&f, &x, sizeof(f));
  return f;
}

/* Nearest-even; 65520 and above round to infinity, NaN stays NaN. */
static inline uint16_t par_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (ax >= 0x477ff000u) return sign | 0x7c00u; /* 65520 and above round to infinity */
  if (ax < 0x38800000u) {                       /* below 2^-14: a subnormal half */
    float v;
    memcpy(&v, &ax, sizeof(v));
    return sign | (uint16_t)nearbyintf(v * 16777216.0f); /* exact scaling, then nearest-even */
  }
  uint32_t h = ((((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13)), rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return sign | (uint16_t)h;
}

/* Nearest-even; NaN stays a quiet NaN. */
static inline uint16_t par_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* Element i of a float dtype's array as a double, and v stored there: through float for the
 * 16-bit types, which come from float32 accumulators, so the one rounding is the store's. */
static inline double par_get(const void* p, int64_t i, loomDataType_t dt) {
  switch (dt) {
    case loomFloat16:
      return par_half_to_float(((const uint16_t*)p)[i]);
    case loomBfloat16:
      return par_bf16_to_float(((const uint16_t*)p)[i]);
    case loomFloat32:
      return ((const float*)p)[i];
    default:
      return ((const double*)p)[i];
  }
}

static inline void par_put(void* p, int64_t i, loomDataType_t dt, double v) {
  switch (dt) {
    case loomFloat16:
      ((uint16_t*)p)[i] = par_float_to_half((float)v);
      break;
    case loomBfloat16:
      ((uint16_t*)p)[i] = par_float_to_bf16((float)v);
      break;
    case loomFloat32:
      ((float*)p)[i] = (float)v;
      break;
    default:
      ((double*)p)[i] = v;
  }
}

/* ---- Tensors ----------------------------------------------------------------------------- */

int64_t par_numel(const loomTensor* t);
/* A valid description: t non-NULL, ndim in 0..8, a Loom dtype, extents and strides >= 0, data
 * non-NULL when there are elements, and a byte span that fits in the address space. */
loomResult_t par_check(loomComm_t comm, const char* fn, const char* name, const loomTensor* t);
/* par_check, and the output rule: t does not overlap itself. */
loomResult_t par_check_out(loomComm_t comm, const char* fn, const char* name, const loomTensor* t);
/* [*lo, *hi): the bytes t's elements cover (lo == hi when it has none). */
void par_span(const loomTensor* t, uintptr_t* lo, uintptr_t* hi);
int par_overlap(const loomTensor* a, const loomTensor* b); /* byte spans intersect */
int par_same_view(const loomTensor* a, const loomTensor* b);
int par_contiguous(const loomTensor* t); /* loomTensorIsContiguous */
/* Matrix-viewable (PARALLEL.md section 1): rows, cols and leading dimension of the view. */
int par_matrix(const loomTensor* t, int64_t* rows, int64_t* cols, int64_t* ld);
/* "[2, 3, 4]" */
const char* par_shape_str(const loomTensor* t, char* buf, size_t len);
/* dst = src, element by element; equal shapes and dtypes, any strides, no overlap. */
void par_copy(const loomTensor* src, const loomTensor* dst);
/* Strided <-> a dense row-major buffer of t's shape. */
void par_pack(const loomTensor* src, void* dense);
void par_unpack(const void* dense, const loomTensor* dst);
/* A dense tensor of t's shape and dtype over data. */
void par_dense_like(const loomTensor* t, void* data, loomTensor* out);
/* Shapes equal except along dim (-1: everywhere); on a mismatch *bad is the first dim. */
int par_shapes_agree(const loomTensor* a, const loomTensor* b, int except_dim, int* bad);

/* ---- Splits ------------------------------------------------------------------------------ */

/* Checks splits (NULL: even) of extent over n ranks and fills offs[0..n] (offs[n] = extent).
 * what names the argument in the message ("splits", "seqSplits", "vocabSplits"). */
loomResult_t par_splits(loomComm_t comm, const char* fn, const char* what, const int64_t* splits,
                        int n, int64_t extent, int64_t* offs);

/* ---- A call's entry ---------------------------------------------------------------------- */

/* The communicator's rank and size; comm must be a live one. */
loomResult_t par_comm(loomComm_t comm, const char* fn, const char* name, int* rank, int* n);
/* Checks the stream against host memory (this version computes on host memory only) and
 * orders the call after the stream's earlier work: NULL passes; a host stream is
 * synchronized (its first error is returned); a CUDA stream is refused. */
loomResult_t par_enter(loomComm_t comm, const char* fn, loomStream_t stream);
/* Scratch of n bytes (64-byte aligned, n may be 0); NULL with an error set when it cannot. */
void* par_scratch(loomComm_t comm, const char* fn, size_t n);

/* A host stream of the calling thread, for work the layer overlaps with its own compute
 * (made on first use, destroyed when the thread exits); NULL when one cannot be made. */
loomStream_t par_side_stream(void);

#define PAR_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PAR_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
