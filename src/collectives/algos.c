/* algos.c - from a task to its plan: which algorithm families can serve
 * each collective, the tuner's pick among them, and the generator call. */
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/dag.h"
#include "core/checks.h"
#include "core/dtype.h"
#include "core/params.h"
#include "topo/tune.h"
#include "transport/transport.h"

typedef loomResult_t (*gen_fn)(const struct coll_args* a, struct plan* out);

/* Both enums come from core/colls.def; the collectives layer adds send and
 * receive after the table. */
_Static_assert((int)TUNE_COLL_COUNT == (int)COLL_SEND, "coll_kind extends colls.def");
_Static_assert(TUNE_LINES_BYTES == TP_LINES_BYTES, "the model and the transport agree on lines");

static const gen_fn generators[COLL_KIND_COUNT][TUNE_ALGO_COUNT] = {
    [COLL_ALLREDUCE] = {[TUNE_RING] = ring_allreduce_build,
                        [TUNE_TREE] = tree_allreduce_build,
                        [TUNE_RHD] = rhd_allreduce_build,
                        [TUNE_ONESHOT] = oneshot_allreduce_build,
                        [TUNE_TWOSHOT] = twoshot_allreduce_build,
                        [TUNE_HIER] = hier_allreduce_build,
                        [TUNE_DOUBLING] = doubling_allreduce_build,
                        [TUNE_ORDERED] = ordered_allreduce_build,
                        [TUNE_LINES] = lines_allreduce_build},
    [COLL_BROADCAST] = {[TUNE_RING] = ring_broadcast_build,
                        [TUNE_TREE] = tree_broadcast_build,
                        [TUNE_READ] = read_broadcast_build,
                        [TUNE_LINES] = lines_broadcast_build},
    [COLL_REDUCE] = {[TUNE_RING] = ring_reduce_build,
                     [TUNE_TREE] = tree_reduce_build,
                     [TUNE_ORDERED] = ordered_reduce_build,
                     [TUNE_LINES] = lines_reduce_build},
    [COLL_ALLGATHER] = {[TUNE_RING] = ring_allgather_build,
                        [TUNE_RHD] = rhd_allgather_build,
                        [TUNE_READ] = read_allgather_build,
                        [TUNE_LINES] = lines_allgather_build},
    [COLL_REDUCESCATTER] = {[TUNE_RING] = ring_reducescatter_build,
                            [TUNE_RHD] = rhd_reducescatter_build,
                            [TUNE_READ] = read_reducescatter_build,
                            [TUNE_ORDERED] = ordered_reducescatter_build,
                            [TUNE_LINES] = lines_reducescatter_build},
    [COLL_ALLTOALL] = {[TUNE_PAIRWISE] = pairwise_alltoall_build,
                       [TUNE_BRUCK] = bruck_alltoall_build,
                       [TUNE_READ] = read_alltoall_build,
                       [TUNE_LINES] = lines_alltoall_build},
    [COLL_ALLTOALLV] = {[TUNE_PAIRWISE] = pairwise_alltoallv_build},
    [COLL_GATHER] = {[TUNE_DIRECT] = direct_gather_build},
    [COLL_SCATTER] = {[TUNE_DIRECT] = direct_scatter_build},
};

/* The size the tuner reasons about: the whole vector (tune.h). */
static size_t task_bytes(const struct coll_task* t, int n) {
  size_t es = dtype_size(t->dtype);
  switch (t->kind) {
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER:
    case COLL_ALLTOALL:
    case COLL_GATHER:
    case COLL_SCATTER:
      return t->count * es * (size_t)n;
    default:
      return t->count * es;
  }
}

/* The families that read peers' buffers directly (direct.c). */
#define DIRECT_ALGOS \
  (TUNE_ALGO_BIT(TUNE_ONESHOT) | TUNE_ALGO_BIT(TUNE_TWOSHOT) | TUNE_ALGO_BIT(TUNE_READ))

