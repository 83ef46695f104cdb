/* api.c - the collective entry points: check the arguments on the calling
 * rank (before anything moves, so a bad call loses nothing and hangs no
 * peer), record a task, and hand it to the group layer. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/exec.h"
#include "core/checks.h"
#include "core/dtype.h"
#include "core/memkind.h"
#include "core/stream.h"
#include "transport/transport.h"

static loomResult_t bad(struct loom_comm* comm, const char* fn, const char* what) {
  return err_set(comm, loomInvalidArgument, "invalid argument: %s: %s", fn, what);
}

/* What every call checked first: its communicator and stream; then the
 * kind of memory of its buffers (check_buf), one kind per call. */
struct call {
  const char* fn;
  struct loom_comm* comm;
  struct loom_stream* stream; /* NULL: run now */
  enum mem_kind mem;          /* of the buffers checked so far (MEM_HOST: none yet) */
  const char* mem_first;      /* the first buffer classified; NULL: none yet */
  const void* mem_ptr;        /* ... and its address (an in-place call's second is not asked) */
};

/* The checks every call shares: comm, datatype, stream. */
static loomResult_t call_begin(struct call* c, const char* fn, loomComm_t comm,
                               loomDataType_t dtype, loomStream_t stream) {
  c->fn = fn;
  c->stream = NULL;
  c->mem = MEM_HOST;
  c->mem_first = NULL;
  c->mem_ptr = NULL;
  if (!comm) return bad(NULL, fn, "communicator is NULL");
  LOOM_CHECK(comm_get(comm, fn, &c->comm));
  if ((unsigned)dtype >= (unsigned)loomNumTypes) {
    char why[64];
    snprintf(why, sizeof(why), "unknown datatype %d", (int)dtype);
    return bad(c->comm, fn, why);
  }
  if (stream) LOOM_CHECK(stream_get(stream, fn, &c->stream));
  return coll_comm_ready(c->comm);
}

/* The bytes of count x mult elements of esize bytes, if they fit (with room
 * for the arithmetic of plans: at most PTRDIFF_MAX). Every size product of a
 * call goes through here before anything is allocated or sent, so an
 * impossible size is this rank's loomInvalidArgument and never reaches a
 * peer. */
static loomResult_t check_size(const struct call* c, const char* name, size_t count, size_t mult,
                               size_t esize, size_t* bytes_out) {
  size_t elems = 0, bytes = 0;
  if (!__builtin_mul_overflow(count, mult, &elems) &&
      !__builtin_mul_overflow(elems, esize, &bytes) && bytes <= (size_t)PTRDIFF_MAX) {
    *bytes_out = bytes;
    return loomSuccess;
  }
  char why[256];
  if (mult > 1)
    snprintf(why, sizeof(why),
             "%s: count %zu x %zu ranks x %zu-byte elements is more than a buffer can hold (%zu "
             "bytes at most)",
             name, count, mult, esize, (size_t)PTRDIFF_MAX);
  else
    snprintf(why, sizeof(why),
             "%s: count %zu x %zu-byte elements is more than a buffer can hold (%zu bytes at most)",
             name, count, esize, (size_t)PTRDIFF_MAX);
  return bad(c->comm, c->fn, why);
}

/* Classifies buffer name (once per buffer and call): every buffer of a call
 * is of one kind, and the call's stream can serve it. */
static loomResult_t check_kind(struct call* c, const char* name, const void* p) {
  char why[320];
  if (p == c->mem_ptr) return loomSuccess; /* in place: this buffer was classified */
  enum mem_kind k = mem_kind_of(p, NULL);
  if (!c->mem_first) {
    c->mem = k;
    c->mem_first = name;
    c->mem_ptr = p;
  } else if (k != c->mem) {
    snprintf(why, sizeof(why),
             "%s is %s memory but %s is %s memory: the buffers of one call must all be host "
             "memory or all device memory",
             name, mem_kind_name(k), c->mem_first, mem_kind_name(c->mem));
    return bad(c->comm, c->fn, why);
  }
  /* Host memory on a NULL or host stream: the host executor, which every build has. */
  if (k == MEM_HOST && (!c->stream || stream_kind_of(c->stream) == STREAM_HOST)) return loomSuccess;
  if (!exec_pick(c->stream, k)) {
    snprintf(why, sizeof(why), "%s is %s memory, which %s", name, mem_kind_name(k),
             exec_refusal(c->stream, k));
    return bad(c->comm, c->fn, why);
  }
  return loomSuccess;
}

