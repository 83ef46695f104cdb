/*
 * nccl.h - the interface of NCCL 2.28 as Loom's drop-in libnccl.so.2 serves it.
 *
 * Loom's own text of NCCL's C interface: the same names, enum values, struct
 * layouts and signatures, so that a program built against either header runs
 * on either library. It needs no CUDA header: cudaStream_t is declared as the
 * CUDA runtime declares it. docs/NCCL.md lists what each function, config
 * field and NCCL_* variable does on Loom. The guard is NCCL's own, so a
 * program that reaches both headers sees one.
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 22809
/* Codes up to 2.8 were X*1000+Y*100+Z; from 2.9 on, X*10000+Y*100+Z. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA runtime's stream handle, declared as cuda_runtime_api.h does. */
typedef struct CUstream_st* cudaStream_t;

typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
#define NCCL_REVOKE_DEFAULT 0x00

/* Communicator options, version 2.28's layout. size, magic and version are
 * written by the initializer; every other field starts undefined and takes
 * the library's default. */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                         \
  {                                                                                     \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                    \
  }

/* What ncclGroupSimulateEnd fills in (version 2.22's layout). */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER                                                        \
  {                                                                                      \
    sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_UNDEF_FLOAT                                                                 \
  }

/* Sized like the enum that held the reduction ops before 2.10. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5, /* the first value ncclRedOpCreatePreMulSum may return */
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* Each function comes twice: nccl* and the pnccl* alias that profilers
 * interpose on. */
#define NCCL_DROPIN_DECL(ret, name, args) \
  ret nccl##name args;                    \
  ret pnccl##name args;

NCCL_DROPIN_DECL(ncclResult_t, MemAlloc, (void** ptr, size_t size))
NCCL_DROPIN_DECL(ncclResult_t, MemFree, (void* ptr))
NCCL_DROPIN_DECL(ncclResult_t, GetVersion, (int* version))
NCCL_DROPIN_DECL(ncclResult_t, GetUniqueId, (ncclUniqueId * uniqueId))
NCCL_DROPIN_DECL(ncclResult_t, CommInitRankConfig,
                 (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank,
                  ncclConfig_t* config))
NCCL_DROPIN_DECL(ncclResult_t, CommInitRank,
                 (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))
NCCL_DROPIN_DECL(ncclResult_t, CommInitAll, (ncclComm_t * comm, int ndev, const int* devlist))
NCCL_DROPIN_DECL(ncclResult_t, CommFinalize, (ncclComm_t comm))
NCCL_DROPIN_DECL(ncclResult_t, CommDestroy, (ncclComm_t comm))
NCCL_DROPIN_DECL(ncclResult_t, CommAbort, (ncclComm_t comm))
NCCL_DROPIN_DECL(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags))
NCCL_DROPIN_DECL(ncclResult_t, CommSplit,
                 (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))
NCCL_DROPIN_DECL(ncclResult_t, CommShrink,
                 (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                  ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags))
NCCL_DROPIN_DECL(ncclResult_t, CommInitRankScalable,
                 (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                  ncclConfig_t* config))
NCCL_DROPIN_DECL(const char*, GetErrorString, (ncclResult_t result))
NCCL_DROPIN_DECL(const char*, GetLastError, (ncclComm_t comm))
/* Deprecated by NCCL; kept because it is still exported. */
__attribute__((deprecated("ncclResetDebugInit is not part of NCCL's supported interface"))) void
ncclResetDebugInit(void);
__attribute__((deprecated("pncclResetDebugInit is not part of NCCL's supported interface"))) void
pncclResetDebugInit(void);
NCCL_DROPIN_DECL(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))
NCCL_DROPIN_DECL(ncclResult_t, CommCount, (const ncclComm_t comm, int* count))
NCCL_DROPIN_DECL(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int* device))
NCCL_DROPIN_DECL(ncclResult_t, CommUserRank, (const ncclComm_t comm, int* rank))
NCCL_DROPIN_DECL(ncclResult_t, CommRegister,
                 (const ncclComm_t comm, void* buff, size_t size, void** handle))
NCCL_DROPIN_DECL(ncclResult_t, CommDeregister, (const ncclComm_t comm, void* handle))
NCCL_DROPIN_DECL(ncclResult_t, CommWindowRegister,
                 (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))
NCCL_DROPIN_DECL(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
NCCL_DROPIN_DECL(ncclResult_t, RedOpCreatePreMulSum,
                 (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype,
                  ncclScalarResidence_t residence, ncclComm_t comm))
NCCL_DROPIN_DECL(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))
NCCL_DROPIN_DECL(ncclResult_t, Reduce,
                 (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                  ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream))
NCCL_DROPIN_DECL(ncclResult_t, Bcast,
                 (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                  cudaStream_t stream))
NCCL_DROPIN_DECL(ncclResult_t, Broadcast,
                 (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                  int root, ncclComm_t comm, cudaStream_t stream))
NCCL_DROPIN_DECL(ncclResult_t, AllReduce,
                 (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
NCCL_DROPIN_DECL(ncclResult_t, ReduceScatter,
                 (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
NCCL_DROPIN_DECL(ncclResult_t, AllGather,
                 (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                  ncclComm_t comm, cudaStream_t stream))
NCCL_DROPIN_DECL(ncclResult_t, AlltoAll,
                 (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                  ncclComm_t comm, cudaStream_t stream))
NCCL_DROPIN_DECL(ncclResult_t, Gather,
                 (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                  int root, ncclComm_t comm, cudaStream_t stream))
NCCL_DROPIN_DECL(ncclResult_t, Scatter,
                 (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                  int root, ncclComm_t comm, cudaStream_t stream))
NCCL_DROPIN_DECL(ncclResult_t, Send,
                 (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                  ncclComm_t comm, cudaStream_t stream))
NCCL_DROPIN_DECL(ncclResult_t, Recv,
                 (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                  cudaStream_t stream))
NCCL_DROPIN_DECL(ncclResult_t, GroupStart, (void))
NCCL_DROPIN_DECL(ncclResult_t, GroupEnd, (void))
NCCL_DROPIN_DECL(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t * simInfo))

#undef NCCL_DROPIN_DECL

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
