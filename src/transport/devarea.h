/* devarea.h - the device area of a rank segment (rankseg.h): the words by
 * which a rank's CUDA stream and its host tell the peers on its host how far
 * its device work has gone, and the buffers a peer reads, published by the
 * CUDA executor (collectives/exec_cuda.c, which says how they are used).
 *
 * The area starts on a page of its own, so that each process that maps the
 * segment can register that range with the driver (cuMemHostRegister,
 * mapped for the device): a peer's stream then waits on these words through
 * its own mapping. Pairs are indexed by the peer's index among the ranks of
 * this host (tp_local_index), so the area grows with the host's ranks, not
 * the communicator's. Internal to the transport layer and the CUDA
 * executor. */
#ifndef LOOM_TRANSPORT_DEVAREA_H
#define LOOM_TRANSPORT_DEVAREA_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

#define DEV_SLOTS 4      /* calls whose buffers are published at once */
#define DEV_SLOT_BUFS 3  /* a call's buffers: send, receive, scratch (plan.h's order) */
#define DEV_P2P_DEPTH 8  /* sends to one peer published at once */
#define DEV_IPC_BYTES 64 /* CUipcMemHandle */

/* A device buffer as a peer reads it: its address in its owner's process,
 * and, where a peer in another process must open it, the allocation it lies
 * in (base, the driver's buffer id, an IPC handle). */
struct dev_buf {
  uint64_t va;
  uint64_t base, id; /* id 0: not exported (same process peers only) */
  unsigned char ipc[DEV_IPC_BYTES];
};

/* One rank's words and slots. */
struct dev_pub {
  _Alignas(64) uint64_t gpu_done;       /* written by the rank's stream */
  _Alignas(64) _Atomic uint64_t queued; /* the last value whose write is queued */
  _Atomic uint64_t maps_open;           /* peers' allocations this rank has open (IPC) */
  struct {
    _Atomic uint64_t seq;
    struct dev_buf buf[DEV_SLOT_BUFS];
  } slot[DEV_SLOTS];
};

/* One rank's side of its sends to and receives from one peer of its host
 * (counts since the communicator began). */
struct dev_pair {
  _Alignas(64) uint64_t sent_gpu;       /* sends whose buffer is ready: by the stream */
  uint64_t got_gpu;                     /* receives done: by the stream */
  _Alignas(64) _Atomic uint64_t sent_q; /* sends queued (their descriptors published) */
  _Atomic uint64_t got_q;               /* receives queued */
  _Atomic uint64_t refused;             /* k + 1: this rank refused the peer's send k */
  _Atomic uint64_t refused_bytes;       /* ... whose size differs from the receive's */
  struct {
    struct dev_buf buf;
    uint64_t bytes;
  } desc[DEV_P2P_DEPTH]; /* send k's buffer in desc[k % DEV_P2P_DEPTH] */
};

/* Bytes of the area of a rank with nlocal ranks on its host (pages). */
static inline size_t dev_area_bytes(int nlocal) {
  return LOOM_ALIGN_UP(sizeof(struct dev_pub) + (size_t)nlocal * sizeof(struct dev_pair),
                       (size_t)4096);
}

static inline struct dev_pair* dev_area_pair(struct dev_pub* area, int local) {
  return (struct dev_pair*)(area + 1) + local;
}

#endif
