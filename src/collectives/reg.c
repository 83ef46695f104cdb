/* reg.c - memory through the API: loomMemAlloc/loomMemFree and buffer
 * registration.
 *
 * A registration is an entry of the registration cache
 * (transport/regcache.h), registered with every transport of the
 * communicator that needs it (none of the host transports: direct plans read
 * any buffer of a same-host peer, mapped when it is loomMemAlloc memory, by
 * cross-memory attach otherwise). Its handle is an entry of the live-handle
 * table; destroying the communicator ends its registrations, so a handle
 * from a destroyed communicator is stale. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "core/checks.h"
#include "core/handle.h"
#include "core/memkind.h"
#include "transport/regcache.h"

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
  struct reg_entry* e;
  LOOM_CHECK(regcache_add_comm(c, buff, size, mem_kind_of(buff, NULL), &e));
  *handle = (void*)(uintptr_t)e->handle;
  return loomSuccess;
}

loomResult_t loomCommDeregister(const loomComm_t comm, void* handle) {
  static const char fn[] = "loomCommDeregister";
  struct loom_comm* c = NULL;
  LOOM_CHECK(comm_get(comm, fn, &c));
  uint64_t h = (uint64_t)(uintptr_t)handle;
  struct reg_entry* e = handle_get(h, HANDLE_REG);
  if (e && e->comm != c)
    return err_set(c, loomInvalidArgument,
                   "invalid argument: %s: registration %p belongs to another communicator", fn,
                   handle);
  if (!e || regcache_remove_comm(e) != loomSuccess)
    return err_set(
        c, loomInvalidArgument,
        "invalid argument: %s: %p is not a live registration of this communicator (it %s)", fn,
        handle, handle_why(h, HANDLE_REG));
  return loomSuccess;
}

void reg_comm_fini(struct loom_comm* comm) {
  regcache_comm_fini(comm);
}
