/*
 * loom.h - the public API of Loom, a collective communication library.
 *
 * The API mirrors NCCL's name for name with the prefix "loom". Differences are
 * marked (Loom): host buffers, host streams, all-to-all-v, timeouts and
 * environment-based initialisation. Plain C99, usable from C and C++.
 *
 * Thread safety: a communicator may be used by one thread at a time for
 * collectives; different communicators may be used concurrently. Group calls
 * (loomGroupStart/End) are per thread. Every function returns loomResult_t
 * unless shown otherwise, and loomGetLastError() explains a failure.
 */
#ifndef LOOM_H
#define LOOM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Public functions are the only symbols libloom exports. */
#if defined(__GNUC__) && __GNUC__ >= 4
#define LOOM_API __attribute__((visibility("default")))
#else
#define LOOM_API
#endif

#define LOOM_MAJOR 0
#define LOOM_MINOR 1
#define LOOM_PATCH 0
#define LOOM_VERSION(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define LOOM_VERSION_CODE LOOM_VERSION(LOOM_MAJOR, LOOM_MINOR, LOOM_PATCH)

#define LOOM_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[LOOM_UNIQUE_ID_BYTES];
} loomUniqueId;

typedef struct loomComm* loomComm_t;
typedef struct loomStream* loomStream_t; /* (Loom) host or CUDA stream */

typedef enum {
  loomSuccess = 0,
  loomUnhandledCudaError = 1,
  loomSystemError = 2,
  loomInternalError = 3,
  loomInvalidArgument = 4,
  loomInvalidUsage = 5,
  loomRemoteError = 6, /* a peer failed or went away */
  loomInProgress = 7,
  loomTimeout = 8, /* a wait passed the communicator's timeout */
  loomNumResults = 9
} loomResult_t;

typedef enum {
  loomInt8 = 0,
  loomChar = 0,
  loomUint8 = 1,
  loomInt32 = 2,
  loomInt = 2,
  loomUint32 = 3,
  loomInt64 = 4,
  loomUint64 = 5,
  loomFloat16 = 6,
  loomHalf = 6,
  loomFloat32 = 7,
  loomFloat = 7,
  loomFloat64 = 8,
  loomDouble = 8,
  loomBfloat16 = 9,
  loomFloat8e4m3 = 10,
  loomFloat8e5m2 = 11,
  loomNumTypes = 12
} loomDataType_t;

/* Values >= loomNumOps come from loomRedOpCreatePreMulSum. */
typedef enum {
  loomSum = 0,
  loomProd = 1,
  loomMax = 2,
  loomMin = 3,
  loomAvg = 4,
  loomNumOps = 5,
  loomMaxRedOp = 0x7fffffff
} loomRedOp_t;

typedef enum { loomScalarDevice = 0, loomScalarHostImmediate = 1 } loomScalarResidence_t;

#define LOOM_SPLIT_NOCOLOR (-1)

/*
 * Communicator options. Always start from LOOM_CONFIG_INITIALIZER.
 * blocking:  1 (default) calls return when done; 0 lets init return
 *            loomInProgress (poll loomCommGetAsyncError).
 * timeoutMs: (Loom) 0 takes LOOM_TIMEOUT_MS (default 600000). Every wait gives
 *            up with loomTimeout after this long; the communicator is then in
 *            error.
 * commName:  a name used in log lines; may be NULL. Copied.
 */
typedef struct {
  size_t size;          /* sizeof(loomConfig_t), set by the initializer */
  unsigned int magic;   /* set by the initializer */
  unsigned int version; /* set by the initializer */
  int blocking;
  int timeoutMs;
  const char* commName;
  /* (Loom) 1: before each collective the ranks agree on its arguments and a
   * mismatch is loomInvalidUsage on every rank (LOOM_CHECK_ARGS); 0: not;
   * LOOM_CONFIG_UNDEF_INT: LOOM_CHECK_ARGS decides. Equal on every rank. */
  int checkArgs;
  /* (Loom) 1: every reduction folds the ranks' values in rank order 0..n-1,
   * bit-identical whatever the algorithm, size or slice (LOOM_DETERMINISTIC);
   * 0: the tuner's fastest order; LOOM_CONFIG_UNDEF_INT: LOOM_DETERMINISTIC
   * decides. Equal on every rank. */
  int deterministic;
} loomConfig_t;

#define LOOM_CONFIG_MAGIC 0x6c6f6f6dU /* "loom" */
#define LOOM_CONFIG_UNDEF_INT (-2147483647 - 1)
#define LOOM_CONFIG_INITIALIZER                                                        \
  {                                                                                    \
    sizeof(loomConfig_t), LOOM_CONFIG_MAGIC, LOOM_VERSION_CODE, LOOM_CONFIG_UNDEF_INT, \
        LOOM_CONFIG_UNDEF_INT, NULL, LOOM_CONFIG_UNDEF_INT, LOOM_CONFIG_UNDEF_INT      \
  }

