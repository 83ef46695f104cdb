/* reduce_impl.h - the host reduction kernels, written once and compiled once
 * per ISA (reduce_scalar.c, reduce_avx2.c, reduce_avx512.c).
 *
 * Three parts:
 *  1. the kernel table type and the per-ISA entry points, for dispatch.c and
 *     the unit tests;
 *  2. the element codecs (float16, bfloat16, float8), from kernels/codec.h:
 *     the single definition of every conversion, inlined into these kernels
 *     and the device kernels (kernels/cuda), and wrapped by dtype.c;
 *  3. the kernel bodies, only where CPU_KERNEL_BODIES is defined (the ISA
 *     files), ending in CPU_KERNEL_TABLE_INIT.
 *
 * Bit-identical results across ISAs come from writing every kernel as an
 * element-wise loop with no reassociation, so vectorising it cannot change a
 * result; the few places where instruction choice could (F16C, NaN operand
 * order) are pinned down below. Elements are read and written with memcpy so
 * that any byte alignment is defined behaviour; GCC turns those into plain
 * unaligned vector loads. */
#ifndef LOOM_KERNELS_CPU_REDUCE_IMPL_H
#define LOOM_KERNELS_CPU_REDUCE_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- 1. Tables ----------------------------------------------------------- */

typedef void (*cpu_binop_fn)(void* dst, const void* a, const void* b, size_t n);
typedef void (*cpu_div_fn)(void* dst, const void* src, size_t n, int divisor);
typedef void (*cpu_mul_fn)(void* dst, const void* src, size_t n, const void* scalar);

enum { CPU_OP_SUM, CPU_OP_PROD, CPU_OP_MAX, CPU_OP_MIN, CPU_OP_COUNT };

/* Every slot is filled; integer div kernels expect divisor != 0 (dispatch.c
 * filters it out). */
struct cpu_kernel_table {
  cpu_binop_fn reduce[loomNumTypes][CPU_OP_COUNT];
  cpu_div_fn div[loomNumTypes];
  cpu_mul_fn mul_scalar[loomNumTypes];
};

extern const struct cpu_kernel_table cpu_kernels_scalar;
extern const struct cpu_kernel_table cpu_kernels_avx2;
extern const struct cpu_kernel_table cpu_kernels_avx512;

#ifdef __cplusplus
}
#endif

/* Everything below is static and must vectorise whatever the build type, and
 * the results must never depend on contraction into FMA. */
#pragma GCC push_options
#pragma GCC optimize("O3", "fp-contract=off")

/* ---- 2. Codecs: kernels/codec.h, shared with the device kernels ---------- */

#include "kernels/codec.h"

#pragma GCC pop_options
#endif /* LOOM_KERNELS_CPU_REDUCE_IMPL_H */

/* ---- 3. Kernel bodies (ISA files only) ----------------------------------- */
#if defined(CPU_KERNEL_BODIES) && !defined(LOOM_KERNELS_CPU_REDUCE_BODIES)
#define LOOM_KERNELS_CPU_REDUCE_BODIES

/* The scalar file defines CPU_KERNEL_PORTABLE so that it stays the plain C
 * reference even when the whole build uses -march=native. */
#if !defined(CPU_KERNEL_PORTABLE) && (defined(__AVX512F__) || defined(__F16C__))
#include <immintrin.h>
#define CPU_HAVE_F16C 1
#else
#define CPU_HAVE_F16C 0
#endif

#pragma GCC push_options
#pragma GCC optimize("O3", "fp-contract=off")

/* Elements of decoded float16/bfloat16/float8 held on the stack at a time:
 * small enough for L1, large enough to amortise the loop overhead. */
#define CPU_BLOCK 256

#define CPU_LDST(T, s)                                   \
  static inline T ld_##s(const void* p, size_t i) {      \
    T v;                                                 \
    memcpy(&v, (const char*)p + i * sizeof v, sizeof v); \
    return v;                                            \
  }                                                      \
  static inline void st_##s(void* p, size_t i, T v) {    \
    memcpy((char*)p + i * sizeof v, &v, sizeof v);       \
  }
