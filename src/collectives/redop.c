/* redop.c - reduction operators: the five built-ins and PreMulSum ops, which
 * live in a per-communicator table.
 *
 * A PreMulSum op's value is loomNumOps + index + COLL_MAX_PREMUL x gen, where
 * gen comes from a process-wide counter at creation: a destroyed op, or one
 * made on another communicator, does not name a live op of this one even
 * when its slot was reused (until the counter wraps, after 8 million ops). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "collectives/coll.h"
#include "core/checks.h"
#include "core/dtype.h"

/* Keeps the largest value below 2^31 (loomRedOp_t is an int enum). */
#define PREMUL_GENS (((uint32_t)INT32_MAX - (uint32_t)loomNumOps) / COLL_MAX_PREMUL)

static _Atomic uint32_t premul_gen_next;

/* The slot an op value names, if it names a live op of cc; else -1. Under
 * ops_lock. */
static int premul_slot(const struct coll_comm* cc, loomRedOp_t op) {
  if ((int)op < (int)loomNumOps) return -1;
  uint32_t v = (uint32_t)op - (uint32_t)loomNumOps;
  uint32_t idx = v % COLL_MAX_PREMUL, gen = v / COLL_MAX_PREMUL;
  return cc->ops[idx].in_use && cc->ops[idx].gen == gen ? (int)idx : -1;
}

loomResult_t redop_resolve(struct loom_comm* comm, loomRedOp_t op, loomDataType_t dtype,
                           struct coll_task* t) {
  t->op = op;
  if ((int)op >= 0 && (int)op < (int)loomNumOps) return loomSuccess;
  struct coll_comm* cc = comm->coll;
  loomResult_t res = loomSuccess;
  pthread_mutex_lock(&cc->ops_lock);
  int idx = premul_slot(cc, op);
  if (idx < 0) {
    res =
        err_set(comm, loomInvalidArgument,
                "invalid argument: reduction op %d is neither built in nor a live PreMulSum op of "
                "this communicator (destroyed, or made on another one)",
                (int)op);
  } else if (cc->ops[idx].dtype != dtype) {
    res = err_set(comm, loomInvalidArgument,
                  "invalid argument: PreMulSum op %d was made for %s, the call passes %s", (int)op,
                  dtype_name(cc->ops[idx].dtype), dtype_name(dtype));
  } else if (cc->ops[idx].residence == loomScalarHostImmediate) {
    memcpy(t->scalar, cc->ops[idx].value, sizeof(t->scalar));
  } else {
    t->scalar_ptr = cc->ops[idx].ptr; /* read when the operation runs */
  }
  pthread_mutex_unlock(&cc->ops_lock);
  return res;
}

loomResult_t loomRedOpCreatePreMulSum(loomRedOp_t* op, void* scalar, loomDataType_t datatype,
                                      loomScalarResidence_t residence, loomComm_t comm) {
  static const char fn[] = "loomRedOpCreatePreMulSum";
  struct loom_comm* c = NULL;
  LOOM_CHECK(comm_get(comm, fn, &c));
  if (!op) return err_set(c, loomInvalidArgument, "invalid argument: %s: op pointer is NULL", fn);
  if (!scalar) return err_set(c, loomInvalidArgument, "invalid argument: %s: scalar is NULL", fn);
  if ((unsigned)datatype >= (unsigned)loomNumTypes)
    return err_set(c, loomInvalidArgument, "invalid argument: %s: unknown datatype %d", fn,
                   (int)datatype);
  if (residence != loomScalarDevice && residence != loomScalarHostImmediate)
    return err_set(c, loomInvalidArgument, "invalid argument: %s: unknown scalar residence %d", fn,
                   (int)residence);
  LOOM_CHECK(coll_comm_ready(c));
  struct coll_comm* cc = c->coll;
  pthread_mutex_lock(&cc->ops_lock);
  int idx = 0;
  while (idx < COLL_MAX_PREMUL && cc->ops[idx].in_use) idx++;
  if (idx == COLL_MAX_PREMUL) {
    pthread_mutex_unlock(&cc->ops_lock);
    return err_set(c, loomInvalidUsage,
                   "%s: too many live PreMulSum ops (at most %d): destroy some", fn,
                   COLL_MAX_PREMUL);
  }
  struct premul_op* p = &cc->ops[idx];
  memset(p, 0, sizeof(*p));
  p->in_use = 1;
  p->gen = atomic_fetch_add(&premul_gen_next, 1) % PREMUL_GENS;
  p->dtype = datatype;
  p->residence = residence;
  p->ptr = scalar;
  /* Host ranks have no device memory: a "device" scalar is a host pointer
   * read when the operation runs, as NCCL reads device scalars. */
  if (residence == loomScalarHostImmediate) memcpy(p->value, scalar, dtype_size(datatype));
  *op = (loomRedOp_t)((uint32_t)loomNumOps + (uint32_t)idx + COLL_MAX_PREMUL * p->gen);
  pthread_mutex_unlock(&cc->ops_lock);
  return loomSuccess;
}

loomResult_t loomRedOpDestroy(loomRedOp_t op, loomComm_t comm) {
  static const char fn[] = "loomRedOpDestroy";
  struct loom_comm* c = NULL;
  LOOM_CHECK(comm_get(comm, fn, &c));
  if ((int)op >= 0 && (int)op < (int)loomNumOps)
    return err_set(c, loomInvalidArgument,
                   "invalid argument: %s: op %d is built in (only PreMulSum ops are destroyed)", fn,
                   (int)op);
  LOOM_CHECK(coll_comm_settled(c));
  struct coll_comm* cc = c->coll;
  loomResult_t res = loomSuccess;
  pthread_mutex_lock(&cc->ops_lock);
  int idx = premul_slot(cc, op);
  if (idx < 0)
    res = err_set(c, loomInvalidArgument,
                  "invalid argument: %s: op %d is not a live PreMulSum op of this communicator "
                  "(destroyed already, or made on another one)",
                  fn, (int)op);
  else
    cc->ops[idx].in_use = 0;
  pthread_mutex_unlock(&cc->ops_lock);
  return res;
}
