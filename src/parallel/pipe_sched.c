/* pipe_sched.c - pipeline schedules as data (PARALLEL.md section 6): the six generated kinds,
 * user schedules checked against the validity rules, and the accessors. Everything here is
 * local and pure; the binding simulator is pipe_sim.c. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipe.h"

static const char* const CREATE = "loomPipeScheduleCreate";

/* ---- Building the lists ------------------------------------------------------------------ */

/* One rank's list under construction: compute actions go in through gen_push, which adds the
 * receives and sends around them as the generated lists require. */
typedef struct {
  struct loomPipeSchedule* s;
  int rank;
  int sendb_after_b; /* ZB-H1, ZB-V, DualPipeV: the backward is split, SendB follows B */
} gen;

static void gen_put(gen* g, loomPipeOp_t op, int stage, int mb, int peer) {
  loomPipeAction* a = &g->s->lists[g->rank][g->s->counts[g->rank]++];
  a->op = op;
  a->stage = stage;
  a->microbatch = mb;
  a->peer = peer;
}

/* The rank of stage s's neighbour when that neighbour lives on another rank, else -1. */
static int gen_peer(const struct loomPipeSchedule* s, int stage, int rank) {
  if (stage < 0 || stage >= s->S) return -1;
  return s->stage_rank[stage] == rank ? -1 : s->stage_rank[stage];
}

static void gen_push(gen* g, loomPipeOp_t op, int stage, int mb) {
  int up = gen_peer(g->s, stage - 1, g->rank), down = gen_peer(g->s, stage + 1, g->rank);
  if (op == loomPipeF && up >= 0) gen_put(g, loomPipeRecvF, stage, mb, up);
  if (op == loomPipeB && down >= 0) gen_put(g, loomPipeRecvB, stage, mb, down);
  gen_put(g, op, stage, mb, -1);
  if (op == loomPipeF && down >= 0) gen_put(g, loomPipeSendF, stage, mb, down);
  if (up >= 0 && op == (g->sendb_after_b ? loomPipeB : loomPipeW))
    gen_put(g, loomPipeSendB, stage, mb, up);
}

/* AFAB (GPipe): every forward, then each microbatch's backward. */
static void gen_afab(gen* g) {
  for (int i = 0; i < g->s->m; i++) gen_push(g, loomPipeF, g->rank, i);
  for (int i = 0; i < g->s->m; i++) {
    gen_push(g, loomPipeB, g->rank, i);
    gen_push(g, loomPipeW, g->rank, i);
  }
}

/* 1F1B: p-r-1 warm-up forwards, one forward one backward, then the remaining backwards. */
static void gen_1f1b(gen* g) {
  int r = g->rank, m = g->s->m, w = g->s->p - r - 1 < m ? g->s->p - r - 1 : m;
  for (int i = 0; i < w; i++) gen_push(g, loomPipeF, r, i);
  for (int i = 0; i < m - w; i++) {
    gen_push(g, loomPipeF, r, w + i);
    gen_push(g, loomPipeB, r, i);
    gen_push(g, loomPipeW, r, i);
  }
  for (int i = m - w; i < m; i++) {
    gen_push(g, loomPipeB, r, i);
    gen_push(g, loomPipeW, r, i);
  }
}

/* Megatron's interleaved order: the k-th forward (back = 0) or backward (back = 1). */
static void inter_push(gen* g, int k, int back) {
  int p = g->s->p, v = g->s->v, c = (k / p) % v;
  if (back) c = v - 1 - c;
  int stage = c * p + g->rank, mb = (k / (p * v)) * p + k % p;
  if (!back) {
    gen_push(g, loomPipeF, stage, mb);
    return;
  }
  gen_push(g, loomPipeB, stage, mb);
  gen_push(g, loomPipeW, stage, mb);
}

static void gen_interleaved(gen* g) {
  int p = g->s->p, n = g->s->v * g->s->m, w = 2 * (p - g->rank - 1) + (g->s->v - 1) * p;
  if (w > n) w = n;
  for (int k = 0; k < w; k++) inter_push(g, k, 0);
  for (int k = 0; k < n - w; k++) {
    inter_push(g, w + k, 0);
    inter_push(g, k, 1);
  }
  for (int k = n - w; k < n; k++) inter_push(g, k, 1);
}