CPU_LDST(uint8_t, u8)
CPU_LDST(int8_t, i8)
CPU_LDST(uint16_t, u16)
CPU_LDST(uint32_t, u32)
CPU_LDST(int32_t, i32)
CPU_LDST(uint64_t, u64)
CPU_LDST(int64_t, i64)
CPU_LDST(float, f32)
CPU_LDST(double, f64)

/* ---- Element operations ---- */

/* Sums and products wrap: they are done in the unsigned type, which also
 * serves the signed one (same bits). u8 promotes to int without overflow. */
#define CPU_WRAP_OPS(T, s)             \
  static inline T s##_sum(T a, T b) {  \
    return (T)(a + b);                 \
  }                                    \
  static inline T s##_prod(T a, T b) { \
    return (T)(a * b);                 \
  }
#define CPU_ORDER_OPS(T, s)           \
  static inline T s##_max(T a, T b) { \
    return a > b ? a : b;             \
  }                                   \
  static inline T s##_min(T a, T b) { \
    return a < b ? a : b;             \
  }
CPU_WRAP_OPS(uint8_t, u8)
CPU_WRAP_OPS(uint32_t, u32)
CPU_WRAP_OPS(uint64_t, u64)
CPU_ORDER_OPS(uint8_t, u8)
CPU_ORDER_OPS(int8_t, i8)
CPU_ORDER_OPS(uint32_t, u32)
CPU_ORDER_OPS(int32_t, i32)
CPU_ORDER_OPS(uint64_t, u64)
CPU_ORDER_OPS(int64_t, i64)

/* When both operands are NaN, x86 returns the first one, but the compiler may
 * swap the operands of a commutative op differently in scalar and vector
 * code. So a NaN `a` always wins, quieted (a + a): the result no longer
 * depends on code generation. Written as a bit select because a ternary
 * would not vectorise (a + a may trap). Max and min need no help: the ternary
 * fixes the order and is exactly what MAXPS/MINPS compute. */
static inline float f32_pick_nan(float a, float r) {
  uint32_t m = 0u - (uint32_t)(a != a);
  return f32_of((f32_bits(a + a) & m) | (f32_bits(r) & ~m));
}
static inline double f64_pick_nan(double a, double r) {
  uint64_t m = 0u - (uint64_t)(a != a), qa, rr;
  double q = a + a, out;
  memcpy(&qa, &q, sizeof qa);
  memcpy(&rr, &r, sizeof rr);
  rr = (qa & m) | (rr & ~m);
  memcpy(&out, &rr, sizeof out);
  return out;
}
static inline float f32_sum(float a, float b) {
  return f32_pick_nan(a, a + b);
}
static inline float f32_prod(float a, float b) {
  return f32_pick_nan(a, a * b);
}
static inline double f64_sum(double a, double b) {
  return f64_pick_nan(a, a + b);
}
static inline double f64_prod(double a, double b) {
  return f64_pick_nan(a, a * b);
}
CPU_ORDER_OPS(float, f32)
CPU_ORDER_OPS(double, f64)

/* ---- Block codecs: n elements from index `first` to or from floats ---- */

#define CPU_DECODE_BLOCK(fmt, s)                                                              \
  static inline void fmt##_decode_block(float* out, const void* in, size_t first, size_t m) { \
    for (size_t j = 0; j < m; j++) out[j] = fmt##_decode(ld_##s(in, first + j));              \
  }
#define CPU_ENCODE_BLOCK(fmt, s)                                                              \
  static inline void fmt##_encode_block(void* out, size_t first, const float* in, size_t m) { \
    for (size_t j = 0; j < m; j++) st_##s(out, first + j, fmt##_encode(in[j]));               \
  }