unsigned algo_available(enum coll_kind kind) {
  unsigned avail = 0;
  if ((unsigned)kind >= COLL_SEND) return 0;
  for (int g = 0; g < TUNE_ALGO_COUNT; g++)
    if (generators[kind][g]) avail |= TUNE_ALGO_BIT(g);
  return avail;
}

unsigned algo_candidates(enum coll_kind kind, int direct, int lines, int deterministic,
                         const struct tune_consts* k) {
  unsigned avail = algo_available(kind);
  /* Direct plans read the peers' buffers with loads or cross-memory
   * attach: host memory only. */
  if (!direct) avail &= ~DIRECT_ALGOS;
  if (!lines) avail &= ~TUNE_ALGO_BIT(TUNE_LINES);
  /* Two levels need two levels: several hosts, several ranks on each, the
   * same number everywhere. */
  if (k->nhosts < 2 || k->local < 2 || !k->even) avail &= ~TUNE_ALGO_BIT(TUNE_HIER);
  /* Deterministic reductions are folded in rank order, by the ordered
   * family, which serves nothing else (ordered.c), and by lines, which fold
   * in rank order always (lines.c). */
  if (deterministic && (avail & TUNE_ALGO_BIT(TUNE_ORDERED)))
    avail = TUNE_ALGO_BIT(TUNE_ORDERED) | (avail & TUNE_ALGO_BIT(TUNE_LINES));
  else
    avail &= ~TUNE_ALGO_BIT(TUNE_ORDERED);
  return avail;
}

/* coll_args.distinct: whether t's plan may count on SEND and RECV being
 * two buffers. Only all-to-all's plans differ (the direct plan's one copy
 * instead of two, pairwise's receives straight into RECV instead of through
 * scratch); for the other kinds it stays 0, so that in-place and
 * out-of-place calls share one cached plan. Ranks of one call may differ in
 * it: both of read_alltoall_build's forms have the same syncs, and peers
 * read only SEND, which neither writes between them; both of pairwise's
 * have the same exchanges and differ in local copies only. */
static int task_distinct(const struct coll_task* t) {
  return t->kind == COLL_ALLTOALL && t->sendbuff != t->recvbuff;
}

loomResult_t algo_plan(const struct coll_task* t, struct plan* out) {
  return algo_plan_rank(t, t->comm->rank, out);
}

loomResult_t algo_plan_rank(const struct coll_task* t, int rank, struct plan* out) {
  struct loom_comm* comm = t->comm;
  int n = comm->nranks;
  size_t es = dtype_size(t->dtype);
  struct coll_args a = {0};
  a.nranks = n;
  a.rank = rank;
  a.count = t->count;
  a.slice_elems = LOOM_MAX(params_get()->slice_size / es, (size_t)1);
  a.premul = redop_is_premul(t->op);
  a.avg = t->op == loomAvg;
  a.root = t->root;
  a.distinct = task_distinct(t);
  if (t->kind == COLL_ALLTOALLV) {
    a.sendcounts = t->v;
    a.sdispls = t->v + n;
    a.recvcounts = t->v + 2 * n;
    a.rdispls = t->v + 3 * n;
  }
  const struct tune_consts* k = &comm->coll->tune;
  /* Lines: host memory among the ranks of one host, what one rank puts
   * fitting them (all-reduce, reduce: the vector; all-gather: its block;
   * reduce-scatter, all-to-all: its whole input). */
  size_t put = task_bytes(t, n) / (t->kind == COLL_ALLGATHER ? (size_t)n : 1);
  int lines = tp_lines_ok(comm) && t->mem == MEM_HOST && put <= TP_LINES_BYTES;
  unsigned avail = algo_candidates(t->kind, tp_direct_ok(comm) && t->mem == MEM_HOST, lines,
                                   comm->deterministic, k);
  if (!avail)
    return err_set(comm, loomInternalError, "no algorithm can serve collective kind %d", t->kind);
  enum tune_algo algo =
      tune_pick(k, (enum tune_coll)t->kind, n, task_bytes(t, n), a.slice_elems * es, avail);
  if (algo == TUNE_HIER) {
    a.host_of = comm->coll->host_of;
    a.cross_algo =
        tune_hier_cross(k, k->nhosts, task_bytes(t, n) / (size_t)k->local, a.slice_elems * es);
  }
  plan_init(out, rank, n, tune_algo_name(algo));
  if (rank == comm->rank)
    LOOM_TRACE(SUB_TUNE, "rank %d: %s of %zu bytes by %s%s%s", comm->rank,
               tune_coll_name((enum tune_coll)t->kind), task_bytes(t, n), tune_algo_name(algo),
               algo == TUNE_HIER ? ", across hosts by " : "",
               algo == TUNE_HIER ? tune_algo_name((enum tune_algo)a.cross_algo) : "");
  return generators[t->kind][algo](&a, out);
}

