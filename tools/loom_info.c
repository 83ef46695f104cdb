/* loom_info - what this build of Loom is and what it can use here.
 *   loom_info          version, features compiled in, transports usable here
 *   loom_info --env    every LOOM_* variable: value, default, help
 *   loom_info --topo   the probed topology, in LOOM_TOPO_FILE's format
 *   loom_info --hang DIR  the diagnosis of the flight records the ranks wrote to DIR
 *                      (LOOM_DUMP_DIR), see loom_hang.h
 *   loom_info --memory what a communicator holds after one call of each collective
 *                      (-n N: N thread ranks; else the ranks loomrun or another launcher
 *                      started) */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "core/comm.h"
#include "core/memstat.h"
#include "core/params.h"
#include "kernels/cpu/cpu_kernels.h"
#include "loom.h"
#include "loom_hang.h"
#include "topo/topo.h"
#include "topo/tune.h"

static const char* type_name(enum param_type t) {
  switch (t) {
    case PARAM_STR:
      return "string";
    case PARAM_INT:
      return "int";
    case PARAM_SIZE:
      return "size";
    case PARAM_BOOL:
      return "bool";
  }
  return "?";
}

/* The table, with each bad value marked; then one line per bad setting
 * (what init would say). Returns 1 when a setting is bad. */
static int print_env(void) {
  int n, bad = 0;
  const struct param_desc* rows = params_table(&n);
  printf("%-22s %-7s %-10s %-10s %s\n", "variable", "type", "default", "value", "help");
  for (int i = 0; i < n; i++) {
    char value[128], def[64];
    const char* why = params_bad(i);
    const char* env = getenv(rows[i].env);
    if (why)
      snprintf(value, sizeof(value), "%s  <-- BAD: %s%s", env ? env : "", why,
               rows[i].flags & P_HINT ? " (ignored: the default is used)" : "");
    else
      params_value_str(i, value, sizeof(value));
    size_t len = strlen(rows[i].def);
    if (len >= 2 && rows[i].def[0] == '"')
      snprintf(def, sizeof(def), "%.*s", (int)(len - 2), rows[i].def + 1);
    else
      snprintf(def, sizeof(def), "%s", rows[i].def);
    printf("%-22s %-7s %-10s %-10s %s%s\n", rows[i].env, type_name(rows[i].type),
           def[0] ? def : "(empty)", value[0] ? value : "(empty)", rows[i].help,
           rows[i].flags & P_AGREE ? " [same on every rank]" : "");
  }
  if (coll_settings_check() != loomSuccess) {
    printf("\n%s\n", loomGetLastError(NULL));
    bad = 1;
  }
  return bad;
}

static void size_text(size_t b, char* buf, size_t len) {
  if (b >= (1u << 20))
    snprintf(buf, len, "%zu MiB", b >> 20);
  else if (b >= 1024)
    snprintf(buf, len, "%zu KiB", b >> 10);
  else
    snprintf(buf, len, "%zu B", b);
}

/* Per collective, rank count and size range: what the tuner would pick and
 * what it predicts. */
