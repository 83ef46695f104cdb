/* dtype.h - what every layer knows of the public datatypes and ops: element
 * sizes and names. (The arithmetic on them is the kernels'.) */
#ifndef LOOM_CORE_DTYPE_H
#define LOOM_CORE_DTYPE_H

#include <stddef.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of one element; 0 for an unknown type. Inline: every call asks it
 * a few times. */
static inline size_t dtype_size(loomDataType_t t) {
  /* In the order of loomDataType_t (dtype.c checks it): int8, uint8,
   * int32, uint32, int64, uint64, float16, float32, float64, bfloat16,
   * float8e4m3, float8e5m2. */
  static const unsigned char sizes[loomNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  /* The unsigned compare also rejects negative (corrupt) values. */
  return (unsigned)t < loomNumTypes ? sizes[t] : 0;
}
const char* dtype_name(loomDataType_t t); /* "float32", ...; "unknown" */
const char* redop_name(loomRedOp_t op);   /* "sum", ...; "premulsum" for >= loomNumOps */

#ifdef __cplusplus
}
#endif

#endif
