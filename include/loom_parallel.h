/*
 * loom_parallel.h - Loom's parallelism primitives (libloom_parallel): tensors, the device
 * mesh, tensor- and sequence-parallel collectives and linear layers, vocab-parallel cross
 * entropy, pipeline schedules and ZeRO. Built on loom.h alone. The contract is the project's
 * PARALLEL.md; docs/PARALLEL.md explains the design.
 *
 * Conventions: every function returns loomResult_t; arguments come as inputs, outputs,
 * options, communicator, stream; an options pointer may be NULL (the ..._INIT defaults).
 * A function that takes a communicator (or a handle made over one) is collective over it;
 * those marked "local" do no communication. stream NULL: host memory, returns when done; a
 * host stream: ordered after earlier work on it, outputs valid after loomStreamSynchronize.
 * Misuse returns loomInvalidArgument before any communication, outputs untouched, and
 * loomGetLastError names the function, the argument and the values.
 */
#ifndef LOOM_PARALLEL_H
#define LOOM_PARALLEL_H

#include <stdint.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- 1. Tensors ------------------------------------------------------------------------ */

#define LOOM_TENSOR_MAX_DIMS 8
typedef struct {
  void* data; /* element (0,...,0); host or CUDA device memory */
  loomDataType_t dtype;
  int ndim;                              /* 0..8; 0 is a scalar (one element) */
  int64_t shape[LOOM_TENSOR_MAX_DIMS];   /* >= 0; entries at and past ndim ignored */
  int64_t strides[LOOM_TENSOR_MAX_DIMS]; /* in elements, >= 0 */
} loomTensor;

/* Local: a row-major contiguous tensor over data. */
LOOM_API loomResult_t loomTensorMake(void* data, loomDataType_t dtype, int ndim,
                                     const int64_t shape[], loomTensor* tensor);
/* Local: 1 when the strides are loomTensorMake's (dims of extent 1 ignored). */
LOOM_API loomResult_t loomTensorIsContiguous(const loomTensor* tensor, int* contiguous);
/* Local: the product of the extents (1 for ndim 0). */
LOOM_API loomResult_t loomTensorNumel(const loomTensor* tensor, int64_t* numel);
/* Local: the view of [start, start + length) along dim; no copy. */
LOOM_API loomResult_t loomTensorSlice(const loomTensor* tensor, int dim, int64_t start,
                                      int64_t length, loomTensor* slice);

/* ---- 2. Device mesh -------------------------------------------------------------------- */

typedef struct loomMesh* loomMesh_t;
typedef enum {
  loomMeshDp = 0,
  loomMeshPp = 1,
  loomMeshCp = 2,
  loomMeshTp = 3,
  loomMeshEp = 4,
  loomMeshNumDims = 5
} loomMeshDim_t;

/* Collective over world, blocking: sizes indexed by loomMeshDim_t (product = world size);
 * order names the dims fastest first ("tp-cp-ep-dp-pp" when NULL); groups is a
 * NULL-terminated list of flattened groups such as "dp-cp" (NULL: none). */
LOOM_API loomResult_t loomMeshCreate(loomComm_t world, const int sizes[loomMeshNumDims],
                                     const char* order, const char* const groups[],
                                     loomMesh_t* mesh);
LOOM_API loomResult_t loomMeshGetComm(loomMesh_t mesh, loomMeshDim_t dim, loomComm_t* comm);
LOOM_API loomResult_t loomMeshGetGroup(loomMesh_t mesh, const char* dims, loomComm_t* comm);
LOOM_API loomResult_t loomMeshGetCoord(loomMesh_t mesh, loomMeshDim_t dim, int* coord);
LOOM_API loomResult_t loomMeshGetSize(loomMesh_t mesh, loomMeshDim_t dim, int* size);
LOOM_API loomResult_t loomMeshGetRankOf(loomMesh_t mesh, const int coords[loomMeshNumDims],
                                        int* worldRank);
LOOM_API loomResult_t loomMeshGetCoordsOf(loomMesh_t mesh, int worldRank,
                                          int coords[loomMeshNumDims]);
LOOM_API loomResult_t loomMeshDestroy(loomMesh_t mesh);

/* ---- 3.1 Conjugate collectives --------------------------------------------------------- */
/* splits: NULL (even, must divide exactly) or one extent per rank of comm. */

LOOM_API loomResult_t loomAllReduceTensor(const loomTensor* x, loomTensor* y, loomRedOp_t op,
                                          loomComm_t comm, loomStream_t stream);