/* ZB-H1: 1F1B with the weight gradients held back (at most r pending after a steady step's
 * B) so that they fill the bubbles of the cool-down. */
static void gen_zbh1(gen* g) {
  int r = g->rank, m = g->s->m, w = g->s->p - r - 1 < m ? g->s->p - r - 1 : m, nw = 0;
  for (int i = 0; i < w; i++) gen_push(g, loomPipeF, r, i);
  for (int i = 0; i < m - w; i++) {
    gen_push(g, loomPipeF, r, w + i);
    gen_push(g, loomPipeB, r, i);
    while (i + 1 - nw > r) gen_push(g, loomPipeW, r, nw++);
  }
  for (int i = m - w; i < m; i++) {
    gen_push(g, loomPipeB, r, i);
    if (nw < i + 1) gen_push(g, loomPipeW, r, nw++);
  }
  while (nw < m) gen_push(g, loomPipeW, r, nw++);
}

/* DualPipeV on one rank: chunk 0 is stage r, chunk 1 stage 2p-1-r. A B "with zero bubble"
 * defers its W to a FIFO that the phases' W's pop; any other B is followed by its own W. */
typedef struct {
  gen* g;
  int stage[2], nf[2], nb[2];
  int* wq; /* deferred W's as stage*m + microbatch */
  int wq_head, wq_tail;
} dpv;

static void dpv_f(dpv* d, int c) {
  gen_push(d->g, loomPipeF, d->stage[c], d->nf[c]++);
}

static void dpv_b(dpv* d, int c, int zb) {
  int mb = d->nb[c]++, m = d->g->s->m;
  gen_push(d->g, loomPipeB, d->stage[c], mb);
  if (zb)
    d->wq[d->wq_tail++] = d->stage[c] * m + mb;
  else
    gen_push(d->g, loomPipeW, d->stage[c], mb);
}

static void dpv_w(dpv* d) {
  int k = d->wq[d->wq_head++], m = d->g->s->m;
  gen_push(d->g, loomPipeW, k / m, k % m);
}

/* The eight phases of DeepSeek's DualPipeV (dualpipev.py, its step_1 .. step_8). */
static void dpv_phases(dpv* d, int p, int r, int m) {
  for (int i = 0; i < 2 * (p - r - 1); i++) dpv_f(d, 0);
  for (int i = 0; i < r + 1; i++) dpv_f(d, 0), dpv_f(d, 1);
  for (int i = 0; i < p - r - 1; i++) dpv_b(d, 1, 1), dpv_w(d), dpv_f(d, 1);
  for (int i = 0; i < m - 2 * p + r + 1; i++)
    dpv_f(d, 0), dpv_b(d, 1, 0), dpv_f(d, 1), dpv_b(d, 0, 0);
  for (int i = 0; i < p - r - 1; i++) dpv_b(d, 1, 0), dpv_f(d, 1), dpv_b(d, 0, 0);
  /* Step 6 switches to deferred W's half-way, before B1 on odd ranks, before B0 on even. */
  for (int i = 0, zb = 0; i < r + 1; i++) {
    if (i == (r + 1) / 2 && r % 2 == 1) zb = 1;
    dpv_b(d, 1, zb);
    if (i == (r + 1) / 2 && r % 2 == 0) zb = 1;
    dpv_b(d, 0, zb);
  }
  for (int i = 0; i < p - r - 1; i++) dpv_w(d), dpv_b(d, 0, 1);
  for (int i = 0; i < r + 1; i++) dpv_w(d);
}

static loomResult_t gen_dualpipev(gen* g) {
  struct loomPipeSchedule* s = g->s;
  dpv d = {g, {g->rank, 2 * s->p - 1 - g->rank}, {0, 0}, {0, 0}, NULL, 0, 0};
  d.wq = malloc(sizeof(int) * 2 * (size_t)s->m);
  if (d.wq == NULL) return par_fail(NULL, loomSystemError, CREATE, "out of memory");
  dpv_phases(&d, s->p, g->rank, s->m);
  free(d.wq);
  return loomSuccess;
}

