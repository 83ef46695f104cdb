/* setup.c - the ranks of a run: the launcher's communicator (loomrun, mpirun, srun), the
 * threads of -t, the ranks of -g, their communicators, buffers and streams, and the small
 * collectives the harness itself needs (barriers, the timing and #wrong reductions).
 *
 * Under a launcher with -t 1 -g 1 the launcher's communicator is the benchmarked one. Otherwise
 * process 0 makes a unique id, the launcher's communicator carries it to every process and is
 * closed, and each thread initialises its ranks with loomCommInitRankConfig. A rank that fails
 * aborts its communicators, so that its peers fail at once instead of waiting for a timeout. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static const char* const env_families[][2] = {{"LOOM_RANK", "LOOM_WORLD_SIZE"},
                                              {"RANK", "WORLD_SIZE"},
                                              {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                              {"PMI_RANK", "PMI_SIZE"},
                                              {"SLURM_PROCID", "SLURM_NTASKS"}};

/* This process's rank as the launcher gave it (what loomCommInitFromEnv reads), or -1. */
static int env_proc_rank(void) {
  for (size_t f = 0; f < sizeof(env_families) / sizeof(env_families[0]); f++) {
    const char *r = getenv(env_families[f][0]), *s = getenv(env_families[f][1]);
    if (r && *r && s && *s) return atoi(r);
  }
  return -1;
}

void perf_fail(struct perf_thread* t, const struct perf_rank* r, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (r)
    fprintf(stderr, "%s: rank %d: %s\n", t->w->coll->tool, r->rank, msg);
  else
    fprintf(stderr, "%s: %s\n", t->w->coll->tool, msg);
  t->failed = 1;
}

static int loom_ok(struct perf_thread* t, const struct perf_rank* r, loomResult_t res,
                   const char* what) {
  if (res == loomSuccess) return 0;
  const char* last = loomGetLastError(r ? r->comm : NULL);
  perf_fail(t, r, "%s failed: %s%s%s", what, loomGetErrorString(res), *last ? ": " : "", last);
  return -1;
}

static loomConfig_t config_for(const struct perf_opts* o, const char* tool) {
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  if (o->timeout_s > 0) cfg.timeoutMs = o->timeout_s * 1000;
  cfg.commName = tool;
  return cfg;
}

/* ---- Harness collectives: on the ranks' own streams, so they stay in call order ---- */

int perf_sync(struct perf_thread* t) {
  for (int g = 0; g < t->nlocal; g++) {
    struct perf_rank* r = &t->ranks[g];
    if (r->stream && loom_ok(t, r, loomStreamSynchronize(r->stream), "waiting for the stream"))
      return -1;
  }
  return 0;
}

/* op < 0: a broadcast from rank 0 instead of a reduction. */
int perf_allreduce(struct perf_thread* t, void* vals, loomDataType_t type, loomRedOp_t op) {
  size_t es = dtype_size(type);
  loomResult_t res = loomSuccess;
  if (t->nlocal > 1) loomGroupStart();
  for (int g = 0; g < t->nlocal && res == loomSuccess; g++) {
    struct perf_rank* r = &t->ranks[g];
    char* v = (char*)vals + (size_t)g * es;
    res = (int)op < 0 ? loomBroadcast(v, v, 1, type, 0, r->comm, r->stream)
                      : loomAllReduce(v, v, 1, type, op, r->comm, r->stream);
  }
  if (t->nlocal > 1) {
    loomResult_t end = loomGroupEnd();
    if (res == loomSuccess) res = end;
  }
  if (loom_ok(t, &t->ranks[0], res, "the harness's own all-reduce")) return -1;
  return perf_sync(t);
}

int perf_barrier(struct perf_thread* t) {
  int32_t one[t->nlocal];
  for (int g = 0; g < t->nlocal; g++) one[g] = 1;
  return perf_allreduce(t, one, loomInt32, loomSum);
}

/* ---- Per-rank work in parallel: init and finalize block until every rank joins ---- */

struct rank_job {
  struct perf_thread* t;
  int g;
  loomResult_t res;
  loomResult_t (*fn)(struct perf_thread* t, int g);
};

