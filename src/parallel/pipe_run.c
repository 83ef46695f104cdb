/* pipe_run.c - the pipeline runner (PARALLEL.md section 6): walks one rank's list of a
 * schedule, calling the user's forward and backward callbacks and moving activations and
 * gradients between the ranks.
 *
 * Why one communicator per channel. Loom runs the launches on one communicator in the order of
 * the calls, whatever stream they are on, and a send may not complete before its receive is
 * posted. So a rank that both sends and receives on one communicator can deadlock: with one
 * communicator per direction, interleaved 1F1B sends around a ring (rank p-1 to rank 0), and
 * each rank's receive waits behind its own send, which waits for the next rank's receive,
 * which waits behind that rank's send... A shared communicator also mixes forward and
 * backward messages, whose orders the schedule fixes only per direction. Instead the runner
 * splits pp into one two-rank communicator per channel: (sender, receiver, direction) for
 * every such triple the schedule uses. On a channel one rank only sends and the other only
 * receives, each on a host stream of its own, in list order; the schedule guarantees that
 * sends and receives come in the same order per channel, so the k-th send meets the k-th
 * receive and nothing else is queued between them.
 *
 * Why this cannot deadlock. The host thread never waits for a send. It waits for a channel's
 * receives only right before an F or B that consumes one, and then only for receives posted
 * earlier in the list; the binding simulator waits at each receive, so every wait here is
 * one the simulator also makes, and a schedule the simulator finishes finishes here. The
 * channel streams wait only for their peers' matching operations, which their hosts post by
 * the same argument. Every wait has the deadline of pp's timeout (the channels inherit its
 * config). On any error the runner aborts its channels, so its peers' waits end with
 * loomRemoteError rather than at their deadline, and the runner is then only destroyable.
 *
 * Buffers: one slab per runner, made at create, with a buffer per (boundary, microbatch) for
 * activations and one for gradients, for each boundary this rank touches. Nothing in a run
 * reuses a buffer, so a sent one stays valid until its send completed (the run ends by
 * synchronizing every channel) and an F's input until its B returns. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipe.h"

static const char* const CREATE = "loomPipeRunnerCreate";
static const char* const RUN = "loomPipeRunnerRun";

enum { DIR_F = 0, DIR_B = 1 };

/* One end of a channel on this rank. */
struct pipe_chan {
  loomComm_t comm;     /* the two-rank communicator */
  loomStream_t stream; /* this end's host stream */
  int peer;            /* the other end's rank in comm */
  int pp_peer;         /* ... and in pp */
  int pending;         /* receives posted since the last wait on stream */
};

struct loomPipeRunner {
  const struct loomPipeSchedule* sched;
  loomComm_t pp; /* names the runner's errors */
  int rank;
  size_t* bytes; /* [S-1]: actBytes */
  int nchan;
  struct pipe_chan* chans; /* this rank's ends */
  int* send_of;            /* [2p]: (peer*2 + dir) -> index in chans, or -1 */
  int* recv_of;            /* [2p] likewise */
  unsigned char* slab;
  unsigned char** act;  /* [(S-1)*m]: boundary b, microbatch i; NULL where not touched */
  unsigned char** grad; /* likewise */
  int failed;           /* a run failed: only destroy is valid */
};

/* ---- Channels ---------------------------------------------------------------------------- */

/* used[(src*p + dst)*2 + dir]: the channels the schedule's sends name. */
static unsigned char* chan_used(const struct loomPipeSchedule* s) {
  int p = s->p;
  unsigned char* used = calloc((size_t)p * p * 2, 1);
  if (!used) return NULL;
  for (int r = 0; r < p; r++)
    for (int k = 0; k < s->counts[r]; k++) {
      const loomPipeAction* a = &s->lists[r][k];
      if (a->op == loomPipeSendF) used[((size_t)r * p + a->peer) * 2 + DIR_F] = 1;
      if (a->op == loomPipeSendB) used[((size_t)r * p + a->peer) * 2 + DIR_B] = 1;
    }
  return used;
}

/* The splits: each round of loomCommSplit over pp makes the channels whose ends are all
 * distinct (a greedy matching in a fixed order, equal on every rank since the schedule is);
 * a rank in none of them passes LOOM_SPLIT_NOCOLOR. */
