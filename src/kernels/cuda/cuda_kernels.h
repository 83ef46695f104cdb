/* cuda_kernels.h - Loom's device kernels (reduce.cu), enqueued on a CUDA
 * stream: element-wise reduction, PreMulSum's multiply, loomAvg's division
 * and a copy, with the results the host kernels (kernels/cpu) give, bit for
 * bit, for the same inputs.
 *
 * The kernels travel inside libloom as a fatbin (sm_80, sm_90, compute_90
 * PTX) and are loaded through the CUDA driver, which is reached by dlopen,
 * never linked: a build with kernels still loads and runs where there is no
 * driver, and every function here then fails with loomInvalidUsage saying
 * why. Each function enqueues on `stream` (a cudaStream_t / CUstream; NULL
 * is the legacy default stream) for the context current on the calling
 * thread, and returns without waiting; the module is loaded once per
 * context. Thread safe. Pointers are device (or managed, or mapped host)
 * addresses of that context; dst may equal a or b, never overlap them
 * otherwise. A count of 0 enqueues nothing. */
#ifndef LOOM_KERNELS_CUDA_H
#define LOOM_KERNELS_CUDA_H

#include <stddef.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build carries the device kernels. */
int cuda_kernels_built(void);
/* 1 when the kernels can run here: built, a driver, a device; else 0 and,
 * with why_out, the reason (static text). */
int cuda_kernels_usable(const char** why_out);

/* dst[i] = a[i] op b[i]; op is a built-in (loomAvg reduces as a sum). */
loomResult_t cuda_reduce(loomDataType_t t, loomRedOp_t op, void* dst, const void* a, const void* b,
                         size_t count, void* stream);
/* dst[i] = src[i] / divisor (loomAvg's last step), as cpu_div. */
loomResult_t cuda_div(loomDataType_t t, void* dst, const void* src, size_t count, int divisor,
                      void* stream);
/* dst[i] = src[i] * scalar (PreMulSum). scalar is one element of type t: in
 * device memory when on_device (read by the kernel, after the work before it
 * on the stream: loomScalarDevice), else on the host (read now). */
loomResult_t cuda_mul_scalar(loomDataType_t t, void* dst, const void* src, size_t count,
                             const void* scalar, int on_device, void* stream);
/* memcpy(dst, src, bytes) by a kernel (what a copy fused into a step uses;
 * plain copies may as well be cuMemcpyAsync). */
loomResult_t cuda_copy(void* dst, const void* src, size_t bytes, void* stream);

#ifdef __cplusplus
}
#endif

#endif
