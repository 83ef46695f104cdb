/* dtype.c - element sizes and names of the public datatypes and ops. */
#include "core/dtype.h"

/* dtype.h's table of sizes follows the enum's order. */
_Static_assert(loomInt8 == 0 && loomUint8 == 1 && loomInt32 == 2 && loomUint32 == 3 &&
                   loomInt64 == 4 && loomUint64 == 5 && loomFloat16 == 6 && loomFloat32 == 7 &&
                   loomFloat64 == 8 && loomBfloat16 == 9 && loomFloat8e4m3 == 10 &&
                   loomFloat8e5m2 == 11 && loomNumTypes == 12,
               "loomDataType_t's order (dtype_size's table)");

/* Indexed by loomDataType_t. */
static const char* const dtype_names[loomNumTypes] = {
    [loomInt8] = "int8",         [loomUint8] = "uint8",           [loomInt32] = "int32",
    [loomUint32] = "uint32",     [loomInt64] = "int64",           [loomUint64] = "uint64",
    [loomFloat16] = "float16",   [loomFloat32] = "float32",       [loomFloat64] = "float64",
    [loomBfloat16] = "bfloat16", [loomFloat8e4m3] = "float8e4m3", [loomFloat8e5m2] = "float8e5m2",
};

static const char* const redop_names[loomNumOps] = {
    [loomSum] = "sum", [loomProd] = "prod", [loomMax] = "max", [loomMin] = "min", [loomAvg] = "avg",
};

const char* dtype_name(loomDataType_t t) {
  return (unsigned)t < loomNumTypes ? dtype_names[t] : "unknown";
}

const char* redop_name(loomRedOp_t op) {
  if ((int)op < 0) return "unknown";
  /* Every value past the built-ins is a handle from loomRedOpCreatePreMulSum. */
  return (int)op < loomNumOps ? redop_names[op] : "premulsum";
}
