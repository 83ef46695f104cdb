/* api.c - the collective entry points: check the arguments on the calling
 * rank (before anything moves, so a bad call loses nothing and hangs no
 * peer), record a task, and hand it to the group layer. */
#include <stdint.h>
#include <stdio.h>

#include "../core/checks.h"
#include "../core/stream.h"
#include "../kernels/cpu/cpu_kernels.h"
#include "coll.h"

static loomResult_t bad(struct loomComm* comm, const char* fn, const char* what) {
  return err_set(comm, loomInvalidArgument, "invalid argument: %s: %s", fn, what);
}

/* The checks every call shares: comm, datatype, stream. */
static loomResult_t check_common(struct loomComm* comm, const char* fn, loomDataType_t dtype,
                                 loomStream_t stream) {
  if (!comm) return bad(NULL, fn, "communicator is NULL");
  LOOM_CHECK(comm_check(comm));
  if ((unsigned)dtype >= (unsigned)loomNumTypes) {
    char why[64];
    snprintf(why, sizeof(why), "unknown datatype %d", (int)dtype);
    return bad(comm, fn, why);
  }
  if (stream) LOOM_CHECK(stream_check(stream));
  return coll_comm_ready(comm);
}

/* A buffer of count elements: not NULL when count > 0, size representable. */
static loomResult_t check_buf(struct loomComm* comm, const char* fn, const char* name,
                              const void* p, size_t count, size_t esize) {
  char why[128];
  if (count > SIZE_MAX / esize / (size_t)comm->nranks) {
    snprintf(why, sizeof(why), "count %zu is too large", count);
    return bad(comm, fn, why);
  }
  if (count > 0 && !p) {
    snprintf(why, sizeof(why), "%s is NULL with count %zu", name, count);
    return bad(comm, fn, why);
  }
  return loomSuccess;
}

static int ranges_overlap(const void* a, size_t alen, const void* b, size_t blen) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return alen && blen && x < y + blen && y < x + alen;
}

loomResult_t loomAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                           loomStream_t stream) {
  static const char fn[] = "loomAllReduce";
  LOOM_CHECK(check_common(comm, fn, datatype, stream));
  size_t es = dtype_size(datatype);
  LOOM_CHECK(check_buf(comm, fn, "sendbuff", sendbuff, count, es));
  LOOM_CHECK(check_buf(comm, fn, "recvbuff", recvbuff, count, es));
  if (sendbuff != recvbuff && ranges_overlap(sendbuff, count * es, recvbuff, count * es))
    return bad(comm, fn, "sendbuff and recvbuff overlap without being the same (in-place) buffer");
  struct coll_task t = {0};
  t.kind = COLL_ALLREDUCE;
  t.comm = comm;
  t.stream = stream;
  t.sendbuff = sendbuff;
  t.recvbuff = recvbuff;
  t.count = count;
  t.dtype = datatype;
  LOOM_CHECK(redop_resolve(comm, op, datatype, &t));
  if (count == 0) return loomSuccess;
  return group_submit(&t);
}

static loomResult_t p2p_call(enum coll_kind kind, const char* fn, const void* sendbuff,
                             void* recvbuff, size_t count, loomDataType_t datatype, int peer,
                             loomComm_t comm, loomStream_t stream) {
  LOOM_CHECK(check_common(comm, fn, datatype, stream));
  LOOM_CHECK(check_buf(comm, fn, kind == COLL_SEND ? "sendbuff" : "recvbuff",
                       kind == COLL_SEND ? sendbuff : recvbuff, count, dtype_size(datatype)));
  if (peer < 0 || peer >= comm->nranks) {
    char why[96];
    snprintf(why, sizeof(why), "peer %d is out of range (the communicator has %d ranks)", peer,
             comm->nranks);
    return bad(comm, fn, why);
  }
  if (count == 0) return loomSuccess;
  struct coll_task t = {0};
  t.kind = kind;
  t.comm = comm;
  t.stream = stream;
  t.sendbuff = sendbuff;
  t.recvbuff = recvbuff;
  t.count = count;
  t.dtype = datatype;
  t.op = loomSum;
  t.root = peer;
  return group_submit(&t);
}

loomResult_t loomSend(const void* sendbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream) {
  return p2p_call(COLL_SEND, "loomSend", sendbuff, NULL, count, datatype, peer, comm, stream);
}

loomResult_t loomRecv(void* recvbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream) {
  return p2p_call(COLL_RECV, "loomRecv", NULL, recvbuff, count, datatype, peer, comm, stream);
}

/* ---- Not available yet: they exist so every program links. ---- */

static loomResult_t not_yet(const char* fn) {
  return err_set(NULL, loomInvalidUsage, "%s is not available yet in this version of Loom", fn);
}

loomResult_t loomBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream) {
  return not_yet("loomBroadcast");
}
loomResult_t loomReduce(const void* sendbuff, void* recvbuff, size_t count, loomDataType_t datatype,
                        loomRedOp_t op, int root, loomComm_t comm, loomStream_t stream) {
  return not_yet("loomReduce");
}
loomResult_t loomAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  return not_yet("loomAllGather");
}
loomResult_t loomReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               loomStream_t stream) {
  return not_yet("loomReduceScatter");
}
loomResult_t loomAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  return not_yet("loomAlltoAll");
}
loomResult_t loomAlltoAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  return not_yet("loomAlltoAllv");
}
loomResult_t loomGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                        loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream) {
  return not_yet("loomGather");
}
loomResult_t loomScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                         loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream) {
  return not_yet("loomScatter");
}
loomResult_t loomMemAlloc(void** ptr, size_t size) { return not_yet("loomMemAlloc"); }
loomResult_t loomMemFree(void* ptr) { return not_yet("loomMemFree"); }
loomResult_t loomCommRegister(const loomComm_t comm, void* buff, size_t size, void** handle) {
  return not_yet("loomCommRegister");
}
loomResult_t loomCommDeregister(const loomComm_t comm, void* handle) {
  return not_yet("loomCommDeregister");
}
