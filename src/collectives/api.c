/* api.c - the collective entry points: check the arguments on the calling
 * rank (before anything moves, so a bad call loses nothing and hangs no
 * peer), record a task, and hand it to the group layer. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/checks.h"
#include "../core/stream.h"
#include "../kernels/cpu/cpu_kernels.h"
#include "../transport/transport.h"
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

/* ---- The other collectives ---- */

static loomResult_t check_root(struct loomComm* comm, const char* fn, int root) {
  if (root >= 0 && root < comm->nranks) return loomSuccess;
  char why[96];
  snprintf(why, sizeof(why), "root %d is out of range (the communicator has %d ranks)", root,
           comm->nranks);
  return bad(comm, fn, why);
}

/* Buffers a (alen bytes) and b (blen) may overlap only in the in-place case,
 * where a starts at inplace_at (NULL: no in-place form); any other overlap
 * is an error. */
static loomResult_t check_overlap(struct loomComm* comm, const char* fn, const void* a, size_t alen,
                                  const void* b, size_t blen, const void* inplace_at) {
  if (!a || !b || !ranges_overlap(a, alen, b, blen)) return loomSuccess;
  if (inplace_at && a == inplace_at) return loomSuccess;
  return bad(comm, fn, "sendbuff and recvbuff overlap without being the in-place case");
}

static void task_fill(struct coll_task* t, enum coll_kind kind, struct loomComm* comm,
                      loomStream_t stream, const void* sendbuff, void* recvbuff, size_t count,
                      loomDataType_t dtype, int root) {
  memset(t, 0, sizeof(*t));
  t->kind = kind;
  t->comm = comm;
  t->stream = stream;
  t->sendbuff = sendbuff;
  t->recvbuff = recvbuff;
  t->count = count;
  t->dtype = dtype;
  t->op = loomSum;
  t->root = root;
}

loomResult_t loomBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream) {
  static const char fn[] = "loomBroadcast";
  LOOM_CHECK(check_common(comm, fn, datatype, stream));
  LOOM_CHECK(check_root(comm, fn, root));
  size_t es = dtype_size(datatype), bytes = count * es;
  LOOM_CHECK(check_buf(comm, fn, "recvbuff", recvbuff, count, es));
  if (comm->rank == root) {
    LOOM_CHECK(check_buf(comm, fn, "sendbuff", sendbuff, count, es));
    LOOM_CHECK(check_overlap(comm, fn, sendbuff, bytes, recvbuff, bytes, recvbuff));
  }
  if (count == 0) return loomSuccess;
  struct coll_task t;
  task_fill(&t, COLL_BROADCAST, comm, stream, sendbuff, recvbuff, count, datatype, root);
  return group_submit(&t);
}

loomResult_t loomReduce(const void* sendbuff, void* recvbuff, size_t count, loomDataType_t datatype,
                        loomRedOp_t op, int root, loomComm_t comm, loomStream_t stream) {
  static const char fn[] = "loomReduce";
  LOOM_CHECK(check_common(comm, fn, datatype, stream));
  LOOM_CHECK(check_root(comm, fn, root));
  size_t es = dtype_size(datatype), bytes = count * es;
  LOOM_CHECK(check_buf(comm, fn, "sendbuff", sendbuff, count, es));
  if (comm->rank == root) {
    LOOM_CHECK(check_buf(comm, fn, "recvbuff", recvbuff, count, es));
    LOOM_CHECK(check_overlap(comm, fn, sendbuff, bytes, recvbuff, bytes, recvbuff));
  }
  struct coll_task t;
  task_fill(&t, COLL_REDUCE, comm, stream, sendbuff, recvbuff, count, datatype, root);
  LOOM_CHECK(redop_resolve(comm, op, datatype, &t));
  if (count == 0) return loomSuccess;
  return group_submit(&t);
}

loomResult_t loomAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  static const char fn[] = "loomAllGather";
  LOOM_CHECK(check_common(comm, fn, datatype, stream));
  size_t es = dtype_size(datatype), n = (size_t)comm->nranks;
  LOOM_CHECK(check_buf(comm, fn, "sendbuff", sendbuff, sendcount, es));
  LOOM_CHECK(check_buf(comm, fn, "recvbuff", recvbuff, sendcount * n, es));
  LOOM_CHECK(check_overlap(comm, fn, sendbuff, sendcount * es, recvbuff, sendcount * n * es,
                           recvbuff ? (char*)recvbuff + (size_t)comm->rank * sendcount * es : NULL));
  if (sendcount == 0) return loomSuccess;
  struct coll_task t;
  task_fill(&t, COLL_ALLGATHER, comm, stream, sendbuff, recvbuff, sendcount, datatype, 0);
  return group_submit(&t);
}

