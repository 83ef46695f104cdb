/* regcache.c - the registration cache (regcache.h).
 *
 * One list under one lock: entries are few (allocations and registered
 * buffers, not calls) and a lookup is one short walk. A loomCommRegister
 * entry's handle and its place in the list end together under the lock,
 * so of a loomCommDeregister and the communicator's teardown racing for one
 * entry exactly one frees it. */
#include "transport/regcache.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/checks.h"
#include "core/handle.h"
#include "transport/transport.h"

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct reg_entry* cache_list;
static uint64_t cache_next_id = 1;

static void cache_push_locked(struct reg_entry* e) {
  e->rg.id = cache_next_id++;
  e->next = cache_list;
  cache_list = e;
}

/* 1 when e was in the list (now it is not). */
static int cache_unlink_locked(struct reg_entry* e) {
  struct reg_entry** at = &cache_list;
  while (*at && *at != e) at = &(*at)->next;
  if (!*at) return 0;
  *at = e->next;
  return 1;
}

loomResult_t regcache_add_region(void* base, size_t size, int fd, uint64_t* id_out) {
  struct reg_entry* e = calloc(1, sizeof(*e));
  if (!e) return err_set(NULL, loomSystemError, "loomMemAlloc: out of memory");
  e->rg = (struct mem_region){0, fd, 0, (uint64_t)(uintptr_t)base, size};
  e->kind = MEM_HOST;
  pthread_mutex_lock(&cache_lock);
  cache_push_locked(e);
  *id_out = e->rg.id;
  pthread_mutex_unlock(&cache_lock);
  return loomSuccess;
}

loomResult_t regcache_take_region(const void* base, struct reg_entry** out) {
  uint64_t b = (uint64_t)(uintptr_t)base;
  pthread_mutex_lock(&cache_lock);
  struct reg_entry* e = cache_list;
  while (e && !(e->comm == NULL && e->rg.base == b)) e = e->next;
  if (e) cache_unlink_locked(e);
  pthread_mutex_unlock(&cache_lock);
  if (!e)
    return err_set_sub(NULL, SUB_ALLOC, loomInvalidArgument,
                       "invalid argument: loomMemFree(%p): not an allocation of loomMemAlloc, or "
                       "already freed",
                       base);
  *out = e;
  return loomSuccess;
}

void regcache_find_region(const void* addr, size_t bytes, struct mem_region* out) {
  uint64_t a = (uint64_t)(uintptr_t)addr;
  *out = (struct mem_region){0, -1, 0, 0, 0};
  if (!addr) return;
  pthread_mutex_lock(&cache_lock);
  for (struct reg_entry* e = cache_list; e; e = e->next)
    if (!e->comm && a >= e->rg.base && a - e->rg.base <= e->rg.size &&
        bytes <= e->rg.size - (a - e->rg.base)) {
      *out = e->rg;
      break;
    }
  pthread_mutex_unlock(&cache_lock);
}

loomResult_t regcache_add_comm(struct loom_comm* comm, void* buf, size_t bytes, int kind,
                               struct reg_entry** out) {
  struct reg_entry* e = calloc(1, sizeof(*e));
  if (!e) return err_set(comm, loomSystemError, "out of memory");
  e->rg = (struct mem_region){0, -1, 0, (uint64_t)(uintptr_t)buf, bytes};
  e->kind = kind;
  e->comm = comm;
  loomResult_t r = tp_mem_reg_used(comm, buf, bytes, kind, e->tp_handle);
  if (r == loomSuccess) {
    /* Handle and place together, as they end. */
    pthread_mutex_lock(&cache_lock);
    r = handle_new(HANDLE_REG, e, &e->handle);
    if (r == loomSuccess) cache_push_locked(e);
    pthread_mutex_unlock(&cache_lock);
  }
  if (r != loomSuccess) {
    tp_mem_dereg_used(comm, e->tp_handle);
    free(e);
    return r;
  }
  *out = e;
  return loomSuccess;
}

static void entry_free(struct reg_entry* e) {
  tp_mem_dereg_used(e->comm, e->tp_handle);
  free(e);
}

loomResult_t regcache_remove_comm(struct reg_entry* e) {
  pthread_mutex_lock(&cache_lock);
  int mine = handle_end(e->handle, HANDLE_REG) == e;
  if (mine) cache_unlink_locked(e);
  pthread_mutex_unlock(&cache_lock);
  if (!mine) return loomInvalidArgument;
  entry_free(e);
  return loomSuccess;
}

void regcache_comm_fini(struct loom_comm* comm) {
  struct reg_entry* gone = NULL;
  pthread_mutex_lock(&cache_lock);
  struct reg_entry** at = &cache_list;
  while (*at) {
    struct reg_entry* e = *at;
    if (e->comm == comm && handle_end(e->handle, HANDLE_REG) == e) {
      *at = e->next;
      e->next = gone;
      gone = e;
    } else {
      at = &e->next;
    }
  }
  pthread_mutex_unlock(&cache_lock);
  while (gone) {
    struct reg_entry* next = gone->next;
    entry_free(gone);
    gone = next;
  }
}
