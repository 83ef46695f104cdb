/* net_check - one rank of the network test suite (tests/net/net_suite.sh).
 * Uses only the public API. The communicator comes from the environment
 * (loomCommInitFromEnv: LOOM_RANK, LOOM_WORLD_SIZE, LOOM_ROOT=host:port, on
 * which rank 0 listens, and LOOM_SECRET in hex).
 *
 *   net_check [--big] [--only allreduce,broadcast,...] [--pause-file F --resume-file G]
 *       Runs every collective over the matrix of net_colls.c and checks every
 *       element; one summary line per collective. With --pause-file, after the
 *       first pass it writes F (its pid), waits for G to exist, and runs the
 *       matrix again: the harness attacks the ranks' ports in between.
 *   net_check --init-only
 *       Joins and leaves (the suite runs it with a wrong secret: it must fail).
 *   net_check --fault-loop COUNT --ready-file F --stop-file S [--fail-time-file T]
 *       All-reduces COUNT floats (checked) until S exists, then leaves cleanly.
 *       Writes F (its pid) after the first good iteration. On an error prints
 *       one line "FAULT rc=... at_ms=... after_ms=... error: ..." (after_ms
 *       from the epoch milliseconds the harness wrote to T when it struck)
 *       and exits 3.
 *
 * Exit status: 0 all good, 1 wrong values, 2 a call failed (or init failed),
 * 3 the fault loop saw an error, 4 the fault loop was never told to stop,
 * 64 usage. */
#include "net_check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WRONG_SHOWN 10

static struct {
  int big, init_only;
  const char* only;
  const char *pause_file, *resume_file;
  size_t fault_count;
  const char *ready_file, *stop_file, *fail_time_file;
  int max_seconds;
} opt = {.max_seconds = 240};

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void nc_die_call(struct nc_ctx* c, loomResult_t r, const char* what) {
  fprintf(stderr, "net_check rank %d: %s failed: %s (%d): %s\n", c->rank, what,
          loomGetErrorString(r), (int)r, loomGetLastError(c->comm));
  printf("net_check rank %d: FAILED: %s: %s: %s\n", c->rank, what, loomGetErrorString(r),
         loomGetLastError(c->comm));
  fflush(stdout);
  loomCommAbort(c->comm);
  exit(2);
}

void nc_wrong(struct nc_ctx* c, const char* what, size_t i, double got, double want) {
  if (c->wrong < MAX_WRONG_SHOWN)
    printf("net_check rank %d: WRONG %s: element %zu is %.17g, expected %.17g\n", c->rank, what, i,
           got, want);
  c->wrong++;
  c->wrong_here++;
}

/* Writes text to path through a temporary name, so a reader never sees half. */
static int write_file(const char* path, const char* text) {
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
  FILE* f = fopen(tmp, "w");
  if (!f) return -1;
  fputs(text, f);
  if (fclose(f) != 0 || rename(tmp, path) != 0) return -1;
  return 0;
}

static int file_exists(const char* path) {
  return access(path, F_OK) == 0;
}

static void write_pid_file(const char* path) {
  char text[32];
  snprintf(text, sizeof(text), "%d\n", (int)getpid());
  if (write_file(path, text) != 0) {
    fprintf(stderr, "net_check: cannot write %s: %s\n", path, strerror(errno));
    exit(2);
  }
}

/* ---- The matrix ---------------------------------------------------------- */

struct coll_entry {
  const char* name;
  void (*run)(struct nc_ctx*);
};
static const struct coll_entry colls[] = {
    {"allreduce", nc_allreduce},
    {"broadcast", nc_broadcast},
    {"reduce", nc_reduce},
    {"allgather", nc_allgather},
    {"reducescatter", nc_reducescatter},
    {"alltoall", nc_alltoall},
    {"alltoallv", nc_alltoallv},
    {"gather", nc_gather},
    {"scatter", nc_scatter},
    {"sendrecv", nc_sendrecv},
};
#define NCOLLS (sizeof(colls) / sizeof(colls[0]))

static int selected(const char* name) {
  if (!opt.only) return 1;
  size_t len = strlen(name);
  for (const char* p = opt.only; (p = strstr(p, name)) != NULL; p += len)
    if ((p == opt.only || p[-1] == ',') && (p[len] == '\0' || p[len] == ',')) return 1;
  return 0;
}

static void run_matrix(struct nc_ctx* c, const char* pass) {
  for (size_t k = 0; k < NCOLLS; k++) {
    if (!selected(colls[k].name)) continue;
    c->calls = 0;
    c->wrong_here = 0;
    double t0 = mono_s();
    colls[k].run(c);
    printf("net_check rank %d/%d%s: %-13s %s %5ld calls %7.2f s%s\n", c->rank, c->nranks, pass,
           colls[k].name, c->wrong_here ? "WRONG" : "ok   ", c->calls, mono_s() - t0,
           c->big ? " (with (1<<20)+3)" : "");
    fflush(stdout);
  }
}

static void wait_for_file(const char* path, const char* why) {
  double deadline = mono_s() + opt.max_seconds;
  while (!file_exists(path)) {
    if (mono_s() > deadline) {
      fprintf(stderr, "net_check: gave up waiting for %s (%s)\n", path, why);
      exit(4);
    }
    usleep(20000);
  }
}