static void* rank_job_main(void* arg) {
  struct rank_job* j = arg;
  j->res = j->fn(j->t, j->g);
  return NULL;
}

/* Runs fn for every local rank, on helper threads when there are several. */
static int each_rank(struct perf_thread* t, loomResult_t (*fn)(struct perf_thread*, int),
                     const char* what) {
  struct rank_job jobs[t->nlocal];
  pthread_t ids[t->nlocal];
  int started[t->nlocal];
  for (int g = 0; g < t->nlocal; g++) {
    jobs[g] = (struct rank_job){t, g, loomSuccess, fn};
    started[g] = t->nlocal > 1 && pthread_create(&ids[g], NULL, rank_job_main, &jobs[g]) == 0;
  }
  /* One rank, or no thread to be had: in this thread, while the others run. */
  for (int g = 0; g < t->nlocal; g++)
    if (!started[g]) rank_job_main(&jobs[g]);
  for (int g = 0; g < t->nlocal; g++)
    if (started[g]) pthread_join(ids[g], NULL);
  int rc = 0;
  for (int g = 0; g < t->nlocal; g++)
    if (loom_ok(t, &t->ranks[g], jobs[g].res, what)) rc = -1;
  return rc;
}

static loomResult_t rank_comm_init(struct perf_thread* t, int g) {
  struct perf_world* w = t->w;
  loomConfig_t cfg = config_for(w->o, w->coll->tool);
  return loomCommInitRankConfig(&t->ranks[g].comm, w->nranks, w->id, t->ranks[g].rank, &cfg);
}

static loomResult_t rank_comm_finalize(struct perf_thread* t, int g) {
  return loomCommFinalize(t->ranks[g].comm);
}

/* ---- Buffers ---- */

