/* reduce_avx512.c - the kernels compiled for AVX-512 (F, BW, VL, DQ) + F16C
 * (CMakeLists.txt adds the flags). dispatch.c only calls this table on a CPU
 * that has all of them. */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || \
    !defined(__AVX512DQ__) || !defined(__F16C__)
#error "reduce_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c"
#endif

#define CPU_KERNEL_BODIES
#include "kernels/cpu/reduce_impl.h"

const struct cpu_kernel_table cpu_kernels_avx512 = CPU_KERNEL_TABLE_INIT;