static int matrix_main(struct nc_ctx* c) {
  c->big = opt.big;
  run_matrix(c, "");
  if (opt.pause_file) {
    write_pid_file(opt.pause_file);
    wait_for_file(opt.resume_file, "the resume file");
    c->big = 0;
    run_matrix(c, " pass 2");
  }
  NC_CALL(c, "loomCommFinalize", loomCommFinalize(c->comm));
  NC_CALL(c, "loomCommDestroy", loomCommDestroy(c->comm));
  if (c->wrong) {
    printf("net_check rank %d: FAILED: %ld wrong elements\n", c->rank, c->wrong);
    return 1;
  }
  printf("net_check rank %d: all collectives passed\n", c->rank);
  return 0;
}

/* ---- The fault loop ------------------------------------------------------ */

static long long read_fail_time(void) {
  if (!opt.fail_time_file) return -1;
  FILE* f = fopen(opt.fail_time_file, "r");
  if (!f) return -1;
  long long t = -1;
  if (fscanf(f, "%lld", &t) != 1) t = -1;
  fclose(f);
  return t;
}

static int fault_main(struct nc_ctx* c) {
  size_t count = opt.fault_count;
  float* send = malloc(count * sizeof(float) + 1);
  float* recv = malloc(count * sizeof(float) + 1);
  if (!send || !recv) return 2;
  for (size_t i = 0; i < count; i++) send[i] = (float)((i * 7 + (size_t)c->rank * 5 + 3) % 8);
  double deadline = mono_s() + opt.max_seconds;
  for (long iter = 0;; iter++) {
    long wrong = 0;
    loomResult_t r = nc_allreduce_once(c, send, recv, count, &wrong);
    if (r != loomSuccess) {
      long long at = now_ms(), fail = read_fail_time();
      printf("net_check rank %d: FAULT rc=%d (%s) iter=%ld at_ms=%lld after_ms=%lld error: %s\n",
             c->rank, (int)r, loomGetErrorString(r), iter, at, fail >= 0 ? at - fail : -1,
             loomGetLastError(c->comm));
      fflush(stdout);
      loomCommAbort(c->comm);
      return 3;
    }
    if (wrong) {
      printf("net_check rank %d: FAILED: all-reduce %ld of %zu floats: %ld wrong elements\n",
             c->rank, iter, count, wrong);
      loomCommAbort(c->comm);
      return 1;
    }
    if (iter == 0) write_pid_file(opt.ready_file);
    if (file_exists(opt.stop_file)) {
      NC_CALL(c, "loomCommFinalize", loomCommFinalize(c->comm));
      NC_CALL(c, "loomCommDestroy", loomCommDestroy(c->comm));
      printf("net_check rank %d: stopped after %ld all-reduces\n", c->rank, iter + 1);
      return 0;
    }
    if (mono_s() > deadline) {
      printf("net_check rank %d: FAILED: never told to stop\n", c->rank);
      loomCommAbort(c->comm);
      return 4;
    }
  }
}

/* ---- Arguments and main -------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: net_check [--big] [--only LIST] [--pause-file F --resume-file G]\n"
          "       net_check --init-only\n"
          "       net_check --fault-loop COUNT --ready-file F --stop-file S [--fail-time-file T]\n"
          "       (any: [--max-seconds N]; the communicator comes from LOOM_RANK,\n"
          "        LOOM_WORLD_SIZE, LOOM_ROOT and LOOM_SECRET)\n");
  exit(64);
}

static void parse_args(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKE(field)     \
  do {                  \
    if (!next) usage(); \
    field = next;       \
    i++;                \
  } while (0)
    if (!strcmp(a, "--big"))
      opt.big = 1;
    else if (!strcmp(a, "--init-only"))
      opt.init_only = 1;
    else if (!strcmp(a, "--only"))
      TAKE(opt.only);
    else if (!strcmp(a, "--pause-file"))
      TAKE(opt.pause_file);
    else if (!strcmp(a, "--resume-file"))
      TAKE(opt.resume_file);
    else if (!strcmp(a, "--ready-file"))
      TAKE(opt.ready_file);
    else if (!strcmp(a, "--stop-file"))
      TAKE(opt.stop_file);
    else if (!strcmp(a, "--fail-time-file"))
      TAKE(opt.fail_time_file);
    else if (!strcmp(a, "--fault-loop") && next) {
      opt.fault_count = strtoull(next, NULL, 0);
      i++;
    } else if (!strcmp(a, "--max-seconds") && next) {
      opt.max_seconds = atoi(next);
      i++;
    } else
      usage();
#undef TAKE
  }
  if (!!opt.pause_file != !!opt.resume_file) usage();
  if (opt.fault_count && (!opt.ready_file || !opt.stop_file)) usage();
}

int main(int argc, char** argv) {
  parse_args(argc, argv);
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct nc_ctx c = {0};
  const char* env_rank = getenv("LOOM_RANK");
  c.rank = env_rank ? atoi(env_rank) : -1;
  double t0 = mono_s();
  loomResult_t r = loomCommInitFromEnv(&c.comm, NULL);
  if (r != loomSuccess) {
    printf("net_check rank %d: init failed: %s (%d): %s\n", c.rank, loomGetErrorString(r), (int)r,
           loomGetLastError(NULL));
    return 2;
  }
  NC_CALL(&c, "loomCommUserRank", loomCommUserRank(c.comm, &c.rank));
  NC_CALL(&c, "loomCommCount", loomCommCount(c.comm, &c.nranks));
  printf("net_check rank %d/%d: joined in %.2f s (pid %d)\n", c.rank, c.nranks, mono_s() - t0,
         (int)getpid());
  if (opt.init_only) {
    NC_CALL(&c, "loomCommFinalize", loomCommFinalize(c.comm));
    NC_CALL(&c, "loomCommDestroy", loomCommDestroy(c.comm));
    return 0;
  }
  if (opt.fault_count) return fault_main(&c);
  return matrix_main(&c);
}
