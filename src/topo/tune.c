/* tune.c - the cost model and the choice it makes. */
#include "topo/tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/debug.h"
#include "core/params.h"
#include "core/util.h"

static const char* const algo_names[TUNE_ALGO_COUNT] = {
    "ring",    "tree", "rhd",  "pairwise", "bruck",   "direct", "oneshot",
    "twoshot", "read", "hier", "doubling", "ordered", "lines"};
static const char* const coll_names[TUNE_COLL_COUNT] = {
#define COLL(id, token, text, flags) token,
#include "core/colls.def"
#undef COLL
};

const char* tune_algo_name(enum tune_algo a) {
  return (unsigned)a < TUNE_ALGO_COUNT ? algo_names[a] : "unknown";
}
const char* tune_coll_name(enum tune_coll c) {
  return (unsigned)c < TUNE_COLL_COUNT ? coll_names[c] : "unknown";
}
int tune_algo_parse(const char* name) {
  for (int a = 0; a < TUNE_ALGO_COUNT; a++)
    if (strcasecmp(name, algo_names[a]) == 0) return a;
  return -1;
}

static const char* const proto_names[TUNE_PROTO_COUNT] = {"simple"};

const char* tune_proto_name(enum tune_proto p) {
  return (unsigned)p < TUNE_PROTO_COUNT ? proto_names[p] : "unknown";
}

int tune_proto_parse(const char* name) {
  for (int p = 0; p < TUNE_PROTO_COUNT; p++)
    if (strcasecmp(name, proto_names[p]) == 0) return p;
  return -1;
}

loomResult_t tune_proto_check(const char* name) {
  if (!name || !*name || tune_proto_parse(name) >= 0) return loomSuccess;
  char why[160], acc[160];
  snprintf(why, sizeof(why), "'%s' is not a protocol of the host path", name);
  size_t used = 0;
  for (int p = 0; p < TUNE_PROTO_COUNT; p++)
    used += (size_t)snprintf(acc + used, sizeof(acc) - used, "%s%s", p ? ", " : "", proto_names[p]);
  snprintf(acc + used, sizeof(acc) - used, ", or empty for the tuner's choice");
  return params_reject("LOOM_PROTO", why, acc);
}

int tune_proto_forced(void) {
  const char* want = params_get()->proto;
  return want && *want && tune_proto_parse(want) >= 0;
}

enum tune_proto tune_proto_pick(void) {
  if (tune_proto_forced()) return (enum tune_proto)tune_proto_parse(params_get()->proto);
  return TUNE_PROTO_SIMPLE; /* the model has nothing to weigh yet */
}

/* Checks the names of LOOM_ALGO ("family" or "coll:family;..."; its syntax
 * was checked by params.c). */
loomResult_t tune_algo_check(const char* spec) {
  char buf[256], why[160], acc[400];
  size_t used = (size_t)snprintf(acc, sizeof(acc), "a family (");
  for (int a = 0; a < TUNE_ALGO_COUNT; a++)
    used += (size_t)snprintf(acc + used, sizeof(acc) - used, "%s%s", a ? ", " : "", algo_names[a]);
  used += (size_t)snprintf(acc + used, sizeof(acc) - used,
                           "), or coll:family pairs separated by ; "
                           "where coll is ");
  for (int c = 0; c < TUNE_COLL_COUNT && used < sizeof(acc); c++)
    used += (size_t)snprintf(acc + used, sizeof(acc) - used, "%s%s", c ? ", " : "", coll_names[c]);
  if (!spec || !*spec) return loomSuccess;
  snprintf(buf, sizeof(buf), "%s", spec);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
    char* colon = strchr(tok, ':');
    const char* family = colon ? colon + 1 : tok;
    if (colon) {
      *colon = '\0';
      int c = 0;
      while (c < TUNE_COLL_COUNT && strcasecmp(tok, coll_names[c]) != 0) c++;
      if (c == TUNE_COLL_COUNT) {
        snprintf(why, sizeof(why), "'%s' is not a collective", tok);
        return params_reject("LOOM_ALGO", why, acc);
      }
    }
    if (tune_algo_parse(family) < 0) {
      snprintf(why, sizeof(why), "'%s' is not an algorithm family", family);
      return params_reject("LOOM_ALGO", why, acc);
    }
  }
  return loomSuccess;
}