/* ---- Versions and errors ------------------------------------------------ */

/* Writes LOOM_VERSION_CODE to *version. Thread safe. */
LOOM_API loomResult_t loomGetVersion(int* version);
/* A static text for a result code; never NULL. Thread safe. */
LOOM_API const char* loomGetErrorString(loomResult_t result);
/* The last error seen on comm (or, when comm is NULL, by the calling thread),
 * naming its cause. Never NULL; "" when there was none. The text stays valid
 * until the next failing call on the same comm or thread. */
LOOM_API const char* loomGetLastError(loomComm_t comm);
/* (Loom) Sets the text loomGetLastError(comm) returns (comm NULL: the calling
 * thread's), copied and truncated to the library's limit. For layered
 * libraries (libloom_parallel): the communicator is not put in error. */
LOOM_API loomResult_t loomSetLastError(loomComm_t comm, const char* message);

/* ---- Communicator creation and teardown --------------------------------- */

/* Rank 0 calls it and hands the bytes to every rank. Opens the rendezvous
 * listening socket in this process; the id carries its address and a random
 * secret. Thread safe. */
LOOM_API loomResult_t loomGetUniqueId(loomUniqueId* uniqueId);
/* Collective over nranks ranks; blocks until every rank joined or the timeout
 * passed. *comm is written only on success. */
LOOM_API loomResult_t loomCommInitRank(loomComm_t* comm, int nranks, loomUniqueId commId, int rank);
/* As loomCommInitRank with options. With config->blocking == 0 it returns
 * loomInProgress at once, *comm is valid, and loomCommGetAsyncError reports
 * loomSuccess once the communicator is ready. */
LOOM_API loomResult_t loomCommInitRankConfig(loomComm_t* comm, int nranks, loomUniqueId commId,
                                             int rank, loomConfig_t* config);
/* ndev ranks inside this process. devlist names CUDA devices; (Loom) NULL
 * makes host ranks. Blocks until all are ready. */
LOOM_API loomResult_t loomCommInitAll(loomComm_t* comms, int ndev, const int* devlist);
/* (Loom) Rank, size and rendezvous from the environment: LOOM_RANK /
 * LOOM_WORLD_SIZE / LOOM_ROOT (host:port); RANK / WORLD_SIZE / MASTER_ADDR /
 * MASTER_PORT; OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE and PMI_RANK /
 * PMI_SIZE with LOOM_ROOT or MASTER_ADDR/MASTER_PORT; SLURM_PROCID /
 * SLURM_NTASKS likewise. Rank 0 listens on the named address. config may be
 * NULL. */
LOOM_API loomResult_t loomCommInitFromEnv(loomComm_t* comm, loomConfig_t* config);
/* As MPI_Comm_split, collective over comm. color == LOOM_SPLIT_NOCOLOR gives
 * *newcomm == NULL. config may be NULL (inherit comm's). */
LOOM_API loomResult_t loomCommSplit(loomComm_t comm, int color, int key, loomComm_t* newcomm,
                                    loomConfig_t* config);
/* Completes the work issued on comm and synchronises with the peers, so that
 * loomCommDestroy afterwards never cuts a peer off. Collective. */
LOOM_API loomResult_t loomCommFinalize(loomComm_t comm);
/* Releases comm. Not collective; peers still waiting on this rank see
 * loomRemoteError. */
LOOM_API loomResult_t loomCommDestroy(loomComm_t comm);
/* Never blocks on peers; releases everything. Peers blocked in a call with
 * this rank get loomRemoteError. */
LOOM_API loomResult_t loomCommAbort(loomComm_t comm);

/* (Loom, NCCL 2.28's signatures) Surviving a lost rank. */
#define LOOM_REVOKE_DEFAULT 0
#define LOOM_SHRINK_DEFAULT 0
#define LOOM_SHRINK_ABORT 1 /* first end whatever is in flight on comm */
/* Pending and future calls on comm return an error at once, here
 * (loomInvalidUsage) and on every rank that can still be reached
 * (loomRemoteError); nothing is freed. Afterwards destroy, split and shrink
 * are safe. Not collective. */
LOOM_API loomResult_t loomCommRevoke(loomComm_t comm, int revokeFlags);
/* Called by every rank not in excludeRanksList: a communicator of those
 * ranks, in their old order, built with no participation of the excluded
 * ones, whatever state comm is in (a dead peer included). config NULL:
 * inherit comm's. */
