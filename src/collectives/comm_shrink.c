/* comm_shrink.c - surviving a lost rank: loomCommRevoke and loomCommShrink
 * (API.md; NCCL 2.28's signatures).
 *
 * Revoke fails the communicator here and has rank 0 tell every rank it can
 * reach (the bootstrap's failure notice, naming no peer), so that their
 * pending and future calls fail at once too. Shrink builds a new
 * communicator among the ranks not excluded without the excluded ones and
 * without rank 0's star: the lowest surviving rank makes a fresh unique id
 * and hands it to each other survivor over the bootstrap's rank-to-rank
 * links, in their survivor form (a failure of the old communicator does not
 * stop them; the sender's departure or failure, the deadline or an abort
 * do), and all survivors then initialise on it, ranked in their old order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "core/bootstrap.h"
#include "core/checks.h"

/* A shrink's id message: one tag per shrink of the communicator, above
 * every tag a transport uses. */
#define SHRINK_TAG_BASE 0xfff00000u

loomResult_t loomCommRevoke(loomComm_t handle, int revokeFlags) {
  struct loom_comm* comm = NULL;
  LOOM_CHECK(comm_get(handle, "loomCommRevoke", &comm));
  if (revokeFlags != LOOM_REVOKE_DEFAULT)
    return err_set(
        comm, loomInvalidArgument,
        "invalid argument: loomCommRevoke: revokeFlags %d is not LOOM_REVOKE_DEFAULT (0)",
        revokeFlags);
  LOOM_CHECK(coll_comm_settled(comm));
  if (atomic_load(&comm->aborted))
    return err_set(comm, loomInvalidUsage, "loomCommRevoke: the communicator was aborted");
  comm_set_failed(comm, -1, loomInvalidUsage,
                  "the communicator was revoked on this rank (loomCommRevoke): it takes no more "
                  "work; destroy, split or shrink it");
  char why[96];
  snprintf(why, sizeof(why), "rank %d revoked the communicator (loomCommRevoke)", comm->rank);
  comm_boot_enter(comm);
  if (comm->boot) boot_report_failure(comm, -1, why);
  comm_boot_leave(comm);
  return loomSuccess;
}

/* The list is valid: ranks in range, none twice, not the caller's. Fills
 * out (nranks flags) with the excluded ranks. */
static loomResult_t excluded_check(struct loom_comm* comm, const int* list, int count,
                                   unsigned char* out) {
  if (count < 0 || count >= comm->nranks)
    return err_set(comm, loomInvalidArgument,
                   "invalid argument: loomCommShrink: excludeRanksCount %d is outside [0, %d) "
                   "(a communicator of %d ranks, one of them this one)",
                   count, comm->nranks, comm->nranks);
  if (count > 0 && list == NULL)
    return err_set(comm, loomInvalidArgument,
                   "invalid argument: loomCommShrink: excludeRanksList is NULL with "
                   "excludeRanksCount %d",
                   count);
  for (int i = 0; i < count; i++) {
    int r = list[i];
    if (r < 0 || r >= comm->nranks)
      return err_set(comm, loomInvalidArgument,
                     "invalid argument: loomCommShrink: excludeRanksList[%d] is %d, not a rank of "
                     "a communicator of %d",
                     i, r, comm->nranks);
    if (out[r])
      return err_set(comm, loomInvalidArgument,
                     "invalid argument: loomCommShrink: rank %d is in excludeRanksList twice", r);
    if (r == comm->rank)
      return err_set(comm, loomInvalidArgument,
                     "invalid argument: loomCommShrink: this rank (%d) is in excludeRanksList; "
                     "only the ranks that stay call it",
                     r);
    out[r] = 1;
  }
  return loomSuccess;
}