/* ---- The model ---- */

static double slices(double bytes, double slice) {
  return bytes <= 0 ? 0 : ceil(bytes / slice);
}
static int log2_floor(int n) {
  int k = 0;
  while ((2 << k) <= n) k++;
  return k;
}
static int log2_ceil(int n) {
  int k = 0;
  while ((1 << k) < n) k++;
  return k;
}

/* A table of the calibration at the buffer size S, bytes per microsecond:
 * log-linear between its points, the nearest point outside them; the
 * single figure when the table is not all there (a tuning file without it). */
static double at_size(const double* table, double single, double S) {
  for (int p = 0; p < TUNE_CAL_POINTS; p++)
    if (!(table[p] > 0)) return single * 1e3;
  double x = log2(fmax(S, 1) / TUNE_CAL_FIRST) / 2; /* in points */
  if (x <= 0) return table[0] * 1e3;
  if (x >= TUNE_CAL_POINTS - 1) return table[TUNE_CAL_POINTS - 1] * 1e3;
  int p = (int)x;
  double f = x - p;
  return (table[p] * (1 - f) + table[p + 1] * f) * 1e3;
}

/* Copy bandwidth through a FIFO and reduction bandwidth at buffer size S. */
static double copy_bw(const struct tune_consts* k, double S) {
  return at_size(k->copy_at, k->copy_gbps, S);
}
static double reduce_bw(const struct tune_consts* k, double S) {
  return at_size(k->reduce_at, k->reduce_gbps, S);
}

/* A pipelined chain or tree: the first slice takes depth hops, the rest
 * follow one slice time apart. fan is how many children each hop feeds. */
static double pipeline_us(const struct tune_consts* k, int depth, double bytes, double slice,
                          int fan) {
  double ns = slices(bytes, slice), sl = fmin(slice, bytes);
  double per = k->step_us + fan * sl / copy_bw(k, bytes);
  return (depth - 1 + ns) * per;
}

/* A sync of n ranks: each waits for the slowest of n flags, about a step
 * per doubling. */
static double sync_us(const struct tune_consts* k, int n) {
  return k->step_us * log2_ceil(n);
}

/* The fixed cost of one direct read: a system call between processes. */
static double read_call(const struct tune_consts* k) {
  return k->read_gbps > 0 ? k->read_call_us : k->cma_us;
}

/* Bytes per microsecond of a direct plan's reads at buffer size S: loads
 * (thread ranks) scale with size as the copy does; cross-memory attach has
 * its own table; with neither, the copy's. */
static double read_bw(const struct tune_consts* k, double S) {
  if (k->read_gbps > 0) return k->read_gbps * copy_bw(k, S) / k->copy_gbps;
  if (k->cma_gbps > 0) return at_size(k->cma_at, k->cma_gbps, S);
  return copy_bw(k, S);
}

/* Microseconds to read `bytes` from peers and fold them into one's own, at
 * buffer size S: between processes the calibration measured the two
 * together, as one-shot and two-shot do them (a bounce buffer at a time:
 * they share the caches, and the pair ran at a third to a half of the read
 * alone on a machine where adding the two figures made two-shot the choice
 * at 2-3x the ring's time); loads (thread ranks), or a tuning file without
 * the table: the read, then the reduction. */
static double read_reduce_us(const struct tune_consts* k, double bytes, double S) {
  int table = 1;
  for (int p = 0; p < TUNE_CAL_POINTS; p++) table = table && k->cma_reduce_at[p] > 0;
  if (k->read_gbps <= 0 && k->cma_gbps > 0 && table) return bytes / at_size(k->cma_reduce_at, 0, S);
  return bytes / read_bw(k, S) + bytes / reduce_bw(k, S);
}

/* TUNE_ORDERED's reduce-scatter: per piece, one exchange with every peer and
 * n - 1 local fold steps (each about a step's latency); the ring's volume. */
static double ordered_us(const struct tune_consts* k, int n, double S, double sl) {
  double B = copy_bw(k, S), R = reduce_bw(k, S);
  return slices(S / n, sl) * n * k->step_us + (double)(n - 1) / n * S / B +
         (double)(n - 1) / n * S / R;
}