static loomResult_t chan_make(struct loomPipeRunner* rn, unsigned char* used) {
  const struct loomPipeSchedule* s = rn->sched;
  int p = s->p, me = rn->rank;
  int* busy = malloc(sizeof(int) * (size_t)p);
  if (!busy) return par_fail(rn->pp, loomSystemError, CREATE, "out of memory");
  loomResult_t r = loomSuccess, local = loomSuccess;
  while (r == loomSuccess) {
    int mine = -1, taken = 0;
    memset(busy, 0, sizeof(int) * (size_t)p);
    for (int c = 0; c < p * p * 2; c++) {
      int src = c / 2 / p, dst = c / 2 % p;
      if (!used[c] || busy[src] || busy[dst]) continue;
      busy[src] = busy[dst] = 1;
      used[c] = 0;
      taken = 1;
      if (src == me || dst == me) mine = c;
    }
    if (!taken) break;
    loomComm_t comm = NULL;
    r = loomCommSplit(rn->pp, mine < 0 ? LOOM_SPLIT_NOCOLOR : mine, me, &comm, NULL);
    if (r != loomSuccess || mine < 0) continue;
    int src = mine / 2 / p, dst = mine / 2 % p, dir = mine % 2;
    struct pipe_chan* ch = &rn->chans[rn->nchan++];
    ch->comm = comm;
    ch->peer = (src == me ? dst : src) > me ? 1 : 0; /* key = pp rank orders the two */
    ch->pp_peer = src == me ? dst : src;
    if (src == me)
      rn->send_of[dst * 2 + dir] = rn->nchan - 1;
    else
      rn->recv_of[src * 2 + dir] = rn->nchan - 1;
    /* A stream that cannot be made fails the create, after the remaining (collective) splits. */
    loomResult_t rs = loomStreamCreate(&ch->stream);
    if (rs != loomSuccess && local == loomSuccess) local = rs;
  }
  free(busy);
  return r != loomSuccess ? r : local;
}

/* Ends the channels: aborted (after an error, so that peers stop waiting) or destroyed. */
static void chan_close(struct loomPipeRunner* rn, int abort) {
  for (int c = 0; c < rn->nchan; c++) {
    struct pipe_chan* ch = &rn->chans[c];
    if (abort && ch->comm) {
      loomCommAbort(ch->comm); /* queued launches on it fail at once */
      ch->comm = NULL;
    }
    if (ch->stream) loomStreamSynchronize(ch->stream);
    if (!abort && ch->comm) {
      loomCommDestroy(ch->comm);
      ch->comm = NULL;
    }
  }
}

/* ---- Buffers ----------------------------------------------------------------------------- */

/* A boundary b (between stages b and b+1) is this rank's when either stage is. */
static int boundary_mine(const struct loomPipeSchedule* s, int me, int b) {
  return s->stage_rank[b] == me || s->stage_rank[b + 1] == me;
}

static size_t round_up(size_t n) {
  return (n + 63) / 64 * 64;
}

static loomResult_t slab_make(struct loomPipeRunner* rn, const size_t act_bytes[]) {
  const struct loomPipeSchedule* s = rn->sched;
  size_t nb = (size_t)(s->S - 1) * (size_t)s->m, total = 0;
  rn->act = calloc(nb ? nb : 1, sizeof(*rn->act));
  rn->grad = calloc(nb ? nb : 1, sizeof(*rn->grad));
  if (!rn->act || !rn->grad) return par_fail(rn->pp, loomSystemError, CREATE, "out of memory");
  for (int b = 0; b < s->S - 1; b++) {
    if (!boundary_mine(s, rn->rank, b)) continue;
    size_t one = round_up(act_bytes[b] ? act_bytes[b] : 1);
    if (one < act_bytes[b] || one > (SIZE_MAX - total) / 2 / (size_t)s->m)
      return par_err(rn->pp, CREATE, "actBytes[%d] = %zu overflows the buffers of %d microbatches",
                     b, act_bytes[b], s->m);
    total += one * 2 * (size_t)s->m;
  }
  rn->bytes = malloc(sizeof(size_t) * (size_t)(s->S > 1 ? s->S - 1 : 1));
  if (!rn->bytes) return par_fail(rn->pp, loomSystemError, CREATE, "out of memory");
  if (s->S > 1) memcpy(rn->bytes, act_bytes, sizeof(size_t) * (size_t)(s->S - 1));
  rn->slab = par_scratch(rn->pp, CREATE, total);
  if (!rn->slab) return loomSystemError;
  unsigned char* at = rn->slab;
  for (int b = 0; b < s->S - 1; b++) {
    if (!boundary_mine(s, rn->rank, b)) continue;
    size_t one = round_up(act_bytes[b] ? act_bytes[b] : 1);
    for (int i = 0; i < s->m; i++) {
      rn->act[(size_t)b * s->m + i] = at;
      rn->grad[(size_t)b * s->m + i] = at + one;
      at += 2 * one;
    }
  }
  return loomSuccess;
}

