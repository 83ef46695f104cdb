/* dropin.h - the parts of the NCCL drop-in shared between its files. The
 * drop-in is written on include/loom.h alone: an ncclComm_t is a loomComm_t,
 * result codes and enums carry the same values, and what NCCL does
 * differently (configs, CUDA streams, device memory, NCCL_* variables) is
 * translated here. */
#ifndef LOOM_COMPAT_NCCL_DROPIN_H
#define LOOM_COMPAT_NCCL_DROPIN_H

#include "loom.h"
#include "nccl.h"

/* The drop-in's handle is Loom's: no table, no extra indirection. */
#define LCOMM(c) ((loomComm_t)(c))

/* pnccl##name, the same function under the name profilers interpose on. */
#define DROPIN_ALIAS(name) \
  extern __typeof__(nccl##name) pnccl##name __attribute__((alias("nccl" #name)))

/* Loom's result as NCCL's: the codes agree up to ncclInProgress; a Loom
 * timeout (a peer that did not answer in time) is ncclRemoteError, its text
 * still naming the timeout. */
static inline ncclResult_t dropin_result(loomResult_t r) {
  return r == loomTimeout ? ncclRemoteError : (ncclResult_t)r;
}

/* Sets the text ncclGetLastError(comm) returns and gives back code. */
ncclResult_t dropin_fail(ncclComm_t comm, ncclResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* NCCL's config as Loom's. NULL: the defaults (and NCCL_COMM_BLOCKING).
 * Refuses a config not made by NCCL_CONFIG_INITIALIZER. */
ncclResult_t dropin_config(const ncclConfig_t* in, loomConfig_t* out, const char* fn);

/* ---- CUDA, reached without linking it (dropin_cuda.c) ---- */

/* 1 when ptr is CUDA device or managed memory; 0 for host memory, and
 * whenever no CUDA driver is loaded in this process. */
int dropin_is_device(const void* ptr);
/* The number of CUDA devices; 0 without a driver or a device. */
int dropin_device_count(void);
/* cudaMalloc and cudaFree through the CUDA runtime this process loaded. */
ncclResult_t dropin_device_alloc(void** ptr, size_t size);
ncclResult_t dropin_device_free(void* ptr, int* was_device_out);

/* The Loom stream for a call on these buffers: NULL (the call completes
 * before it returns) when every buffer is host memory, whatever the CUDA
 * stream; otherwise Loom's wrapper of the CUDA stream. */
ncclResult_t dropin_stream(ncclComm_t comm, const void* a, const void* b, cudaStream_t s,
                           loomStream_t* out);

/* ---- NCCL_* variables (dropin_env.c) ---- */

/* Copies the NCCL_* variables that have a Loom counterpart to it, once,
 * before the first communicator; a LOOM_* variable already set wins. */
void dropin_env_map(void);

#endif /* LOOM_COMPAT_NCCL_DROPIN_H */