static double allreduce_us(const struct tune_consts* k, enum tune_algo a, int n, double S,
                           double sl) {
  double B = copy_bw(k, S), R = reduce_bw(k, S);
  switch (a) {
    case TUNE_RING:
      return 2 * (n - 1) * slices(S / n, sl) * k->step_us + 2.0 * (n - 1) / n * S / B +
             (double)(n - 1) / n * S / R;
    case TUNE_TREE: {
      /* Both trees run at once, each with half the data: about 2.5 log2 n
       * rounds of latency (up with a stagger per level, then down), then one
       * round per slice, paced by the busiest rank. At 2 ranks each rank is
       * the root of one tree and the leaf of the other: a slice in and one
       * out a round. From 3 ranks the busiest moves twice that (tree.c): with
       * two children in one tree and a leaf in the other, two slices in and
       * one out on the way up, one in and two out on the way down, one each
       * way as the leaf; 2 S in all, where the ring moves 2 (n - 1) / n S
       * (at 4 ranks on 2 cores the tree took 1.1-1.5x the ring's time from
       * 1 MiB up, docs/PERFORMANCE.md). */
      double rounds = 2.5 * log2(n) + slices(S / 2, sl), per = n > 2 ? 4 : 2;
      return rounds * (k->step_us + per * fmin(sl, S / 2) / B) + S / R;
    }
    case TUNE_RHD: {
      int p = 1 << log2_floor(n), lg = log2_floor(n);
      double t = 0;
      for (int i = 1; i <= lg; i++) t += 2 * slices(S / (1 << i), sl) * k->step_us;
      t += 2.0 * (p - 1) / p * S / B + (double)(p - 1) / p * S / R;
      if (p != n) t += 2 * slices(S, sl) * k->step_us + 2 * S / B + S / R;
      return t;
    }
    case TUNE_DOUBLING: {
      int lg = log2_floor(n), rounds = lg + (1 << lg != n ? 2 : 0);
      return rounds * (slices(S, sl) * k->step_us + S / B + S / R);
    }
    case TUNE_ORDERED:
      return ordered_us(k, n, S, sl) + k->step_us + (double)(n - 1) / n * S / B;
    /* Direct reads: a sync is about one step; each byte read from a peer
     * is one copy (cross-memory attach) or a load before it is reduced. */
    case TUNE_ONESHOT: {
      double reads = (n - 1) * slices(S, sl);
      return 2 * sync_us(k, n) + reads * read_call(k) + read_reduce_us(k, (n - 1) * S, S) +
             2 * S / B;
    }
    case TUNE_TWOSHOT: {
      double reads = (n - 1) * (slices(S / n, sl) + 1);
      /* Its own block copied, the peers' blocks read and folded in, then
       * the other blocks read. */
      double part = (double)(n - 1) / n * S;
      return 3 * sync_us(k, n) + reads * read_call(k) + S / n / B + read_reduce_us(k, part, S) +
             part / read_bw(k, S);
    }
    default:
      return -1;
  }
}

/* The single-read plans of direct.c (TUNE_READ). */
static double read_us(const struct tune_consts* k, enum tune_coll coll, int n, double S) {
  double B = 2 * copy_bw(k, S), D = read_bw(k, S);
  double part = (double)(n - 1) / n * S, calls = (n - 1) * read_call(k);
  switch (coll) {
    case TUNE_ALLGATHER:
      return 2 * sync_us(k, n) + calls + part / D + S / n / B;
    case TUNE_REDUCESCATTER:
      return 2 * sync_us(k, n) + calls + read_reduce_us(k, part, S);
    case TUNE_BROADCAST:
      return 2 * sync_us(k, n) + read_call(k) + S / D;
    /* Out of place, the common case, each block is read into its place
     * (one copy); in place they are staged and copied out once more. */
    case TUNE_ALLTOALL:
      return 2 * sync_us(k, n) + calls + part / D + S / n / B;
    default:
      return -1;
  }
}

/* TUNE_LINES: every rank puts what its peers need into its lines, then
 * reads every rank's, its own included, each as soon as it is there: one
 * exchange instead of a step per exchange (the calibrated fraction of a
 * step), then the bytes at the calibrated rate of the lines (a put and a
 * peer's read of the same bytes, half each). Only up to TUNE_LINES_BYTES. */
