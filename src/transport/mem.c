/* mem.c - loomMemAlloc: memory that peers on this host can map.
 *
 * Each allocation is its own memfd, mapped shared and kept open, so a peer
 * process can open /proc/<pid>/fd/<fd> and map the same pages (direct plans
 * then read it with plain loads instead of cross-memory attach). A registry
 * of live allocations answers "which allocation holds this address" when a
 * rank publishes its buffers. Region ids are never reused, so a peer's
 * cached mapping of a freed region can never be mistaken for a new one. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/checks.h"
#include "transport/peer.h"

struct mem_entry {
  struct mem_region rg;
  struct mem_entry* next;
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mem_entry* mem_list;
static uint64_t mem_next_id = 1;

loomResult_t tp_mem_alloc(size_t size, void** ptr_out) {
  long page = sysconf(_SC_PAGESIZE);
  size_t len = (size + (size_t)page - 1) / (size_t)page * (size_t)page;
  struct mem_entry* e = calloc(1, sizeof(*e));
  if (!e) return err_set(NULL, loomSystemError, "loomMemAlloc: out of memory");
  int fd = memfd_create("loom-mem", MFD_CLOEXEC);
  if (fd < 0) {
    free(e);
    return err_set_sub(NULL, SUB_ALLOC, loomSystemError, "loomMemAlloc: memfd_create failed: %s",
                       strerror(errno));
  }
  void* p = MAP_FAILED;
  if (ftruncate(fd, (off_t)len) == 0)
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    free(e);
    return err_set_sub(NULL, SUB_ALLOC, loomSystemError,
                       "loomMemAlloc: cannot map %zu bytes of shared memory: %s", len,
                       strerror(err));
  }
  pthread_mutex_lock(&mem_lock);
  e->rg = (struct mem_region){mem_next_id++, fd, 0, (uint64_t)(uintptr_t)p, len};
  e->next = mem_list;
  mem_list = e;
  pthread_mutex_unlock(&mem_lock);
  LOOM_INFO(SUB_ALLOC, "loomMemAlloc: %zu bytes at %p (memfd %d)", len, p, fd);
  *ptr_out = p;
  return loomSuccess;
}

loomResult_t tp_mem_free(void* ptr) {
  pthread_mutex_lock(&mem_lock);
  struct mem_entry** at = &mem_list;
  while (*at && (*at)->rg.base != (uint64_t)(uintptr_t)ptr) at = &(*at)->next;
  struct mem_entry* e = *at;
  if (e) *at = e->next;
  pthread_mutex_unlock(&mem_lock);
  if (!e)
    return err_set_sub(NULL, SUB_ALLOC, loomInvalidArgument,
                       "invalid argument: loomMemFree(%p): not an allocation of loomMemAlloc, or "
                       "already freed",
                       ptr);
  munmap(ptr, e->rg.size);
  close(e->rg.fd);
  free(e);
  return loomSuccess;
}

void mem_region_find(const void* addr, size_t bytes, struct mem_region* out) {
  uint64_t a = (uint64_t)(uintptr_t)addr;
  memset(out, 0, sizeof(*out));
  out->fd = -1;
  if (!addr) return;
  pthread_mutex_lock(&mem_lock);
  for (struct mem_entry* e = mem_list; e; e = e->next)
    if (a >= e->rg.base && a - e->rg.base <= e->rg.size && bytes <= e->rg.size - (a - e->rg.base)) {
      *out = e->rg;
      break;
    }
  pthread_mutex_unlock(&mem_lock);
}