/* ZB-V, Loom's deterministic greedy (the contract fixes only its properties). It simulates all
 * ranks with f = b = w = 1 and comm = 0 in unit time steps; at each step a free rank takes,
 * in this order of preference:
 *   1. a ready B (the lower stage first), which frees an activation and feeds the rank below;
 *   2. a ready F while fewer than 2p activations are in flight on the rank, chunk 1 (the later
 *      stage, nearer the loss) first, so that microbatches reach the turn of the V early;
 *   3. the oldest pending W: the W's fill the time in which nothing else is ready;
 * else it idles. The list is the order of what each rank took. F and B of a stage go in
 * microbatch order (the next one of the stage is the only candidate), W's in FIFO order. For
 * m >= 2p this gives the lower bound 6m+p-1 (checked by the tests for p = 1..6), the cap keeps
 * every rank's peak <= 2p, and any m >= 1 finishes. */
typedef struct {
  struct loomPipeSchedule* s;
  int *fdone, *bdone;      /* [S*m] finish step, or INT_MAX while not done */
  int *nf, *nb;            /* [S] next microbatch to run */
  int *wq, *head, *tail;   /* per rank FIFO of stage*m+mb, 2m each */
  int *free_at, *inflight; /* [p] */
} zbv;

static int zbv_ready(const zbv* z, int* done, int stage, int mb, int t) {
  return stage < 0 || stage >= z->s->S || done[stage * z->s->m + mb] <= t;
}

/* The action rank r takes at step t (1 taken, 0 idle). */
static int zbv_step(zbv* z, gen* g, int r, int t) {
  struct loomPipeSchedule* s = z->s;
  int m = s->m, st[2] = {r, 2 * s->p - 1 - r};
  for (int c = 0; c < 2; c++) {
    int k = st[c], i = z->nb[k];
    if (i < m && zbv_ready(z, z->fdone, k, i, t) && zbv_ready(z, z->bdone, k + 1, i, t)) {
      gen_push(g, loomPipeB, k, i);
      z->bdone[k * m + i] = t + 1;
      z->nb[k]++, z->inflight[r]--;
      z->wq[r * 2 * m + z->tail[r]++] = k * m + i;
      return 1;
    }
  }
  for (int c = 1; c >= 0 && z->inflight[r] < 2 * s->p; c--) {
    int k = st[c], i = z->nf[k];
    if (i < m && zbv_ready(z, z->fdone, k - 1, i, t)) {
      gen_push(g, loomPipeF, k, i);
      z->fdone[k * m + i] = t + 1;
      z->nf[k]++, z->inflight[r]++;
      return 1;
    }
  }
  if (z->head[r] == z->tail[r]) return 0;
  int q = z->wq[r * 2 * m + z->head[r]++];
  gen_push(g, loomPipeW, q / m, q % m);
  return 1;
}

static loomResult_t gen_zbv(struct loomPipeSchedule* s) {
  int S = s->S, p = s->p, m = s->m;
  size_t sm = (size_t)S * m;
  int* buf = malloc(sizeof(int) * (2 * sm + 2 * (size_t)S + 2 * (size_t)p * m + 4 * (size_t)p));
  if (buf == NULL) return par_fail(NULL, loomSystemError, CREATE, "out of memory");
  zbv z = {s,    buf,  buf + sm, buf + 2 * sm, buf + 2 * sm + S, buf + 2 * sm + 2 * S,
           NULL, NULL, NULL,     NULL};
  z.head = z.wq + 2 * (size_t)p * m, z.tail = z.head + p, z.free_at = z.tail + p;
  z.inflight = z.free_at + p;
  for (size_t k = 0; k < sm; k++) z.fdone[k] = z.bdone[k] = INT_MAX;
  memset(z.nf, 0, sizeof(int) * (2 * (size_t)S + 2 * (size_t)p * m + 4 * (size_t)p));
  long long left = 3LL * S * m, t = 0, limit = 2 * left + 2LL * S + 8;
  for (; left > 0 && t < limit; t++)
    for (int r = 0; r < p; r++) {
      gen g = {s, r, 1};
      if (z.free_at[r] <= t && zbv_step(&z, &g, r, (int)t)) z.free_at[r] = (int)t + 1, left--;
    }
  free(buf);
  if (left > 0) return par_fail(NULL, loomInternalError, CREATE, "ZB-V greedy did not finish");
  return loomSuccess;
}

/* ---- Schedules ---------------------------------------------------------------------------- */

