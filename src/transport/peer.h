/* peer.h - what a rank publishes, in its shared rank segment, so that peers
 * on its host can read its buffers directly (src/transport/peer.c), and the
 * registry of loomMemAlloc memory (src/transport/mem.c). Internal to the
 * transport layer; the collectives use the tp_peer_* calls of transport.h. */
#ifndef LOOM_TRANSPORT_PEER_H
#define LOOM_TRANSPORT_PEER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

#define PEER_NBUFS 3 /* a plan's send, receive and scratch buffers */

/* A piece of loomMemAlloc memory: a memfd mapped shared, which a peer maps
 * too (through /proc/<pid>/fd/<fd>) and then reads with plain loads. */
struct mem_region {
  uint64_t id; /* unique in the process, never reused */
  int32_t fd;  /* -1: not loomMemAlloc memory */
  int32_t pad;
  uint64_t base;
  uint64_t size;
};

/* Written by the owner rank, read by its peers. The addresses are those of
 * the owner's current direct plan; they are valid from the owner's first
 * sync of that plan to its last. */
struct peer_pub {
  _Atomic uint64_t phase; /* syncs this rank has arrived at */
  uint64_t probe_addr;    /* a word of private memory, for the cross-memory-attach probe */
  uint64_t probe_value;   /* ... and what it holds */
  uint64_t addr[PEER_NBUFS];
  uint64_t bytes[PEER_NBUFS];
  struct mem_region region[PEER_NBUFS];
};

/* transport.c: rank's published block (this rank's own too), or NULL when
 * rank is on another host. */
struct peer_pub* tp_pub(struct loom_comm* comm, int rank);

/* transport.c: where the communicator keeps peer.c's state. */
struct peer_state;
struct peer_state** tp_peer_state_slot(struct loom_comm* comm);

/* peer.c: per-communicator setup, after every same-host rank segment is
 * open: probes cross-memory attach to every peer and agrees (collectively)
 * whether direct plans may run. */
loomResult_t peer_comm_init(struct loom_comm* comm);
void peer_comm_fini(struct loom_comm* comm);

/* mem.c: the loomMemAlloc region holding [addr, addr + bytes), if any;
 * else *out gets fd -1. Thread safe. */
void mem_region_find(const void* addr, size_t bytes, struct mem_region* out);

#endif
