/* reduce_scalar.c - the kernels in portable C: the reference that defines
 * every result, and the fallback on CPUs without AVX2. GCC may still
 * vectorise it for the baseline ISA (SSE2); that cannot change a result, as
 * every kernel is element-wise (see reduce_impl.h). */
#define CPU_KERNEL_BODIES
#define CPU_KERNEL_PORTABLE /* no F16C even under -march=native */
#include "kernels/cpu/reduce_impl.h"

const struct cpu_kernel_table cpu_kernels_scalar = CPU_KERNEL_TABLE_INIT;