static void sched_free(struct loomPipeSchedule* s) {
  if (s == NULL) return;
  for (int r = 0; s->lists != NULL && r < s->p; r++) free(s->lists[r]);
  free(s->lists);
  free(s->counts);
  free(s->stage_rank);
  free(s);
}

/* An empty schedule with room for cap[r] actions on rank r (NULL: 7 per stage and microbatch,
 * the most a generated list holds: F, B, W and at most four sends and receives). */
static struct loomPipeSchedule* sched_alloc(int p, int S, int m, const int cap[]) {
  struct loomPipeSchedule* s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->p = p, s->S = S, s->m = m, s->v = S / p;
  s->stage_rank = malloc(sizeof(int) * (size_t)S);
  s->lists = calloc((size_t)p, sizeof(loomPipeAction*));
  s->counts = calloc((size_t)p, sizeof(int));
  if (s->stage_rank == NULL || s->lists == NULL || s->counts == NULL) {
    sched_free(s);
    return NULL;
  }
  for (int r = 0; r < p; r++) {
    size_t n = cap != NULL ? (size_t)cap[r] : 7 * (size_t)(S / p) * (size_t)m;
    s->lists[r] = malloc(sizeof(loomPipeAction) * (n > 0 ? n : 1));
    if (s->lists[r] == NULL) {
      sched_free(s);
      return NULL;
    }
  }
  return s;
}

/* numChunks and m as each kind allows them (PARALLEL.md 6 and 8). */
static loomResult_t create_check(loomPipeKind_t kind, int p, int m, int v) {
  if ((int)kind < 0 || (int)kind > 5)
    return par_err(NULL, CREATE, "kind is %d, not a loomPipeKind_t (0..5)", (int)kind);
  if (p < 1) return par_err(NULL, CREATE, "numRanks is %d, below 1", p);
  if (m < 1) return par_err(NULL, CREATE, "numMicrobatches is %d, below 1", m);
  if (kind <= loomPipe1F1B || kind == loomPipeZBH1) {
    if (v != 1) return par_err(NULL, CREATE, "numChunks is %d but kind %d takes 1", v, (int)kind);
  } else if (kind == loomPipeInterleaved1F1B) {
    if (v < 2) return par_err(NULL, CREATE, "numChunks is %d but interleaved 1F1B takes >= 2", v);
    if (m % p != 0)
      return par_err(NULL, CREATE,
                     "numMicrobatches %d is not a multiple of numRanks %d (interleaved 1F1B)", m,
                     p);
  } else {
    if (v != 2) return par_err(NULL, CREATE, "numChunks is %d but kind %d takes 2", v, (int)kind);
    if (kind == loomPipeDualPipeV && m < 2 * p)
      return par_err(NULL, CREATE, "numMicrobatches %d is below 2*numRanks = %d (DualPipeV)", m,
                     2 * p);
  }
  if ((long long)p * v > INT_MAX / 8 || 7LL * v * m > INT_MAX / 8)
    return par_err(NULL, CREATE, "numRanks %d, numMicrobatches %d, numChunks %d: too large", p, m,
                   v);
  return loomSuccess;
}

static loomResult_t create_lists(struct loomPipeSchedule* s) {
  if (s->kind == loomPipeZBV) return gen_zbv(s);
  for (int r = 0; r < s->p; r++) {
    gen g = {s, r, s->kind >= loomPipeZBH1};
    switch (s->kind) {
      case loomPipeAFAB:
        gen_afab(&g);
        break;
      case loomPipe1F1B:
        gen_1f1b(&g);
        break;
      case loomPipeInterleaved1F1B:
        gen_interleaved(&g);
        break;
      case loomPipeZBH1:
        gen_zbh1(&g);
        break;
      default: {
        loomResult_t rc = gen_dualpipev(&g);
        if (rc != loomSuccess) return rc;
      }
    }
  }
  return loomSuccess;
}