LOOM_API loomResult_t loomCommShrink(loomComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                     loomComm_t* newcomm, loomConfig_t* config, int shrinkFlags);
/* loomSuccess, loomInProgress while a non-blocking init runs, or the error
 * that put comm in error (a dead peer, a timeout). */
LOOM_API loomResult_t loomCommGetAsyncError(loomComm_t comm, loomResult_t* asyncError);
LOOM_API loomResult_t loomCommCount(const loomComm_t comm, int* count);
LOOM_API loomResult_t loomCommUserRank(const loomComm_t comm, int* rank);
/* (Loom) -1 for host ranks. */
LOOM_API loomResult_t loomCommCuDevice(const loomComm_t comm, int* device);

/* ---- Memory ------------------------------------------------------------- */

/* Memory that peers can reach without copies. */
LOOM_API loomResult_t loomMemAlloc(void** ptr, size_t size);
LOOM_API loomResult_t loomMemFree(void* ptr);
LOOM_API loomResult_t loomCommRegister(const loomComm_t comm, void* buff, size_t size,
                                       void** handle);
LOOM_API loomResult_t loomCommDeregister(const loomComm_t comm, void* handle);

/* ---- Collectives -------------------------------------------------------- */
/* All ranks of comm call them in the same order with matching arguments.
 * stream == NULL: the call returns when the operation is complete. */

LOOM_API loomResult_t loomAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                                    loomStream_t stream);
LOOM_API loomResult_t loomBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                    loomDataType_t datatype, int root, loomComm_t comm,
                                    loomStream_t stream);
LOOM_API loomResult_t loomReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 loomDataType_t datatype, loomRedOp_t op, int root, loomComm_t comm,
                                 loomStream_t stream);
LOOM_API loomResult_t loomAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    loomDataType_t datatype, loomComm_t comm, loomStream_t stream);
LOOM_API loomResult_t loomReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                                        loomStream_t stream);
/* count elements to and from each peer. */
LOOM_API loomResult_t loomAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                   loomDataType_t datatype, loomComm_t comm, loomStream_t stream);
/* (Loom) counts and displacements in elements, one per peer. */
LOOM_API loomResult_t loomAlltoAllv(const void* sendbuff, const size_t sendcounts[],
                                    const size_t sdispls[], void* recvbuff,
                                    const size_t recvcounts[], const size_t rdispls[],
                                    loomDataType_t datatype, loomComm_t comm, loomStream_t stream);
LOOM_API loomResult_t loomGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 loomDataType_t datatype, int root, loomComm_t comm,
                                 loomStream_t stream);
LOOM_API loomResult_t loomScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                  loomDataType_t datatype, int root, loomComm_t comm,
                                  loomStream_t stream);
LOOM_API loomResult_t loomSend(const void* sendbuff, size_t count, loomDataType_t datatype,
                               int peer, loomComm_t comm, loomStream_t stream);
LOOM_API loomResult_t loomRecv(void* recvbuff, size_t count, loomDataType_t datatype, int peer,
                               loomComm_t comm, loomStream_t stream);

/* Calls between them are issued together at the outermost loomGroupEnd; sends
 * and receives inside one group never deadlock whatever their order. Per
 * thread; may nest. */
LOOM_API loomResult_t loomGroupStart(void);
LOOM_API loomResult_t loomGroupEnd(void);

/* A sum in which each rank's input is first multiplied by *scalar (of type
 * datatype). With loomScalarHostImmediate the value is read now. */
LOOM_API loomResult_t loomRedOpCreatePreMulSum(loomRedOp_t* op, void* scalar,
                                               loomDataType_t datatype,
                                               loomScalarResidence_t residence, loomComm_t comm);
LOOM_API loomResult_t loomRedOpDestroy(loomRedOp_t op, loomComm_t comm);

/* ---- Streams (Loom) ----------------------------------------------------- */

/* A host stream: calls on it return at once and run in order on the stream's
 * own worker thread. */
LOOM_API loomResult_t loomStreamCreate(loomStream_t* stream);
/* Wraps a cudaStream_t; work on device buffers is enqueued on it. */
LOOM_API loomResult_t loomStreamCreateFromCuda(loomStream_t* stream, void* cudaStream);
/* (Loom) The cudaStream_t that stream wraps, or NULL for a host stream.
 * Local; for layered libraries (libloom_parallel). */
LOOM_API loomResult_t loomStreamGetCuda(loomStream_t stream, void** cudaStream);
/* Waits for the work issued so far; returns the first error among it. */
LOOM_API loomResult_t loomStreamSynchronize(loomStream_t stream);
/* loomSuccess when done, loomInProgress otherwise. Never blocks. */
LOOM_API loomResult_t loomStreamQuery(loomStream_t stream);
/* Waits for the stream's work, then releases it. */
LOOM_API loomResult_t loomStreamDestroy(loomStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_H */
