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
#include <stdint.h>

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

/* ---- What the CUDA executor queues besides kernels ----
 * Each enqueues on `stream` in the calling thread's current context. */

/* 1 when the driver has every operation below; else 0 and the reason. */
int cuda_stream_usable(const char** why_out);
/* Makes device dev's primary context current on this thread (retained once
 * per process, kept) until the matching cuda_ctx_leave. */
loomResult_t cuda_ctx_enter(int dev);
void cuda_ctx_leave(void);
/* cuMemcpyAsync: any pair of device, mapped or managed addresses. */
loomResult_t cuda_memcpy(void* dst, const void* src, size_t bytes, void* stream);
/* Stream memory operations on a 64-bit word of mapped memory (a device
 * address of it): write value once the work before it is done; hold the
 * work after it until the word is >= value, compared as the driver does,
 * cyclically: (int64_t)(word - value) >= 0. */
loomResult_t cuda_write_value(void* stream, uint64_t* word, uint64_t value);
loomResult_t cuda_wait_value(void* stream, const uint64_t* word, uint64_t value);
/* Device memory of the current context (cuMemAlloc). */
loomResult_t cuda_dev_alloc(void** out, size_t bytes);
void cuda_dev_free(void* p);
/* cuStreamSynchronize; cuStreamQuery (loomInProgress while work is left). */
loomResult_t cuda_stream_sync(void* stream);
loomResult_t cuda_stream_query(void* stream);
/* 1 when stream is being captured into a CUDA graph. */
int cuda_stream_capturing(void* stream);
/* Events without timing: record on a stream; make a stream wait for the
 * last record (it stays valid when the recording stream is destroyed);
 * wait on the host for the last record. */
loomResult_t cuda_event_create(void** ev);
void cuda_event_destroy(void* ev);
loomResult_t cuda_event_record(void* ev, void* stream);
loomResult_t cuda_event_wait(void* stream, void* ev);
loomResult_t cuda_event_sync(void* ev);
/* Ranks in other processes. cuda_host_register maps host memory (a shared
 * segment) for the device: *dev_out is its device address (unregister
 * before unmapping it). cuda_alloc_of gives the device allocation p lies
 * in: its base, size and the driver's buffer id (unique in this process, so an
 * allocation freed and made again at one address is told apart).
 * cuda_ipc_export makes the IPC handle of the allocation at base;
 * cuda_ipc_open maps a peer process's handle, cuda_ipc_close unmaps it. */
#define CUDA_IPC_BYTES 64
loomResult_t cuda_host_register(void* host, size_t bytes, void** dev_out);
void cuda_host_unregister(void* host);
loomResult_t cuda_alloc_of(const void* p, uint64_t* base_out, size_t* size_out, uint64_t* id_out);
loomResult_t cuda_ipc_export(uint64_t base, unsigned char handle[CUDA_IPC_BYTES]);
loomResult_t cuda_ipc_open(const unsigned char handle[CUDA_IPC_BYTES], void** out);
void cuda_ipc_close(void* p);

#ifdef __cplusplus
}
#endif

#endif