/* Bytes of memory this process may still take, from /proc/meminfo (MemAvailable). */
static size_t mem_available(void) {
  FILE* f = fopen("/proc/meminfo", "r");
  char line[256];
  unsigned long long kb = 0;
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  if (f) fclose(f);
  if (kb) return (size_t)kb * 1024;
  return (size_t)sysconf(_SC_AVPHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
}

/* nccl-tests lowers maxBytes when the buffers would not fit; so do we, with the smallest
 * budget of any rank, so that every rank runs the same sizes. */
static int cap_max_bytes(struct perf_thread* t) {
  const struct perf_opts* o = t->w->o;
  int per_proc = o->nthreads * o->ngpus;
  int buffers = o->mem->direct ? 2 : 3; /* send, receive, and staging for the checks */
  uint64_t budget = (uint64_t)(mem_available() * 0.8) / (uint64_t)per_proc / (uint64_t)buffers;
  uint64_t caps[t->nlocal];
  for (int g = 0; g < t->nlocal; g++) caps[g] = budget;
  if (perf_allreduce(t, caps, loomUint64, loomMin)) return -1;
  t->max_bytes = o->max_bytes;
  t->min_bytes = o->min_bytes;
  if (caps[0] >= o->max_bytes) return 0;
  t->max_bytes = (size_t)caps[0];
  if (t->min_bytes > t->max_bytes) t->min_bytes = t->max_bytes;
  if (t->is_main) printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", t->max_bytes);
  return 0;
}

static int rank_register(struct perf_thread* t, struct perf_rank* r) {
  const char* fn =
      t->w->o->local_register == 2 ? "-R 2: loomCommRegister" : "-R 1: loomCommRegister";
  /* The buffers are never empty (mem.c allocates at least a page), even for -e 0. */
  size_t bytes = t->max_bytes ? t->max_bytes : 1;
  char what[128];
  snprintf(what, sizeof(what), "%s of the send buffer (%zu bytes)", fn, bytes);
  if (loom_ok(t, r, loomCommRegister(r->comm, r->send, bytes, &r->send_handle), what)) return -1;
  snprintf(what, sizeof(what), "%s of the receive buffer (%zu bytes)", fn, bytes);
  return loom_ok(t, r, loomCommRegister(r->comm, r->recv, bytes, &r->recv_handle), what);
}

static int rank_buffers(struct perf_thread* t, struct perf_rank* r) {
  const struct perf_opts* o = t->w->o;
  const struct perf_mem_kind* k = o->mem;
  int loom_alloc = o->local_register == 2;
  char err[256];
  void *s = NULL, *v = NULL;
  if (k->alloc(&s, t->max_bytes, loom_alloc, err, sizeof(err)) ||
      k->alloc(&v, t->max_bytes, loom_alloc, err, sizeof(err))) {
    perf_fail(t, r, "%s%s", loom_alloc ? "-R 2: " : "", err);
    return -1;
  }
  r->send = s;
  r->recv = v;
  if (!k->direct && o->check && !(r->staging = malloc(t->max_bytes ? t->max_bytes : 1))) {
    perf_fail(t, r, "cannot allocate %zu bytes of host memory for the checks", t->max_bytes);
    return -1;
  }
  if (o->local_register && rank_register(t, r)) return -1;
  if (!o->stream_null && loom_ok(t, r, loomStreamCreate(&r->stream), "loomStreamCreate")) return -1;
  return 0;
}

/* A clean end: what the communicator holds goes first, then the communicator. After a
 * failure the communicator is aborted instead (which releases what it held), so that peers
 * waiting on this rank fail at once. */
static void rank_release(struct perf_thread* t, struct perf_rank* r) {
  const struct perf_opts* o = t->w->o;
  if (r->comm && !t->failed) {
    if (r->premul_live) loomRedOpDestroy(r->premul, r->comm);
    if (r->send_handle) loomCommDeregister(r->comm, r->send_handle);
    if (r->recv_handle) loomCommDeregister(r->comm, r->recv_handle);
  }
  if (r->comm && t->failed) loomCommAbort(r->comm);
  if (r->stream) loomStreamDestroy(r->stream);
  if (r->comm && !t->failed) loomCommDestroy(r->comm);
  o->mem->release(r->send, o->local_register == 2);
  o->mem->release(r->recv, o->local_register == 2);
  free(r->staging);
  memset(r, 0, sizeof(*r));
}

/* ---- A thread and its ranks ---- */

static int thread_ranks_init(struct perf_thread* t) {
  struct perf_world* w = t->w;
  for (int g = 0; g < t->nlocal; g++)
    t->ranks[g].rank = (w->proc * w->o->nthreads + t->thread) * t->nlocal + g;
  if (w->env_comm) { /* -t 1 -g 1 under a launcher: its communicator is the one */
    t->ranks[0].comm = w->env_comm;
    w->env_comm = NULL;
    return 0;
  }
  return each_rank(t, rank_comm_init, "loomCommInitRankConfig");
}

static void thread_fini(struct perf_thread* t) {
  if (!t->failed && perf_sync(t) == 0) each_rank(t, rank_comm_finalize, "loomCommFinalize");
  for (int g = 0; g < t->nlocal; g++) rank_release(t, &t->ranks[g]);
}

static void* thread_main(void* arg) {
  struct perf_thread* t = arg;
  if (thread_ranks_init(t) == 0 && report_devices(t) == 0 && cap_max_bytes(t) == 0) {
    int ok = 1;
    for (int g = 0; g < t->nlocal && ok; g++) ok = rank_buffers(t, &t->ranks[g]) == 0;
    if (ok) bench_run(t);
  }
  thread_fini(t);
  return NULL;
}

/* ---- The world: the launcher, the unique id, the threads ---- */

static int world_init(struct perf_world* w) {
  const struct perf_opts* o = w->o;
  int local = o->nthreads * o->ngpus;
  w->nprocs = 1;
  w->proc = 0;
  if (env_proc_rank() >= 0) {
    loomConfig_t cfg = config_for(o, w->coll->tool);
    loomResult_t r = loomCommInitFromEnv(&w->env_comm, &cfg);
    if (r != loomSuccess) {
      fprintf(stderr, "%s: loomCommInitFromEnv failed: %s: %s\n", w->coll->tool,
              loomGetErrorString(r), loomGetLastError(NULL));
      return -1;
    }
    loomCommCount(w->env_comm, &w->nprocs);
    loomCommUserRank(w->env_comm, &w->proc);
  }
  w->nranks = w->nprocs * local;
  if (w->env_comm && local == 1) return 0;
  loomResult_t r = w->proc == 0 ? loomGetUniqueId(&w->id) : loomSuccess;
  if (r == loomSuccess && w->env_comm) { /* carry the id to every process, then close */
    r = loomBroadcast(&w->id, &w->id, sizeof(w->id), loomUint8, 0, w->env_comm, NULL);
    if (r == loomSuccess) r = loomCommFinalize(w->env_comm);
    loomCommDestroy(w->env_comm);
    w->env_comm = NULL;
  }
  if (r == loomSuccess) return 0;
  fprintf(stderr, "%s: sharing the unique id failed: %s: %s\n", w->coll->tool,
          loomGetErrorString(r), loomGetLastError(NULL));
  return -1;
}

/* Runs thread 0 here and the others on their own threads; returns how many failed. */
static int run_threads(struct perf_world* w, int64_t* wrong_out) {
  int n = w->o->nthreads, failed = 0;
  struct perf_thread* th = calloc((size_t)n, sizeof(*th));
  pthread_t* ids = calloc((size_t)n, sizeof(*ids));
  struct perf_rank* ranks = calloc((size_t)n * (size_t)w->o->ngpus, sizeof(*ranks));
  if (!th || !ids || !ranks) {
    fprintf(stderr, "%s: out of memory for %d threads\n", w->coll->tool, n);
    free(th), free(ids), free(ranks);
    return 1;
  }
  for (int i = 0; i < n; i++)
    th[i] = (struct perf_thread){.w = w,
                                 .thread = i,
                                 .nlocal = w->o->ngpus,
                                 .ranks = ranks + (size_t)i * (size_t)w->o->ngpus,
                                 .is_main = w->proc == 0 && i == 0};
  for (int i = 1; i < n; i++)
    if (pthread_create(&ids[i], NULL, thread_main, &th[i]) != 0) {
      fprintf(stderr, "%s: cannot start thread %d of %d\n", w->coll->tool, i, n);
      exit(PERF_EXIT_FAIL); /* the other ranks cannot complete without it */
    }
  thread_main(&th[0]);
  for (int i = 1; i < n; i++) pthread_join(ids[i], NULL);
  for (int i = 0; i < n; i++) failed += th[i].failed;
  *wrong_out = th[0].wrong;
  free(th), free(ids), free(ranks);
  return failed;
}

/* A run that failed leaves no JSON file behind: a half-written one would be read as data. */
static void json_close(struct perf_world* w, int keep) {
  if (!w->json) return;
  fclose(w->json);
  if (!keep) unlink(w->o->json_path);
}

int perf_main(const struct perf_coll* coll, int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct perf_opts o;
  int rc = perf_args_parse(&o, argc, argv, coll->tool, env_proc_rank() > 0);
  if (rc >= 0) return rc;
  struct perf_world w = {.o = &o, .coll = coll};
  if (o.json_path && env_proc_rank() <= 0 && !(w.json = fopen(o.json_path, "w"))) {
    fprintf(stderr, "-J %s: cannot write the JSON file: %m\n", o.json_path);
    return PERF_EXIT_USAGE;
  }
  if (world_init(&w) != 0) return PERF_EXIT_FAIL;
  if (coll->has_root && o.root >= w.nranks) {
    /* Every process says it: the first to exit makes loomrun stop the others,
     * which may be before process 0 has printed. */
    fprintf(stderr, "-r %d: root out of range: the run has %d ranks (0 to %d)\n", o.root, w.nranks,
            w.nranks - 1);
    if (w.env_comm) loomCommDestroy(w.env_comm);
    json_close(&w, 0);
    return PERF_EXIT_USAGE;
  }
  if (w.proc == 0) report_preamble(&w);
  int64_t wrong = 0;
  int failed = run_threads(&w, &wrong);
  if (w.proc == 0 && !failed) {
    if (w.json && report_json(&w)) failed = 1;
    report_footer(&w);
    if (wrong)
      fprintf(stderr, "%s: %lld wrong values (the #wrong columns); the exit status is %d\n",
              coll->tool, (long long)wrong, PERF_EXIT_FAIL);
  }
  json_close(&w, !failed);
  free(w.report.rows);
  return failed || wrong ? PERF_EXIT_FAIL : 0;
}
