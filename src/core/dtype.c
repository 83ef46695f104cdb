/* dtype.c - element sizes and names of the public datatypes and ops. */
#include "core/dtype.h"

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
