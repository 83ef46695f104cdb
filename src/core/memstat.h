/* memstat.h - what a communicator holds, by use and by peer.
 *
 * Every buffer the library allocates for a communicator is counted here when it is made and
 * when it is released, with the use it serves and, where it serves one peer, that peer: the
 * INFO line at init and at destroy (subsystem ALLOC), `loom_info --memory`, and the tests that
 * check that a destroyed communicator holds nothing come from these counts. Shared memory is
 * counted once, on the rank that creates it (a FIFO on its sender; a receiver's mapping of it
 * is not counted again). Counting is a few atomic adds on paths that allocate anyway. */
#ifndef LOOM_CORE_MEMSTAT_H
#define LOOM_CORE_MEMSTAT_H

#include <stdatomic.h>
#include <stddef.h>

enum mem_use {
  MEM_RANKSEG,  /* this rank's segment: doorbell, FIFO descriptor slots (rankseg.h) */
  MEM_FIFO,     /* the FIFOs of connections this rank sends on (their slots and control) */
  MEM_CONN,     /* connection state: ends, queues, socket message rings, tables of them */
  MEM_STAGING,  /* bounce and staging buffers: receive-and-reduce, copies between processes */
  MEM_SCRATCH,  /* the plans' scratch buffer (one per communicator, grown to the largest need) */
  MEM_PLANS,    /* built plans: the plan cache and plans of running launches */
  MEM_RECORDER, /* the flight recorder's slots (LOOM_RECORDER_SIZE, recorder.h) */
  MEM_USES
};

struct mem_stat {
  _Atomic size_t now[MEM_USES];
  _Atomic size_t peak[MEM_USES]; /* the highest each use reached */
  _Atomic size_t total, peak_total;
  _Atomic size_t* peer; /* nranks: bytes held now for each peer (FIFO, connection, staging) */
  int nranks;
};

struct loom_comm;

/* "rankseg", "fifo", ... */
const char* memstat_use_name(enum mem_use use);
/* Sets up m for nranks peers: 0, or -1 when out of memory. */
int memstat_init(struct mem_stat* m, int nranks);
/* Releases m's table; logs a warning naming what comm still holds, if anything (a leak). */
void memstat_fini(struct loom_comm* comm);
/* comm holds bytes more (add) or fewer (sub) for use; peer: the peer they serve, or -1. A
 * NULL comm counts nothing. Any thread. */
void memstat_add(struct loom_comm* comm, enum mem_use use, int peer, size_t bytes);
void memstat_sub(struct loom_comm* comm, enum mem_use use, int peer, size_t bytes);
/* Bytes every communicator of this process holds now, together. */
size_t memstat_process_now(void);
/* One INFO line (ALLOC): when ("after init", "at destroy"), the total, each use now and at its
 * peak, and the peers held for. */
void memstat_log(struct loom_comm* comm, const char* when);
/* A copy of comm's counts (a moment's view: other threads may be adding). */
struct mem_snapshot {
  size_t now[MEM_USES], peak[MEM_USES], total, peak_total;
  int peers_held;  /* peers something is held for now */
  size_t peer_max; /* the most held for one peer */
};
void memstat_get(struct loom_comm* comm, struct mem_snapshot* out);

#endif