LOOM_API loomResult_t loomAllGatherDim(const loomTensor* x, loomTensor* y, int dim,
                                       const int64_t* splits, loomComm_t comm, loomStream_t stream);
LOOM_API loomResult_t loomReduceScatterDim(const loomTensor* x, loomTensor* y, int dim,
                                           const int64_t* splits, loomRedOp_t op, loomComm_t comm,
                                           loomStream_t stream);
LOOM_API loomResult_t loomSplitDim(const loomTensor* x, loomTensor* y, int dim,
                                   const int64_t* splits, loomComm_t comm, loomStream_t stream);
LOOM_API loomResult_t loomAlltoAllDim(const loomTensor* x, loomTensor* y, int scatterDim,
                                      int gatherDim, const int64_t* scatterSplits,
                                      const int64_t* gatherSplits, loomComm_t comm,
                                      loomStream_t stream);

/* ---- 3.2 Parallel linear layers -------------------------------------------------------- */

/* Row-major C[m x n] = alpha * op(A) * op(B) + beta * C; beta == 0: C is not read. */
typedef loomResult_t (*loomGemmFn_t)(void* ctx, int transA, int transB, int64_t m, int64_t n,
                                     int64_t k, double alpha, const void* A, int64_t lda,
                                     const void* B, int64_t ldb, double beta, void* C, int64_t ldc,
                                     loomDataType_t dtype, loomStream_t stream);
typedef struct {
  loomGemmFn_t fn;
  void* ctx;
} loomGemm;
typedef struct {
  int sequenceParallel;     /* 1: the token side is split over TP along seqDim */
  int seqDim;               /* dim of x (column) or y (row) split under SP; < ndim-1 */
  const int64_t* seqSplits; /* NULL: even; else tp-size extents along seqDim */
  int gatherOutput;         /* column only: all-gather y along its last dim (equal out_r) */
  int accumulate;           /* loomLinearBackwardWeight: 1 adds into dw/db, 0 overwrites */
  const loomGemm* gemm;     /* NULL: loomGemmDefault() */
  /* (Loom) the column forward under SP: 1 gathers the input slab by slab around a ring while
   * the GEMM of the slab already here runs; -1 gathers it all, then runs one GEMM; 0 lets the
   * layer choose: on host memory it gathers first, since the copies need the same cores as
   * the GEMM and the ring lost on every shape measured (docs/PERFORMANCE.md). */
  int overlap;
} loomLinearOpts;
#define LOOM_LINEAR_OPTS_INIT \
  { 0, 0, NULL, 0, 0, NULL, 0 }

/* Never NULL: CBLAS (or a portable loop) on host memory. Not a loomResult_t function. */
LOOM_API const loomGemm* loomGemmDefault(void);
LOOM_API loomResult_t loomColumnLinearForward(const loomTensor* x, const loomTensor* w,
                                              const loomTensor* b, loomTensor* y, loomTensor* xFull,
                                              const loomLinearOpts* opts, loomComm_t tp,
                                              loomStream_t stream);
LOOM_API loomResult_t loomColumnLinearBackwardInput(const loomTensor* dy, const loomTensor* w,
                                                    loomTensor* dx, const loomLinearOpts* opts,
                                                    loomComm_t tp, loomStream_t stream);
LOOM_API loomResult_t loomRowLinearForward(const loomTensor* x, const loomTensor* w,
                                           const loomTensor* b, loomTensor* y,
                                           const loomLinearOpts* opts, loomComm_t tp,
                                           loomStream_t stream);
LOOM_API loomResult_t loomRowLinearBackwardInput(const loomTensor* dy, const loomTensor* w,
                                                 loomTensor* dx, loomTensor* dyFull,
                                                 const loomLinearOpts* opts, loomComm_t tp,
                                                 loomStream_t stream);
/* Local: dw = dy^T * x, db = sum over rows of dy (added when opts->accumulate). */
LOOM_API loomResult_t loomLinearBackwardWeight(const loomTensor* x, const loomTensor* dy,
                                               loomTensor* dw, loomTensor* db,
                                               const loomLinearOpts* opts, loomStream_t stream);

/* ---- 3.3 Vocab-parallel cross entropy -------------------------------------------------- */

typedef struct {
  int64_t ignoreIndex;        /* default -100 */
  double labelSmoothing;      /* eps in [0, 1) */
  const int64_t* vocabSplits; /* NULL: every rank's V_r equal; else tp-size entries */
} loomCrossEntropyOpts;
#define LOOM_CROSS_ENTROPY_OPTS_INIT \
  { -100, 0.0, NULL }