loomResult_t loomReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               loomStream_t stream) {
  static const char fn[] = "loomReduceScatter";
  LOOM_CHECK(check_common(comm, fn, datatype, stream));
  size_t es = dtype_size(datatype), n = (size_t)comm->nranks;
  LOOM_CHECK(check_buf(comm, fn, "sendbuff", sendbuff, recvcount * n, es));
  LOOM_CHECK(check_buf(comm, fn, "recvbuff", recvbuff, recvcount, es));
  /* In place: recvbuff == sendbuff + rank * recvcount. */
  const void* inplace = sendbuff ? (const char*)sendbuff + (size_t)comm->rank * recvcount * es : NULL;
  LOOM_CHECK(check_overlap(comm, fn, recvbuff, recvcount * es, sendbuff, recvcount * n * es, inplace));
  struct coll_task t;
  task_fill(&t, COLL_REDUCESCATTER, comm, stream, sendbuff, recvbuff, recvcount, datatype, 0);
  LOOM_CHECK(redop_resolve(comm, op, datatype, &t));
  if (recvcount == 0) return loomSuccess;
  return group_submit(&t);
}

loomResult_t loomAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  static const char fn[] = "loomAlltoAll";
  LOOM_CHECK(check_common(comm, fn, datatype, stream));
  size_t es = dtype_size(datatype), n = (size_t)comm->nranks;
  LOOM_CHECK(check_buf(comm, fn, "sendbuff", sendbuff, count * n, es));
  LOOM_CHECK(check_buf(comm, fn, "recvbuff", recvbuff, count * n, es));
  LOOM_CHECK(check_overlap(comm, fn, sendbuff, count * n * es, recvbuff, count * n * es, recvbuff));
  if (count == 0) return loomSuccess;
  struct coll_task t;
  task_fill(&t, COLL_ALLTOALL, comm, stream, sendbuff, recvbuff, count, datatype, 0);
  return group_submit(&t);
}

/* The extent (elements) of a buffer described by counts and displacements. */
static size_t v_extent(const size_t* counts, const size_t* displs, int n) {
  size_t end = 0;
  for (int p = 0; p < n; p++)
    if (counts[p] && displs[p] + counts[p] > end) end = displs[p] + counts[p];
  return end;
}

loomResult_t loomAlltoAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  static const char fn[] = "loomAlltoAllv";
  LOOM_CHECK(check_common(comm, fn, datatype, stream));
  if (!sendcounts || !sdispls || !recvcounts || !rdispls)
    return bad(comm, fn, "a count or displacement array is NULL");
  int n = comm->nranks;
  size_t es = dtype_size(datatype);
  for (int p = 0; p < n; p++)
    if (sendcounts[p] > SIZE_MAX / es || sdispls[p] > SIZE_MAX / es - sendcounts[p] ||
        recvcounts[p] > SIZE_MAX / es || rdispls[p] > SIZE_MAX / es - recvcounts[p])
      return bad(comm, fn, "a count or displacement is too large");
  size_t sext = v_extent(sendcounts, sdispls, n), rext = v_extent(recvcounts, rdispls, n);
  LOOM_CHECK(check_buf(comm, fn, "sendbuff", sendbuff, sext, es));
  LOOM_CHECK(check_buf(comm, fn, "recvbuff", recvbuff, rext, es));
  if (sendbuff && recvbuff && ranges_overlap(sendbuff, sext * es, recvbuff, rext * es))
    return bad(comm, fn, "sendbuff and recvbuff overlap (all-to-all-v has no in-place form)");
  struct coll_task t;
  task_fill(&t, COLL_ALLTOALLV, comm, stream, sendbuff, recvbuff, 0, datatype, 0);
  /* The arrays are read when the operation runs, perhaps on a stream:
   * keep a copy. */
  t.v = malloc(4 * (size_t)n * sizeof(size_t));
  if (!t.v) return err_set(comm, loomSystemError, "out of memory");
  memcpy(t.v, sendcounts, (size_t)n * sizeof(size_t));
  memcpy(t.v + n, sdispls, (size_t)n * sizeof(size_t));
  memcpy(t.v + 2 * n, recvcounts, (size_t)n * sizeof(size_t));
  memcpy(t.v + 3 * n, rdispls, (size_t)n * sizeof(size_t));
  t.count = sext > rext ? sext : rext;
  if (sext == 0 && rext == 0) {
    free(t.v);
    return loomSuccess;
  }
  return group_submit(&t); /* owns t.v from here */
}