static void print_tuning(void) {
  const struct tune_consts* k = tune_consts_get();
  size_t slice = params_get()->slice_size;
  printf(
      "tuning constants: step %.2f us, copy %.2f GB/s, reduce %.2f GB/s, %d cpus, "
      "cross-memory attach %.2f GB/s, lines %.2f GB/s and %.2f of a step, hand-off %.2f us\n"
      "(direct plans, "
      "oneshot/twoshot/read, are costed as between processes: they need every rank on this "
      "host)\n",
      k->step_us, k->copy_gbps, k->reduce_gbps, k->ncpus, k->cma_gbps, k->lines_gbps, k->lines_step,
      k->handoff_us);
  if (k->disturbed > 0)
    printf(
        "(%d of the bandwidths below were measured only while other work held the cores: "
        "a later process measures again)\n",
        k->disturbed);
  if (k->copy_at[0] > 0) {
    printf("per rank's buffer, GB/s:  %8s %8s %8s %10s\n", "fifo", "cma", "reduce", "cma+reduce");
    for (int p = 0; p < TUNE_CAL_POINTS; p++) {
      char sz[32];
      size_text(tune_cal_bytes(p), sz, sizeof(sz));
      printf("  %-23s %8.2f %8.2f %8.2f %10.2f\n", sz, k->copy_at[p], k->cma_at[p], k->reduce_at[p],
             k->cma_reduce_at[p]);
    }
  }
  printf("%-14s %5s  %-22s %-9s %s\n", "collective", "ranks", "sizes", "algorithm",
         "predicted time");
  const int ranks[] = {2, 4, 8, 16};
  for (int c = 0; c < TUNE_COLL_COUNT; c++) {
    /* One host, host memory, LOOM_DETERMINISTIC as set: what a
     * communicator of processes here would choose from. */
    unsigned avail = algo_candidates((enum coll_kind)c, params_get()->direct, params_get()->direct,
                                     params_get()->deterministic, k);
    if (!avail) continue;
    for (size_t ri = 0; ri < sizeof(ranks) / sizeof(ranks[0]); ri++) {
      int n = ranks[ri];
      size_t lo = 8;
      enum tune_algo cur = tune_pick_model(k, (enum tune_coll)c, n, lo, slice, avail);
      double t_lo = tune_predict_us(k, (enum tune_coll)c, cur, n, lo, slice);
      for (size_t b = 8;; b *= 2) {
        int last = b >= (256u << 20);
        size_t nb = b * 2;
        enum tune_algo next =
            last ? TUNE_ALGO_COUNT : tune_pick_model(k, (enum tune_coll)c, n, nb, slice, avail);
        if (next != cur) {
          char a[32], z[32], range[80];
          size_text(lo, a, sizeof(a));
          size_text(b, z, sizeof(z));
          snprintf(range, sizeof(range), "%s - %s", a, z);
          printf("%-14s %5d  %-22s %-9s %.1f us .. %.1f us\n", tune_coll_name((enum tune_coll)c), n,
                 range, tune_algo_name(cur), t_lo,
                 tune_predict_us(k, (enum tune_coll)c, cur, n, b, slice));
          if (last) break;
          lo = nb;
          cur = next;
          t_lo = tune_predict_us(k, (enum tune_coll)c, cur, n, lo, slice);
        }
      }
    }
  }
}

/* Shared memory works here if a segment can be made and mapped. */
static int shm_usable(void) {
  char name[64];
  snprintf(name, sizeof(name), "/loom-info-%d", (int)getpid());
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return 0;
  shm_unlink(name);
  int ok = ftruncate(fd, 4096) == 0;
  void* p = ok ? mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) return 0;
  munmap(p, 4096);
  return 1;
}

static void print_info(void) {
  int v = 0;
  loomGetVersion(&v);
  printf("Loom %d.%d.%d (version code %d)\n", v / 10000, (v / 100) % 100, v % 100, v);
  printf("features compiled in: %s\n", LOOM_FEATURES);
  printf("cpu reduction kernels: %s (supported:%s%s scalar)\n", cpu_isa_name(cpu_isa_active()),
         cpu_isa_supported(CPU_ISA_AVX512) ? " avx512" : "",
         cpu_isa_supported(CPU_ISA_AVX2) ? " avx2" : "");
  printf("transports usable here:\n");
  printf("  local   yes (ranks that are threads of one process: direct copy)\n");
  printf("  shm     %s (processes on one host: POSIX shared-memory FIFOs)\n",
         shm_usable() ? "yes" : "no: /dev/shm is not usable");
  printf("  socket  yes (ranks on other hosts, or all with LOOM_TRANSPORTS=socket: TCP)\n");
  printf(
      "  direct  %s (ranks of one host read each other's buffers: loomMemAlloc memory is\n"
      "          mapped, other memory read by process_vm_readv, probed per communicator)\n",
      params_get()->direct ? "allowed" : "off (LOOM_DIRECT=0)");
  printf("  p2p, verbs, ucx: not built yet\n");
  printf("algorithms:");
  for (int c = 0; c < TUNE_COLL_COUNT; c++) {
    unsigned avail = algo_available((enum coll_kind)c);
    if (!avail) continue;
    printf(" %s(", tune_coll_name((enum tune_coll)c));
    const char* sep = "";
    for (int a = 0; a < TUNE_ALGO_COUNT; a++)
      if (avail & TUNE_ALGO_BIT(a)) {
        printf("%s%s", sep, tune_algo_name((enum tune_algo)a));
        sep = ",";
      }
    printf(")");
  }
  printf("\n");
}

