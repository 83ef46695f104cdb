/* pipe_sim.c - the binding simulator of PARALLEL.md section 6 and the validity rules that a
 * user schedule (loomPipeScheduleFromActions) must pass before it is simulated. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "pipe.h"

static const char* const OPS[7] = {"F", "B", "W", "SF", "RF", "SB", "RB"};

/* ---- Validity rules ----------------------------------------------------------------------- */

/* Where each (op, stage, microbatch) sits in its rank's list (-1: absent), and for sends and
 * receives their ordinal on their (sender, receiver, direction) channel. */
typedef struct {
  const struct loomPipeSchedule* s;
  const char* fn;
  int* pos[7]; /* [S*m] action index */
  int* ord[7]; /* [S*m] ordinal on the channel, for ops 3..6 */
} rules;

static int key(const struct loomPipeSchedule* s, int stage, int mb) {
  return stage * s->m + mb;
}

/* The position of (op, stage, mb), -1 when absent or when stage is outside [0, S). */
static int at(const rules* q, int op, int stage, int mb) {
  if (stage < 0 || stage >= q->s->S) return -1;
  return q->pos[op][key(q->s, stage, mb)];
}

static loomResult_t rules_place(rules* q) {
  const struct loomPipeSchedule* s = q->s;
  int* cnt = calloc(4 * (size_t)s->p, sizeof(int));
  if (cnt == NULL) return par_fail(NULL, loomSystemError, q->fn, "out of memory");
  for (int r = 0; r < s->p; r++) {
    memset(cnt, 0, 4 * (size_t)s->p * sizeof(int));
    for (int k = 0; k < s->counts[r]; k++) {
      const loomPipeAction* a = &s->lists[r][k];
      int* slot = &q->pos[a->op][key(s, a->stage, a->microbatch)];
      if (*slot >= 0) {
        free(cnt);
        return par_err(NULL, q->fn, "rank %d action %d: a second %s%d.%d (the first is action %d)",
                       r, k, OPS[a->op], a->stage, a->microbatch, *slot);
      }
      *slot = k;
      if (a->op >= loomPipeSendF)
        q->ord[a->op][key(s, a->stage, a->microbatch)] = cnt[(a->op - 3) * s->p + a->peer]++;
    }
  }
  free(cnt);
  return loomSuccess;
}

/* Every stage has its F, B and W on its rank. */
static loomResult_t rules_complete(const rules* q) {
  const struct loomPipeSchedule* s = q->s;
  for (int st = 0; st < s->S; st++)
    for (int i = 0; i < s->m; i++)
      for (int op = loomPipeF; op <= loomPipeW; op++)
        if (at(q, op, st, i) < 0) {
          int r = s->stage_rank[st];
          return par_err(NULL, q->fn, "rank %d action %d (the end of its list): no %s%d.%d", r,
                         s->counts[r], OPS[op], st, i);
        }
  return loomSuccess;
}

/* The action that must come before action k (op, stage, mb) on rank r: its op and stage, or
 * op -1 when none is needed. */
static void rules_before(const struct loomPipeSchedule* s, int r, const loomPipeAction* a, int* op,
                         int* st) {
  int up = a->stage - 1;
  *op = -1, *st = a->stage;
  switch (a->op) {
    case loomPipeF:
      if (up >= 0) *op = s->stage_rank[up] == r ? loomPipeF : loomPipeRecvF;
      if (*op == loomPipeF) *st = up;
      break;
    case loomPipeB:
      *op = loomPipeF; /* the own F; the B or RecvB from below is checked by the caller */
      break;
    case loomPipeW:
      *op = loomPipeB;
      break;
    case loomPipeSendF:
      *op = loomPipeF;
      break;
    case loomPipeSendB:
      *op = loomPipeB;
      break;
    default:
      break;
  }
}

static loomResult_t rules_need(const rules* q, int r, int k, const loomPipeAction* a, int op,
                               int st) {
  int j = at(q, op, st, a->microbatch);
  if (j >= 0 && j < k) return loomSuccess;
  return par_err(NULL, q->fn, "rank %d action %d: %s%d.%d must come after %s%d.%d on its rank", r,
                 k, OPS[a->op], a->stage, a->microbatch, OPS[op], st, a->microbatch);
}