/* A buffer of count x mult elements: its size fits (check_size), it is not
 * NULL when it is not empty, and it does not wrap around the end of the
 * address space. bytes_out may be NULL. */
static loomResult_t check_buf(struct call* c, const char* name, const void* p, size_t count,
                              size_t mult, size_t esize, size_t* bytes_out) {
  char why[256];
  size_t bytes = 0;
  LOOM_CHECK(check_size(c, name, count, mult, esize, &bytes));
  if (bytes > 0 && !p) {
    snprintf(why, sizeof(why), "%s is NULL with %zu bytes to %s", name, bytes,
             name[0] == 's' ? "read" : "write");
    return bad(c->comm, c->fn, why);
  }
  if (bytes > 0 && (uintptr_t)p > UINTPTR_MAX - bytes) {
    snprintf(why, sizeof(why), "%s %p of %zu bytes wraps around the end of the address space", name,
             p, bytes);
    return bad(c->comm, c->fn, why);
  }
  if (bytes > 0) LOOM_CHECK(check_kind(c, name, p));
  if (bytes_out) *bytes_out = bytes;
  return loomSuccess;
}

/* Ranges checked by check_buf: their ends do not wrap. */
static int ranges_overlap(const void* a, size_t alen, const void* b, size_t blen) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return alen && blen && x < y + blen && y < x + alen;
}

/* Buffers a (alen bytes) and b (blen) may overlap only in the in-place case,
 * where a starts at inplace_at (NULL: no in-place form); any other overlap
 * is an error. */
static loomResult_t check_overlap(const struct call* c, const void* a, size_t alen, const void* b,
                                  size_t blen, const void* inplace_at) {
  if (!a || !b || !ranges_overlap(a, alen, b, blen)) return loomSuccess;
  if (inplace_at && a == inplace_at) return loomSuccess;
  return bad(c->comm, c->fn, "sendbuff and recvbuff overlap without being the in-place case");
}

static loomResult_t check_root(const struct call* c, int root, const char* what) {
  if (root >= 0 && root < c->comm->nranks) return loomSuccess;
  char why[96];
  snprintf(why, sizeof(why), "%s %d is out of range (the communicator has %d ranks)", what, root,
           c->comm->nranks);
  return bad(c->comm, c->fn, why);
}

static void task_fill(struct coll_task* t, enum coll_kind kind, const struct call* c,
                      const void* sendbuff, void* recvbuff, size_t count, loomDataType_t dtype,
                      int root) {
  memset(t, 0, sizeof(*t));
  t->kind = kind;
  t->comm = c->comm;
  t->stream = c->stream;
  t->sendbuff = sendbuff;
  t->recvbuff = recvbuff;
  t->count = count;
  t->dtype = dtype;
  t->op = loomSum;
  t->root = root;
  t->mem = c->mem;
}

loomResult_t loomAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                           loomStream_t stream) {
  struct call c;
  size_t bytes = 0;
  LOOM_CHECK(call_begin(&c, "loomAllReduce", comm, datatype, stream));
  size_t es = dtype_size(datatype);
  LOOM_CHECK(check_buf(&c, "sendbuff", sendbuff, count, 1, es, &bytes));
  LOOM_CHECK(check_buf(&c, "recvbuff", recvbuff, count, 1, es, NULL));
  if (sendbuff != recvbuff && ranges_overlap(sendbuff, bytes, recvbuff, bytes))
    return bad(c.comm, c.fn,
               "sendbuff and recvbuff overlap without being the same (in-place) buffer");
  struct coll_task t;
  task_fill(&t, COLL_ALLREDUCE, &c, sendbuff, recvbuff, count, datatype, 0);
  LOOM_CHECK(redop_resolve(c.comm, op, datatype, &t));
  return group_submit_coll(c.fn, &t, count == 0);
}