/* The probed facts on stdout, ready to edit into a LOOM_TOPO_FILE; a file
 * already set is checked, its error on stderr (exit status 1). */
static int print_topo(void) {
  struct topo_facts probed;
  topo_probe(&probed);
  topo_print(&probed, stdout);
  if (topo_check() == loomSuccess) return 0;
  fprintf(stderr, "loom_info: %s\n", loomGetLastError(NULL));
  return 1;
}

/* ---- --memory ------------------------------------------------------------------ */

/* One rank's counts, as every rank sends them to rank 0 (plain integers). */
#define MEM_PEERS_SHOWN 16 /* communicators this small also get a line per rank and peer */

struct mem_row {
  uint64_t init_total;                    /* right after init */
  uint64_t now[MEM_USES], peak[MEM_USES]; /* after the calls */
  uint64_t total, peak_total, peer_max;
  int64_t peers_held;
  uint64_t peer[MEM_PEERS_SHOWN]; /* held for each peer (FIFOs, connections, staging) */
};

struct mem_job {
  int nranks, rank, threads; /* threads: ranks are this process's threads */
  size_t bytes;              /* per rank, of each collective */
  loomUniqueId id;
  int failed;
};

#define MEM_CHECK(call)                                                                          \
  do {                                                                                           \
    loomResult_t r_ = (call);                                                                    \
    if (r_ != loomSuccess) {                                                                     \
      fprintf(stderr, "loom_info: rank %d: %s: %s\n", job->rank, #call, loomGetLastError(comm)); \
      job->failed = 1;                                                                           \
      goto out;                                                                                  \
    }                                                                                            \
  } while (0)

/* size_text, with two decimals above 1 MiB. */
static void mem_text(size_t b, char* buf, size_t len) {
  if (b >= (1u << 20))
    snprintf(buf, len, "%.2f MiB", (double)b / (1u << 20));
  else
    size_text(b, buf, len);
}

static void mem_print(const struct mem_job* job, int nranks, const struct mem_row* rows) {
  char b[32];
  printf(
      "memory of one communicator of %d ranks (%s%s%s), after one call of each collective\n"
      "(all-reduce, reduce-scatter, all-gather, all-to-all, broadcast, reduce, gather, scatter,\n"
      "a ring of send/recv) with %zu bytes per rank; bytes held now (peak in brackets)\n",
      nranks, job->threads ? "threads of one process" : "processes",
      params_get()->transports[0] ? ", LOOM_TRANSPORTS=" : "", params_get()->transports,
      job->bytes);
  printf("%-5s %-10s", "rank", "init");
  for (int u = 0; u < MEM_USES; u++) printf(" %-20s", memstat_use_name((enum mem_use)u));
  printf(" %-20s %s\n", "total", "peers (most for one)");
  for (int r = 0; r < nranks; r++) {
    const struct mem_row* w = &rows[r];
    mem_text(w->init_total, b, sizeof(b));
    printf("%-5d %-10s", r, b);
    for (int u = 0; u < MEM_USES; u++) {
      char now[32], peak[32], cell[72];
      mem_text(w->now[u], now, sizeof(now));
      mem_text(w->peak[u], peak, sizeof(peak));
      snprintf(cell, sizeof(cell), "%s (%s)", now, peak);
      printf(" %-20s", cell);
    }
    char now[32], peak[32], cell[72];
    mem_text(w->total, now, sizeof(now));
    mem_text(w->peak_total, peak, sizeof(peak));
    snprintf(cell, sizeof(cell), "%s (%s)", now, peak);
    mem_text(w->peer_max, b, sizeof(b));
    printf(" %-20s %lld (%s)\n", cell, (long long)w->peers_held, b);
  }
  uint64_t sum = 0;
  for (int r = 0; r < nranks; r++) sum += rows[r].total;
  mem_text(sum, b, sizeof(b));
  printf("all ranks together: %s (%llu bytes)\n", b, (unsigned long long)sum);
  if (nranks > MEM_PEERS_SHOWN) return;
  printf("held for each peer (FIFOs this rank sends on, connections, staging):\n");
  for (int r = 0; r < nranks; r++) {
    printf("  rank %d:", r);
    for (int p = 0; p < nranks; p++) {
      mem_text(rows[r].peer[p], b, sizeof(b));
      printf("%s %d: %s", p ? "," : "", p, b);
    }
    printf("\n");
  }
}

/* One rank: init, the calls, the counts to rank 0, destroy. */
static void* mem_rank(void* arg) {
  struct mem_job* job = arg;
  loomComm_t comm = NULL;
  struct mem_row* rows = NULL;
  float *in = NULL, *out = NULL;
  loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
  cfg.commName = "loom_info --memory";
  if (job->threads) {
    MEM_CHECK(loomCommInitRankConfig(&comm, job->nranks, job->id, job->rank, &cfg));
  } else {
    MEM_CHECK(loomCommInitFromEnv(&comm, &cfg));
    MEM_CHECK(loomCommUserRank(comm, &job->rank));
    MEM_CHECK(loomCommCount(comm, &job->nranks));
  }
  struct loom_comm* c = NULL;
  MEM_CHECK(comm_get(comm, "loom_info", &c));
  struct mem_snapshot s;
  memstat_get(c, &s);
  struct mem_row row = {.init_total = s.total};
  int n = job->nranks, me = job->rank;
  size_t count = job->bytes / sizeof(float);
  if (count == 0) count = 1;
  in = calloc(count * (size_t)n, sizeof(float));
  out = calloc(count * (size_t)n, sizeof(float));
  rows = calloc((size_t)n, sizeof(*rows));
  if (!in || !out || !rows) {
    fprintf(stderr, "loom_info: out of memory\n");
    job->failed = 1;
    goto out;
  }
  size_t per = count / (size_t)n ? count / (size_t)n : 1; /* all-to-all, gather: count in all */
  MEM_CHECK(loomAllReduce(in, out, count, loomFloat32, loomSum, comm, NULL));
  MEM_CHECK(loomReduceScatter(in, out, per, loomFloat32, loomSum, comm, NULL));
  MEM_CHECK(loomAllGather(in, out, per, loomFloat32, comm, NULL));
  MEM_CHECK(loomAlltoAll(in, out, per, loomFloat32, comm, NULL));
  MEM_CHECK(loomBroadcast(in, out, count, loomFloat32, 0, comm, NULL));
  MEM_CHECK(loomReduce(in, out, count, loomFloat32, loomSum, 0, comm, NULL));
  MEM_CHECK(loomGather(in, out, per, loomFloat32, 0, comm, NULL));
  MEM_CHECK(loomScatter(in, out, per, loomFloat32, 0, comm, NULL));
  MEM_CHECK(loomGroupStart());
  MEM_CHECK(loomSend(in, count, loomFloat32, (me + 1) % n, comm, NULL));
  MEM_CHECK(loomRecv(out, count, loomFloat32, (me + n - 1) % n, comm, NULL));
  MEM_CHECK(loomGroupEnd());
  memstat_get(c, &s);
  for (int u = 0; u < MEM_USES; u++) row.now[u] = s.now[u], row.peak[u] = s.peak[u];
  row.total = s.total;
  row.peak_total = s.peak_total;
  row.peer_max = s.peer_max;
  row.peers_held = s.peers_held;
  for (int p = 0; p < n && p < MEM_PEERS_SHOWN; p++)
    row.peer[p] = atomic_load_explicit(&c->mem.peer[p], memory_order_relaxed);
  MEM_CHECK(loomAllGather(&row, rows, sizeof(row), loomUint8, comm, NULL));
  if (me == 0) mem_print(job, n, rows);
  MEM_CHECK(loomCommFinalize(comm));
out:
  if (comm) loomCommDestroy(comm);
  free(in);
  free(out);
  free(rows);
  return NULL;
}

/* -n N: N thread ranks here; else this process is one rank of a launched job. */
static int print_memory(int nthreads, size_t bytes) {
  struct mem_job one = {.bytes = bytes};
  if (nthreads <= 0) {
    mem_rank(&one);
    size_t left = memstat_process_now();
    if (left)
      fprintf(stderr, "loom_info: rank %d: %zu bytes still held after destroy\n", one.rank, left);
    else if (one.rank == 0 && !one.failed)
      printf("after destroy: nothing held (each rank checks its own)\n");
    return one.failed || left;
  }
  struct mem_job* jobs = calloc((size_t)nthreads, sizeof(*jobs));
  pthread_t* th = calloc((size_t)nthreads, sizeof(*th));
  loomUniqueId id;
  if (!jobs || !th || loomGetUniqueId(&id) != loomSuccess) {
    fprintf(stderr, "loom_info: cannot start: %s\n",
            jobs && th ? loomGetLastError(NULL) : "out of memory");
    free(jobs);
    free(th);
    return 1;
  }
  int started = 0, failed = 0;
  for (int r = 0; r < nthreads; r++) {
    jobs[r] =
        (struct mem_job){.nranks = nthreads, .rank = r, .threads = 1, .bytes = bytes, .id = id};
    if (pthread_create(&th[r], NULL, mem_rank, &jobs[r]) != 0) {
      fprintf(stderr, "loom_info: cannot start thread %d\n", r);
      failed = 1;
      break;
    }
    started++;
  }
  for (int r = 0; r < started; r++) {
    pthread_join(th[r], NULL);
    failed |= jobs[r].failed;
  }
  size_t left = memstat_process_now();
  if (left)
    fprintf(stderr, "loom_info: %zu bytes still held after destroy\n", left);
  else if (!failed)
    printf("after destroy: nothing held\n");
  free(jobs);
  free(th);
  return failed || left;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--env") == 0) return print_env();
    if (strcmp(argv[i], "--topo") == 0) return print_topo();
    if (strcmp(argv[i], "--hang") == 0) {
      if (i + 2 != argc) {
        fprintf(stderr, "loom_info: --hang takes one directory (LOOM_DUMP_DIR of the ranks)\n");
        return 2;
      }
      return hang_main(argv[i + 1]);
    }
    if (strcmp(argv[i], "--memory") == 0) {
      int n = 0;
      size_t bytes = 1u << 20;
      for (int j = i + 1; j + 1 < argc; j += 2) {
        char* end = NULL;
        long long v = strtoll(argv[j + 1], &end, 10);
        if (!end || *end || v < 1 || v > (1ll << 32) ||
            (strcmp(argv[j], "-n") != 0 && strcmp(argv[j], "--bytes") != 0)) {
          fprintf(stderr, "loom_info: --memory takes -n RANKS and --bytes BYTES (positive)\n");
          return 2;
        }
        if (strcmp(argv[j], "-n") == 0)
          n = (int)LOOM_MIN(v, 1024);
        else
          bytes = (size_t)v;
      }
      if ((argc - i - 1) % 2) {
        fprintf(stderr, "loom_info: --memory takes -n RANKS and --bytes BYTES (positive)\n");
        return 2;
      }
      return print_memory(n, bytes);
    }
    if (strcmp(argv[i], "--tuning") == 0) {
      print_tuning();
      return 0;
    }
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf(
          "usage: loom_info [--env | --topo | --tuning | --hang DIR | --memory [-n RANKS] [--bytes "
          "B]]\n"
          "  --env     print every LOOM_* variable with its value, default and help\n"
          "  --topo    print the topology probed here, in LOOM_TOPO_FILE's format\n"
          "            (docs/topology.md): save it, edit it, give it to a rank\n"
          "  --tuning  print, per collective, rank count and size range, the algorithm the\n"
          "            tuner picks and the time it predicts\n"
          "  --hang DIR  merge the flight records the ranks wrote to DIR (LOOM_DUMP_DIR) on a\n"
          "            timeout, a failure, loomCommAbort or LOOM_DUMP_SIGNAL, and say where they\n"
          "            diverge, who waits on whom and who holds the others back\n"
          "  --memory  what one communicator holds (FIFOs, connections, staging, scratch, plans,\n"
          "            per peer) after one call of each collective of B bytes per rank (1 MiB),\n"
          "            and that destroy releases it all: -n RANKS thread ranks here, or run it\n"
          "            under a launcher (loomrun -n 8 loom_info --memory) for process ranks\n");
      return 0;
    }
    fprintf(stderr, "loom_info: unknown option %s (try --help)\n", argv[i]);
    return 2;
  }
  print_info();
  return 0;
}