/* A send or receive: its partner exists, with the same ordinal on their channel. */
static loomResult_t rules_match(const rules* q, int r, int k, const loomPipeAction* a) {
  static const int partner[7] = {
      0, 0, 0, loomPipeRecvF, loomPipeSendF, loomPipeRecvB, loomPipeSendB};
  static const int shift[7] = {0, 0, 0, 1, -1, -1, 1};
  int op = partner[a->op], st = a->stage + shift[a->op], i = a->microbatch;
  if (at(q, op, st, i) < 0)
    return par_err(NULL, q->fn, "rank %d action %d: %s%d.%d has no matching %s%d.%d on rank %d", r,
                   k, OPS[a->op], a->stage, i, OPS[op], st, i, a->peer);
  int mine = q->ord[a->op][key(q->s, a->stage, i)], theirs = q->ord[op][key(q->s, st, i)];
  if (mine != theirs)
    return par_err(
        NULL, q->fn,
        "rank %d action %d: %s%d.%d is number %d on its channel with rank %d but %s%d.%d "
        "is number %d there: sends and receives in different orders",
        r, k, OPS[a->op], a->stage, i, mine, a->peer, OPS[op], st, i, theirs);
  return loomSuccess;
}

static loomResult_t rules_order(const rules* q) {
  const struct loomPipeSchedule* s = q->s;
  for (int r = 0; r < s->p; r++)
    for (int k = 0; k < s->counts[r]; k++) {
      const loomPipeAction* a = &s->lists[r][k];
      int op, st;
      loomResult_t rc = loomSuccess;
      rules_before(s, r, a, &op, &st);
      if (op >= 0) rc = rules_need(q, r, k, a, op, st);
      if (rc == loomSuccess && a->op == loomPipeB && a->stage + 1 < s->S) {
        int local = s->stage_rank[a->stage + 1] == r;
        rc = rules_need(q, r, k, a, local ? loomPipeB : loomPipeRecvB, a->stage + (local ? 1 : 0));
      }
      if (rc == loomSuccess && a->op >= loomPipeSendF) rc = rules_match(q, r, k, a);
      if (rc != loomSuccess) return rc;
    }
  return loomSuccess;
}

/* Every rule but the simulation; s's actions already have a stage of their rank, a microbatch
 * in range, a send or receive only across ranks, and their peers. */
loomResult_t pipe_check_rules(const struct loomPipeSchedule* s, const char* fn) {
  size_t n = (size_t)s->S * s->m;
  int* buf = malloc(sizeof(int) * 14 * (n > 0 ? n : 1));
  if (buf == NULL) return par_fail(NULL, loomSystemError, fn, "out of memory");
  rules q = {s, fn, {NULL}, {NULL}};
  for (int op = 0; op < 7; op++) q.pos[op] = buf + op * n, q.ord[op] = buf + (7 + op) * n;
  for (size_t j = 0; j < 14 * n; j++) buf[j] = -1;
  loomResult_t rc = rules_place(&q);
  if (rc == loomSuccess) rc = rules_complete(&q);
  if (rc == loomSuccess) rc = rules_order(&q);
  free(buf);
  return rc;
}

/* ---- Simulator ---------------------------------------------------------------------------- */

typedef struct {
  const struct loomPipeSchedule* s;
  const loomPipeCosts* c;
  double *clock, *busy, *dep[2]; /* [p], [p], departures of SendF / SendB by sender key */
  unsigned char* sent[2];
  int *idx, *live, *peak; /* [p] next action, F done - B done, its maximum */
  double* const* start;   /* NULL, or [p][counts[r]]: when each action began */
} sim;

/* Moves rank r as far as it can; returns how many actions it took. */
static long sim_walk(sim* z, int r) {
  const struct loomPipeSchedule* s = z->s;
  long moved = 0;
  for (; z->idx[r] < s->counts[r]; z->idx[r]++, moved++) {
    const loomPipeAction* a = &s->lists[r][z->idx[r]];
    int k = key(s, a->stage, a->microbatch), d = a->op >= loomPipeSendB;
    int recv = a->op == loomPipeRecvF || a->op == loomPipeRecvB;
    double cost = a->op == loomPipeF ? z->c->f : a->op == loomPipeB ? z->c->b : z->c->w;
    if (recv) {
      int from = key(s, a->stage + (d ? 1 : -1), a->microbatch);
      if (!z->sent[d][from]) break;
      if (z->dep[d][from] + z->c->comm > z->clock[r]) z->clock[r] = z->dep[d][from] + z->c->comm;
    }
    if (z->start != NULL) z->start[r][z->idx[r]] = z->clock[r]; /* a receive: its arrival */
    if (recv) continue;
    if (a->op == loomPipeSendF || a->op == loomPipeSendB) {
      z->dep[d][k] = z->clock[r];
      z->sent[d][k] = 1;
    } else {
      z->clock[r] += cost, z->busy[r] += cost;
      z->live[r] += a->op == loomPipeF ? 1 : a->op == loomPipeB ? -1 : 0;
      if (z->live[r] > z->peak[r]) z->peak[r] = z->live[r];
    }
  }
  return moved;
}

