/* redop.c - reduction operators: the five built-ins and PreMulSum ops, which
 * live in a per-communicator table (op value = loomNumOps + index). */
#include <stdio.h>
#include <string.h>

#include "../core/checks.h"
#include "../kernels/cpu/cpu_kernels.h"
#include "coll.h"

loomResult_t redop_resolve(struct loomComm* comm, loomRedOp_t op, loomDataType_t dtype,
                           struct coll_task* t) {
  t->op = op;
  if ((int)op >= 0 && (int)op < (int)loomNumOps) return loomSuccess;
  int idx = (int)op - (int)loomNumOps;
  struct coll_comm* cc = comm->coll;
  loomResult_t res = loomSuccess;
  pthread_mutex_lock(&cc->ops_lock);
  if ((int)op < 0 || idx >= COLL_MAX_PREMUL || !cc->ops[idx].in_use) {
    res = err_set(comm, loomInvalidArgument,
                  "invalid argument: reduction op %d is neither built in nor a live PreMulSum op of "
                  "this communicator",
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
  LOOM_CHECK(comm_check(comm));
  if (!op) return err_set(comm, loomInvalidArgument, "invalid argument: op pointer is NULL");
  if (!scalar) return err_set(comm, loomInvalidArgument, "invalid argument: scalar is NULL");
  if ((unsigned)datatype >= (unsigned)loomNumTypes)
    return err_set(comm, loomInvalidArgument, "invalid argument: unknown datatype %d", (int)datatype);
  if (residence != loomScalarDevice && residence != loomScalarHostImmediate)
    return err_set(comm, loomInvalidArgument, "invalid argument: unknown scalar residence %d",
                   (int)residence);
  LOOM_CHECK(coll_comm_ready(comm));
  struct coll_comm* cc = comm->coll;
  pthread_mutex_lock(&cc->ops_lock);
  int idx = 0;
  while (idx < COLL_MAX_PREMUL && cc->ops[idx].in_use) idx++;
  if (idx == COLL_MAX_PREMUL) {
    pthread_mutex_unlock(&cc->ops_lock);
    return err_set(comm, loomInvalidUsage, "too many live PreMulSum ops (at most %d): destroy some",
                   COLL_MAX_PREMUL);
  }
  struct premul_op* p = &cc->ops[idx];
  memset(p, 0, sizeof(*p));
  p->in_use = 1;
  p->dtype = datatype;
  p->residence = residence;
  p->ptr = scalar;
  /* Host ranks have no device memory: a "device" scalar is a host pointer
   * read when the operation runs, as NCCL reads device scalars. */
  if (residence == loomScalarHostImmediate) memcpy(p->value, scalar, dtype_size(datatype));
  pthread_mutex_unlock(&cc->ops_lock);
  *op = (loomRedOp_t)((int)loomNumOps + idx);
  return loomSuccess;
}

loomResult_t loomRedOpDestroy(loomRedOp_t op, loomComm_t comm) {
  LOOM_CHECK(comm_check(comm));
  int idx = (int)op - (int)loomNumOps;
  if ((int)op < (int)loomNumOps || idx >= COLL_MAX_PREMUL)
    return err_set(comm, loomInvalidArgument,
                   "invalid argument: op %d is not a PreMulSum op (built-in ops cannot be destroyed)",
                   (int)op);
  LOOM_CHECK(coll_comm_ready(comm));
  struct coll_comm* cc = comm->coll;
  loomResult_t res = loomSuccess;
  pthread_mutex_lock(&cc->ops_lock);
  if (!cc->ops[idx].in_use)
    res = err_set(comm, loomInvalidArgument, "invalid argument: PreMulSum op %d is not live", (int)op);
  else
    cc->ops[idx].in_use = 0;
  pthread_mutex_unlock(&cc->ops_lock);
  return res;
}
