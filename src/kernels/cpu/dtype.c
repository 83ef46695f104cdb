/* dtype.c - element sizes, names, and the scalar float16/bfloat16/float8
 * conversions. The conversions themselves are static inline functions in
 * reduce_impl.h, so that the kernels inline the very same definition and a
 * conversion can never differ between dtype.c and a kernel. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/reduce_impl.h"

struct dtype_desc {
  const char* name;
  size_t size;
};

/* Indexed by loomDataType_t. */
static const struct dtype_desc dtype_table[loomNumTypes] = {
    [loomInt8] = {"int8", 1},
    [loomUint8] = {"uint8", 1},
    [loomInt32] = {"int32", 4},
    [loomUint32] = {"uint32", 4},
    [loomInt64] = {"int64", 8},
    [loomUint64] = {"uint64", 8},
    [loomFloat16] = {"float16", 2},
    [loomFloat32] = {"float32", 4},
    [loomFloat64] = {"float64", 8},
    [loomBfloat16] = {"bfloat16", 2},
    [loomFloat8e4m3] = {"float8e4m3", 1},
    [loomFloat8e5m2] = {"float8e5m2", 1},
};

static const char* const redop_names[loomNumOps] = {
    [loomSum] = "sum", [loomProd] = "prod", [loomMax] = "max", [loomMin] = "min", [loomAvg] = "avg",
};

size_t dtype_size(loomDataType_t t) {
  /* The unsigned compare also rejects negative (corrupt) values. */
  return (unsigned)t < loomNumTypes ? dtype_table[t].size : 0;
}

const char* dtype_name(loomDataType_t t) {
  return (unsigned)t < loomNumTypes ? dtype_table[t].name : "unknown";
}

const char* redop_name(loomRedOp_t op) {
  if ((int)op < 0) return "unknown";
  /* Every value past the built-ins is a handle from loomRedOpCreatePreMulSum. */
  return (int)op < loomNumOps ? redop_names[op] : "premulsum";
}

float half_to_float(uint16_t h) {
  return half_decode(h);
}
uint16_t float_to_half(float f) {
  return half_encode(f);
}
float bf16_to_float(uint16_t h) {
  return bf16_decode(h);
}
uint16_t float_to_bf16(float f) {
  return bf16_encode(f);
}
float fp8e4m3_to_float(uint8_t v) {
  return fp8e4m3_decode(v);
}
uint8_t float_to_fp8e4m3(float f) {
  return fp8e4m3_encode(f);
}
float fp8e5m2_to_float(uint8_t v) {
  return fp8e5m2_decode(v);
}
uint8_t float_to_fp8e5m2(float f) {
  return fp8e5m2_encode(f);
}