loomResult_t loomGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                        loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream) {
  static const char fn[] = "loomGather";
  LOOM_CHECK(check_common(comm, fn, datatype, stream));
  LOOM_CHECK(check_root(comm, fn, root));
  size_t es = dtype_size(datatype), n = (size_t)comm->nranks;
  LOOM_CHECK(check_buf(comm, fn, "sendbuff", sendbuff, sendcount, es));
  if (comm->rank == root) {
    LOOM_CHECK(check_buf(comm, fn, "recvbuff", recvbuff, sendcount * n, es));
    LOOM_CHECK(check_overlap(comm, fn, sendbuff, sendcount * es, recvbuff, sendcount * n * es,
                             recvbuff ? (char*)recvbuff + (size_t)root * sendcount * es : NULL));
  }
  if (sendcount == 0) return loomSuccess;
  struct coll_task t;
  task_fill(&t, COLL_GATHER, comm, stream, sendbuff, recvbuff, sendcount, datatype, root);
  return group_submit(&t);
}

loomResult_t loomScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                         loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream) {
  static const char fn[] = "loomScatter";
  LOOM_CHECK(check_common(comm, fn, datatype, stream));
  LOOM_CHECK(check_root(comm, fn, root));
  size_t es = dtype_size(datatype), n = (size_t)comm->nranks;
  LOOM_CHECK(check_buf(comm, fn, "recvbuff", recvbuff, recvcount, es));
  if (comm->rank == root) {
    LOOM_CHECK(check_buf(comm, fn, "sendbuff", sendbuff, recvcount * n, es));
    const void* inplace = sendbuff ? (const char*)sendbuff + (size_t)root * recvcount * es : NULL;
    LOOM_CHECK(check_overlap(comm, fn, recvbuff, recvcount * es, sendbuff, recvcount * n * es, inplace));
  }
  if (recvcount == 0) return loomSuccess;
  struct coll_task t;
  task_fill(&t, COLL_SCATTER, comm, stream, sendbuff, recvbuff, recvcount, datatype, root);
  return group_submit(&t);
}

/* ---- Memory ---- */

loomResult_t loomMemAlloc(void** ptr, size_t size) {
  if (!ptr) return err_set(NULL, loomInvalidArgument, "invalid argument: loomMemAlloc: ptr is NULL");
  if (size == 0) return err_set(NULL, loomInvalidArgument, "invalid argument: loomMemAlloc: size is 0");
  return tp_mem_alloc(size, ptr);
}

loomResult_t loomMemFree(void* ptr) {
  if (!ptr) return loomSuccess; /* as free(NULL) */
  return tp_mem_free(ptr);
}

/* A registration: the buffer is recorded so Deregister can check its
 * handle. Direct plans read any buffer of a same-host peer (mapped when it
 * is loomMemAlloc memory, by cross-memory attach otherwise), so nothing has
 * to be pinned or exchanged here. */
struct reg_handle {
  struct loomComm* comm;
  void* buff;
  size_t size;
  struct reg_handle* next;
};
/* Live handles, so that a stale or foreign one is an error, not a crash. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct reg_handle* reg_list;

loomResult_t loomCommRegister(const loomComm_t comm, void* buff, size_t size, void** handle) {
  LOOM_CHECK(coll_comm_ready(comm));
  if (!handle) return err_set(comm, loomInvalidArgument, "invalid argument: loomCommRegister: handle is NULL");
  if (!buff || size == 0)
    return err_set(comm, loomInvalidArgument,
                   "invalid argument: loomCommRegister: buffer %p of %zu bytes", buff, size);
  struct reg_handle* h = calloc(1, sizeof(*h));
  if (!h) return err_set(comm, loomSystemError, "out of memory");
  *h = (struct reg_handle){comm, buff, size, NULL};
  pthread_mutex_lock(&reg_lock);
  h->next = reg_list;
  reg_list = h;
  pthread_mutex_unlock(&reg_lock);
  *handle = h;
  return loomSuccess;
}

loomResult_t loomCommDeregister(const loomComm_t comm, void* handle) {
  LOOM_CHECK(comm_check(comm));
  pthread_mutex_lock(&reg_lock);
  struct reg_handle** at = &reg_list;
  while (*at && (*at != handle || (*at)->comm != comm)) at = &(*at)->next;
  struct reg_handle* h = *at;
  if (h) *at = h->next;
  pthread_mutex_unlock(&reg_lock);
  if (!h)
    return err_set(comm, loomInvalidArgument,
                   "invalid argument: loomCommDeregister: %p is not a live registration of this "
                   "communicator", handle);
  free(h);
  return loomSuccess;
}
