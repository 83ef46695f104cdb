// values.h - test inputs whose reductions are exact in any order, and an
// independent reference: every element value is a small integer (or power of
// two) chosen per datatype so that every partial result is representable.
// Encoding to the narrow float formats enumerates their codes and picks the
// nearest with ties to even, independent of the library's converters.
#ifndef LOOM_TESTS_VALUES_H
#define LOOM_TESTS_VALUES_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "shim/loom_shim.h"

namespace values {

// Decoders of the narrow formats (exact).
inline double decode_bits(uint32_t bits, int ebits, int mbits, bool fn_variant) {
  uint32_t sign = bits >> (ebits + mbits);
  uint32_t exp = (bits >> mbits) & ((1u << ebits) - 1);
  uint32_t man = bits & ((1u << mbits) - 1);
  int bias = (1 << (ebits - 1)) - 1;
  double v;
  if (!fn_variant && exp == (1u << ebits) - 1)
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (fn_variant && exp == (1u << ebits) - 1 && man == (1u << mbits) - 1)
    v = std::numeric_limits<double>::quiet_NaN();
  else if (exp == 0)
    v = std::ldexp((double)man, 1 - bias - mbits);
  else
    v = std::ldexp((double)(man | (1u << mbits)), (int)exp - bias - mbits);
  return sign ? -v : v;
}

struct Format {
  int ebits, mbits, bytes;
  bool fn;
};
inline Format format_of(loomDataType_t t) {
  switch (t) {
    case loomFloat16:
      return {5, 10, 2, false};
    case loomBfloat16:
      return {8, 7, 2, false};
    case loomFloat8e4m3:
      return {4, 3, 1, true};
    default:
      return {5, 2, 1, false};  // e5m2
  }
}

// Nearest code with ties to even (codes of adjacent values differ in the
// last bit, so "even code" is the even mantissa).
inline uint32_t encode_narrow(double x, loomDataType_t t) {
  Format f = format_of(t);
  uint32_t ncodes = 1u << (8 * f.bytes);
  uint32_t best = 0;
  double bestd = std::numeric_limits<double>::infinity();
  for (uint32_t c = 0; c < ncodes; c++) {
    double v = decode_bits(c, f.ebits, f.mbits, f.fn);
    if (std::isnan(v) || std::isinf(v)) continue;
    double d = std::fabs(v - x);
    if (d < bestd || (d == bestd && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      bestd = d;
    }
  }
  return best;
}

// Stores the (exactly representable, or to be rounded) value x as type t.
inline void store(loomDataType_t t, void* buf, size_t i, double x) {
  switch (t) {
    case loomInt8:
      ((int8_t*)buf)[i] = (int8_t)(int64_t)x;
      break;
    case loomUint8:
      ((uint8_t*)buf)[i] = (uint8_t)(uint64_t)(int64_t)x;
      break;
    case loomInt32:
      ((int32_t*)buf)[i] = (int32_t)(int64_t)x;
      break;
    case loomUint32:
      ((uint32_t*)buf)[i] = (uint32_t)(uint64_t)(int64_t)x;
      break;
    case loomInt64:
      ((int64_t*)buf)[i] = (int64_t)x;
      break;
    case loomUint64:
      ((uint64_t*)buf)[i] = (uint64_t)(int64_t)x;
      break;
    case loomFloat32:
      ((float*)buf)[i] = (float)x;
      break;
    case loomFloat64:
      ((double*)buf)[i] = x;
      break;
    case loomFloat16:
    case loomBfloat16:
      ((uint16_t*)buf)[i] = (uint16_t)encode_narrow(x, t);
      break;
    default:
      ((uint8_t*)buf)[i] = (uint8_t)encode_narrow(x, t);
      break;
  }
}

// The pattern of inputs: rank r, element i -> a small value. Chosen per
// type and op so that any order of reduction is exact.
struct Pattern {
  int period;
  std::vector<double> table;  // value index -> value
};
inline Pattern pattern(loomDataType_t t, loomRedOp_t op) {
  bool uns = shim::is_unsigned(t);
  if (op == loomProd) return uns ? Pattern{3, {1, 2, 3}} : Pattern{3, {1, -1, 2}};
  if (op == loomMax || op == loomMin)
    return uns ? Pattern{7, {0, 1, 2, 3, 4, 5, 6}} : Pattern{7, {-3, -2, -1, 0, 1, 2, 3}};
  if (t == loomFloat8e5m2) return Pattern{3, {-1, 0, 1}};
  return uns ? Pattern{3, {0, 1, 2}} : Pattern{5, {-2, -1, 0, 1, 2}};
}
inline double input(const Pattern& p, int rank, size_t i) {
  return p.table[((size_t)rank * 7 + i) % (size_t)p.period];
}

// Wraps an exact integer result to the type, as two's complement does.
inline double wrap_int(loomDataType_t t, long double v) {
  __int128 x = (__int128)v;
  switch (t) {
    case loomInt8:
      return (double)(int8_t)(uint8_t)x;
    case loomUint8:
      return (double)(uint8_t)x;
    case loomInt32:
      return (double)(int32_t)(uint32_t)x;
    case loomUint32:
      return (double)(uint32_t)x;
    case loomInt64:
      return (double)(int64_t)(uint64_t)x;
    case loomUint64:
      return (double)(uint64_t)x;
    default:
      return (double)v;
  }
}

// The expected result at element i of an all-reduce over n ranks. scale is
// PreMulSum's scalar (1 for built-in ops).
inline double expected(loomDataType_t t, loomRedOp_t op, const Pattern& p, int n, size_t i,
                       double scale) {
  long double acc = (op == loomProd) ? 1 : 0;
  for (int r = 0; r < n; r++) {
    double v = input(p, r, i) * scale;
    if (op == loomProd)
      acc *= v;
    else if (op == loomMax)
      acc = r == 0 ? v : std::max((double)acc, v);
    else if (op == loomMin)
      acc = r == 0 ? v : std::min((double)acc, v);
    else
      acc += v;
  }
  double res = wrap_int(t, acc);
  if (op == loomAvg) {
    if (!shim::is_float(t)) {
      if (shim::is_unsigned(t)) return (double)((unsigned long long)res / (unsigned long long)n);
      return (double)((long long)res / (long long)n);
    }
    if (t == loomFloat64) return res / n;
    return (double)((float)res / (float)n);  // then rounded to t by store()
  }
  return res;
}

}  // namespace values

#endif
