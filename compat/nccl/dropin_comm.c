/* dropin_comm.c - NCCL's communicator calls, errors, versions and memory on
 * Loom's (include/loom.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dropin.h"

#define CONFIG_MAGIC 0xcafebeefU

ncclResult_t dropin_fail(ncclComm_t comm, ncclResult_t code, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  loomSetLastError(LCOMM(comm), msg);
  return code;
}

/* A field of an older, shorter config is read only where that version had it. */
#define HAS_FIELD(cfg, f) ((cfg)->size >= offsetof(ncclConfig_t, f) + sizeof((cfg)->f))

ncclResult_t dropin_config(const ncclConfig_t* in, loomConfig_t* out, const char* fn) {
  loomConfig_t def = LOOM_CONFIG_INITIALIZER;
  *out = def;
  if (in) {
    if (in->magic != CONFIG_MAGIC || in->size < offsetof(ncclConfig_t, blocking) + sizeof(int))
      return dropin_fail(NULL, ncclInvalidArgument,
                         "invalid argument: %s: the config was not set up with "
                         "NCCL_CONFIG_INITIALIZER (magic 0x%x, size %zu)",
                         fn, in->magic, in->size);
    out->blocking = in->blocking;
    if (HAS_FIELD(in, commName)) out->commName = in->commName;
  }
  /* NCCL_COMM_BLOCKING gives blocking where the config leaves it unset. */
  const char* env = getenv("NCCL_COMM_BLOCKING");
  if (out->blocking == NCCL_CONFIG_UNDEF_INT && env && (!strcmp(env, "0") || !strcmp(env, "1")))
    out->blocking = env[0] - '0';
  if (out->blocking != NCCL_CONFIG_UNDEF_INT && out->blocking != 0 && out->blocking != 1)
    return dropin_fail(NULL, ncclInvalidArgument,
                       "invalid argument: %s: config blocking is %d; it must be 0 or 1", fn,
                       out->blocking);
  return ncclSuccess;
}

ncclResult_t ncclGetVersion(int* version) {
  if (!version)
    return dropin_fail(NULL, ncclInvalidArgument, "invalid argument: ncclGetVersion: NULL");
  *version = NCCL_VERSION_CODE; /* the interface served: docs/NCCL.md says why */
  return ncclSuccess;
}
DROPIN_ALIAS(GetVersion);

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled CUDA error (ncclGetLastError says which call)";
    case ncclSystemError:
      return "system error (a system call or the network failed)";
    case ncclInternalError:
      return "internal error (a defect in the library: please report it)";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage (the calls do not match what the library expects)";
    case ncclRemoteError:
      return "remote error (a peer failed, went away or did not answer in time)";
    case ncclInProgress:
      return "operation in progress";
    default:
      return "unknown result code";
  }
}
DROPIN_ALIAS(GetErrorString);

const char* ncclGetLastError(ncclComm_t comm) {
  return loomGetLastError(LCOMM(comm));
}
DROPIN_ALIAS(GetLastError);

