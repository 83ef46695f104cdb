/* regcache.h - the registration cache: every range of memory Loom has been
 * told about, in one table per process, found by address.
 *
 * Two sorts of entry: loomMemAlloc regions (every communicator's; the memfd
 * that peers on this host map to read them with plain loads) and
 * loomCommRegister ranges (one communicator's, with the API handle that
 * names them). Each entry holds the handle that every transport of its
 * communicator which needs registration (caps.registers: pinning, keys a
 * NIC needs) returned from mem_reg, so a transfer finds its registration
 * with one lookup. Internal to src/transport and reg.c. Thread safe. */
#ifndef LOOM_TRANSPORT_REGCACHE_H
#define LOOM_TRANSPORT_REGCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "loom.h"
#include "transport/peer.h"
#include "transport/transport.h"

struct reg_entry {
  struct mem_region rg;   /* id (never reused), fd (loomMemAlloc: its memfd; else -1), range */
  int kind;               /* enum mem_kind of the range */
  struct loom_comm* comm; /* loomCommRegister: its communicator; NULL: a loomMemAlloc region */
  uint64_t handle;        /* loomCommRegister: its API handle (core/handle.h), else 0 */
  void* tp_handle[TP_MAX_TRANSPORTS]; /* mem_reg's, by the transport's index; NULL: none */
  struct reg_entry* next;
};

/* A loomMemAlloc region [base, base + size) whose memfd is fd: a new entry.
 * Returns its id. */
loomResult_t regcache_add_region(void* base, size_t size, int fd, uint64_t* id_out);
/* Takes out the region starting at base: loomSuccess and its entry in
 * *out (the caller unmaps and frees it), or loomInvalidArgument when base
 * is no region's start. */
loomResult_t regcache_take_region(const void* base, struct reg_entry** out);
/* The loomMemAlloc region holding [addr, addr + bytes), if any; else *out
 * gets fd -1 and id 0. */
void regcache_find_region(const void* addr, size_t bytes, struct mem_region* out);

/* loomCommRegister: a new entry for comm, registered with each transport
 * of comm that needs it (tp_mem_reg_used), named by a new handle
 * (HANDLE_REG, e->handle) that leads to the entry. */
loomResult_t regcache_add_comm(struct loom_comm* comm, void* buf, size_t bytes, int kind,
                               struct reg_entry** out);
/* loomCommDeregister: ends e's handle and removes e, unless comm's teardown
 * took it first (then loomInvalidArgument: not live). Deregisters and
 * frees it. */
loomResult_t regcache_remove_comm(struct reg_entry* e);
/* Teardown of comm: every entry of it goes, its handle ended. */
void regcache_comm_fini(struct loom_comm* comm);

#endif