static loomResult_t p2p_call(enum coll_kind kind, const char* fn, const void* sendbuff,
                             void* recvbuff, size_t count, loomDataType_t datatype, int peer,
                             loomComm_t comm, loomStream_t stream) {
  struct call c;
  LOOM_CHECK(call_begin(&c, fn, comm, datatype, stream));
  LOOM_CHECK(check_buf(&c, kind == COLL_SEND ? "sendbuff" : "recvbuff",
                       kind == COLL_SEND ? sendbuff : recvbuff, count, 1, dtype_size(datatype),
                       NULL));
  LOOM_CHECK(check_root(&c, peer, "peer"));
  if (count == 0) return loomSuccess;
  struct coll_task t;
  task_fill(&t, kind, &c, sendbuff, recvbuff, count, datatype, peer);
  return group_submit(&t); /* point-to-point: LOOM_CHECK_ARGS does not pair sends with receives */
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

loomResult_t loomBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm,
                           loomStream_t stream) {
  struct call c;
  size_t bytes = 0;
  LOOM_CHECK(call_begin(&c, "loomBroadcast", comm, datatype, stream));
  LOOM_CHECK(check_root(&c, root, "root"));
  size_t es = dtype_size(datatype);
  LOOM_CHECK(check_buf(&c, "recvbuff", recvbuff, count, 1, es, &bytes));
  if (c.comm->rank == root) {
    LOOM_CHECK(check_buf(&c, "sendbuff", sendbuff, count, 1, es, NULL));
    LOOM_CHECK(check_overlap(&c, sendbuff, bytes, recvbuff, bytes, recvbuff));
  }
  struct coll_task t;
  task_fill(&t, COLL_BROADCAST, &c, sendbuff, recvbuff, count, datatype, root);
  return group_submit_coll(c.fn, &t, count == 0);
}

loomResult_t loomReduce(const void* sendbuff, void* recvbuff, size_t count, loomDataType_t datatype,
                        loomRedOp_t op, int root, loomComm_t comm, loomStream_t stream) {
  struct call c;
  size_t bytes = 0;
  LOOM_CHECK(call_begin(&c, "loomReduce", comm, datatype, stream));
  LOOM_CHECK(check_root(&c, root, "root"));
  size_t es = dtype_size(datatype);
  LOOM_CHECK(check_buf(&c, "sendbuff", sendbuff, count, 1, es, &bytes));
  if (c.comm->rank == root) {
    LOOM_CHECK(check_buf(&c, "recvbuff", recvbuff, count, 1, es, NULL));
    LOOM_CHECK(check_overlap(&c, sendbuff, bytes, recvbuff, bytes, recvbuff));
  }
  struct coll_task t;
  task_fill(&t, COLL_REDUCE, &c, sendbuff, recvbuff, count, datatype, root);
  LOOM_CHECK(redop_resolve(c.comm, op, datatype, &t));
  return group_submit_coll(c.fn, &t, count == 0);
}

loomResult_t loomAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  struct call c;
  size_t sbytes = 0, rbytes = 0;
  LOOM_CHECK(call_begin(&c, "loomAllGather", comm, datatype, stream));
  size_t es = dtype_size(datatype), n = (size_t)c.comm->nranks;
  LOOM_CHECK(check_buf(&c, "sendbuff", sendbuff, sendcount, 1, es, &sbytes));
  LOOM_CHECK(check_buf(&c, "recvbuff", recvbuff, sendcount, n, es, &rbytes));
  const char* inplace = recvbuff ? (char*)recvbuff + (size_t)c.comm->rank * sbytes : NULL;
  LOOM_CHECK(check_overlap(&c, sendbuff, sbytes, recvbuff, rbytes, inplace));
  struct coll_task t;
  task_fill(&t, COLL_ALLGATHER, &c, sendbuff, recvbuff, sendcount, datatype, 0);
  return group_submit_coll(c.fn, &t, sendcount == 0);
}