LOOM_API loomResult_t loomVocabParallelCrossEntropyForward(const loomTensor* logits,
                                                           const loomTensor* target,
                                                           loomTensor* loss, loomTensor* lse,
                                                           const loomCrossEntropyOpts* opts,
                                                           loomComm_t tp, loomStream_t stream);
LOOM_API loomResult_t loomVocabParallelCrossEntropyBackward(
    const loomTensor* logits, const loomTensor* target, const loomTensor* lse,
    const loomTensor* dloss, loomTensor* dlogits, const loomCrossEntropyOpts* opts, loomComm_t tp,
    loomStream_t stream);

/* ---- 4. Context parallel attention ----------------------------------------------------- */
/* q [B,Sq,Hq,D], k [B,Skv,Hkv,D], v [B,Skv,Hkv,Dv], out [B,Sq,Hq,Dv], lse [B,Hq,Sq] (float32;
   float64 for float64 inputs); Sq, Skv are local lengths. Last dim stride 1. */

typedef enum { loomCpContiguous = 0, loomCpZigzag = 1 } loomCpLayout_t;
typedef enum { loomCpRing = 0, loomCpAllGatherKv = 1, loomCpUlysses = 2 } loomCpAlgo_t;

typedef struct {
  /* One block: q rows at global positions qStart.., k/v rows at kStart... Writes out
     [B,Lq,Hq,Dv] and lse [B,Hq,Lq] of this block alone (not merged). */
  loomResult_t (*forward)(void* ctx, const loomTensor* q, const loomTensor* k, const loomTensor* v,
                          int64_t qStart, int64_t kStart, int causal, double scale, loomTensor* out,
                          loomTensor* lse, loomStream_t stream);
  /* Same block; out, dout and lse are the final (merged) ones of these q rows. Writes, does not
     add, this block's contributions to dq [B,Lq,Hq,D], dk [B,Lk,Hkv,D], dv [B,Lk,Hkv,Dv]. */
  loomResult_t (*backward)(void* ctx, const loomTensor* q, const loomTensor* k, const loomTensor* v,
                           const loomTensor* out, const loomTensor* dout, const loomTensor* lse,
                           int64_t qStart, int64_t kStart, int causal, double scale, loomTensor* dq,
                           loomTensor* dk, loomTensor* dv, loomStream_t stream);
  void* ctx;
} loomAttnKernel;

typedef struct {
  int causal;            /* needs global Sq == Skv; without it Sq and Skv may differ */
  double softmaxScale;   /* 0: 1/sqrt(D) */
  loomCpLayout_t layout; /* of q, k, v, out, lse, and of dq, dk, dv, dout */
  loomCpAlgo_t algo;
  const loomAttnKernel* kernel; /* NULL: loomAttnKernelReference() */
} loomAttnOpts;
#define LOOM_ATTN_OPTS_INIT \
  { 0, 0.0, loomCpContiguous, loomCpRing, NULL }

/* Never NULL: the host reference kernel (cache-blocked). Not a loomResult_t function. */
LOOM_API const loomAttnKernel* loomAttnKernelReference(void);
LOOM_API loomResult_t loomCpAttentionForward(const loomTensor* q, const loomTensor* k,
                                             const loomTensor* v, loomTensor* out, loomTensor* lse,
                                             const loomAttnOpts* opts, loomComm_t cp,
                                             loomStream_t stream);
LOOM_API loomResult_t loomCpAttentionBackward(const loomTensor* q, const loomTensor* k,
                                              const loomTensor* v, const loomTensor* out,
                                              const loomTensor* dout, const loomTensor* lse,
                                              loomTensor* dq, loomTensor* dk, loomTensor* dv,
                                              const loomAttnOpts* opts, loomComm_t cp,
                                              loomStream_t stream);
/* Local: rank cpRank's positions of full along seqDim. */
LOOM_API loomResult_t loomCpShard(const loomTensor* full, int seqDim, loomCpLayout_t layout,
                                  int cpRank, int cpSize, loomTensor* local, loomStream_t stream);
/* Collective: every rank gets the whole sequence in position order. */
LOOM_API loomResult_t loomCpUnshard(const loomTensor* local, int seqDim, loomCpLayout_t layout,
                                    loomTensor* full, loomComm_t cp, loomStream_t stream);