loomResult_t loomPipeScheduleCreate(loomPipeKind_t kind, int numRanks, int numMicrobatches,
                                    int numChunks, loomPipeSchedule_t* sched) {
  if (sched == NULL) return par_err(NULL, CREATE, "sched is NULL");
  loomResult_t rc = create_check(kind, numRanks, numMicrobatches, numChunks);
  if (rc != loomSuccess) return rc;
  int p = numRanks, v = numChunks;
  struct loomPipeSchedule* s = sched_alloc(p, p * v, numMicrobatches, NULL);
  if (s == NULL) return par_fail(NULL, loomSystemError, CREATE, "out of memory");
  s->kind = kind;
  for (int k = 0; k < s->S; k++)
    s->stage_rank[k] = kind >= loomPipeZBV ? (k < p ? k : 2 * p - 1 - k) : k % p;
  if ((rc = create_lists(s)) != loomSuccess) {
    sched_free(s);
    return rc;
  }
  *sched = s;
  return loomSuccess;
}

/* ---- User schedules ----------------------------------------------------------------------- */

static const char* const FROM = "loomPipeScheduleFromActions";

static loomResult_t from_check(int p, int S, const int stageRank[], int m,
                               const loomPipeAction* const actions[], const int numActions[],
                               loomPipeSchedule_t* sched) {
  if (sched == NULL) return par_err(NULL, FROM, "sched is NULL");
  if (p < 1) return par_err(NULL, FROM, "numRanks is %d, below 1", p);
  if (S < 1) return par_err(NULL, FROM, "numStages is %d, below 1", S);
  if (m < 1) return par_err(NULL, FROM, "numMicrobatches is %d, below 1", m);
  if (stageRank == NULL) return par_err(NULL, FROM, "stageRank is NULL");
  if (actions == NULL) return par_err(NULL, FROM, "actions is NULL");
  if (numActions == NULL) return par_err(NULL, FROM, "numActions is NULL");
  if ((long long)S * m > INT_MAX / 8)
    return par_err(NULL, FROM, "numStages %d times numMicrobatches %d is too large", S, m);
  for (int k = 0; k < S; k++)
    if (stageRank[k] < 0 || stageRank[k] >= p)
      return par_err(NULL, FROM, "stageRank[%d] is %d, outside [0, %d)", k, stageRank[k], p);
  for (int r = 0; r < p; r++) {
    if (numActions[r] < 0)
      return par_err(NULL, FROM, "numActions[%d] is %d, below 0", r, numActions[r]);
    if (numActions[r] > 0 && actions[r] == NULL)
      return par_err(NULL, FROM, "actions[%d] is NULL with numActions[%d] = %d", r, r,
                     numActions[r]);
  }
  return loomSuccess;
}

/* One action's own fields: an op, a stage on this rank, a microbatch, and a send or receive
 * only across ranks. Returns the peer it gets (-1 for F, B, W), or -2 after an error. */
static int from_action(const int stageRank[], int p, int S, int m, int r, int k,
                       const loomPipeAction* a, loomResult_t* rc) {
  int op = (int)a->op, s = a->stage, i = a->microbatch, nb = -1;
  *rc = loomInvalidArgument;
  if (op < 0 || op > 6)
    return par_err(NULL, FROM, "rank %d action %d: op %d is not a loomPipeOp_t", r, k, op), -2;
  if (s < 0 || s >= S || i < 0 || i >= m)
    return par_err(NULL, FROM,
                   "rank %d action %d: stage %d or microbatch %d outside [0, %d), [0, %d)", r, k, s,
                   i, S, m),
           -2;
  if (stageRank[s] != r)
    return par_err(NULL, FROM, "rank %d action %d: stage %d is on rank %d", r, k, s, stageRank[s]),
           -2;
  if (op == loomPipeSendF || op == loomPipeRecvB) nb = s + 1;
  if (op == loomPipeSendB || op == loomPipeRecvF) nb = s - 1;
  *rc = loomSuccess;
  if (nb == -1 && op <= loomPipeW) return -1;
  if (nb < 0 || nb >= S)
    return *rc =
               par_err(NULL, FROM, "rank %d action %d: op %d on stage %d has no neighbour stage %d",
                       r, k, op, s, nb),
           -2;
  if (stageRank[nb] == r)
    return *rc = par_err(
               NULL, FROM,
               "rank %d action %d: a send or receive between stages %d and %d, both on rank %d", r,
               k, s, nb, r),
           -2;
  return stageRank[nb];
}

