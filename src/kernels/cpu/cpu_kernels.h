/* cpu_kernels.h - element-wise reduction, scaling and conversion on host
 * memory, for every loomDataType_t and the five built-in ops.
 *
 * Integer sums and products wrap as two's complement. float16, bfloat16 and
 * the two float8 formats are computed in float32 and rounded to nearest-even
 * on each store. Kernels are vectorised (AVX-512 or AVX2 chosen at run time,
 * LOOM_CPU_KERNEL to force) with a scalar fallback that defines the results:
 * every variant gives bit-identical output. All functions are thread safe and
 * never block. Buffers may alias exactly (dst == a or dst == b) but must not
 * partially overlap. */
#ifndef LOOM_KERNELS_CPU_H
#define LOOM_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

enum cpu_isa { CPU_ISA_SCALAR = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2, CPU_ISA_COUNT };

/* memcpy(dst, src, bytes) for the collectives' data, avoiding the slow case of
 * the C library's copy described in copy.c. The ranges must not overlap. */
void cpu_copy(void* dst, const void* src, size_t bytes);

/* dst[i] = a[i] op b[i] for i < count. op is one of the five built-ins;
 * loomAvg reduces as a sum (the division is cpu_scale's job). */
void cpu_reduce(loomDataType_t t, loomRedOp_t op, void* dst, const void* a, const void* b,
                size_t count);
/* dst[i] = src[i] / divisor (the final step of loomAvg). Integer types use
 * C division of the wrapped sum (truncation toward zero); floating types
 * divide in their compute precision (float64 for float64, float32 otherwise)
 * and round once. */
void cpu_div(loomDataType_t t, void* dst, const void* src, size_t count, int divisor);
/* dst[i] = src[i] * scalar (PreMulSum's pre-multiply). scalar points to one
 * element of type t. Integer types wrap. */
void cpu_mul_scalar(loomDataType_t t, void* dst, const void* src, size_t count, const void* scalar);

/* The ISA the dispatcher chose (after LOOM_CPU_KERNEL), and what this CPU
 * supports. */
enum cpu_isa cpu_isa_active(void);
int cpu_isa_supported(enum cpu_isa isa);
const char* cpu_isa_name(enum cpu_isa isa);
/* The same kernels for one ISA, for the tests that compare variants. The
 * ISA must be supported. */
void cpu_reduce_isa(enum cpu_isa isa, loomDataType_t t, loomRedOp_t op, void* dst, const void* a,
                    const void* b, size_t count);
void cpu_div_isa(enum cpu_isa isa, loomDataType_t t, void* dst, const void* src, size_t count,
                 int divisor);
void cpu_mul_scalar_isa(enum cpu_isa isa, loomDataType_t t, void* dst, const void* src,
                        size_t count, const void* scalar);

/* Scalar conversions, exact round-to-nearest-even. */
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float fp8e4m3_to_float(uint8_t v);
uint8_t float_to_fp8e4m3(float f); /* saturates to +-448 (no infinities), NaN stays NaN */
float fp8e5m2_to_float(uint8_t v);
uint8_t float_to_fp8e5m2(float f); /* overflow rounds to infinity as IEEE does */

#ifdef __cplusplus
}
#endif

#endif