/* Sweeps the ranks until all lists are done or none can move (a deadlock). */
static loomResult_t sim_run(sim* z, const char* fn) {
  const struct loomPipeSchedule* s = z->s;
  for (;;) {
    long moved = 0;
    int left = 0;
    for (int r = 0; r < s->p; r++) moved += sim_walk(z, r);
    for (int r = 0; r < s->p; r++) left += z->idx[r] < s->counts[r];
    if (left == 0) return loomSuccess;
    if (moved > 0) continue;
    for (int r = 0; r < s->p; r++)
      if (z->idx[r] < s->counts[r]) {
        const loomPipeAction* a = &s->lists[r][z->idx[r]];
        return par_err(
            NULL, fn, "rank %d action %d: deadlock, no rank can move and %s%d.%d waits for rank %d",
            r, z->idx[r], OPS[a->op], a->stage, a->microbatch, a->peer);
      }
  }
}

static void sim_report(const sim* z, loomPipeStats* stats, double idle[], int peak[]) {
  const struct loomPipeSchedule* s = z->s;
  double makespan = 0, ratio = 0;
  for (int r = 0; r < s->p; r++)
    if (z->clock[r] > makespan) makespan = z->clock[r];
  for (int r = 0; r < s->p; r++) {
    /* All costs zero: no time, so no bubble (not 0/0). */
    if (makespan > 0) ratio += (makespan - z->busy[r]) / makespan;
    if (idle != NULL) idle[r] = makespan - z->busy[r];
    if (peak != NULL) peak[r] = z->peak[r];
  }
  stats->makespan = makespan;
  stats->bubbleRatio = ratio / s->p;
}

loomResult_t pipe_simulate(const struct loomPipeSchedule* s, const loomPipeCosts* costs,
                           const char* fn, loomPipeStats* stats, double idle[], int peak[],
                           double* const start[]) {
  size_t n = (size_t)s->S * s->m, p = (size_t)s->p;
  double* d = calloc(2 * n + 2 * p, sizeof(double));
  int* i = calloc(3 * p, sizeof(int));
  unsigned char* u = calloc(2 * n, 1);
  if (d == NULL || i == NULL || u == NULL) {
    free(d), free(i), free(u);
    return par_fail(NULL, loomSystemError, fn, "out of memory");
  }
  sim z = {s, costs, d, d + p, {d + 2 * p, d + 2 * p + n}, {u, u + n}, i, i + p, i + 2 * p, start};
  loomResult_t rc = sim_run(&z, fn);
  if (rc == loomSuccess) sim_report(&z, stats, idle, peak);
  free(d), free(i), free(u);
  return rc;
}

static loomResult_t sim_cost(const char* fn, const char* name, double v) {
  if (v >= 0 && v <= DBL_MAX) return loomSuccess;
  return par_err(NULL, fn, "costs->%s is %g, not a finite value >= 0", name, v);
}

loomResult_t loomPipeSimulate(loomPipeSchedule_t sched, const loomPipeCosts* costs,
                              loomPipeStats* stats, double rankIdle[], int rankPeakActivations[]) {
  const char* fn = "loomPipeSimulate";
  if (sched == NULL) return par_err(NULL, fn, "sched is NULL");
  if (costs == NULL) return par_err(NULL, fn, "costs is NULL");
  if (stats == NULL) return par_err(NULL, fn, "stats is NULL");
  loomResult_t rc = sim_cost(fn, "f", costs->f);
  if (rc == loomSuccess) rc = sim_cost(fn, "b", costs->b);
  if (rc == loomSuccess) rc = sim_cost(fn, "w", costs->w);
  if (rc == loomSuccess) rc = sim_cost(fn, "comm", costs->comm);
  if (rc != loomSuccess) return rc;
  return pipe_simulate(sched, costs, fn, stats, rankIdle, rankPeakActivations, NULL);
}