/* Loom reads its log settings once, at its first call; a reload has nothing
 * to redo (docs/NCCL.md: ignored). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
void ncclResetDebugInit(void) {}
DROPIN_ALIAS(ResetDebugInit);
#pragma GCC diagnostic pop

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  dropin_env_map();
  return dropin_result(loomGetUniqueId((loomUniqueId*)uniqueId));
}
DROPIN_ALIAS(GetUniqueId);

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  dropin_env_map();
  loomConfig_t cfg;
  ncclResult_t r = dropin_config(config, &cfg, "ncclCommInitRankConfig");
  if (r != ncclSuccess) return r;
  loomUniqueId id;
  memcpy(&id, &commId, sizeof(id));
  return dropin_result(loomCommInitRankConfig((loomComm_t*)comm, nranks, id, rank, &cfg));
}
DROPIN_ALIAS(CommInitRankConfig);

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}
DROPIN_ALIAS(CommInitRank);

/* Several ids spread NCCL's bootstrap over several roots; Loom's bootstrap
 * spreads itself (a tree under the first root), so the first id serves. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config) {
  if (nId < 1 || !commIds)
    return dropin_fail(NULL, ncclInvalidArgument,
                       "invalid argument: ncclCommInitRankScalable: %d ids at %p; at least one "
                       "is needed",
                       nId, (void*)commIds);
  return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}
DROPIN_ALIAS(CommInitRankScalable);

/* devlist NULL means devices 0..ndev-1 in NCCL; on a machine with no CUDA
 * device the drop-in makes host ranks instead, which serve host buffers. */
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  dropin_env_map();
  if (devlist || ndev <= 0 || dropin_device_count() == 0)
    return dropin_result(loomCommInitAll((loomComm_t*)comm, ndev, devlist));
  int* devs = malloc(sizeof(int) * (size_t)ndev);
  if (!devs) return dropin_fail(NULL, ncclSystemError, "ncclCommInitAll: out of memory");
  for (int i = 0; i < ndev; i++) devs[i] = i;
  ncclResult_t r = dropin_result(loomCommInitAll((loomComm_t*)comm, ndev, devs));
  free(devs);
  return r;
}
DROPIN_ALIAS(CommInitAll);

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return dropin_result(loomCommFinalize(LCOMM(comm)));
}
DROPIN_ALIAS(CommFinalize);

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return dropin_result(loomCommDestroy(LCOMM(comm)));
}
DROPIN_ALIAS(CommDestroy);

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return dropin_result(loomCommAbort(LCOMM(comm)));
}
DROPIN_ALIAS(CommAbort);

ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return dropin_result(loomCommRevoke(LCOMM(comm), revokeFlags));
}
DROPIN_ALIAS(CommRevoke);

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  loomConfig_t cfg;
  if (config) {
    ncclResult_t r = dropin_config(config, &cfg, "ncclCommSplit");
    if (r != ncclSuccess) return r;
  }
  return dropin_result(
      loomCommSplit(LCOMM(comm), color, key, (loomComm_t*)newcomm, config ? &cfg : NULL));
}
DROPIN_ALIAS(CommSplit);

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  loomConfig_t cfg;
  if (config) {
    ncclResult_t r = dropin_config(config, &cfg, "ncclCommShrink");
    if (r != ncclSuccess) return r;
  }
  return dropin_result(loomCommShrink(LCOMM(comm), excludeRanksList, excludeRanksCount,
                                      (loomComm_t*)newcomm, config ? &cfg : NULL, shrinkFlags));
}
DROPIN_ALIAS(CommShrink);

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  loomResult_t e = loomSuccess;
  loomResult_t r = loomCommGetAsyncError(LCOMM(comm), asyncError ? &e : NULL);
  if (r == loomSuccess) *asyncError = dropin_result(e);
  return dropin_result(r);
}
DROPIN_ALIAS(CommGetAsyncError);

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return dropin_result(loomCommCount(LCOMM(comm), count));
}
DROPIN_ALIAS(CommCount);

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return dropin_result(loomCommCuDevice(LCOMM(comm), device));
}
DROPIN_ALIAS(CommCuDevice);

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return dropin_result(loomCommUserRank(LCOMM(comm), rank));
}
DROPIN_ALIAS(CommUserRank);

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return dropin_result(loomCommRegister(LCOMM(comm), buff, size, handle));
}
DROPIN_ALIAS(CommRegister);

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return dropin_result(loomCommDeregister(LCOMM(comm), handle));
}
DROPIN_ALIAS(CommDeregister);

/* A window is a registration: Loom has no symmetric-memory kernels that
 * would use one differently (docs/NCCL.md). */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int winFlags) {
  if (winFlags & ~NCCL_WIN_COLL_SYMMETRIC)
    return dropin_fail(comm, ncclInvalidArgument,
                       "invalid argument: ncclCommWindowRegister: unknown flags 0x%x", winFlags);
  if (!win)
    return dropin_fail(comm, ncclInvalidArgument,
                       "invalid argument: ncclCommWindowRegister: win is NULL");
  return dropin_result(loomCommRegister(LCOMM(comm), buff, size, (void**)win));
}
DROPIN_ALIAS(CommWindowRegister);

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return dropin_result(loomCommDeregister(LCOMM(comm), (void*)win));
}
DROPIN_ALIAS(CommWindowDeregister);

/* NCCL's memory is device memory: cudaMalloc through the program's CUDA
 * runtime. (Loom's loomMemAlloc is host memory peers can map.) */
ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (!ptr)
    return dropin_fail(NULL, ncclInvalidArgument, "invalid argument: ncclMemAlloc: ptr is NULL");
  if (size == 0) {
    *ptr = NULL;
    return ncclSuccess;
  }
  return dropin_device_alloc(ptr, size);
}
DROPIN_ALIAS(MemAlloc);

ncclResult_t ncclMemFree(void* ptr) {
  if (!ptr) return ncclSuccess;
  int device = 0;
  ncclResult_t r = dropin_device_free(ptr, &device);
  if (r == ncclSuccess && !device)
    return dropin_fail(NULL, ncclInvalidArgument,
                       "invalid argument: ncclMemFree: %p is not device memory from ncclMemAlloc",
                       ptr);
  return r;
}
DROPIN_ALIAS(MemFree);
