/* regcache_probe.c - C helpers for test_regcache.cc: the registration
 * cache's loomMemAlloc regions, found by address. */
#include "transport/regcache.h"

/* The region holding [addr, addr + bytes): its id, or 0 when none. */
unsigned long long probe_region_id(const void* addr, size_t bytes) {
  struct mem_region rg;
  regcache_find_region(addr, bytes, &rg);
  return rg.fd >= 0 ? (unsigned long long)rg.id : 0;
}
