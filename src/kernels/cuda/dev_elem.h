/* dev_elem.h - the element operations of the device kernels (reduce.cu),
 * written so that each gives the bits the host kernels give
 * (kernels/cpu/reduce_impl.h) for the same inputs, NaNs included.
 *
 * Plain C with LOOM_HD: nvcc compiles it into the kernels, and the unit
 * tests compile the very same functions on the host and compare them with
 * cpu_reduce, cpu_div and cpu_mul_scalar bit for bit
 * (tests/unit/test_dev_elem.cc), so a difference shows without a GPU.
 *
 * Where the two processors differ, the code below follows the host:
 *  - NaNs. x86 (SSE) returns the first operand that is a NaN, quieted, and
 *    its "default NaN" (sign set, 0xffc00000 / 0xfff8000000000000) when an
 *    operation makes a NaN from numbers (inf - inf, 0 * inf); the host
 *    kernels pin the order, a NaN `a` winning (f32_pick_nan). A GPU returns
 *    its canonical NaN (0x7fffffff) in every case. So a device result that
 *    is a NaN is replaced by the NaN the host would have made (dev_nan_f32).
 *  - Max and min are the ternaries of the host (`a > b ? a : b`), which
 *    both processors evaluate alike; never fmaxf, whose NaN rule differs.
 *  - Contraction: each op rounds once; reduce.cu is compiled with
 *    -fmad=false, and no function here has a product beside a sum.
 *  - Division: IEEE division (nvcc's default -prec-div=true) of the float32
 *    (float64) value; integer division is C's, which the host kernels'
 *    floating trick reproduces exactly.
 * float16, bfloat16 and float8 decode with kernels/codec.h, compute in
 * float32 with the rules above, and round to nearest-even on each store. */
#ifndef LOOM_KERNELS_CUDA_DEV_ELEM_H
#define LOOM_KERNELS_CUDA_DEV_ELEM_H

#include <stdint.h>

#include "kernels/codec.h"

LOOM_HD static inline int dev_isnan_f32(float x) {
  return (f32_bits(x) & 0x7fffffffu) > 0x7f800000u;
}
LOOM_HD static inline uint64_t dev_f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}
LOOM_HD static inline double dev_f64_of(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}
LOOM_HD static inline int dev_isnan_f64(double x) {
  return (dev_f64_bits(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}

/* The NaN x86 makes from operands a and b when the result r is a NaN. */
LOOM_HD static inline float dev_nan_f32(float a, float b, float r) {
  if (!dev_isnan_f32(r)) return r;
  if (dev_isnan_f32(a)) return f32_of(f32_bits(a) | 0x400000u);
  if (dev_isnan_f32(b)) return f32_of(f32_bits(b) | 0x400000u);
  return f32_of(0xffc00000u);
}
LOOM_HD static inline double dev_nan_f64(double a, double b, double r) {
  if (!dev_isnan_f64(r)) return r;
  if (dev_isnan_f64(a)) return dev_f64_of(dev_f64_bits(a) | 0x8000000000000ull);
  if (dev_isnan_f64(b)) return dev_f64_of(dev_f64_bits(b) | 0x8000000000000ull);
  return dev_f64_of(0xfff8000000000000ull);
}

/* ---- float32 and float64: one family each, computed in their own type ---- */
#define DEV_FLOAT_OPS(T, s)                           \
  LOOM_HD static inline T dev_##s##_sum(T a, T b) {   \
    return dev_nan_##s(a, b, a + b);                  \
  }                                                   \
  LOOM_HD static inline T dev_##s##_prod(T a, T b) {  \
    return dev_nan_##s(a, b, a * b);                  \
  }                                                   \
  LOOM_HD static inline T dev_##s##_max(T a, T b) {   \
    return a > b ? a : b;                             \
  }                                                   \
  LOOM_HD static inline T dev_##s##_min(T a, T b) {   \
    return a < b ? a : b;                             \
  }                                                   \
  LOOM_HD static inline T dev_##s##_div(T a, int d) { \
    T fd = (T)d;                                      \
    return dev_nan_##s(a, fd, a / fd);                \
  }