/* ---- Create and destroy ------------------------------------------------------------------ */

static loomResult_t runner_check(loomPipeSchedule_t sched, const size_t act_bytes[],
                                 loomPipeRunner_t* runner, loomComm_t pp, int* rank) {
  int n = 0;
  loomResult_t r = par_comm(pp, CREATE, "pp", rank, &n);
  if (r != loomSuccess) return r;
  if (!sched) return par_err(pp, CREATE, "sched is NULL");
  if (!runner) return par_err(pp, CREATE, "runner is NULL");
  if (!act_bytes && sched->S > 1)
    return par_err(pp, CREATE, "actBytes is NULL but the schedule has %d stages", sched->S);
  if (n != sched->p)
    return par_err(pp, CREATE, "pp has %d ranks but the schedule has p = %d", n, sched->p);
  return loomSuccess;
}

loomResult_t loomPipeRunnerCreate(loomPipeSchedule_t sched, const size_t actBytes[],
                                  loomPipeRunner_t* runner, loomComm_t pp) {
  int rank = 0;
  loomResult_t r = runner_check(sched, actBytes, runner, pp, &rank);
  if (r != loomSuccess) return r;
  int p = sched->p;
  struct loomPipeRunner* rn = calloc(1, sizeof(*rn));
  unsigned char* used = chan_used(sched);
  if (rn) {
    rn->sched = sched;
    rn->pp = pp;
    rn->rank = rank;
    rn->chans = calloc((size_t)p * 4, sizeof(*rn->chans)); /* at most 2 ends per peer*dir */
    rn->send_of = malloc(sizeof(int) * 2 * (size_t)p);
    rn->recv_of = malloc(sizeof(int) * 2 * (size_t)p);
  }
  if (!rn || !used || !rn->chans || !rn->send_of || !rn->recv_of) {
    /* Local, before any split: the peers' splits time out, as for any one-rank failure. */
    free(used);
    if (rn) loomPipeRunnerDestroy(rn);
    return par_fail(pp, loomSystemError, CREATE, "out of memory");
  }
  for (int k = 0; k < 2 * p; k++) rn->send_of[k] = rn->recv_of[k] = -1;
  r = slab_make(rn, actBytes);
  if (r == loomSuccess) r = chan_make(rn, used);
  free(used);
  if (r != loomSuccess) {
    loomPipeRunnerDestroy(rn);
    return r;
  }
  *runner = rn;
  return loomSuccess;
}

loomResult_t loomPipeRunnerDestroy(loomPipeRunner_t runner) {
  if (!runner) return loomSuccess;
  chan_close(runner, 0);
  for (int c = 0; c < runner->nchan; c++)
    if (runner->chans[c].stream) loomStreamDestroy(runner->chans[c].stream);
  free(runner->chans);
  free(runner->send_of);
  free(runner->recv_of);
  free(runner->bytes);
  free(runner->act);
  free(runner->grad);
  free(runner->slab);
  free(runner);
  return loomSuccess;
}

/* ---- Run --------------------------------------------------------------------------------- */

#define ACT(rn, b, i) ((rn)->act[(size_t)(b) * (rn)->sched->m + (i)])
#define GRAD(rn, b, i) ((rn)->grad[(size_t)(b) * (rn)->sched->m + (i)])