static double lines_us(const struct tune_consts* k, enum tune_coll coll, int n, double S) {
  double L = k->lines_gbps > 0 ? k->lines_gbps * 1e3 : copy_bw(k, S) / 4;
  double R = reduce_bw(k, S);
  double hop = k->lines_step > 0 ? k->lines_step * k->step_us : fmax(k->step_us - 1, 0.05) / 4;
  double put = coll == TUNE_ALLGATHER ? S / n : S, half = 2 * L, B = copy_bw(k, S);
  if (put > TUNE_LINES_BYTES) return -1;
  switch (coll) {
    case TUNE_ALLREDUCE:
    case TUNE_REDUCE: /* the root's part: the others run ahead */
      return hop + put / half + n * put / half + (n - 1) * put / R;
    case TUNE_ALLGATHER: /* its own block copied, the others' read */
      return hop + put / half + (n - 1) * put / half + put / B;
    case TUNE_REDUCESCATTER:
      return hop + put / half + put / half + (double)(n - 1) / n * put / R;
    case TUNE_ALLTOALL: /* the whole input in, a block from each other rank out */
      return hop + put / half + (double)(n - 1) / n * put / half + put / n / B;
    case TUNE_BROADCAST: /* the root runs ahead: no hand-off back to it */
      return hop + put / half + put / half;
    default:
      return -1;
  }
}

/* The network's constants, defaulted when the tuning file left them out. */
static double net_gbps(const struct tune_consts* k) {
  return k->net_gbps > 0 ? k->net_gbps : 1.25;
}
static double net_us(const struct tune_consts* k) {
  return k->net_us > 0 ? k->net_us : 25;
}

/* The constants a flat algorithm sees on a communicator that spans hosts:
 * each step waits for a network message, and the network's bandwidth is
 * shared by the flows that leave a host at once. */
static struct tune_consts across(const struct tune_consts* k, int flows) {
  struct tune_consts f = *k;
  f.step_us = fmax(k->step_us, net_us(k));
  double cap = net_gbps(k) / LOOM_MAX(flows, 1);
  f.copy_gbps = fmin(k->copy_gbps, cap);
  for (int p = 0; p < TUNE_CAL_POINTS; p++)
    if (f.copy_at[p] > 0) f.copy_at[p] = fmin(f.copy_at[p], cap);
  f.nhosts = 1;
  return f;
}

/* One host's ranks: the ones that share its cores. */
static int ranks_here(const struct tune_consts* k, int n) {
  return k->nhosts > 1 && k->local > 0 ? k->local : n;
}

/* The flat algorithms, all ranks alike (the caller sets the constants). */
static double flat_us(const struct tune_consts* k, enum tune_coll coll, enum tune_algo a, int n,
                      double S, double sl) {
  double B = copy_bw(k, S), R = reduce_bw(k, S);
  double t = -1;
  if (a == TUNE_READ) return read_us(k, coll, n, S);
  if (a == TUNE_LINES) return lines_us(k, coll, n, S);
  switch (coll) {
    case TUNE_ALLREDUCE:
      t = allreduce_us(k, a, n, S, sl);
      break;
    case TUNE_BROADCAST:
    case TUNE_REDUCE: {
      double red = coll == TUNE_REDUCE ? S / R : 0;
      if (a == TUNE_RING) t = pipeline_us(k, n - 1, S, sl, 1) + red;
      if (a == TUNE_ORDERED && coll == TUNE_REDUCE)
        t = ordered_us(k, n, S, sl) + k->step_us + (double)(n - 1) / n * S / B;
      if (a == TUNE_TREE) {
        double lat = coll == TUNE_REDUCE ? 1.5 * log2(n) + 1 : log2(n) + 1;
        t = (lat + slices(S / 2, sl)) * (k->step_us + 2 * fmin(sl, S / 2) / B) + red;
      }
      break;
    }
    case TUNE_ALLGATHER:
    case TUNE_REDUCESCATTER: {
      if (a == TUNE_ORDERED) {
        t = coll == TUNE_REDUCESCATTER ? ordered_us(k, n, S, sl) : -1;
        break;
      }
      double red = coll == TUNE_REDUCESCATTER ? (double)(n - 1) / n * S / R : 0;
      double bw = (double)(n - 1) / n * S / B + red;
      if (a == TUNE_RING) t = (n - 1) * slices(S / n, sl) * k->step_us + bw;
      if (a == TUNE_RHD) {
        int p = 1 << log2_floor(n), lg = log2_floor(n);
        t = bw;
        for (int i = 0; i < lg; i++) t += slices(S * (1 << i) / n, sl) * k->step_us;
        if (p != n) t += 2 * slices(S / n, sl) * k->step_us + S / n / B;
      }
      break;
    }
    case TUNE_ALLTOALL:
    case TUNE_ALLTOALLV:
      if (a == TUNE_PAIRWISE)
        t = (n - 1) * slices(S / n, sl) * k->step_us + (double)(n - 1) / n * S / B;
      /* Bruck: half the buffer a round, and a rotation of all of it before and
       * after, local copies at twice the rate of a FIFO's (one copy, not two). */
      if (a == TUNE_BRUCK && coll == TUNE_ALLTOALL)
        t = log2_ceil(n) * (k->step_us + S / 2 / B) + S / B;
      break;
    case TUNE_GATHER:
    case TUNE_SCATTER:
      if (a == TUNE_DIRECT) t = k->step_us + (double)(n - 1) / n * S / B;
      break;
    default:
      break;
  }
  return t;
}