loomResult_t loomReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               loomStream_t stream) {
  struct call c;
  size_t sbytes = 0, rbytes = 0;
  LOOM_CHECK(call_begin(&c, "loomReduceScatter", comm, datatype, stream));
  size_t es = dtype_size(datatype), n = (size_t)c.comm->nranks;
  LOOM_CHECK(check_buf(&c, "sendbuff", sendbuff, recvcount, n, es, &sbytes));
  LOOM_CHECK(check_buf(&c, "recvbuff", recvbuff, recvcount, 1, es, &rbytes));
  /* In place: recvbuff == sendbuff + rank * recvcount. */
  const char* inplace = sendbuff ? (const char*)sendbuff + (size_t)c.comm->rank * rbytes : NULL;
  LOOM_CHECK(check_overlap(&c, recvbuff, rbytes, sendbuff, sbytes, inplace));
  struct coll_task t;
  task_fill(&t, COLL_REDUCESCATTER, &c, sendbuff, recvbuff, recvcount, datatype, 0);
  LOOM_CHECK(redop_resolve(c.comm, op, datatype, &t));
  return group_submit_coll(c.fn, &t, recvcount == 0);
}

loomResult_t loomAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  struct call c;
  size_t bytes = 0;
  LOOM_CHECK(call_begin(&c, "loomAlltoAll", comm, datatype, stream));
  size_t es = dtype_size(datatype), n = (size_t)c.comm->nranks;
  LOOM_CHECK(check_buf(&c, "sendbuff", sendbuff, count, n, es, &bytes));
  LOOM_CHECK(check_buf(&c, "recvbuff", recvbuff, count, n, es, NULL));
  LOOM_CHECK(check_overlap(&c, sendbuff, bytes, recvbuff, bytes, recvbuff));
  struct coll_task t;
  task_fill(&t, COLL_ALLTOALL, &c, sendbuff, recvbuff, count, datatype, 0);
  return group_submit_coll(c.fn, &t, count == 0);
}

/* The extent (elements) of a buffer described by counts and displacements,
 * each end checked: loomInvalidArgument naming the peer whose count and
 * displacement overflow. */
static loomResult_t v_extent(const struct call* c, const char* name, const size_t* counts,
                             const size_t* displs, size_t* extent_out) {
  size_t end = 0;
  for (int p = 0; p < c->comm->nranks; p++) {
    size_t e;
    if (__builtin_add_overflow(displs[p], counts[p], &e)) {
      char why[160];
      snprintf(why, sizeof(why), "%s: displacement %zu + count %zu of peer %d overflows", name,
               displs[p], counts[p], p);
      return bad(c->comm, c->fn, why);
    }
    if (counts[p] && e > end) end = e;
  }
  *extent_out = end;
  return loomSuccess;
}

