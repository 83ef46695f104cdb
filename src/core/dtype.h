/* dtype.h - what every layer knows of the public datatypes and ops: element
 * sizes and names. (The arithmetic on them is the kernels'.) */
#ifndef LOOM_CORE_DTYPE_H
#define LOOM_CORE_DTYPE_H

#include <stddef.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of one element; 0 for an unknown type. */
size_t dtype_size(loomDataType_t t);
const char* dtype_name(loomDataType_t t); /* "float32", ...; "unknown" */
const char* redop_name(loomRedOp_t op);   /* "sum", ...; "premulsum" for >= loomNumOps */

#ifdef __cplusplus
}
#endif

#endif
