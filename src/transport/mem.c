/* mem.c - loomMemAlloc: memory that peers on this host can map.
 *
 * Each allocation is its own memfd, mapped shared and kept open, so a peer
 * process can open /proc/<pid>/fd/<fd> and map the same pages (direct plans
 * then read it with plain loads instead of cross-memory attach). The
 * registration cache (regcache.h) holds the live allocations and answers
 * "which allocation holds this address" when a rank publishes its buffers.
 * Region ids are never reused, so a peer's cached mapping of a freed region
 * can never be mistaken for a new one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/checks.h"
#include "transport/peer.h"
#include "transport/regcache.h"

loomResult_t tp_mem_alloc(size_t size, void** ptr_out) {
  long page = sysconf(_SC_PAGESIZE);
  size_t len = (size + (size_t)page - 1) / (size_t)page * (size_t)page;
  int fd = memfd_create("loom-mem", MFD_CLOEXEC);
  if (fd < 0)
    return err_set_sub(NULL, SUB_ALLOC, loomSystemError, "loomMemAlloc: memfd_create failed: %s",
                       strerror(errno));
  void* p = MAP_FAILED;
  if (ftruncate(fd, (off_t)len) == 0)
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    return err_set_sub(NULL, SUB_ALLOC, loomSystemError,
                       "loomMemAlloc: cannot map %zu bytes of shared memory: %s", len,
                       strerror(err));
  }
  uint64_t id;
  loomResult_t r = regcache_add_region(p, len, fd, &id);
  if (r != loomSuccess) {
    munmap(p, len);
    close(fd);
    return r;
  }
  LOOM_INFO(SUB_ALLOC, "loomMemAlloc: %zu bytes at %p (memfd %d, region %llu)", len, p, fd,
            (unsigned long long)id);
  *ptr_out = p;
  return loomSuccess;
}

loomResult_t tp_mem_free(void* ptr) {
  struct reg_entry* e;
  LOOM_CHECK(regcache_take_region(ptr, &e));
  munmap(ptr, e->rg.size);
  close(e->rg.fd);
  free(e);
  return loomSuccess;
}

void mem_region_find(const void* addr, size_t bytes, struct mem_region* out) {
  regcache_find_region(addr, bytes, out);
}