loomResult_t loomAlltoAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream) {
  struct call c;
  size_t sext = 0, rext = 0, sbytes = 0, rbytes = 0;
  LOOM_CHECK(call_begin(&c, "loomAlltoAllv", comm, datatype, stream));
  if (!sendcounts || !sdispls || !recvcounts || !rdispls)
    return bad(c.comm, c.fn, "a count or displacement array is NULL");
  int n = c.comm->nranks;
  size_t es = dtype_size(datatype);
  LOOM_CHECK(v_extent(&c, "sendbuff", sendcounts, sdispls, &sext));
  LOOM_CHECK(v_extent(&c, "recvbuff", recvcounts, rdispls, &rext));
  LOOM_CHECK(check_buf(&c, "sendbuff", sendbuff, sext, 1, es, &sbytes));
  LOOM_CHECK(check_buf(&c, "recvbuff", recvbuff, rext, 1, es, &rbytes));
  if (sendbuff && recvbuff && ranges_overlap(sendbuff, sbytes, recvbuff, rbytes))
    return bad(c.comm, c.fn, "sendbuff and recvbuff overlap (all-to-all-v has no in-place form)");
  struct coll_task t;
  task_fill(&t, COLL_ALLTOALLV, &c, sendbuff, recvbuff, 0, datatype, 0);
  /* The arrays are read when the operation runs, perhaps on a stream:
   * keep a copy. */
  t.v = malloc(4 * (size_t)n * sizeof(size_t));
  if (!t.v) return err_set(c.comm, loomSystemError, "out of memory");
  memcpy(t.v, sendcounts, (size_t)n * sizeof(size_t));
  memcpy(t.v + n, sdispls, (size_t)n * sizeof(size_t));
  memcpy(t.v + 2 * n, recvcounts, (size_t)n * sizeof(size_t));
  memcpy(t.v + 3 * n, rdispls, (size_t)n * sizeof(size_t));
  t.count = sext > rext ? sext : rext;
  return group_submit_coll(c.fn, &t, sext == 0 && rext == 0); /* owns t.v from here */
}

loomResult_t loomGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                        loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream) {
  struct call c;
  size_t sbytes = 0, rbytes = 0;
  LOOM_CHECK(call_begin(&c, "loomGather", comm, datatype, stream));
  LOOM_CHECK(check_root(&c, root, "root"));
  size_t es = dtype_size(datatype), n = (size_t)c.comm->nranks;
  LOOM_CHECK(check_buf(&c, "sendbuff", sendbuff, sendcount, 1, es, &sbytes));
  /* Every rank checks the root's size, the same product, so that a size the
   * root rejects is rejected everywhere and nobody starts. */
  LOOM_CHECK(check_size(&c, "recvbuff", sendcount, n, es, &rbytes));
  if (c.comm->rank == root) {
    LOOM_CHECK(check_buf(&c, "recvbuff", recvbuff, sendcount, n, es, NULL));
    const char* inplace = recvbuff ? (char*)recvbuff + (size_t)root * sbytes : NULL;
    LOOM_CHECK(check_overlap(&c, sendbuff, sbytes, recvbuff, rbytes, inplace));
  }
  struct coll_task t;
  task_fill(&t, COLL_GATHER, &c, sendbuff, recvbuff, sendcount, datatype, root);
  return group_submit_coll(c.fn, &t, sendcount == 0);
}

loomResult_t loomScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                         loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream) {
  struct call c;
  size_t sbytes = 0, rbytes = 0;
  LOOM_CHECK(call_begin(&c, "loomScatter", comm, datatype, stream));
  LOOM_CHECK(check_root(&c, root, "root"));
  size_t es = dtype_size(datatype), n = (size_t)c.comm->nranks;
  LOOM_CHECK(check_buf(&c, "recvbuff", recvbuff, recvcount, 1, es, &rbytes));
  LOOM_CHECK(check_size(&c, "sendbuff", recvcount, n, es, &sbytes)); /* the root's, everywhere */
  if (c.comm->rank == root) {
    LOOM_CHECK(check_buf(&c, "sendbuff", sendbuff, recvcount, n, es, NULL));
    const char* inplace = sendbuff ? (const char*)sendbuff + (size_t)root * rbytes : NULL;
    LOOM_CHECK(check_overlap(&c, recvbuff, rbytes, sendbuff, sbytes, inplace));
  }
  struct coll_task t;
  task_fill(&t, COLL_SCATTER, &c, sendbuff, recvbuff, recvcount, datatype, root);
  return group_submit_coll(c.fn, &t, recvcount == 0);
}