/* The cross-host phase of TUNE_HIER sees the network shared by the host's
 * local ranks, each running its own all-reduce at once. */
static struct tune_consts cross_consts(const struct tune_consts* k) {
  return across(k, k->local);
}

enum tune_algo tune_hier_cross(const struct tune_consts* k, int nhosts, size_t part_bytes,
                               size_t slice_bytes) {
  struct tune_consts net = cross_consts(k);
  double S = (double)part_bytes, sl = (double)LOOM_MAX(slice_bytes, (size_t)64);
  static const enum tune_algo fams[] = {TUNE_RING, TUNE_TREE, TUNE_RHD, TUNE_DOUBLING};
  enum tune_algo best = TUNE_RING;
  double best_t = -1;
  for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
    double t = allreduce_us(&net, fams[i], nhosts, S, sl);
    if (t >= 0 && (best_t < 0 || t < best_t)) best = fams[i], best_t = t;
  }
  return best;
}

/* TUNE_HIER: a ring reduce-scatter among the L ranks of each host, the
 * cross-host all-reduce of each rank's 1/L part among the H ranks that hold
 * the same part (L of them per host at once), a ring all-gather inside. */
static double hier_us(const struct tune_consts* k, double S, double sl) {
  int L = k->local, H = k->nhosts;
  if (H < 2 || L < 2 || !k->even) return -1;
  double B = copy_bw(k, S), R = reduce_bw(k, S);
  double steps = (L - 1) * slices(S / L, sl) * k->step_us, part = (double)(L - 1) / L * S;
  struct tune_consts net = cross_consts(k);
  double cross =
      allreduce_us(&net, tune_hier_cross(k, H, (size_t)(S / L), (size_t)sl), H, S / L, sl);
  return 2 * steps + 2 * part / B + part / R + cross;
}

/* The exchanges of a plan that wait on a peer, one after another: the
 * latency terms of the model, without the slices that follow the first one
 * (a pipeline's rank runs on through its FIFO's slots without waiting for a
 * core each slice). None for the rooted collectives: their data flows one
 * way, each rank waits only for ranks upstream of it, so calls back to back
 * pipeline (a broadcast's root and a reduce's leaves run calls ahead) and a
 * hand-off is paid once per FIFO's worth of calls, not per call. */
static double exchanges(enum tune_coll coll, enum tune_algo a, int n) {
  double lg = log2_ceil(n);
  if (coll == TUNE_BROADCAST || coll == TUNE_REDUCE || coll == TUNE_GATHER || coll == TUNE_SCATTER)
    return 0;
  switch (a) {
    case TUNE_LINES:
    case TUNE_DIRECT:
      return 1;
    case TUNE_ONESHOT:
      return 2 * lg;
    case TUNE_TWOSHOT:
    case TUNE_READ:
      return (a == TUNE_TWOSHOT ? 3 : 2) * lg;
    case TUNE_BRUCK:
      return lg;
    case TUNE_PAIRWISE:
      return n - 1;
    case TUNE_DOUBLING:
      return log2_floor(n) + ((1 << log2_floor(n)) != n ? 2 : 0);
    case TUNE_RHD:
      return (coll == TUNE_ALLREDUCE ? 2 : 1) * log2_floor(n) + ((1 << log2_floor(n)) != n ? 2 : 0);
    case TUNE_TREE: /* all-reduce: up the trees, then down */
      return 2.5 * log2(n);
    case TUNE_ORDERED:
      return n;
    case TUNE_HIER:
    case TUNE_RING:
    default:
      return coll == TUNE_ALLREDUCE ? 2 * (n - 1) : n - 1;
  }
}

