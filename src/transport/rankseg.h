/* rankseg.h - the rank segment: what a rank shares with the peers on its
 * host for the communicator's whole life: its doorbell, what direct plans
 * publish (peer.c), and, in unnamed mode, the descriptors of the FIFOs it
 * sends on (shm.c), so that a receiver can open them, and, on a page of its
 * own at dev_off, the device area (devarea.h).
 *
 * Unnamed mode (the rule): every segment and FIFO is an unnamed file of
 * /dev/shm (shmfile.h), so nothing outlives the processes that use it, even
 * when they are killed. Named mode (the fallback, agreed by all ranks at
 * init): when some rank cannot open a peer's files through /proc (pid
 * namespaces, other users), segments and FIFOs are named POSIX objects,
 * unlinked as soon as both ends have them; a rank killed in between can then
 * leave a name behind. Internal to the transport layer. */
#ifndef LOOM_TRANSPORT_RANKSEG_H
#define LOOM_TRANSPORT_RANKSEG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/cpu_lines.h"
#include "transport/peer.h"
#include "transport/shmfile.h"
#include "transport/transport.h"

#define RANK_SEG_MAGIC 0x4c4d52414e4b3035ULL /* "LMRANK05" */
/* Words of one area of lines (lines.c; the format is cpu_lines.h's). */
#define RANK_SEG_LINE_WORDS CPU_LINES_WORDS(TP_LINES_BYTES)

struct rank_seg {
  _Atomic uint64_t magic; /* written last by its owner */
  uint64_t comm_hash;     /* whose segment this is: checked by whoever maps it */
  int32_t rank, nranks;
  struct bell bell;
  struct peer_pub pub; /* direct plans (peer.c) */
  /* Low-latency lines (lines.c): TP_LINES_AREAS areas, calls use them in
   * turn; lines_put is the newest call whose lines this rank has put. */
  _Alignas(64) _Atomic uint64_t lines_put;
  _Alignas(64) _Atomic uint64_t lines[TP_LINES_AREAS][RANK_SEG_LINE_WORDS];
  /* Unnamed mode: the FIFOs this rank sends on, [lane * nranks + dst]:
   * descriptor + 1, 0 while there is none to open. */
  _Atomic int32_t fifo_fd[];
};

struct rank_segs {
  struct rank_seg* self;
  struct rank_seg** peer;    /* [nranks]; NULL where the peer is on another host */
  size_t bytes;              /* of each segment */
  int named;                 /* the communicator's mode */
  struct shm_file self_file; /* unnamed mode: this rank's, descriptor open until shared */
  int same_host;             /* ranks on this host, this one included */
  int* local;                /* [nranks]: index among this host's ranks, or -1 */
  size_t dev_off;            /* the device area's offset in each segment */
  size_t counted;            /* bytes counted for the communicator (memstat.h) */
};

/* Makes this rank's segment and maps every same-host peer's, agreeing with
 * every rank on the mode. Collective (bootstrap exchanges). On failure the
 * caller calls rankseg_fini. */
loomResult_t rankseg_init(struct loom_comm* comm, struct rank_segs* rs, const struct deadline* dl);
/* Once every peer has mapped this rank's segment (a barrier after
 * rankseg_init): closes its descriptor or unlinks its name. */
void rankseg_shared(struct loom_comm* comm, struct rank_segs* rs);
/* Unmaps everything; in named mode also unlinks every name a peer may have
 * left (a peer killed between creating and unlinking). Never blocks. */
void rankseg_fini(struct loom_comm* comm, struct rank_segs* rs);
/* transport.c: rank's segment (NULL on another host), and the mode. */
struct rank_seg* tp_rank_seg(struct loom_comm* comm, int rank);
int tp_shm_named(struct loom_comm* comm);
/* The slot where owner publishes the FIFO it sends to dst on lane. */
static inline _Atomic int32_t* rankseg_fifo_slot(struct rank_seg* owner, int dst, int lane) {
  return &owner->fifo_fd[lane * owner->nranks + dst];
}

#endif
