/* net_values.h - inputs whose collectives are exact in any order of
 * evaluation, and their references, for net_check. Every value is a small
 * integer (or, for an average over a power-of-two rank count, a small integer
 * over that power of two), so each datatype holds every partial result
 * exactly and a result can be compared bit for bit. The narrow float formats
 * are encoded here from first principles, independent of the library.
 * Plain C, public API types only. */
#ifndef LOOM_TESTS_NET_VALUES_H
#define LOOM_TESTS_NET_VALUES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "loom.h"

/* The reductions net_check runs. NV_PREMUL is a PreMulSum with scalar 2. */
enum nv_op { NV_SUM, NV_PROD, NV_MAX, NV_MIN, NV_AVG, NV_PREMUL, NV_OP_COUNT };

static inline const char* nv_op_name(int op) {
  static const char* const names[NV_OP_COUNT] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return op >= 0 && op < NV_OP_COUNT ? names[op] : "?";
}

static inline size_t nv_size(loomDataType_t t) {
  switch (t) {
    case loomInt8:
    case loomUint8:
    case loomFloat8e4m3:
    case loomFloat8e5m2:
      return 1;
    case loomFloat16:
    case loomBfloat16:
      return 2;
    case loomInt32:
    case loomUint32:
    case loomFloat32:
      return 4;
    default:
      return 8;
  }
}

static inline const char* nv_type_name(loomDataType_t t) {
  switch (t) {
    case loomInt8:
      return "int8";
    case loomUint8:
      return "uint8";
    case loomInt32:
      return "int32";
    case loomUint32:
      return "uint32";
    case loomInt64:
      return "int64";
    case loomUint64:
      return "uint64";
    case loomFloat16:
      return "float16";
    case loomFloat32:
      return "float32";
    case loomFloat64:
      return "float64";
    case loomBfloat16:
      return "bfloat16";
    default:
      return "?";
  }
}

static inline int nv_is_float(loomDataType_t t) {
  return t == loomFloat16 || t == loomBfloat16 || t == loomFloat32 || t == loomFloat64;
}

/* The largest integer pattern value each type holds exactly (a mask). */
static inline uint64_t nv_mask(loomDataType_t t) {
  switch (t) {
    case loomInt8:
      return 0x7f;
    case loomUint8:
      return 0xff;
    case loomInt32:
      return 0x7fffffff;
    case loomUint32:
      return 0xffffffff;
    case loomFloat16:
      return 0x7ff; /* 11 significant bits */
    case loomBfloat16:
      return 0xff; /* 8 */
    case loomFloat32:
      return 0xffffff; /* 24 */
    default:
      return (UINT64_C(1) << 53) - 1; /* 64-bit types, through a double */
  }
}

/* Bits of x (exactly representable and normal, or zero) in a binary format
 * with ebits exponent and mbits mantissa bits. */
static inline uint32_t nv_narrow_encode(double x, int ebits, int mbits) {
  if (x == 0) return 0;
  uint32_t sign = 0;
  if (x < 0) {
    sign = 1;
    x = -x;
  }
  int e;
  double m = frexp(x, &e); /* x = m * 2^e, m in [0.5, 1) */
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t exp = (uint32_t)(e - 1 + bias);
  uint32_t frac = (uint32_t)((2 * m - 1) * (double)(1u << mbits));
  return (sign << (ebits + mbits)) | (exp << mbits) | frac;
}

static inline double nv_narrow_decode(uint32_t bits, int ebits, int mbits) {
  uint32_t sign = bits >> (ebits + mbits);
  uint32_t exp = (bits >> mbits) & ((1u << ebits) - 1);
  uint32_t man = bits & ((1u << mbits) - 1);
  int bias = (1 << (ebits - 1)) - 1;
  double v;
  if (exp == (1u << ebits) - 1)
    v = man ? NAN : INFINITY;
  else if (exp == 0)
    v = ldexp((double)man, 1 - bias - mbits);
  else
    v = ldexp((double)(man | (1u << mbits)), (int)exp - bias - mbits);
  return sign ? -v : v;
}