struct plan_obj* plan_obj_new(void) {
  struct plan_obj* o = calloc(1, sizeof(*o));
  if (o) atomic_init(&o->refs, 1);
  return o;
}

void plan_obj_count(struct plan_obj* o, struct loom_comm* comm) {
  o->comm = comm;
  o->bytes = sizeof(*o) + o->plan.steps_cap * sizeof(*o->plan.steps) +
             o->plan.ops_cap * sizeof(*o->plan.ops);
  memstat_add(comm, MEM_PLANS, -1, o->bytes);
}

void plan_obj_unref(struct plan_obj* o) {
  if (!o || atomic_fetch_sub(&o->refs, 1) != 1) return;
  memstat_sub(o->comm, MEM_PLANS, -1, o->bytes);
  if (o->dag) dag_free(o->dag, 1);
  free(o->dag);
  plan_free(&o->plan);
  free(o);
}

/* Builds t's plan into a new plan_obj. */
static loomResult_t plan_obj_build(const struct coll_task* t, struct plan_obj** out) {
  struct plan_obj* o = plan_obj_new();
  if (!o) return err_set(t->comm, loomSystemError, "out of memory for a plan");
  loomResult_t r = algo_plan(t, &o->plan);
  if (r != loomSuccess) {
    plan_obj_unref(o);
    return r;
  }
  plan_obj_count(o, t->comm);
  *out = o;
  return loomSuccess;
}

loomResult_t algo_plan_cached(const struct coll_task* t, struct plan_obj** out) {
  struct coll_comm* cc = t->comm->coll;
  if (t->kind == COLL_ALLTOALLV) return plan_obj_build(t, out);
  struct plan_key key;
  memset(&key, 0, sizeof(key)); /* compared with memcmp: no stray padding */
  key.kind = t->kind;
  key.count = t->count;
  key.esize = dtype_size(t->dtype);
  key.premul = redop_is_premul(t->op);
  key.avg = t->op == loomAvg;
  key.root = t->root;
  key.mem = t->mem;
  key.distinct = task_distinct(t);
  for (int i = 0; i < PLAN_CACHE; i++)
    if (cc->plans[i].obj && memcmp(&cc->plans[i].key, &key, sizeof(key)) == 0) {
      atomic_fetch_add(&cc->plans[i].obj->refs, 1);
      *out = cc->plans[i].obj;
      return loomSuccess;
    }
  struct plan_obj* o = NULL;
  LOOM_CHECK(plan_obj_build(t, &o));
  int slot = cc->plans_next;
  cc->plans_next = (slot + 1) % PLAN_CACHE;
  plan_obj_unref(cc->plans[slot].obj); /* launches still running it keep theirs */
  cc->plans[slot].key = key;
  cc->plans[slot].obj = o;
  atomic_fetch_add(&o->refs, 1); /* the cache's and the caller's */
  *out = o;
  return loomSuccess;
}
