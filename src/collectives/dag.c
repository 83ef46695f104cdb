/* dag.c - a call's plans as a graph of steps (dag.h). */
#include "collectives/dag.h"

#include <stdlib.h>
#include <string.h>

#include "core/checks.h"

/* An op's place: the step that holds it, and its index in the plan. */
struct op_at {
  uint32_t step, op;
};
/* A wait being collected: rank `rank`'s step `step` waits until `peer` has
 * done `on` steps. */
struct edge {
  int32_t rank, peer;
  uint32_t step, on;
};

static int edge_cmp(const void* x, const void* y) {
  const struct edge *a = x, *b = y;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  if (a->step != b->step) return a->step < b->step ? -1 : 1;
  if (a->peer != b->peer) return a->peer < b->peer ? -1 : 1;
  return a->on < b->on ? -1 : a->on > b->on;
}

static int op_supported(unsigned kind) {
  return kind == OP_SEND || kind == OP_RECV || kind == OP_RECV_REDUCE || kind == OP_COPY ||
         kind == OP_REDUCE || kind == OP_PREMUL || kind == OP_DIV;
}

/* The sends of every ordered pair (a -> b) in order: pair_begin[a * n + b]
 * indexes into `at`. */
struct sends {
  size_t* pair_begin; /* n * n + 1 */
  struct op_at* at;
};

static loomResult_t sends_index(const struct plan* plans, int n, struct sends* s) {
  size_t total = 0, npairs = (size_t)n * (size_t)n;
  s->pair_begin = calloc(npairs + 1, sizeof *s->pair_begin);
  if (!s->pair_begin) return loomSystemError;
  for (int a = 0; a < n; a++)
    for (uint32_t i = 0; i < plans[a].nops; i++) {
      const struct plan_op* o = &plans[a].ops[i];
      if (!op_supported(o->kind))
        return err_set(NULL, loomInvalidUsage,
                       "dag: rank %d's %s plan has a %s op, which a queued executor cannot run", a,
                       plans[a].algo, plan_op_name(o->kind));
      if (o->kind != OP_SEND) continue;
      if (o->peer < 0 || o->peer >= n)
        return err_set(NULL, loomInvalidUsage, "dag: rank %d sends to rank %d of %d", a, o->peer,
                       n);
      s->pair_begin[(size_t)a * n + o->peer + 1]++;
      total++;
    }
  for (size_t p = 0; p < npairs; p++) s->pair_begin[p + 1] += s->pair_begin[p];
  s->at = malloc((total ? total : 1) * sizeof *s->at);
  size_t* fill = malloc(npairs * sizeof *fill);
  if (!s->at || !fill) {
    free(fill);
    return loomSystemError;
  }
  memcpy(fill, s->pair_begin, npairs * sizeof *fill);
  for (int a = 0; a < n; a++)
    for (uint32_t k = 0; k < plans[a].nsteps; k++)
      for (uint32_t i = plans[a].steps[k].op_begin; i < plans[a].steps[k].op_end; i++)
        if (plans[a].ops[i].kind == OP_SEND) {
          struct op_at at = {k, i};
          s->at[fill[(size_t)a * n + plans[a].ops[i].peer]++] = at;
        }
  free(fill);
  return loomSuccess;
}

static loomResult_t ranks_alloc(const struct plan* plans, int n, struct dag_rank* out) {
  for (int r = 0; r < n; r++) {
    out[r].nsteps = plans[r].nsteps;
    out[r].wait_begin = calloc((size_t)plans[r].nsteps + 2, sizeof *out[r].wait_begin);
    out[r].read = malloc((plans[r].nops ? plans[r].nops : 1) * sizeof *out[r].read);
    out[r].waits = NULL;
    if (!out[r].wait_begin || !out[r].read) return loomSystemError;
    for (uint32_t i = 0; i < plans[r].nops; i++) out[r].read[i].peer = -1;
  }
  return loomSuccess;
}