/* The channel from stage's rank in direction dir, or -1 when that stage is this rank's. */
static int chan_from(const struct loomPipeRunner* rn, int stage, int dir) {
  int from = rn->sched->stage_rank[stage];
  return from == rn->rank ? -1 : rn->recv_of[from * 2 + dir];
}

/* The channel an action posts on, or whose receives an F or B waited for (waited), or -1:
 * a callback that failed by itself. */
static int run_chan(const struct loomPipeRunner* rn, const loomPipeAction* a, int waited) {
  switch (a->op) {
    case loomPipeF:
      return waited && a->stage > 0 ? chan_from(rn, a->stage - 1, DIR_F) : -1;
    case loomPipeB:
      return waited && a->stage < rn->sched->S - 1 ? chan_from(rn, a->stage + 1, DIR_B) : -1;
    case loomPipeW:
      return -1;
    case loomPipeSendF:
      return rn->send_of[a->peer * 2 + DIR_F];
    case loomPipeSendB:
      return rn->send_of[a->peer * 2 + DIR_B];
    case loomPipeRecvF:
      return rn->recv_of[a->peer * 2 + DIR_F];
    default:
      return rn->recv_of[a->peer * 2 + DIR_B];
  }
}

/* Waits for the receives posted so far on the channel from stage's rank in direction dir,
 * when that stage is on another rank: all of them come before this point in the list. */
static loomResult_t run_wait(struct loomPipeRunner* rn, int stage, int dir) {
  int c = chan_from(rn, stage, dir);
  if (c < 0) return loomSuccess;
  struct pipe_chan* ch = &rn->chans[c];
  if (!ch->pending) return loomSuccess;
  ch->pending = 0;
  return loomStreamSynchronize(ch->stream);
}

/* *waited: the failure, if any, was the wait for a receive (not the callback). */
static loomResult_t run_compute(struct loomPipeRunner* rn, const loomPipeCallbacks* cb,
                                const loomPipeAction* a, loomStream_t stream, int* waited) {
  int s = a->stage, i = a->microbatch, last = rn->sched->S - 1;
  loomResult_t r = loomSuccess;
  if (a->op == loomPipeF) {
    if (s > 0) r = run_wait(rn, s - 1, DIR_F);
    *waited = r != loomSuccess;
    if (r == loomSuccess)
      r = cb->forward(cb->user, s, i, s > 0 ? ACT(rn, s - 1, i) : NULL,
                      s < last ? ACT(rn, s, i) : NULL, stream);
  } else if (a->op == loomPipeB) {
    if (s < last) r = run_wait(rn, s + 1, DIR_B);
    *waited = r != loomSuccess;
    if (r == loomSuccess)
      r = cb->backwardInput(cb->user, s, i, s < last ? GRAD(rn, s, i) : NULL,
                            s > 0 ? GRAD(rn, s - 1, i) : NULL, stream);
  } else {
    r = cb->backwardWeight(cb->user, s, i, stream);
  }
  /* A callback may have queued its work on a host stream: what it wrote is sent next. */
  if (r == loomSuccess && stream) r = loomStreamSynchronize(stream);
  return r;
}

/* Posts a send or receive on its channel's stream; returns at once. */
static loomResult_t run_post(struct loomPipeRunner* rn, const loomPipeAction* a) {
  int s = a->stage, i = a->microbatch;
  struct pipe_chan* ch = &rn->chans[run_chan(rn, a, 0)];
  switch (a->op) {
    case loomPipeSendF:
      return loomSend(ACT(rn, s, i), rn->bytes[s], loomUint8, ch->peer, ch->comm, ch->stream);
    case loomPipeSendB:
      return loomSend(GRAD(rn, s - 1, i), rn->bytes[s - 1], loomUint8, ch->peer, ch->comm,
                      ch->stream);
    case loomPipeRecvF:
      ch->pending++;
      return loomRecv(ACT(rn, s - 1, i), rn->bytes[s - 1], loomUint8, ch->peer, ch->comm,
                      ch->stream);
    default: /* loomPipeRecvB */
      ch->pending++;
      return loomRecv(GRAD(rn, s, i), rn->bytes[s], loomUint8, ch->peer, ch->comm, ch->stream);
  }
}

