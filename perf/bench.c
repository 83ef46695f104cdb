/* bench.c - the timed sweep, as nccl-tests' TimeTest and BenchTime do it:
 *
 *   per test (datatype x op x root): a warm-up over the sizes (doubling, out of place), then
 *   per size and placement: one call (with check values when -c), a barrier, -n timed
 *   iterations of -m calls each, the mean time of one call reduced across ranks (-a), and -c
 *   checked calls whose wrong elements are summed over the ranks.
 *
 * Each iteration moves its buffers by one row's extent within max_bytes, as nccl-tests does,
 * so that consecutive calls do not find their data in cache. */
#include <math.h>
#include <time.h>

#include "harness.h"

struct bench_case {
  loomDataType_t type;
  int op;   /* -1: none */
  int root; /* -1: none */
};

struct bench_size {
  struct perf_counts cnt;
  size_t send_bytes, recv_bytes, extent; /* extent: the larger of the two */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void bench_setup(const struct perf_thread* t, loomDataType_t type, size_t size,
                        struct bench_size* bs) {
  size_t es = dtype_size(type);
  t->w->coll->counts(size / es, es, t->w->nranks, &bs->cnt);
  bs->send_bytes = bs->cnt.send * es;
  bs->recv_bytes = bs->cnt.recv * es;
  bs->extent = bs->send_bytes > bs->recv_bytes ? bs->send_bytes : bs->recv_bytes;
}

static loomRedOp_t op_of(const struct perf_rank* r, int op) {
  if (op == PERF_OP_MULSUM) return r->premul;
  return op < 0 ? loomSum : (loomRedOp_t)op;
}

static int coll_failed(struct perf_thread* t, loomResult_t res) {
  const char* last = loomGetLastError(t->ranks[0].comm);
  perf_fail(t, &t->ranks[0], "the benchmarked call failed: %s%s%s", loomGetErrorString(res),
            *last ? ": " : "", last);
  return -1;
}

/* Closes a group; res is the first error of the calls inside it. */
static int group_end(struct perf_thread* t, loomResult_t res) {
  loomResult_t end = loomGroupEnd();
  if (res == loomSuccess) res = end;
  return res == loomSuccess ? 0 : coll_failed(t, res);
}

/* The calls of one iteration on every local rank (nccl-tests' startColl). in_group: inside
 * an aggregation group (-m), where waiting would be too early. */
static int start_coll(struct perf_thread* t, const struct bench_case* bc,
                      const struct bench_size* bs, int in_place, int iter, int in_group) {
  const struct perf_opts* o = t->w->o;
  size_t es = dtype_size(bc->type);
  size_t steps = bs->extent ? t->max_bytes / bs->extent : 1;
  size_t shift = bs->extent * ((size_t)iter % steps);
  loomResult_t res = loomSuccess;
  if (t->nlocal > 1) loomGroupStart();
  for (int g = 0; g < t->nlocal && res == loomSuccess; g++) {
    struct perf_rank* r = &t->ranks[g];
    char *recv = r->recv + shift, *send = r->send + shift;
    size_t rank = (size_t)r->rank;
    struct perf_call c = {.send = in_place ? recv + bs->cnt.send_inplace * es * rank : send,
                          .recv = recv + (in_place ? bs->cnt.recv_inplace * es * rank : 0),
                          .count = bs->cnt.param,
                          .type = bc->type,
                          .op = op_of(r, bc->op),
                          .root = bc->root,
                          .rank = r->rank,
                          .nranks = t->w->nranks,
                          .comm = r->comm,
                          .stream = r->stream};
    res = t->w->coll->run(&c);
  }
  if (t->nlocal > 1 ? group_end(t, res) != 0 : res != loomSuccess && coll_failed(t, res)) return -1;
  if (in_group || !o->blocking) return 0;
  if (perf_sync(t)) return -1;
  return o->blocking == 1 ? perf_barrier(t) : 0;
}

/* Waits for what start_coll left running (nccl-tests' completeColl). */
static int complete_coll(struct perf_thread* t) {
  const struct perf_opts* o = t->w->o;
  /* Blocking runs waited after every call (start_coll) or group (timed_loop). */
  return o->blocking ? 0 : perf_sync(t);
}

/* ---- Check values ---- */

static void make_data(const struct perf_thread* t, const struct bench_case* bc,
                      const struct bench_size* bs, uint64_t seed, struct perf_data* d) {
  int op = t->w->coll->reduces ? bc->op : -1;
  data_init(d, bc->type, op, t->w->nranks, bc->root, seed, &bs->cnt);
}

/* Fills the receive buffer with a pattern no result has, then writes the input where this
 * placement's call reads it (nccl-tests' initData). */
static void init_data(struct perf_thread* t, const struct bench_case* bc,
                      const struct bench_size* bs, int in_place, uint64_t seed) {
  const struct perf_mem_kind* k = t->w->o->mem;
  size_t es = dtype_size(bc->type);
  struct perf_data d;
  make_data(t, bc, bs, seed, &d);
  for (int g = 0; g < t->nlocal; g++) {
    struct perf_rank* r = &t->ranks[g];
    k->fill(r->recv, 0xa5, bs->extent);
    if (t->w->coll->input_root_only && r->rank != bc->root) continue;
    char* send = in_place ? r->recv + bs->cnt.send_inplace * es * (size_t)r->rank : r->send;
    if (k->direct) {
      data_fill(&d, r->rank, send, bs->cnt.send);
    } else {
      data_fill(&d, r->rank, r->staging, bs->cnt.send);
      k->from_host(send, r->staging, bs->send_bytes);
    }
  }
}

/* Wrong elements on this thread's ranks. */
static int64_t check_data(struct perf_thread* t, const struct bench_case* bc,
                          const struct bench_size* bs, int in_place, uint64_t seed) {
  const struct perf_mem_kind* k = t->w->o->mem;
  size_t es = dtype_size(bc->type);
  struct perf_data d;
  make_data(t, bc, bs, seed, &d);
  int64_t wrong = 0;
  for (int g = 0; g < t->nlocal; g++) {
    struct perf_rank* r = &t->ranks[g];
    const char* recv = r->recv + (in_place ? bs->cnt.recv_inplace * es * (size_t)r->rank : 0);
    if (!k->direct) {
      k->to_host(r->staging, recv, bs->recv_bytes);
      recv = r->staging;
    }
    wrong += (int64_t)data_check(t->w->coll, &d, r->rank, recv);
  }
  return wrong;
}

/* -c rounds of one checked call each; the wrong elements of every rank, summed. */
static int check_rounds(struct perf_thread* t, const struct bench_case* bc,
                        const struct bench_size* bs, int in_place, int64_t* wrong_out) {
  *wrong_out = 0;
  for (int c = 0; c < t->w->o->check; c++) {
    uint64_t seed = (uint64_t)++t->rep * 33;
    init_data(t, bc, bs, in_place, seed);
    if (start_coll(t, bc, bs, in_place, 0, 0) || complete_coll(t)) return -1;
    int64_t wrong[t->nlocal];
    for (int g = 0; g < t->nlocal; g++) wrong[g] = 0;
    wrong[0] = check_data(t, bc, bs, in_place, seed);
    if (perf_allreduce(t, wrong, loomInt64, loomSum)) return -1;
    *wrong_out = wrong[0];
    if (wrong[0]) break;
  }
  return 0;
}

/* ---- Timing ---- */

/* Iterations first..first+iters-1 of -m calls each; the seconds they took on this thread. */
static int timed_loop(struct perf_thread* t, const struct bench_case* bc,
                      const struct bench_size* bs, int in_place, int first, int iters,
                      double* sec_out) {
  const struct perf_opts* o = t->w->o;
  int agg = o->agg_iters > 1;
  double t0 = now_s(), coll_only = 0;
  for (int iter = first; iter < first + iters; iter++) {
    double ti = o->blocking == 3 ? now_s() : 0;
    if (agg) loomGroupStart();
    for (int a = 0; a < o->agg_iters; a++)
      if (start_coll(t, bc, bs, in_place, iter * o->agg_iters + a, agg)) {
        if (agg) loomGroupEnd();
        return -1;
      }
    if (agg && (group_end(t, loomSuccess) ||
                (o->blocking && (perf_sync(t) || (o->blocking == 1 && perf_barrier(t))))))
      return -1;
    if (o->blocking == 3) {      /* start_coll (or the group above) has waited already */
      coll_only += now_s() - ti; /* the barrier is not the collective's time */
      if (perf_barrier(t)) return -1;
    }
  }
  if (complete_coll(t)) return -1;
  *sec_out = o->blocking == 3 ? coll_only : now_s() - t0;
  return 0;
}

/* The mean seconds of one call on this thread: -n iterations, then, under --min_ms, as many
 * more as the slowest rank's mean of those says fill the time. Every rank agrees on the count
 * through that one maximum, so every rank makes the same calls. */
static int timed_calls(struct perf_thread* t, const struct bench_case* bc,
                       const struct bench_size* bs, int in_place, double* sec_out,
                       long* iters_out) {
  const struct perf_opts* o = t->w->o;
  double calls_per_iter = (double)o->agg_iters, sec;
  long iters = o->iters;
  if (timed_loop(t, bc, bs, in_place, 0, o->iters, &sec)) return -1;
  if (o->min_ms > 0) {
    double v[t->nlocal];
    for (int g = 0; g < t->nlocal; g++) v[g] = sec;
    if (perf_allreduce(t, v, loomFloat64, loomMax)) return -1;
    double per_iter = v[0] / (double)o->iters, want = (double)o->min_ms * 1e-3;
    double total = per_iter > 0 ? ceil(want / per_iter) : (double)PERF_MAX_TIMED_ITERS;
    double most = (double)PERF_MAX_TIMED_ITERS / calls_per_iter; /* keeps iter * -m an int */
    if (total > most) total = floor(most);
    if (total > (double)o->iters) {
      double more;
      if (perf_barrier(t) ||
          timed_loop(t, bc, bs, in_place, o->iters, (int)total - o->iters, &more))
        return -1;
      sec += more;
      iters = (long)total;
    }
  }
  *sec_out = sec / ((double)iters * calls_per_iter);
  *iters_out = iters;
  return 0;
}

/* The time every rank reports, as -a asks: rank 0's, the mean, the min or the max. */
static int reduce_time(struct perf_thread* t, double* sec) {
  static const int ops[] = {-1, loomSum, loomMin, loomMax};
  double v[t->nlocal];
  for (int g = 0; g < t->nlocal; g++) v[g] = *sec;
  if (perf_allreduce(t, v, loomFloat64, (loomRedOp_t)ops[t->w->o->average])) return -1;
  *sec = t->w->o->average == 1 ? v[0] / t->w->nranks : v[0];
  return 0;
}

static void bandwidth(const struct perf_thread* t, const struct bench_size* bs, double sec,
                      struct perf_cell* cell) {
  const struct perf_coll* c = t->w->coll;
  double bytes = (double)bs->extent; /* the whole vector: what nccl-tests' algbw counts */
  cell->time_us = sec * 1e6;
  cell->algbw = sec > 0 ? bytes / 1e9 / sec : 0;
  cell->busbw = cell->algbw * c->bus_factor(t->w->nranks);
}

/* One placement of one row (nccl-tests' BenchTime). */
static int bench_time(struct perf_thread* t, const struct bench_case* bc,
                      const struct bench_size* bs, int in_place, struct perf_cell* cell) {
  const struct perf_opts* o = t->w->o;
  if (o->check) init_data(t, bc, bs, in_place, 99);
  if (start_coll(t, bc, bs, in_place, 0, 0) || complete_coll(t) || perf_barrier(t)) return -1;
  double sec;
  if (timed_calls(t, bc, bs, in_place, &sec, &cell->iters) || reduce_time(t, &sec)) return -1;
  bandwidth(t, bs, sec, cell);
  if (perf_barrier(t)) return -1;
  cell->wrong = -1; /* N/A */
  if (o->check && !(in_place && t->w->coll->inplace_unchecked)) {
    if (check_rounds(t, bc, bs, in_place, &cell->wrong)) return -1;
    t->wrong += cell->wrong;
  }
  if (t->is_main) report_cell(cell);
  return 0;
}

static size_t next_size(const struct perf_opts* o, size_t size) {
  return o->step_factor > 1 ? size * o->step_factor : size + o->step_bytes;
}

static int warm_up(struct perf_thread* t, const struct bench_case* bc) {
  for (size_t size = t->min_bytes; size <= t->max_bytes; size = size ? size * 2 : 1) {
    struct bench_size bs;
    bench_setup(t, bc->type, size, &bs);
    for (int iter = 0; iter < t->w->o->warmup_iters; iter++)
      if (start_coll(t, bc, &bs, 0, iter, 0)) return -1;
    if (complete_coll(t)) return -1;
  }
  return 0;
}

static int sweep(struct perf_thread* t, const struct bench_case* bc) {
  const struct perf_coll* c = t->w->coll;
  for (size_t size = t->min_bytes; size <= t->max_bytes;) {
    struct bench_size bs;
    bench_setup(t, bc->type, size, &bs);
    struct perf_row row = {.size = bs.extent,
                           .count = bs.cnt.param,
                           .type = bc->type,
                           .op = c->has_op ? bc->op : -1,
                           .root = c->has_root ? bc->root : -1};
    if (t->is_main) report_row_start(&row);
    if (bench_time(t, bc, &bs, 0, &row.cell[0]) || bench_time(t, bc, &bs, 1, &row.cell[1]))
      return -1;
    if (t->is_main) {
      report_row_end();
      if (report_add_row(&t->w->report, &row)) {
        perf_fail(t, NULL, "out of memory for the results");
        return -1;
      }
    }
    size_t next = next_size(t->w->o, size);
    if (next <= size) break; /* 0 times a factor, or the end of size_t */
    size = next;
  }
  return 0;
}

/* A PreMulSum op per rank, each with its own scalar, for -o mulsum. */
static int premul_create(struct perf_thread* t, loomDataType_t type) {
  for (int g = 0; g < t->nlocal; g++) {
    struct perf_rank* r = &t->ranks[g];
    uint64_t scalar = 0; /* wide enough for any type, aligned for all */
    dtype_store(type, &scalar, data_premul_scalar(r->rank));
    loomResult_t res =
        loomRedOpCreatePreMulSum(&r->premul, &scalar, type, loomScalarHostImmediate, r->comm);
    if (res != loomSuccess) {
      perf_fail(t, r, "-o mulsum: loomRedOpCreatePreMulSum failed: %s: %s", loomGetErrorString(res),
                loomGetLastError(r->comm));
      return -1;
    }
    r->premul_live = 1;
  }
  return 0;
}

static void premul_destroy(struct perf_thread* t) {
  for (int g = 0; g < t->nlocal; g++)
    if (t->ranks[g].premul_live) {
      loomRedOpDestroy(t->ranks[g].premul, t->ranks[g].comm);
      t->ranks[g].premul_live = 0;
    }
}

/* One test (nccl-tests' TimeTest): a warm-up, then -N cycles of the sweep (0: forever). */
static int time_test(struct perf_thread* t, const struct bench_case* bc) {
  if (perf_barrier(t)) return -1;
  if (bc->op == PERF_OP_MULSUM && t->w->coll->reduces && premul_create(t, bc->type)) return -1;
  int rc = warm_up(t, bc);
  long repeat = t->w->o->run_cycles;
  while (rc == 0) {
    rc = sweep(t, bc);
    if (--repeat == 0) break;
  }
  if (rc == 0) rc = perf_sync(t);
  if (rc == 0) premul_destroy(t);
  return rc;
}

int bench_run(struct perf_thread* t) {
  const struct perf_opts* o = t->w->o;
  const struct perf_coll* c = t->w->coll;
  if (perf_barrier(t)) return -1;
  if (t->is_main) report_table_header();
  int t0 = o->type == PERF_ALL ? 0 : o->type, t1 = o->type == PERF_ALL ? loomNumTypes - 1 : o->type;
  int o0 = !c->has_op ? -1 : o->op == PERF_ALL ? 0 : o->op;
  int o1 = !c->has_op ? -1 : o->op == PERF_ALL ? PERF_NUM_OPS - 1 : o->op;
  int r0 = !c->has_root ? -1 : o->root == PERF_ALL ? 0 : o->root;
  int r1 = !c->has_root ? -1 : o->root == PERF_ALL ? t->w->nranks - 1 : o->root;
  for (int type = t0; type <= t1; type++)
    for (int op = o0; op <= o1; op++)
      for (int root = r0; root <= r1; root++) {
        struct bench_case bc = {(loomDataType_t)type, op, root};
        if (time_test(t, &bc)) return -1;
      }
  return 0;
}