static inline void nv_store(loomDataType_t t, void* buf, size_t i, double x) {
  switch (t) {
    case loomInt8:
      ((int8_t*)buf)[i] = (int8_t)x;
      break;
    case loomUint8:
      ((uint8_t*)buf)[i] = (uint8_t)x;
      break;
    case loomInt32:
      ((int32_t*)buf)[i] = (int32_t)x;
      break;
    case loomUint32:
      ((uint32_t*)buf)[i] = (uint32_t)x;
      break;
    case loomInt64:
      ((int64_t*)buf)[i] = (int64_t)x;
      break;
    case loomUint64:
      ((uint64_t*)buf)[i] = (uint64_t)x;
      break;
    case loomFloat16:
      ((uint16_t*)buf)[i] = (uint16_t)nv_narrow_encode(x, 5, 10);
      break;
    case loomBfloat16:
      ((uint16_t*)buf)[i] = (uint16_t)nv_narrow_encode(x, 8, 7);
      break;
    case loomFloat32:
      ((float*)buf)[i] = (float)x;
      break;
    default:
      ((double*)buf)[i] = x;
      break;
  }
}

static inline double nv_load(loomDataType_t t, const void* buf, size_t i) {
  switch (t) {
    case loomInt8:
      return ((const int8_t*)buf)[i];
    case loomUint8:
      return ((const uint8_t*)buf)[i];
    case loomInt32:
      return ((const int32_t*)buf)[i];
    case loomUint32:
      return ((const uint32_t*)buf)[i];
    case loomInt64:
      return (double)((const int64_t*)buf)[i];
    case loomUint64:
      return (double)((const uint64_t*)buf)[i];
    case loomFloat16:
      return nv_narrow_decode(((const uint16_t*)buf)[i], 5, 10);
    case loomBfloat16:
      return nv_narrow_decode(((const uint16_t*)buf)[i], 8, 7);
    case loomFloat32:
      return ((const float*)buf)[i];
    default:
      return ((const double*)buf)[i];
  }
}

/* splitmix64: patterns that differ for every (key, index). */
static inline uint64_t nv_mix(uint64_t z) {
  z += UINT64_C(0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* What data-movement collectives carry: element i of the block named by key
 * (a source rank, or a source/destination pair). */
static inline double nv_pattern(loomDataType_t t, uint64_t key, size_t i) {
  return (double)(nv_mix((key << 40) ^ (uint64_t)i) & nv_mask(t));
}

/* What rank r contributes to element i of a reduction: small enough that a
 * sum, product, max or min over up to 8 ranks fits every type exactly. */
static inline double nv_red_input(int op, int r, size_t i) {
  switch (op) {
    case NV_PROD:
      return (i + 3 * (size_t)r) % 5 == 0 ? 2 : 1;
    case NV_MAX:
    case NV_MIN:
      return (double)((i * 13 + (size_t)r * 29 + 5) % 64);
    default:
      return (double)((i * 7 + (size_t)r * 5 + 3) % 8);
  }
}

/* The reduction of element i over ranks 0..n-1. */
static inline double nv_red_expect(int op, int n, size_t i) {
  double acc = nv_red_input(op, 0, i);
  for (int r = 1; r < n; r++) {
    double v = nv_red_input(op, r, i);
    switch (op) {
      case NV_PROD:
        acc *= v;
        break;
      case NV_MAX:
        acc = v > acc ? v : acc;
        break;
      case NV_MIN:
        acc = v < acc ? v : acc;
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op == NV_AVG) acc /= n; /* exact: net_check runs avg for n a power of two */
  if (op == NV_PREMUL) acc *= 2;
  return acc;
}

#endif /* LOOM_TESTS_NET_VALUES_H */