static loomResult_t run_check(loomPipeRunner_t rn, const loomPipeCallbacks* cb) {
  if (!rn) return par_err(NULL, RUN, "runner is NULL");
  if (rn->failed)
    return par_fail(rn->pp, loomInvalidUsage, RUN,
                    "an earlier run of this runner failed; only loomPipeRunnerDestroy is valid");
  if (!cb) return par_err(rn->pp, RUN, "callbacks is NULL");
  if (!cb->forward) return par_err(rn->pp, RUN, "callbacks->forward is NULL");
  if (!cb->backwardInput) return par_err(rn->pp, RUN, "callbacks->backwardInput is NULL");
  if (!cb->backwardWeight) return par_err(rn->pp, RUN, "callbacks->backwardWeight is NULL");
  return loomSuccess;
}

static const char* op_name(int op) {
  static const char* const names[] = {"forward",   "backwardInput", "backwardWeight", "send F",
                                      "receive F", "send B",        "receive B"};
  return op >= 0 && op < (int)(sizeof(names) / sizeof(names[0])) ? names[op] : "action";
}

/* The text of a failed run, on pp (what loomGetLastError(pp) returns): which action failed,
 * and the channel communicator's own text, which names the peer or the deadline, when one of
 * its calls failed. A failed callback's own text on pp (loomSetLastError: pp's text differs
 * from `before`, the text at the run's start) is kept after ours. */
static loomResult_t run_failed(struct loomPipeRunner* rn, loomResult_t r, const loomPipeAction* a,
                               int chan, const char* before) {
  char why[768] = "";
  const char* t = chan >= 0 && rn->chans[chan].comm ? loomGetLastError(rn->chans[chan].comm)
                                                    : loomGetLastError(rn->pp);
  if (t && (chan >= 0 || strcmp(t, before) != 0)) snprintf(why, sizeof(why), "%s", t);
  /* The channel's text numbers the ranks of its own two-rank communicator: say which pp
   * rank is at its other end. */
  char with[64] = "";
  if (chan >= 0)
    snprintf(with, sizeof(with), " on the channel with pp rank %d", rn->chans[chan].pp_peer);
  if (a)
    par_fail(rn->pp, r, RUN, "%s of stage %d, microbatch %d failed (%s)%s%s%s", op_name(a->op),
             a->stage, a->microbatch, loomGetErrorString(r), with, why[0] ? ": " : "", why);
  else
    par_fail(rn->pp, r, RUN, "completing the sends and receives failed (%s)%s%s%s",
             loomGetErrorString(r), with, why[0] ? ": " : "", why);
  rn->failed = 1;
  chan_close(rn, 1);
  return r;
}

loomResult_t loomPipeRunnerRun(loomPipeRunner_t runner, const loomPipeCallbacks* callbacks,
                               loomStream_t stream) {
  loomResult_t r = run_check(runner, callbacks);
  if (r != loomSuccess) return r;
  r = par_enter(runner->pp, RUN, stream);
  if (r != loomSuccess) return r; /* nothing communicated: the runner stays usable */
  char before[768];
  snprintf(before, sizeof(before), "%s", loomGetLastError(runner->pp));
  const loomPipeAction* list = runner->sched->lists[runner->rank];
  for (int k = 0; k < runner->sched->counts[runner->rank]; k++) {
    const loomPipeAction* a = &list[k];
    int waited = 0;
    if (a->op == loomPipeF || a->op == loomPipeB || a->op == loomPipeW)
      r = run_compute(runner, callbacks, a, stream, &waited);
    else
      r = run_post(runner, a);
    if (r != loomSuccess) return run_failed(runner, r, a, run_chan(runner, a, waited), before);
  }
  /* The sends (and any receive no compute consumed) complete before the buffers are reused. */
  for (int c = 0; c < runner->nchan; c++) {
    runner->chans[c].pending = 0;
    r = loomStreamSynchronize(runner->chans[c].stream);
    if (r != loomSuccess) return run_failed(runner, r, NULL, c, before);
  }
  return loomSuccess;
}
