/* codec.h - the element codecs of float16, bfloat16 and the two float8
 * formats: the single definition of every conversion, compiled into the host
 * kernels (kernels/cpu/reduce_impl.h, inside its O3 and fp-contract=off
 * region) and into the device kernels (kernels/cuda/reduce.cu), so that a
 * value converts to the same bits on the CPU and on the GPU.
 *
 * Branch-free integer code (vectorisable on the host; on the device,
 * independent of the FTZ and rounding modes). The only float arithmetic is
 * exact: a product by a power of two that stays normal. */
#ifndef LOOM_KERNELS_CODEC_H
#define LOOM_KERNELS_CODEC_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__
#else
#define LOOM_HD
#endif

LOOM_HD static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
LOOM_HD static inline float f32_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* c ? x : y as a bit select. The decoders use it where one input is a
 * float product: in a ternary GCC would sink that product into a branch and,
 * as it may trap, refuse to vectorise the loop. */
LOOM_HD static inline uint32_t bits_select(int c, uint32_t x, uint32_t y) {
  uint32_t m = 0u - (uint32_t)(c != 0);
  return (x & m) | (y & ~m);
}

/* |x| (float bits ax, finite or inf, not NaN) rounded to nearest-even in a
 * format with mbits mantissa bits and exponent bias `bias`, whose smallest
 * subnormal is far above every float subnormal (half, float8). Returns the
 * magnitude code; it may exceed the largest finite code, and the caller
 * saturates or makes infinity. Integer only: vectorisable, and independent of
 * the MXCSR rounding and FTZ/DAZ bits, as F16C's vcvtps2ph with an immediate
 * rounding mode is. */
LOOM_HD static inline uint32_t rne_magnitude(uint32_t ax, uint32_t mbits, uint32_t bias) {
  uint32_t e = ax >> 23;
  /* Normal result: rebias the exponent, then round off sh bits; a carry out
   * of the mantissa correctly bumps the exponent. */
  uint32_t sh = 23 - mbits;
  uint32_t rn = ax - ((127 - bias) << 23);
  uint32_t qn = (rn + ((1u << (sh - 1)) - 1) + ((rn >> sh) & 1)) >> sh;
  /* Subnormal result: the significand with its implicit bit, shifted so one
   * unit is the format's smallest subnormal, rounded the same way. */
  uint32_t sig = (ax & 0x7fffffu) | 0x800000u;
  uint32_t ss = 151 - bias - mbits - e;
  ss = ss - 1 > 30 ? 31 : ss; /* keeps shifts defined; 31 already gives 0 */
  uint32_t qs = (sig + (1u << (ss - 1)) - 1 + ((sig >> ss) & 1)) >> ss;
  return e >= 128 - bias ? qn : qs;
}

/* NaNs follow F16C exactly (vcvtph2ps sets the quiet bit; vcvtps2ph keeps the
 * top payload bits and sets the quiet bit), so that the scalar code and the
 * F16C paths agree on every input. */
LOOM_HD static inline float half_decode(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t normal = (em << 13) + (112u << 23);
  uint32_t sub = f32_bits((float)em * 0x1p-24f); /* exact where used: em < 0x400 */
  uint32_t special = (em << 13) | 0x7f800000u | (em > 0x7c00u ? 0x400000u : 0);
  uint32_t r = bits_select(em >= 0x400u, normal, sub);
  return f32_of(sign | bits_select(em >= 0x7c00u, special, r));
}
LOOM_HD static inline uint16_t half_encode(float f) {
  uint32_t x = f32_bits(f), ax = x & 0x7fffffffu;
  uint32_t q = rne_magnitude(ax, 10, 15);
  q = q > 0x7c00u ? 0x7c00u : q; /* overflow rounds to infinity */
  q = ax > 0x7f800000u ? 0x7e00u | ((ax >> 13) & 0x3ffu) : q;
  return (uint16_t)(((x >> 16) & 0x8000u) | q);
}

/* bfloat16 is the top half of a float: rounding is one add, and it keeps
 * subnormals (unlike vcvtneps2bf16, which flushes them). */
LOOM_HD static inline float bf16_decode(uint16_t h) {
  return f32_of((uint32_t)h << 16);
}
LOOM_HD static inline uint16_t bf16_encode(float f) {
  uint32_t x = f32_bits(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
  uint32_t nan = (x >> 16) | 0x40u;
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : r);
}

/* float8 e4m3 "fn": bias 7, no infinities, 0x7f/0xff are NaN, max 448.
 * Its bits moved into a float16 (mantissa at the top, same exponent field)
 * give the value / 256 for every finite code, subnormals included, so the
 * decoder can reuse float16's (and F16C): scale by 256 (exact), fix NaN. */
LOOM_HD static inline uint16_t fp8e4m3_half_bits(uint8_t v) {
  return (uint16_t)(((v & 0x7fu) << 7) | ((v & 0x80u) << 8));
}
LOOM_HD static inline float fp8e4m3_from_half(uint8_t v, float h) {
  uint32_t nan = ((uint32_t)(v & 0x80u) << 24) | 0x7fc00000u;
  return f32_of(bits_select((v & 0x7fu) == 0x7fu, nan, f32_bits(h * 256.0f)));
}
LOOM_HD static inline float fp8e4m3_decode(uint8_t v) {
  return fp8e4m3_from_half(v, half_decode(fp8e4m3_half_bits(v)));
}
LOOM_HD static inline uint8_t fp8e4m3_encode(float f) {
  uint32_t x = f32_bits(f), ax = x & 0x7fffffffu;
  uint32_t q = rne_magnitude(ax, 3, 7);
  q = q > 0x7eu ? 0x7eu : q; /* saturate, infinities included */
  q = ax > 0x7f800000u ? 0x7fu : q;
  return (uint8_t)(((x >> 24) & 0x80u) | q);
}

/* float8 e5m2: the top byte of a float16, IEEE-like with infinities. */
LOOM_HD static inline uint16_t fp8e5m2_half_bits(uint8_t v) {
  return (uint16_t)(v << 8);
}
LOOM_HD static inline float fp8e5m2_decode(uint8_t v) {
  return half_decode(fp8e5m2_half_bits(v));
}
LOOM_HD static inline uint8_t fp8e5m2_encode(float f) {
  uint32_t x = f32_bits(f), ax = x & 0x7fffffffu;
  uint32_t q = rne_magnitude(ax, 2, 15);
  q = q > 0x7cu ? 0x7cu : q; /* overflow rounds to infinity */
  q = ax > 0x7f800000u ? 0x7eu : q;
  return (uint8_t)(((x >> 24) & 0x80u) | q);
}

#endif /* LOOM_KERNELS_CODEC_H */