CPU_DECODE_BLOCK(bf16, u16)
CPU_ENCODE_BLOCK(bf16, u16)
CPU_ENCODE_BLOCK(fp8e4m3, u8)
CPU_ENCODE_BLOCK(fp8e5m2, u8)

/* float16 uses F16C where the ISA has it; the C tail matches it bit for bit,
 * NaNs included (see half_decode). */
static inline void half_decode_block(float* out, const void* in, size_t first, size_t m) {
  const char* p = (const char*)in + first * 2;
  size_t j = 0;
#if CPU_HAVE_F16C && defined(__AVX512F__)
  for (; j + 16 <= m; j += 16)
    _mm512_storeu_ps(out + j, _mm512_cvtph_ps(_mm256_loadu_si256((const void*)(p + 2 * j))));
#elif CPU_HAVE_F16C
  for (; j + 8 <= m; j += 8)
    _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm_loadu_si128((const void*)(p + 2 * j))));
#endif
  for (; j < m; j++) out[j] = half_decode(ld_u16(p, j));
}
static inline void half_encode_block(void* out, size_t first, const float* in, size_t m) {
  char* p = (char*)out + first * 2;
  size_t j = 0;
#if CPU_HAVE_F16C && defined(__AVX512F__)
  for (; j + 16 <= m; j += 16)
    _mm256_storeu_si256(
        (void*)(p + 2 * j),
        _mm512_cvtps_ph(_mm512_loadu_ps(in + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif CPU_HAVE_F16C
  for (; j + 8 <= m; j += 8)
    _mm_storeu_si128((void*)(p + 2 * j),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + j), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; j < m; j++) st_u16(p, j, half_encode(in[j]));
}

/* float8 decodes through float16 bits, to use F16C too: widen into h (at
 * least m entries), then decode those. */
#define CPU_FP8_WIDEN(fmt)                                                                         \
  static inline const uint16_t* fmt##_widen(uint16_t* h, const void* in, size_t first, size_t m) { \
    for (size_t j = 0; j < m; j++) h[j] = fmt##_half_bits(ld_u8(in, first + j));                   \
    return h;                                                                                      \
  }
CPU_FP8_WIDEN(fp8e5m2)
CPU_FP8_WIDEN(fp8e4m3)
static inline void fp8e5m2_decode_block(float* out, const void* in, size_t first, size_t m) {
  uint16_t h[CPU_BLOCK];
  half_decode_block(out, fp8e5m2_widen(h, in, first, m), 0, m);
}
static inline void fp8e4m3_decode_block(float* out, const void* in, size_t first, size_t m) {
  uint16_t h[CPU_BLOCK];
  half_decode_block(out, fp8e4m3_widen(h, in, first, m), 0, m);
  for (size_t j = 0; j < m; j++) out[j] = fp8e4m3_from_half(ld_u8(in, first + j), out[j]);
}

/* ---- Kernels ---- */

/* START: the first element the C loop does (after a vector prologue). */
#define CPU_BINOP_FROM(name, s, OP, START)                                             \
  static void name(void* dst, const void* a, const void* b, size_t n) {                \
    for (size_t i = START; i < n; i++) st_##s(dst, i, OP(ld_##s(a, i), ld_##s(b, i))); \
  }
#define CPU_BINOP(name, s, OP) CPU_BINOP_FROM(name, s, OP, 0)
#define CPU_MUL(name, s, T, OP)                                                \
  static void name(void* dst, const void* src, size_t n, const void* scalar) { \
    const T k = ld_##s(scalar, 0);                                             \
    for (size_t i = 0; i < n; i++) st_##s(dst, i, OP(ld_##s(src, i), k));      \
  }
/* Integer division is C's (usual conversions, truncation toward zero), done
 * in floating point because that vectorises and idiv does not. It is exact:
 * with |x| < 2^8 in float, or |x| < 2^32 in double, the rounding error of
 * x / d stays below 1/|d|, the least distance from a non-integer quotient to
 * an integer, so truncation finds C's quotient. Only INT32_MIN / -1 would
 * overflow the conversion back: d == -1 negates, wrapping as C cannot. */
#define CPU_INT_DIV(name, s, T, F, I, DIVISOR)                                     \
  static void name(void* dst, const void* src, size_t n, int d) {                  \
    F fd = (F)(DIVISOR);                                                           \
    for (size_t i = 0; i < n; i++) st_##s(dst, i, (T)(I)((F)ld_##s(src, i) / fd)); \
  }
static void k_i32_div(void* dst, const void* src, size_t n, int d) {
  double fd = d;
  if (d == -1) {
    for (size_t i = 0; i < n; i++) st_u32(dst, i, 0u - ld_u32(src, i));
    return;
  }
  for (size_t i = 0; i < n; i++) st_i32(dst, i, (int32_t)((double)ld_i32(src, i) / fd));
}
/* 64-bit quotients do not fit a double's mantissa: idiv it is. */
static void k_i64_div(void* dst, const void* src, size_t n, int d) {
  if (d == -1) {
    for (size_t i = 0; i < n; i++) st_u64(dst, i, 0u - ld_u64(src, i));
    return;
  }
  for (size_t i = 0; i < n; i++) st_i64(dst, i, ld_i64(src, i) / d);
}
static void k_u64_div(void* dst, const void* src, size_t n, int d) {
  for (size_t i = 0; i < n; i++) st_u64(dst, i, ld_u64(src, i) / (uint64_t)d);
}

/* float16, bfloat16, float8: decode a block to float32, run the float32
 * kernel on it in place (one definition of every op), round once on the
 * store. */
#define CPU_SMALL_BINOP(name, fmt, K32)                                 \
  static void name(void* dst, const void* a, const void* b, size_t n) { \
    float x[CPU_BLOCK], y[CPU_BLOCK];                                   \
    for (size_t i = 0; i < n; i += CPU_BLOCK) {                         \
      size_t m = n - i < CPU_BLOCK ? n - i : CPU_BLOCK;                 \
      fmt##_decode_block(x, a, i, m);                                   \
      fmt##_decode_block(y, b, i, m);                                   \
      K32(x, x, y, m);                                                  \
      fmt##_encode_block(dst, i, x, m);                                 \
    }                                                                   \
  }
#define CPU_SMALL_UNARY(fmt)                                                            \
  static void k_##fmt##_div(void* dst, const void* src, size_t n, int d) {              \
    float x[CPU_BLOCK];                                                                 \
    for (size_t i = 0; i < n; i += CPU_BLOCK) {                                         \
      size_t m = n - i < CPU_BLOCK ? n - i : CPU_BLOCK;                                 \
      fmt##_decode_block(x, src, i, m);                                                 \
      k_f32_div(x, x, m, d);                                                            \
      fmt##_encode_block(dst, i, x, m);                                                 \
    }                                                                                   \
  }                                                                                     \
  static void k_##fmt##_mul(void* dst, const void* src, size_t n, const void* scalar) { \
    float x[CPU_BLOCK], k;                                                              \
    fmt##_decode_block(&k, scalar, 0, 1);                                               \
    for (size_t i = 0; i < n; i += CPU_BLOCK) {                                         \
      size_t m = n - i < CPU_BLOCK ? n - i : CPU_BLOCK;                                 \
      fmt##_decode_block(x, src, i, m);                                                 \
      k_f32_mul(x, x, m, &k);                                                           \
      fmt##_encode_block(dst, i, x, m);                                                 \
    }                                                                                   \
  }