DEV_FLOAT_OPS(float, f32)
DEV_FLOAT_OPS(double, f64)
#undef DEV_FLOAT_OPS

/* ---- Integers: sums and products wrap (unsigned arithmetic serves both
 * signs), division is C's. ---- */
#define DEV_INT_OPS(T, s)                           \
  LOOM_HD static inline T dev_##s##_max(T a, T b) { \
    return a > b ? a : b;                           \
  }                                                 \
  LOOM_HD static inline T dev_##s##_min(T a, T b) { \
    return a < b ? a : b;                           \
  }
#define DEV_WRAP_OPS(T, s)                           \
  LOOM_HD static inline T dev_##s##_sum(T a, T b) {  \
    return (T)(a + b);                               \
  }                                                  \
  LOOM_HD static inline T dev_##s##_prod(T a, T b) { \
    return (T)(a * b);                               \
  }
DEV_INT_OPS(int8_t, i8)
DEV_INT_OPS(uint8_t, u8)
DEV_INT_OPS(int32_t, i32)
DEV_INT_OPS(uint32_t, u32)
DEV_INT_OPS(int64_t, i64)
DEV_INT_OPS(uint64_t, u64)
DEV_WRAP_OPS(uint8_t, u8)
DEV_WRAP_OPS(uint32_t, u32)
DEV_WRAP_OPS(uint64_t, u64)
#undef DEV_INT_OPS
#undef DEV_WRAP_OPS
/* uint8 * uint8 promotes to int: 255 * 255 fits, the cast wraps. */

LOOM_HD static inline int8_t dev_i8_div(int8_t a, int d) {
  return (int8_t)((int32_t)a / d);
}
LOOM_HD static inline uint8_t dev_u8_div(uint8_t a, int d) {
  return (uint8_t)((int32_t)a / d);
}
LOOM_HD static inline int32_t dev_i32_div(int32_t a, int d) {
  return d == -1 ? (int32_t)(0u - (uint32_t)a) : a / d;
}
LOOM_HD static inline uint32_t dev_u32_div(uint32_t a, int d) {
  return a / (uint32_t)d;
}
LOOM_HD static inline int64_t dev_i64_div(int64_t a, int d) {
  return d == -1 ? (int64_t)(0u - (uint64_t)a) : a / d;
}
LOOM_HD static inline uint64_t dev_u64_div(uint64_t a, int d) {
  return a / (uint64_t)d;
}

/* ---- float16, bfloat16, float8: float32 arithmetic, one rounding a store.
 * The storage type is the code (uint16_t, uint8_t). ---- */
#define DEV_SMALL_OPS(fmt, T)                                            \
  LOOM_HD static inline T dev_##fmt##_sum(T a, T b) {                    \
    return fmt##_encode(dev_f32_sum(fmt##_decode(a), fmt##_decode(b)));  \
  }                                                                      \
  LOOM_HD static inline T dev_##fmt##_prod(T a, T b) {                   \
    return fmt##_encode(dev_f32_prod(fmt##_decode(a), fmt##_decode(b))); \
  }                                                                      \
  LOOM_HD static inline T dev_##fmt##_max(T a, T b) {                    \
    return fmt##_encode(dev_f32_max(fmt##_decode(a), fmt##_decode(b)));  \
  }                                                                      \
  LOOM_HD static inline T dev_##fmt##_min(T a, T b) {                    \
    return fmt##_encode(dev_f32_min(fmt##_decode(a), fmt##_decode(b)));  \
  }                                                                      \
  LOOM_HD static inline T dev_##fmt##_div(T a, int d) {                  \
    return fmt##_encode(dev_f32_div(fmt##_decode(a), d));                \
  }
DEV_SMALL_OPS(half, uint16_t)
DEV_SMALL_OPS(bf16, uint16_t)
DEV_SMALL_OPS(fp8e4m3, uint8_t)
DEV_SMALL_OPS(fp8e5m2, uint8_t)
#undef DEV_SMALL_OPS

#endif