/* Matches every receive with its send and collects the waits of both. */
static loomResult_t match(const struct plan* plans, int n, const struct sends* s,
                          struct dag_rank* out, struct edge* e, size_t* ne_out) {
  size_t ne = 0, npairs = (size_t)n * (size_t)n;
  size_t* taken = calloc(npairs, sizeof *taken); /* receives matched per pair */
  if (!taken) return loomSystemError;
  loomResult_t res = loomSuccess;
  for (int b = 0; b < n && res == loomSuccess; b++)
    for (uint32_t r = 0; r < plans[b].nsteps && res == loomSuccess; r++)
      for (uint32_t i = plans[b].steps[r].op_begin; i < plans[b].steps[r].op_end; i++) {
        const struct plan_op* o = &plans[b].ops[i];
        if (o->kind != OP_RECV && o->kind != OP_RECV_REDUCE) continue;
        int a = o->peer;
        size_t pair = (size_t)a * n + b, k = a >= 0 && a < n ? taken[pair]++ : 0;
        if (a < 0 || a >= n || s->pair_begin[pair] + k >= s->pair_begin[pair + 1]) {
          res = err_set(NULL, loomInvalidUsage,
                        "dag: rank %d's receive #%zu from rank %d has no send", b, k, a);
          break;
        }
        struct op_at at = s->at[s->pair_begin[pair] + k];
        const struct plan_op* so = &plans[a].ops[at.op];
        if (so->count != o->count) {
          res = err_set(NULL, loomInvalidUsage,
                        "dag: rank %d sends %zu elements to rank %d, which receives %zu", a,
                        so->count, b, o->count);
          break;
        }
        struct dag_read rd = {a, at.step, so->src};
        out[b].read[i] = rd;
        if (a == b) continue; /* a rank's own steps run in order */
        e[ne++] = (struct edge){b, a, r, at.step};
        e[ne++] = (struct edge){a, b, at.step + 1, r + 1};
      }
  for (size_t p = 0; p < npairs && res == loomSuccess; p++)
    if (taken[p] != s->pair_begin[p + 1] - s->pair_begin[p])
      res =
          err_set(NULL, loomInvalidUsage, "dag: rank %zu sends rank %zu %zu messages, it takes %zu",
                  p / n, p % n, s->pair_begin[p + 1] - s->pair_begin[p], taken[p]);
  free(taken);
  *ne_out = ne;
  return res;
}

/* Sorts the waits, keeps the latest per (rank, step, peer) (waiting for a
 * step waits for the ones before it), and hands each rank its share. */
static loomResult_t waits_store(int n, struct edge* e, size_t ne, struct dag_rank* out) {
  qsort(e, ne, sizeof *e, edge_cmp);
  size_t lo = 0;
  for (int r = 0; r < n; r++) {
    size_t hi = lo, kept = 0;
    while (hi < ne && e[hi].rank == r) hi++;
    out[r].waits = malloc((hi > lo ? hi - lo : 1) * sizeof *out[r].waits);
    if (!out[r].waits) return loomSystemError;
    for (size_t j = lo; j < hi; j++) {
      int last_of_group = j + 1 == hi || e[j + 1].step != e[j].step || e[j + 1].peer != e[j].peer;
      if (!last_of_group) continue;
      out[r].waits[kept++] = (struct dag_wait){e[j].peer, e[j].on};
      out[r].wait_begin[e[j].step + 1]++;
    }
    for (uint32_t k = 0; k <= out[r].nsteps; k++) out[r].wait_begin[k + 1] += out[r].wait_begin[k];
    lo = hi;
  }
  return loomSuccess;
}

loomResult_t dag_build(const struct plan* plans, int nranks, struct dag_rank* out) {
  struct sends s = {NULL, NULL};
  struct edge* e = NULL;
  size_t ne = 0, nrecv = 0;
  memset(out, 0, (size_t)nranks * sizeof *out);
  loomResult_t res = sends_index(plans, nranks, &s);
  if (res == loomSuccess) res = ranks_alloc(plans, nranks, out);
  if (res == loomSuccess) {
    nrecv = s.pair_begin[(size_t)nranks * nranks];
    e = malloc((2 * nrecv + 1) * sizeof *e);
    if (!e) res = loomSystemError;
  }
  if (res == loomSuccess) res = match(plans, nranks, &s, out, e, &ne);
  if (res == loomSuccess) res = waits_store(nranks, e, ne, out);
  free(e);
  free(s.pair_begin);
  free(s.at);
  if (res == loomSystemError) err_set(NULL, res, "dag: out of memory for %d plans", nranks);
  if (res != loomSuccess) dag_free(out, nranks);
  return res;
}

void dag_free(struct dag_rank* ranks, int nranks) {
  for (int r = 0; r < nranks; r++) {
    free(ranks[r].wait_begin);
    free(ranks[r].waits);
    free(ranks[r].read);
    memset(&ranks[r], 0, sizeof ranks[r]);
  }
}
