/* reg.c - memory through the API: loomMemAlloc/loomMemFree and buffer
 * registration.
 *
 * A registration records a buffer so that Deregister can check its handle.
 * Direct plans read any buffer of a same-host peer (mapped when it is
 * loomMemAlloc memory, by cross-memory attach otherwise), so nothing has to
 * be pinned or exchanged here. Its handle is an entry of the live-handle
 * table, and the communicator keeps a list of its registrations: destroying
 * it ends them, so a handle from a destroyed communicator is stale. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "core/checks.h"
#include "core/handle.h"
#include "transport/transport.h"

struct reg_handle {
  uint64_t handle;
  struct loom_comm* comm;
  void* buff;
  size_t size;
  struct reg_handle* next; /* the communicator's list, under reg_lock */
};

loomResult_t loomMemAlloc(void** ptr, size_t size) {
  static const char fn[] = "loomMemAlloc";
  if (!ptr) return err_set(NULL, loomInvalidArgument, "invalid argument: %s: ptr is NULL", fn);
  if (size == 0) return err_set(NULL, loomInvalidArgument, "invalid argument: %s: size is 0", fn);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (size > (size_t)PTRDIFF_MAX - page)
    return err_set(NULL, loomInvalidArgument,
                   "invalid argument: %s: size %zu is more than a mapping can hold", fn, size);
  return tp_mem_alloc(size, ptr);
}

loomResult_t loomMemFree(void* ptr) {
  if (!ptr) return loomSuccess; /* as free(NULL) */
  return tp_mem_free(ptr);
}

loomResult_t loomCommRegister(const loomComm_t comm, void* buff, size_t size, void** handle) {
  static const char fn[] = "loomCommRegister";
  struct loom_comm* c = NULL;
  LOOM_CHECK(comm_get(comm, fn, &c));
  LOOM_CHECK(coll_comm_ready(c));
  if (!handle) return err_set(c, loomInvalidArgument, "invalid argument: %s: handle is NULL", fn);
  if (!buff || size == 0 || (uintptr_t)buff > UINTPTR_MAX - size)
    return err_set(c, loomInvalidArgument, "invalid argument: %s: buffer %p of %zu bytes", fn, buff,
                   size);
  struct reg_handle* r = calloc(1, sizeof(*r));
  if (!r) return err_set(c, loomSystemError, "out of memory");
  *r = (struct reg_handle){0, c, buff, size, NULL};
  if (handle_new(HANDLE_REG, r, &r->handle) != loomSuccess) {
    free(r);
    return loomSystemError;
  }
  struct coll_comm* cc = c->coll;
  pthread_mutex_lock(&cc->reg_lock);
  r->next = cc->regs;
  cc->regs = r;
  pthread_mutex_unlock(&cc->reg_lock);
  *handle = (void*)(uintptr_t)r->handle;
  return loomSuccess;
}

loomResult_t loomCommDeregister(const loomComm_t comm, void* handle) {
  static const char fn[] = "loomCommDeregister";
  struct loom_comm* c = NULL;
  LOOM_CHECK(comm_get(comm, fn, &c));
  uint64_t h = (uint64_t)(uintptr_t)handle;
  struct reg_handle* r = handle_get(h, HANDLE_REG);
  if (!r)
    return err_set(
        c, loomInvalidArgument,
        "invalid argument: %s: %p is not a live registration of this communicator (it %s)", fn,
        handle, handle_why(h, HANDLE_REG));
  if (r->comm != c)
    return err_set(c, loomInvalidArgument,
                   "invalid argument: %s: registration %p belongs to another communicator", fn,
                   handle);
  struct coll_comm* cc = c->coll;
  pthread_mutex_lock(&cc->reg_lock);
  int mine = handle_end(h, HANDLE_REG) == r;
  if (mine) {
    struct reg_handle** at = &cc->regs;
    while (*at && *at != r) at = &(*at)->next;
    if (*at) *at = r->next;
  }
  pthread_mutex_unlock(&cc->reg_lock);
  if (!mine)
    return err_set(
        c, loomInvalidArgument,
        "invalid argument: %s: %p is not a live registration of this communicator (it %s)", fn,
        handle, handle_why(h, HANDLE_REG));
  free(r);
  return loomSuccess;
}

void reg_comm_fini(struct loom_comm* comm) {
  struct coll_comm* cc = comm->coll;
  pthread_mutex_lock(&cc->reg_lock);
  struct reg_handle* r = cc->regs;
  cc->regs = NULL;
  pthread_mutex_unlock(&cc->reg_lock);
  while (r) {
    struct reg_handle* next = r->next;
    handle_end(r->handle, HANDLE_REG);
    free(r);
    r = next;
  }
}