#define CPU_SMALL_KERNELS(fmt)                     \
  CPU_SMALL_BINOP(k_##fmt##_sum, fmt, k_f32_sum)   \
  CPU_SMALL_BINOP(k_##fmt##_prod, fmt, k_f32_prod) \
  CPU_SMALL_BINOP(k_##fmt##_max, fmt, k_f32_max)   \
  CPU_SMALL_BINOP(k_##fmt##_min, fmt, k_f32_min)   \
  CPU_SMALL_UNARY(fmt)

/* Integers: one sum/prod/mul kernel per width, shared by both signs. */
#define CPU_WRAP_KERNELS(T, s)         \
  CPU_BINOP(k_##s##_sum, s, s##_sum)   \
  CPU_BINOP(k_##s##_prod, s, s##_prod) \
  CPU_MUL(k_##s##_mul, s, T, s##_prod)
#define CPU_ORDER_KERNELS(s)         \
  CPU_BINOP(k_##s##_max, s, s##_max) \
  CPU_BINOP(k_##s##_min, s, s##_min)

CPU_WRAP_KERNELS(uint8_t, u8)
CPU_WRAP_KERNELS(uint32_t, u32)
CPU_WRAP_KERNELS(uint64_t, u64)
CPU_ORDER_KERNELS(i8)
CPU_ORDER_KERNELS(u8)
CPU_ORDER_KERNELS(i32)
CPU_ORDER_KERNELS(u32)
CPU_ORDER_KERNELS(i64)
CPU_ORDER_KERNELS(u64)
/* C promotes 8-bit values to int (a negative divisor stays negative); it
 * converts the divisor to unsigned for uint32. */
CPU_INT_DIV(k_i8_div, i8, int8_t, float, int32_t, d)
CPU_INT_DIV(k_u8_div, u8, uint8_t, float, int32_t, d)
CPU_INT_DIV(k_u32_div, u32, uint32_t, double, int64_t, (uint32_t)d)

#if CPU_HAVE_F16C && defined(__AVX512F__)
/* AVX-512 only. From f32_pick_nan GCC makes a masked add with the load of b
 * folded in, and masked loads run at about half the memory bandwidth on AMD
 * Zen 4/5. These loops keep every load unmasked and mask only the a + a;
 * they compute exactly f32_sum/f32_prod (f64), and the C loop does the rest. */
#define CPU_PICK_AVX512(name, T, V, ESIZE, VOP, CMP, MASKADD)                               \
  static inline size_t name(void* dst, const void* a, const void* b, size_t n) {            \
    size_t i = 0;                                                                           \
    for (; i + 64 / ESIZE <= n; i += 64 / ESIZE) {                                          \
      V x = _mm512_loadu_##T((const char*)a + i * ESIZE);                                   \
      V y = _mm512_loadu_##T((const char*)b + i * ESIZE);                                   \
      V r = VOP(x, y);                                                                      \
      _mm512_storeu_##T((char*)dst + i * ESIZE, MASKADD(r, CMP(x, x, _CMP_UNORD_Q), x, x)); \
    }                                                                                       \
    return i;                                                                               \
  }
CPU_PICK_AVX512(f32_sum_avx512, ps, __m512, 4, _mm512_add_ps, _mm512_cmp_ps_mask,
                _mm512_mask_add_ps)
CPU_PICK_AVX512(f32_prod_avx512, ps, __m512, 4, _mm512_mul_ps, _mm512_cmp_ps_mask,
                _mm512_mask_add_ps)
CPU_PICK_AVX512(f64_sum_avx512, pd, __m512d, 8, _mm512_add_pd, _mm512_cmp_pd_mask,
                _mm512_mask_add_pd)
CPU_PICK_AVX512(f64_prod_avx512, pd, __m512d, 8, _mm512_mul_pd, _mm512_cmp_pd_mask,
                _mm512_mask_add_pd)
#define CPU_PICK_START(fn) fn##_avx512(dst, a, b, n)
#else
#define CPU_PICK_START(fn) 0
#endif

CPU_BINOP_FROM(k_f32_sum, f32, f32_sum, CPU_PICK_START(f32_sum))
CPU_BINOP_FROM(k_f32_prod, f32, f32_prod, CPU_PICK_START(f32_prod))
CPU_ORDER_KERNELS(f32)
CPU_MUL(k_f32_mul, f32, float, f32_prod)
CPU_BINOP_FROM(k_f64_sum, f64, f64_sum, CPU_PICK_START(f64_sum))
CPU_BINOP_FROM(k_f64_prod, f64, f64_prod, CPU_PICK_START(f64_prod))
CPU_ORDER_KERNELS(f64)
CPU_MUL(k_f64_mul, f64, double, f64_prod)
static void k_f32_div(void* dst, const void* src, size_t n, int d) {
  float fd = (float)d;
  for (size_t i = 0; i < n; i++) st_f32(dst, i, ld_f32(src, i) / fd);
}
static void k_f64_div(void* dst, const void* src, size_t n, int d) {
  double fd = (double)d;
  for (size_t i = 0; i < n; i++) st_f64(dst, i, ld_f64(src, i) / fd);
}

CPU_SMALL_KERNELS(half)
CPU_SMALL_KERNELS(bf16)
CPU_SMALL_KERNELS(fp8e4m3)
CPU_SMALL_KERNELS(fp8e5m2)

#pragma GCC pop_options

#define CPU_OPS4(s) \
  { k_##s##_sum, k_##s##_prod, k_##s##_max, k_##s##_min }
#define CPU_OPS_INT(w, s) \
  { k_##w##_sum, k_##w##_prod, k_##s##_max, k_##s##_min }

/* The initializer of one ISA's struct cpu_kernel_table. */
#define CPU_KERNEL_TABLE_INIT                                                           \
  {                                                                                     \
    .reduce =                                                                           \
        {                                                                               \
            [loomInt8] = CPU_OPS_INT(u8, i8),     [loomUint8] = CPU_OPS_INT(u8, u8),    \
            [loomInt32] = CPU_OPS_INT(u32, i32),  [loomUint32] = CPU_OPS_INT(u32, u32), \
            [loomInt64] = CPU_OPS_INT(u64, i64),  [loomUint64] = CPU_OPS_INT(u64, u64), \
            [loomFloat16] = CPU_OPS4(half),       [loomFloat32] = CPU_OPS4(f32),        \
            [loomFloat64] = CPU_OPS4(f64),        [loomBfloat16] = CPU_OPS4(bf16),      \
            [loomFloat8e4m3] = CPU_OPS4(fp8e4m3), [loomFloat8e5m2] = CPU_OPS4(fp8e5m2), \
        },                                                                              \
    .div = {[loomInt8] = k_i8_div,                                                      \
            [loomUint8] = k_u8_div,                                                     \
            [loomInt32] = k_i32_div,                                                    \
            [loomUint32] = k_u32_div,                                                   \
            [loomInt64] = k_i64_div,                                                    \
            [loomUint64] = k_u64_div,                                                   \
            [loomFloat16] = k_half_div,                                                 \
            [loomFloat32] = k_f32_div,                                                  \
            [loomFloat64] = k_f64_div,                                                  \
            [loomBfloat16] = k_bf16_div,                                                \
            [loomFloat8e4m3] = k_fp8e4m3_div,                                           \
            [loomFloat8e5m2] = k_fp8e5m2_div},                                          \
    .mul_scalar = {[loomInt8] = k_u8_mul,                                               \
                   [loomUint8] = k_u8_mul,                                              \
                   [loomInt32] = k_u32_mul,                                             \
                   [loomUint32] = k_u32_mul,                                            \
                   [loomInt64] = k_u64_mul,                                             \
                   [loomUint64] = k_u64_mul,                                            \
                   [loomFloat16] = k_half_mul,                                          \
                   [loomFloat32] = k_f32_mul,                                           \
                   [loomFloat64] = k_f64_mul,                                           \
                   [loomBfloat16] = k_bf16_mul,                                         \
                   [loomFloat8e4m3] = k_fp8e4m3_mul,                                    \
                   [loomFloat8e5m2] = k_fp8e5m2_mul},                                   \
  }

#endif /* CPU_KERNEL_BODIES */
