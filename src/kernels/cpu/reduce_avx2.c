/* reduce_avx2.c - the kernels compiled for AVX2 + F16C (CMakeLists.txt adds
 * -mavx2 -mf16c -mfma; -ffp-contract=off keeps FMA out of the results).
 * dispatch.c only calls this table on a CPU that has all three. */
#if !defined(__AVX2__) || !defined(__F16C__)
#error "reduce_avx2.c must be compiled with -mavx2 -mf16c -mfma"
#endif

#define CPU_KERNEL_BODIES
#include "kernels/cpu/reduce_impl.h"

const struct cpu_kernel_table cpu_kernels_avx2 = CPU_KERNEL_TABLE_INIT;