double tune_predict_us(const struct tune_consts* k, enum tune_coll coll, enum tune_algo a,
                       int nranks, size_t bytes_in, size_t slice_bytes) {
  int n = nranks;
  double S = (double)bytes_in, sl = (double)LOOM_MAX(slice_bytes, (size_t)64);
  double t = -1;
  if (n <= 1)
    return a == TUNE_RING || a == TUNE_PAIRWISE || a == TUNE_DIRECT ? S / copy_bw(k, S) : -1;
  if (a == TUNE_HIER) {
    t = coll == TUNE_ALLREDUCE ? hier_us(k, S, sl) : -1;
  } else if (a == TUNE_LINES && k->nhosts > 1) {
    t = -1; /* lines live in one host's shared memory */
  } else if (k->nhosts > 1) {
    /* A ring's only crossing flows are its edges between hosts; the other
     * families may send from every local rank at once. */
    struct tune_consts f = across(k, a == TUNE_RING ? k->ring_cross : k->local);
    t = flat_us(&f, coll, a, n, S, sl);
  } else {
    t = flat_us(k, coll, a, n, S, sl);
  }
  /* Ranks beyond the cores take turns on them, and an exchange whose peer
   * holds no core waits for a hand-off of one. */
  int here = ranks_here(k, n);
  if (t > 0 && here > k->ncpus) {
    double turns = (double)here / k->ncpus;
    t *= turns;
    double extra = k->handoff_us - k->step_us * turns;
    if (extra > 0) t += exchanges(coll, a, n) * extra;
  }
  return t;
}

enum tune_algo tune_pick_model(const struct tune_consts* k, enum tune_coll coll, int nranks,
                               size_t bytes, size_t slice_bytes, unsigned avail) {
  enum tune_algo best = TUNE_ALGO_COUNT;
  double best_t = 0;
  for (int a = 0; a < TUNE_ALGO_COUNT; a++) {
    if (!(avail & TUNE_ALGO_BIT(a))) continue;
    double t = tune_predict_us(k, coll, (enum tune_algo)a, nranks, bytes, slice_bytes);
    if (t < 0) continue;
    if (best == TUNE_ALGO_COUNT || t < best_t) {
      best = (enum tune_algo)a;
      best_t = t;
    }
  }
  if (best == TUNE_ALGO_COUNT) /* nothing predicted: the first available */
    for (int a = TUNE_ALGO_COUNT - 1; a >= 0; a--)
      if (avail & TUNE_ALGO_BIT(a)) best = (enum tune_algo)a;
  return best;
}

/* LOOM_ALGO is "name" or "coll:name;coll:name". Returns the name forced for
 * coll, or NULL. */
static const char* forced_for(const char* spec, const char* coll, char* buf, size_t len) {
  if (!spec || !*spec) return NULL;
  snprintf(buf, len, "%s", spec);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
    char* colon = strchr(tok, ':');
    if (!colon) return tok;
    *colon = '\0';
    if (strcasecmp(tok, coll) == 0) return colon + 1;
  }
  return NULL;
}

enum tune_algo tune_pick(const struct tune_consts* k, enum tune_coll coll, int nranks, size_t bytes,
                         size_t slice_bytes, unsigned avail) {
  char buf[256];
  const char* want = forced_for(params_get()->algo, tune_coll_name(coll), buf, sizeof(buf));
  if (want) {
    int a = tune_algo_parse(want);
    if (a >= 0 && (avail & TUNE_ALGO_BIT(a))) return (enum tune_algo)a;
    enum tune_algo m = tune_pick_model(k, coll, nranks, bytes, slice_bytes, avail);
    LOOM_INFO(SUB_TUNE, "LOOM_ALGO asks for '%s', which cannot serve %s; using %s", want,
              tune_coll_name(coll), tune_algo_name(m));
    return m;
  }
  return tune_pick_model(k, coll, nranks, bytes, slice_bytes, avail);
}
