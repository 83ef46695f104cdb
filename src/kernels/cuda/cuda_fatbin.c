/* cuda_fatbin.c - the device kernels' fatbin (reduce.cu, compiled by nvcc at
 * build time into LOOM_CUDA_FATBIN_PATH), carried in libloom's read-only data
 * between loom_cuda_fatbin and loom_cuda_fatbin_end, for cuModuleLoadData.
 * Compiled only when nvcc was found. */
#ifndef LOOM_CUDA_FATBIN_PATH
#error "LOOM_CUDA_FATBIN_PATH names the fatbin to embed"
#endif

__asm__(
    ".section .rodata\n"
    ".balign 64\n"
    ".globl loom_cuda_fatbin\n"
    ".hidden loom_cuda_fatbin\n"
    "loom_cuda_fatbin:\n"
    ".incbin \"" LOOM_CUDA_FATBIN_PATH
    "\"\n"
    ".globl loom_cuda_fatbin_end\n"
    ".hidden loom_cuda_fatbin_end\n"
    "loom_cuda_fatbin_end:\n"
    ".byte 0\n"
    ".previous\n");