loomResult_t loomPipeScheduleFromActions(int numRanks, int numStages, const int stageRank[],
                                         int numMicrobatches, const loomPipeAction* const actions[],
                                         const int numActions[], loomPipeSchedule_t* sched) {
  int p = numRanks, S = numStages, m = numMicrobatches;
  loomResult_t rc = from_check(p, S, stageRank, m, actions, numActions, sched);
  if (rc != loomSuccess) return rc;
  struct loomPipeSchedule* s = sched_alloc(p, S, m, numActions);
  if (s == NULL) return par_fail(NULL, loomSystemError, FROM, "out of memory");
  s->kind = (loomPipeKind_t)-1;
  memcpy(s->stage_rank, stageRank, sizeof(int) * (size_t)S);
  for (int r = 0; r < p && rc == loomSuccess; r++)
    for (int k = 0; k < numActions[r] && rc == loomSuccess; k++) {
      int peer = from_action(stageRank, p, S, m, r, k, &actions[r][k], &rc);
      s->lists[r][k] = actions[r][k];
      s->lists[r][k].peer = peer;
      s->counts[r] = k + 1;
    }
  if (rc == loomSuccess) rc = pipe_check_rules(s, FROM);
  if (rc == loomSuccess) {
    loomPipeCosts unit = {1, 1, 1, 0};
    loomPipeStats st;
    rc = pipe_simulate(s, &unit, FROM, &st, NULL, NULL, NULL);
  }
  if (rc != loomSuccess) {
    sched_free(s);
    return rc;
  }
  *sched = s;
  return loomSuccess;
}

/* ---- Accessors ---------------------------------------------------------------------------- */

loomResult_t loomPipeScheduleGetActions(loomPipeSchedule_t sched, int rank,
                                        const loomPipeAction** actions, int* numActions) {
  const char* fn = "loomPipeScheduleGetActions";
  if (sched == NULL) return par_err(NULL, fn, "sched is NULL");
  if (actions == NULL || numActions == NULL)
    return par_err(NULL, fn, "actions or numActions is NULL");
  if (rank < 0 || rank >= sched->p)
    return par_err(NULL, fn, "rank is %d, outside [0, %d)", rank, sched->p);
  *actions = sched->lists[rank];
  *numActions = sched->counts[rank];
  return loomSuccess;
}

loomResult_t loomPipeScheduleStageRank(loomPipeSchedule_t sched, int stage, int* rank) {
  const char* fn = "loomPipeScheduleStageRank";
  if (sched == NULL) return par_err(NULL, fn, "sched is NULL");
  if (rank == NULL) return par_err(NULL, fn, "rank is NULL");
  if (stage < 0 || stage >= sched->S)
    return par_err(NULL, fn, "stage is %d, outside [0, %d)", stage, sched->S);
  *rank = sched->stage_rank[stage];
  return loomSuccess;
}

loomResult_t loomPipeScheduleFormat(loomPipeSchedule_t sched, int rank, char* buf, size_t size,
                                    size_t* length) {
  static const char* const names[7] = {"F", "B", "W", "SF", "RF", "SB", "RB"};
  const char* fn = "loomPipeScheduleFormat";
  if (sched == NULL) return par_err(NULL, fn, "sched is NULL");
  if (length == NULL) return par_err(NULL, fn, "length is NULL");
  if (buf == NULL && size > 0) return par_err(NULL, fn, "buf is NULL with size %zu", size);
  if (rank < 0 || rank >= sched->p)
    return par_err(NULL, fn, "rank is %d, outside [0, %d)", rank, sched->p);
  size_t n = 0;
  char tok[48];
  if (size > 0) buf[0] = '\0';
  for (int k = 0; k < sched->counts[rank]; k++) {
    const loomPipeAction* a = &sched->lists[rank][k];
    int len = snprintf(tok, sizeof tok, "%s%s%d.%d", k > 0 ? " " : "", names[a->op], a->stage,
                       a->microbatch);
    if (n + (size_t)len < size)
      memcpy(buf + n, tok, (size_t)len + 1);
    else if (n + 1 < size) {
      memcpy(buf + n, tok, size - n - 1); /* truncated like snprintf */
      buf[size - 1] = '\0';
    }
    n += (size_t)len;
  }
  *length = n;
  return loomSuccess;
}

loomResult_t loomPipeScheduleDestroy(loomPipeSchedule_t sched) {
  if (sched == NULL) return par_err(NULL, "loomPipeScheduleDestroy", "sched is NULL");
  sched_free(sched);
  return loomSuccess;
}
