/* dropin_coll.c - NCCL's collectives, point-to-point calls, groups and
 * reduction ops on Loom's. Each call picks its Loom stream from its buffers
 * (dropin_stream): host buffers complete before the call returns, whatever
 * CUDA stream was named; device buffers go on Loom's wrapper of the stream. */
#include "dropin.h"

#define PICK_STREAM(comm, a, b, s)                                   \
  loomStream_t ls;                                                   \
  do {                                                               \
    ncclResult_t pick_r = dropin_stream((comm), (a), (b), (s), &ls); \
    if (pick_r != ncclSuccess) return pick_r;                        \
  } while (0)

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  PICK_STREAM(comm, sendbuff, recvbuff, stream);
  return dropin_result(loomAllReduce(sendbuff, recvbuff, count, (loomDataType_t)datatype,
                                     (loomRedOp_t)op, LCOMM(comm), ls));
}
DROPIN_ALIAS(AllReduce);

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  PICK_STREAM(comm, sendbuff, recvbuff, stream);
  return dropin_result(
      loomBroadcast(sendbuff, recvbuff, count, (loomDataType_t)datatype, root, LCOMM(comm), ls));
}
DROPIN_ALIAS(Broadcast);

/* The in-place broadcast of NCCL's first interface. */
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
DROPIN_ALIAS(Bcast);

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  PICK_STREAM(comm, sendbuff, recvbuff, stream);
  return dropin_result(loomReduce(sendbuff, recvbuff, count, (loomDataType_t)datatype,
                                  (loomRedOp_t)op, root, LCOMM(comm), ls));
}
DROPIN_ALIAS(Reduce);

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  PICK_STREAM(comm, sendbuff, recvbuff, stream);
  return dropin_result(
      loomAllGather(sendbuff, recvbuff, sendcount, (loomDataType_t)datatype, LCOMM(comm), ls));
}
DROPIN_ALIAS(AllGather);

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  PICK_STREAM(comm, sendbuff, recvbuff, stream);
  return dropin_result(loomReduceScatter(sendbuff, recvbuff, recvcount, (loomDataType_t)datatype,
                                         (loomRedOp_t)op, LCOMM(comm), ls));
}
DROPIN_ALIAS(ReduceScatter);

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  PICK_STREAM(comm, sendbuff, recvbuff, stream);
  return dropin_result(
      loomAlltoAll(sendbuff, recvbuff, count, (loomDataType_t)datatype, LCOMM(comm), ls));
}
DROPIN_ALIAS(AlltoAll);

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  PICK_STREAM(comm, sendbuff, recvbuff, stream);
  return dropin_result(
      loomGather(sendbuff, recvbuff, count, (loomDataType_t)datatype, root, LCOMM(comm), ls));
}
DROPIN_ALIAS(Gather);

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  PICK_STREAM(comm, sendbuff, recvbuff, stream);
  return dropin_result(
      loomScatter(sendbuff, recvbuff, count, (loomDataType_t)datatype, root, LCOMM(comm), ls));
}
DROPIN_ALIAS(Scatter);

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  PICK_STREAM(comm, sendbuff, NULL, stream);
  return dropin_result(loomSend(sendbuff, count, (loomDataType_t)datatype, peer, LCOMM(comm), ls));
}
DROPIN_ALIAS(Send);

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  PICK_STREAM(comm, recvbuff, NULL, stream);
  return dropin_result(loomRecv(recvbuff, count, (loomDataType_t)datatype, peer, LCOMM(comm), ls));
}
DROPIN_ALIAS(Recv);

ncclResult_t ncclGroupStart(void) {
  return dropin_result(loomGroupStart());
}
DROPIN_ALIAS(GroupStart);

ncclResult_t ncclGroupEnd(void) {
  return dropin_result(loomGroupEnd());
}
DROPIN_ALIAS(GroupEnd);

/* Loom has no simulator of a group's time: the group stays open and
 * ncclGroupEnd still runs it. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (!simInfo || simInfo->magic != 0x74685283U)
    return dropin_fail(NULL, ncclInvalidArgument,
                       "invalid argument: ncclGroupSimulateEnd: simInfo was not set up with "
                       "NCCL_SIM_INFO_INITIALIZER");
  return dropin_fail(NULL, ncclInvalidUsage,
                     "ncclGroupSimulateEnd: Loom does not simulate groups; the group is still "
                     "open and ncclGroupEnd runs it");
}
DROPIN_ALIAS(GroupSimulateEnd);

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  return dropin_result(loomRedOpCreatePreMulSum((loomRedOp_t*)op, scalar, (loomDataType_t)datatype,
                                                (loomScalarResidence_t)residence, LCOMM(comm)));
}
DROPIN_ALIAS(RedOpCreatePreMulSum);

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return dropin_result(loomRedOpDestroy((loomRedOp_t)op, LCOMM(comm)));
}
DROPIN_ALIAS(RedOpDestroy);
