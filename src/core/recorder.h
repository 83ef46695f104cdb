/* recorder.h - the flight recorder: each communicator keeps its last LOOM_RECORDER_SIZE
 * operations (collectives and point-to-point calls) with their arguments and how far each got:
 * enqueued, started, waiting in step k of n on which peer for how many bytes, done or failed
 * with which error, with timestamps. Written as one JSON file per rank into LOOM_DUMP_DIR on a
 * timeout, a peer's failure, loomCommAbort, and LOOM_DUMP_SIGNAL; `loom_info --hang DIR`
 * merges the files of all ranks into a diagnosis (tools/loom_hang.c; the format is in
 * docs/DESIGN.md, "Flight recorder").
 *
 * Cost: a call writes its slot once when enqueued and once when it ends (relaxed atomic
 * stores, two clock reads); a waiting executor refreshes what it waits on before it sleeps.
 * Slots are reused round-robin: a reader (the dump) may see a slot mid-update, which a
 * diagnosis tolerates; nothing here blocks or allocates after creation. */
#ifndef LOOM_CORE_RECORDER_H
#define LOOM_CORE_RECORDER_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

struct loom_comm;
struct recorder;

enum rec_state { REC_ENQUEUED = 1, REC_STARTED, REC_WAITING, REC_DONE, REC_FAILED };

/* What a call is, when it is enqueued. kind: enum coll_kind (colls.def's order, then send and
 * receive); root: the root, or the peer of a send or receive, or -1. */
struct rec_call {
  int kind;
  int is_p2p;
  size_t count;
  loomDataType_t dtype;
  loomRedOp_t op;
  int root;
  uint64_t stream; /* the stream's handle, 0: none */
};

/* The recorder of comm (LOOM_RECORDER_SIZE slots, counted in memstat), made with the
 * communicator before any thread can see it: loomSuccess with *out NULL when the size is 0. */
loomResult_t recorder_create(struct loom_comm* comm, struct recorder** out);
/* comm's init is done: a signal may write its record from now on. */
void recorder_publish(struct loom_comm* comm);
/* Unregisters (no signal's dump after this returns) and frees. */
void recorder_destroy(struct loom_comm* comm);
/* A call was enqueued: its record's id (nonzero), or 0 with no recorder. Any thread; calls on
 * one communicator are numbered in the order of this call (its collectives apart from its
 * point-to-point calls, so that ranks' collectives match by number). */
uint64_t recorder_enqueue(struct recorder* r, const struct rec_call* call);
/* It started: algo (static text), nsteps of its plan. */
void recorder_start(struct recorder* r, uint64_t id, const char* algo, uint32_t nsteps);
/* It waits in step (0-based) for peer (-1: its turn, a sync or connections) and bytes. */
void recorder_wait(struct recorder* r, uint64_t id, uint32_t step, int peer, int is_send,
                   size_t bytes);
/* It ended with result. */
void recorder_end(struct recorder* r, uint64_t id, loomResult_t result);
/* Writes comm's record to LOOM_DUMP_DIR (if set) once per communicator; reason says why
 * (the failure's text). Any thread; blocks on file I/O only. */
void recorder_dump(struct loom_comm* comm, const char* reason);
/* Checks LOOM_DUMP_SIGNAL and, when set, installs its handler (once per process). */
loomResult_t recorder_signal_setup(void);

#endif