static loomResult_t shrink_args(struct loom_comm* comm, const int* list, int count,
                                loomComm_t* newcomm, const loomConfig_t* config, int flags,
                                unsigned char* excluded) {
  if (!newcomm)
    return err_set(comm, loomInvalidArgument, "invalid argument: loomCommShrink: newcomm is NULL");
  if (flags != LOOM_SHRINK_DEFAULT && flags != LOOM_SHRINK_ABORT)
    return err_set(comm, loomInvalidArgument,
                   "invalid argument: loomCommShrink: shrinkFlags %d is neither "
                   "LOOM_SHRINK_DEFAULT (0) nor LOOM_SHRINK_ABORT (1)",
                   flags);
  LOOM_CHECK(coll_check_config(config));
  return excluded_check(comm, list, count, excluded);
}

/* The lowest survivor makes the id and hands it to the others. */
static loomResult_t shrink_id(struct loom_comm* comm, const unsigned char* excluded, int root,
                              uint32_t tag, struct boot_id* id) {
  struct deadline dl = deadline_in_ms(comm->timeout_ms);
  if (comm->rank != root) return boot_survivor_recv(comm, root, tag, id, sizeof(*id), &dl);
  LOOM_CHECK(boot_id_create(id));
  /* Every survivor that can be reached gets the id, even after a failed send
   * (a rank listed as a survivor that is dead): none is left waiting for it. */
  loomResult_t first = loomSuccess;
  for (int r = 0; r < comm->nranks; r++) {
    if (r == root || excluded[r]) continue;
    loomResult_t res = boot_survivor_send(comm, r, tag, id, sizeof(*id), &dl);
    if (first == loomSuccess) first = res;
  }
  if (first != loomSuccess) boot_id_release(id); /* no init will claim it */
  return first;
}

static loomResult_t shrink_body(struct loom_comm* comm, const unsigned char* excluded,
                                loomComm_t* newcomm, const loomConfig_t* config) {
  int newrank = 0, newsize = 0, root = -1;
  for (int r = 0; r < comm->nranks; r++) {
    if (excluded[r]) continue;
    if (root < 0) root = r;
    newrank += r < comm->rank;
    newsize++;
  }
  uint32_t tag = SHRINK_TAG_BASE + comm->shrinks++;
  struct boot_id id;
  /* What the new communicator takes from this one, read while this one is
   * held: a loomCommAbort on another thread may free it once we leave. */
  loomConfig_t inherit;
  comm_config_inherit(comm, &inherit);
  int cuda_dev = comm->cuda_dev;
  comm_boot_enter(comm);
  loomResult_t r = comm->boot ? shrink_id(comm, excluded, root, tag, &id)
                              : err_set(comm, loomInvalidUsage,
                                        "loomCommShrink: the communicator's bootstrap is gone");
  comm_boot_leave(comm);
  if (r != loomSuccess) return r;
  return coll_init_rank(newcomm, newsize, &id, newrank, config ? config : &inherit, NULL, cuda_dev);
}

loomResult_t loomCommShrink(loomComm_t handle, int* excludeRanksList, int excludeRanksCount,
                            loomComm_t* newcomm, loomConfig_t* config, int shrinkFlags) {
  struct loom_comm* comm = NULL;
  LOOM_CHECK(comm_get(handle, "loomCommShrink", &comm));
  unsigned char* excluded = calloc((size_t)comm->nranks, 1);
  if (!excluded) return err_set(comm, loomSystemError, "out of memory");
  loomResult_t r = shrink_args(comm, excludeRanksList, excludeRanksCount, newcomm, config,
                               shrinkFlags, excluded);
  if (r == loomSuccess) r = coll_comm_settled(comm);
  if (r == loomSuccess && atomic_load(&comm->aborted))
    r = err_set(comm, loomInvalidUsage, "loomCommShrink: the communicator was aborted");
  if (r == loomSuccess) {
    if (shrinkFlags == LOOM_SHRINK_ABORT)
      comm_set_failed(comm, -1, loomInvalidUsage,
                      "loomCommShrink (LOOM_SHRINK_ABORT) ended the work in flight");
    /* In-flight work ends first: it fails fast once comm is broken, and has
     * deadlines of its own otherwise. */
    if (comm->coll) coll_inflight_wait(comm->coll);
    r = shrink_body(comm, excluded, newcomm, config);
  }
  free(excluded);
  return r;
}