/* Local, host: the seqLen/cpSize global positions of the rank's tokens. */
LOOM_API loomResult_t loomCpPositions(int64_t seqLen, loomCpLayout_t layout, int cpRank, int cpSize,
                                      int64_t positions[]);

/* ---- 5. MoE expert parallel ------------------------------------------------------------ */

typedef struct loomMoeHandle* loomMoeHandle_t;
typedef enum { loomMoeDropByPosition = 0, loomMoeDropByWeight = 1 } loomMoeDropPolicy_t;
typedef struct {
  int numExperts;          /* E; must be set */
  int64_t expertAlignment; /* >= 1: each local expert's rows padded to a multiple */
  double capacityFactor;   /* 0: dropless */
  int64_t minCapacity;
  loomMoeDropPolicy_t dropPolicy;
} loomMoeOpts;
#define LOOM_MOE_OPTS_INIT \
  { 0, 1, 0.0, 0, loomMoeDropByPosition }
typedef struct {
  int numLocalExperts;          /* El */
  int64_t numRecvRows;          /* R, padding included */
  const int64_t* expertCounts;  /* [El] pairs received per local expert, from all ranks */
  const int64_t* expertOffsets; /* [El+1] first row of each local expert; [El] == R */
  const int64_t* sendRows;      /* [P] pairs this rank sends to each rank */
  const int64_t* recvRows;      /* [P] pairs this rank receives from each rank */
  int64_t numDropped;           /* slots this rank dropped for capacity */
  int64_t capacity;             /* C, or -1 when dropless */
} loomMoeInfo;

/* Collective over ep, host sync: capacity, the count exchange, the receive layout. */
LOOM_API loomResult_t loomMoeLayoutCreate(const loomTensor* topkIdx, const loomTensor* topkWeights,
                                          loomMoeHandle_t* handle, const loomMoeOpts* opts,
                                          loomComm_t ep, loomStream_t stream);
/* Local: arrays owned by the handle. */
LOOM_API loomResult_t loomMoeGetInfo(loomMoeHandle_t handle, loomMoeInfo* info);
LOOM_API loomResult_t loomMoeDispatch(loomMoeHandle_t handle, const loomTensor* x,
                                      const loomTensor* topkWeights, loomTensor* recvX,
                                      loomTensor* recvWeights, loomStream_t stream);
LOOM_API loomResult_t loomMoeCombine(loomMoeHandle_t handle, const loomTensor* y,
                                     const loomTensor* topkWeights, loomTensor* out,
                                     loomStream_t stream);
LOOM_API loomResult_t loomMoeDispatchBackward(loomMoeHandle_t handle, const loomTensor* dRecvX,
                                              const loomTensor* dRecvWeights, loomTensor* dx,
                                              loomTensor* dTopkWeights, loomStream_t stream);
LOOM_API loomResult_t loomMoeCombineBackward(loomMoeHandle_t handle, const loomTensor* dOut,
                                             const loomTensor* y, const loomTensor* topkWeights,
                                             loomTensor* dY, loomTensor* dTopkWeights,
                                             loomStream_t stream);
/* Local. */
LOOM_API loomResult_t loomMoeHandleDestroy(loomMoeHandle_t handle);

/* ---- 6. Pipeline parallel ------------------------------------------------------------- */

typedef enum {
  loomPipeAFAB = 0,
  loomPipe1F1B = 1,
  loomPipeInterleaved1F1B = 2,
  loomPipeZBH1 = 3,
  loomPipeZBV = 4,
  loomPipeDualPipeV = 5
} loomPipeKind_t;
typedef enum {
  loomPipeF = 0,
  loomPipeB = 1,
  loomPipeW = 2,
  loomPipeSendF = 3,
  loomPipeRecvF = 4,
  loomPipeSendB = 5,
  loomPipeRecvB = 6
} loomPipeOp_t;
typedef struct {
  loomPipeOp_t op;
  int stage;
  int microbatch;
  int peer; /* the other rank of a send or receive; -1 for F, B, W */
} loomPipeAction;
typedef struct loomPipeSchedule* loomPipeSchedule_t;
typedef struct {
  double f, b, w, comm;
} loomPipeCosts;
typedef struct {
  double makespan;
  double bubbleRatio;
} loomPipeStats;

/* Local, pure: a generated schedule of p ranks, m microbatches and v chunks per rank. */
LOOM_API loomResult_t loomPipeScheduleCreate(loomPipeKind_t kind, int numRanks, int numMicrobatches,
                                             int numChunks, loomPipeSchedule_t* sched);
/* (Loom) Local: a user schedule, accepted only if it passes the validity rules. */
LOOM_API loomResult_t loomPipeScheduleFromActions(int numRanks, int numStages,
                                                  const int stageRank[], int numMicrobatches,
                                                  const loomPipeAction* const actions[],
                                                  const int numActions[],
                                                  loomPipeSchedule_t* sched);
/* Local: rank's list; the array lives as long as the schedule. */
LOOM_API loomResult_t loomPipeScheduleGetActions(loomPipeSchedule_t sched, int rank,
                                                 const loomPipeAction** actions, int* numActions);
LOOM_API loomResult_t loomPipeScheduleStageRank(loomPipeSchedule_t sched, int stage, int* rank);
/* Local, like snprintf: "F3.7 SF3.7 ..." */
LOOM_API loomResult_t loomPipeScheduleFormat(loomPipeSchedule_t sched, int rank, char* buf,
                                             size_t size, size_t* length);
/* Local: the binding simulator; rankIdle and rankPeakActivations ([p]) may be NULL. */
LOOM_API loomResult_t loomPipeSimulate(loomPipeSchedule_t sched, const loomPipeCosts* costs,
                                       loomPipeStats* stats, double rankIdle[],
                                       int rankPeakActivations[]);
LOOM_API loomResult_t loomPipeScheduleDestroy(loomPipeSchedule_t sched);

typedef struct {
  loomResult_t (*forward)(void* user, int stage, int microbatch, const void* input, void* output,
                          loomStream_t stream);
  loomResult_t (*backwardInput)(void* user, int stage, int microbatch, const void* gradOutput,
                                void* gradInput, loomStream_t stream);
  loomResult_t (*backwardWeight)(void* user, int stage, int microbatch, loomStream_t stream);
  void* user;
} loomPipeCallbacks;
typedef struct loomPipeRunner* loomPipeRunner_t;

/* Collective over pp (size p; pp rank = schedule rank); actBytes[s] for s < S-1. */
LOOM_API loomResult_t loomPipeRunnerCreate(loomPipeSchedule_t sched, const size_t actBytes[],
                                           loomPipeRunner_t* runner, loomComm_t pp);
/* Collective: one iteration of this rank's list. */
LOOM_API loomResult_t loomPipeRunnerRun(loomPipeRunner_t runner, const loomPipeCallbacks* callbacks,
                                        loomStream_t stream);
LOOM_API loomResult_t loomPipeRunnerDestroy(loomPipeRunner_t runner);

/* ---- 7. ZeRO --------------------------------------------------------------------------- */

typedef struct loomZeroLayout* loomZeroLayout_t;
typedef struct {
  int64_t offset; /* in the flat buffer */
  int64_t numel;
  int bucket;
} loomZeroParam;
typedef struct {
  int64_t offset;
  int64_t count;
  int64_t shardOffset;
} loomZeroBucket;
typedef struct {
  int numParams, numBuckets, dpSize;
  int64_t totalElems;            /* flat buffer length, padding included */
  int64_t shardElems;            /* totalElems / dpSize */
  const loomZeroParam* params;   /* [numParams] */
  const loomZeroBucket* buckets; /* [numBuckets] */
} loomZeroLayoutInfo;

LOOM_API loomResult_t loomZeroLayoutCreate(const int64_t numels[], int numParams, int dpSize,
                                           int64_t bucketElems, int64_t align,
                                           loomZeroLayout_t* layout);
LOOM_API loomResult_t loomZeroLayoutGetInfo(loomZeroLayout_t layout, loomZeroLayoutInfo* info);
LOOM_API loomResult_t loomZeroOwnedRange(loomZeroLayout_t layout, int param, int dpRank,
                                         int64_t* begin, int64_t* count, int64_t* shardOffset);
LOOM_API loomResult_t loomZeroReduceScatterBucket(loomZeroLayout_t layout, int bucket,
                                                  const void* bucketGrads, void* gradShard,
                                                  loomDataType_t datatype, loomRedOp_t op,
                                                  loomComm_t dp, loomStream_t stream);
LOOM_API loomResult_t loomZeroAllGatherBucket(loomZeroLayout_t layout, int bucket,
                                              const void* paramShard, void* bucketParams,
                                              loomDataType_t datatype, loomComm_t dp,
                                              loomStream_t stream);
LOOM_API loomResult_t loomZeroLayoutDestroy(loomZeroLayout_t layout);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_PARALLEL_H */
