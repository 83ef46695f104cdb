/* perf_common.h: what the peer benchmarks (mpi_perf.c, gloo_perf.cc) share.
 *
 * The flags and the table they print follow nccl-tests, so that one parser reads the output of
 * every library (perf/compare/summarize.py) and a reader who knows all_reduce_perf knows these:
 *
 *   -b MINBYTES -e MAXBYTES  sizes (suffixes K, M, G), both in bytes of the "size" column
 *   -f FACTOR | -i STEPBYTES  multiply by FACTOR (default 2) or add STEPBYTES
 *   -n ITERS -w WARMUP        timed iterations (default 20) and warm-up iterations (default 5)
 *   --min_ms MS               time each size for at least MS ms: after the -n calls, as many
 *                             more as the slowest rank's mean says fill MS (default 0: none)
 *   -c 0|1                    check the results of one extra call per size (default 1)
 *   -o sum|prod|max|min       reduction (default sum), -d float (the only datatype here)
 *   -r ROOT                   broadcast root (default 0)
 *   -C COLL                   allreduce, allgather, reducescatter, alltoall or broadcast
 *   -a ALGO                   a library's algorithm (gloo_perf only)
 *
 * The "size" of a row is what nccl-tests calls it: the bytes of the largest buffer of one rank
 * (all-gather: the gathered output; reduce-scatter: the input; all-to-all: one rank's send
 * buffer), where each rank's part is rounded down to 16 bytes; "count" is the count passed to
 * the call (per rank for those three). algbw is size / time.
 *
 * Check values are small integers, so every sum, product, max and min is exact in float32 for
 * up to 8 ranks, whatever order a library reduces in: a "wrong" element is really wrong.
 *
 * Header-only, C99 and C++ alike, so a C and a C++ program include the same code. */
#ifndef LOOM_PERF_COMPARE_COMMON_H
#define LOOM_PERF_COMPARE_COMMON_H

#include <ctype.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum coll_kind {
  COLL_ALLREDUCE,
  COLL_ALLGATHER,
  COLL_REDUCESCATTER,
  COLL_ALLTOALL,
  COLL_BROADCAST
};
enum red_kind { RED_SUM, RED_PROD, RED_MAX, RED_MIN };

struct bench_opts {
  size_t min_bytes, max_bytes, step_bytes; /* step_bytes 0: multiply by step_factor */
  double step_factor;
  int iters, warmup, check, root;
  int min_ms; /* --min_ms; 0: the -n calls only */
  enum coll_kind coll;
  enum red_kind op;
  const char* algo; /* NULL: the library's default */
};

struct coll_desc {
  const char* name; /* the -C spelling */
  const char* tool; /* nccl-tests' program name, used as the JSON "tool" */
  int reduces;
};

static const struct coll_desc coll_descs[] = {
    {"allreduce", "all_reduce_perf", 1},         {"allgather", "all_gather_perf", 0},
    {"reducescatter", "reduce_scatter_perf", 1}, {"alltoall", "alltoall_perf", 0},
    {"broadcast", "broadcast_perf", 0},
};
static const char* const red_names[] = {"sum", "prod", "max", "min"};

/* nccl-tests' bus bandwidth factors: what each rank's link carries relative to algbw. */
static inline double bus_factor(enum coll_kind c, int nranks) {
  double n = nranks;
  switch (c) {
    case COLL_ALLREDUCE:
      return 2.0 * (n - 1) / n;
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER:
    case COLL_ALLTOALL:
      return (n - 1) / n;
    case COLL_BROADCAST:
      return 1.0;
  }
  return 1.0;
}

static inline int coll_is_split(enum coll_kind c) {
  return c == COLL_ALLGATHER || c == COLL_REDUCESCATTER || c == COLL_ALLTOALL;
}

/* Elements of the row's largest buffer for SIZE bytes. Where the buffer is split among the
 * ranks, each rank's part is rounded down to 16 bytes, as nccl-tests does. */
static inline size_t coll_count(enum coll_kind c, size_t bytes, int nranks) {
  size_t count = bytes / sizeof(float);
  if (!coll_is_split(c)) return count;
  return (count / (size_t)nranks & ~(size_t)3) * (size_t)nranks;
}

/* The "count" column, as nccl-tests prints it: the count passed to the call (per rank where
 * the buffer is split). */
static inline size_t coll_param_count(enum coll_kind c, size_t count, int nranks) {
  return coll_is_split(c) ? count / (size_t)nranks : count;
}

static inline int parse_bytes(const char* s, size_t* out) {
  char* end;
  double v = strtod(s, &end);
  if (end == s || v < 0) return -1;
  switch (toupper((unsigned char)*end)) {
    case 'G':
      v *= 1024.0; /* fall through */
    case 'M':
      v *= 1024.0; /* fall through */
    case 'K':
      v *= 1024.0;
      end++;
      break;
    case '\0':
      break;
    default:
      return -1;
  }
  if (*end != '\0' && !(toupper((unsigned char)*end) == 'B' && end[1] == '\0')) return -1;
  *out = (size_t)v;
  return 0;
}

static inline int parse_coll(const char* s, enum coll_kind* out) {
  static const char* const alias[][2] = {{"all_reduce", "allreduce"},
                                         {"all_gather", "allgather"},
                                         {"reduce_scatter", "reducescatter"},
                                         {"all_to_all", "alltoall"},
                                         {"bcast", "broadcast"}};
  for (size_t i = 0; i < sizeof(alias) / sizeof(alias[0]); i++)
    if (strcmp(s, alias[i][0]) == 0) s = alias[i][1];
  for (int i = 0; i < (int)(sizeof(coll_descs) / sizeof(coll_descs[0])); i++)
    if (strcmp(s, coll_descs[i].name) == 0) {
      *out = (enum coll_kind)i;
      return 0;
    }
  return -1;
}

static inline void bench_usage(const char* prog, const char* extra) {
  fprintf(
      stderr,
      "usage: %s [-b MINBYTES] [-e MAXBYTES] [-f FACTOR | -i STEPBYTES] [-n ITERS] [-w WARMUP]\n"
      "          [--min_ms MS]\n"
      "          [-c 0|1] [-o sum|prod|max|min] [-d float] [-r ROOT]\n"
      "          [-C allreduce|allgather|reducescatter|alltoall|broadcast] [-a ALGO]\n%s",
      prog, extra ? extra : "");
}

/* Parses nccl-tests' flags into *o; returns 0, or -1 after printing why. */
static inline int bench_parse_args(int argc, char** argv, struct bench_opts* o) {
  int c;
  o->min_bytes = 32 * 1024 * 1024;
  o->max_bytes = 32 * 1024 * 1024;
  o->step_bytes = 0;
  o->step_factor = 2.0;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1;
  o->root = 0;
  o->coll = COLL_ALLREDUCE;
  o->op = RED_SUM;
  o->algo = NULL;
  o->min_ms = 0;
  static const struct option longs[] = {{"min_ms", required_argument, NULL, 'M'},
                                        {NULL, 0, NULL, 0}};
  while ((c = getopt_long(argc, argv, "b:e:f:i:n:w:c:o:d:r:C:a:h", longs, NULL)) != -1) {
    int bad = 0;
    switch (c) {
      case 'b':
        bad = parse_bytes(optarg, &o->min_bytes);
        break;
      case 'e':
        bad = parse_bytes(optarg, &o->max_bytes);
        break;
      case 'f':
        o->step_factor = atof(optarg);
        bad = o->step_factor <= 1.0;
        break;
      case 'i':
        bad = parse_bytes(optarg, &o->step_bytes) || o->step_bytes == 0;
        break;
      case 'n':
        o->iters = atoi(optarg);
        bad = o->iters < 1;
        break;
      case 'w':
        o->warmup = atoi(optarg);
        bad = o->warmup < 0;
        break;
      case 'M':
        o->min_ms = atoi(optarg);
        bad = o->min_ms < 0 || o->min_ms > 3600 * 1000;
        break;
      case 'c':
        o->check = atoi(optarg) != 0;
        break;
      case 'r':
        o->root = atoi(optarg);
        bad = o->root < 0;
        break;
      case 'a':
        o->algo = optarg;
        break;
      case 'C':
        bad = parse_coll(optarg, &o->coll);
        break;
      case 'd':
        bad = strcmp(optarg, "float") != 0 && strcmp(optarg, "float32") != 0;
        if (bad) fprintf(stderr, "only -d float is measured here\n");
        break;
      case 'o':
        bad = 1;
        for (int i = 0; i < 4; i++)
          if (strcmp(optarg, red_names[i]) == 0) {
            o->op = (enum red_kind)i;
            bad = 0;
          }
        break;
      default:
        return -1;
    }
    if (bad) {
      fprintf(stderr, "bad value for -%c: %s\n", c, optarg);
      return -1;
    }
  }
  if (optind != argc || o->min_bytes > o->max_bytes) {
    fprintf(stderr, "unexpected arguments, or -b larger than -e\n");
    return -1;
  }
  return 0;
}

/* Under --min_ms: how many calls to time after the first -n, whose mean on the slowest rank
 * was slowest_mean seconds, so that all of them fill MS (at most 10^6 in all). Every rank
 * passes the same maximum, so every rank makes the same calls. */
static inline int bench_more_iters(const struct bench_opts* o, double slowest_mean) {
  double want = (double)o->min_ms * 1e-3, total;
  if (o->min_ms <= 0) return 0;
  total = slowest_mean > 0 ? ceil(want / slowest_mean) : 1e6;
  if (total > 1e6) total = 1e6;
  return total > (double)o->iters ? (int)total - o->iters : 0;
}

static inline size_t bench_next_size(const struct bench_opts* o, size_t bytes) {
  if (o->step_bytes) return bytes + o->step_bytes;
  size_t next = (size_t)((double)bytes * o->step_factor);
  return next > bytes ? next : bytes + 1;
}

/* ---- check values ---------------------------------------------------------------------------- */

/* The value rank RANK contributes at index I: an integer in 1..8, so that reductions of up to
 * 8 ranks stay exact in float32 (8^8 = 2^24). */
static inline float check_value(int rank, size_t i) {
  return (float)((i * 7 + (size_t)rank * 13 + (i >> 12)) % 8 + 1);
}

static inline float check_reduced(enum red_kind op, int nranks, size_t i) {
  float acc = check_value(0, i);
  for (int r = 1; r < nranks; r++) {
    float v = check_value(r, i);
    switch (op) {
      case RED_SUM:
        acc += v;
        break;
      case RED_PROD:
        acc *= v;
        break;
      case RED_MAX:
        acc = v > acc ? v : acc;
        break;
      case RED_MIN:
        acc = v < acc ? v : acc;
        break;
    }
  }
  return acc;
}

static inline void fill_values(float* buf, size_t n, int rank, size_t first_index) {
  for (size_t i = 0; i < n; i++) buf[i] = check_value(rank, first_index + i);
}

/* Input of rank RANK for its call, in the layout of its send buffer (see check_output). */
static inline void fill_input(enum coll_kind c, float* send, size_t count, int rank, int nranks) {
  switch (c) {
    case COLL_ALLGATHER:
      fill_values(send, count / (size_t)nranks, rank, 0);
      break;
    default:
      fill_values(send, count, rank, 0);
      break;
  }
}

/* The buffers before a checked call: recv poisoned, and the input where the
 * call reads it (in place: inside recv, where the collective's in-place form
 * puts it). */
static inline void bench_prepare_check(enum coll_kind c, int root, float* send, float* recv,
                                       size_t count, int rank, int nranks, int in_place) {
  size_t per = count / (size_t)nranks;
  memset(recv, 0xff, count * sizeof(float));
  if (!in_place) {
    fill_input(c, send, count, rank, nranks);
    return;
  }
  if (c == COLL_ALLGATHER)
    fill_values(recv + (size_t)rank * per, per, rank, 0);
  else if (c != COLL_BROADCAST || rank == root)
    fill_input(c, recv, count, rank, nranks);
}

/* The "Using devices" lines, one per rank (host ranks: no device). */
static inline void print_devices(const int* pids, int nranks, const char* host) {
  printf("#\n# Using devices\n");
  for (int r = 0; r < nranks; r++)
    printf("#  Rank %2d Group  0 Pid %6d on %10s device host\n", r, pids[r], host);
}

/* Counts the elements of OUT that differ from what rank RANK must hold after the collective.
 * OUT points at the rank's result: the whole buffer, except reduce-scatter (recvcount
 * elements). */
static inline size_t check_output(enum coll_kind c, enum red_kind op, const float* out,
                                  size_t count, int rank, int nranks, int root) {
  size_t wrong = 0, per = count / (size_t)nranks;
  switch (c) {
    case COLL_ALLREDUCE:
      for (size_t i = 0; i < count; i++) wrong += out[i] != check_reduced(op, nranks, i);
      break;
    case COLL_REDUCESCATTER:
      for (size_t i = 0; i < per; i++)
        wrong += out[i] != check_reduced(op, nranks, (size_t)rank * per + i);
      break;
    case COLL_ALLGATHER:
      for (int r = 0; r < nranks; r++)
        for (size_t i = 0; i < per; i++) wrong += out[(size_t)r * per + i] != check_value(r, i);
      break;
    case COLL_ALLTOALL:
      for (int r = 0; r < nranks; r++)
        for (size_t i = 0; i < per; i++)
          wrong += out[(size_t)r * per + i] != check_value(r, (size_t)rank * per + i);
      break;
    case COLL_BROADCAST:
      for (size_t i = 0; i < count; i++) wrong += out[i] != check_value(root, i);
      break;
  }
  return wrong;
}

/* ---- the table --------------------------------------------------------------------------------
 */

struct bench_result {
  double time_us, algbw, busbw;
  long wrong; /* -1: not checked */
};

/* Out-of-place and in-place rows accumulate here for the footer. */
struct bench_totals {
  double busbw_sum;
  int busbw_n;
  long wrong;
};

static inline void print_rule_lines(void) {
  printf("#\n");
  printf("# %10s  %12s  %8s  %6s  %6s  %31s  %31s\n", "", "", "", "", "", "out-of-place",
         "in-place");
  printf("# %10s  %12s  %8s  %6s  %6s  %8s  %6s  %6s  %6s  %8s  %6s  %6s  %6s\n", "size", "count",
         "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
         "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %8s  %6s  %6s  %6s  %8s  %6s  %6s  %6s\n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

static inline void print_header(const struct bench_opts* o, const char* library, const char* how,
                                int nranks) {
  printf("# nThread 1 nGpus 0 nRanks %d minBytes %zu maxBytes %zu step: ", nranks, o->min_bytes,
         o->max_bytes);
  if (o->step_bytes)
    printf("%zu(bytes)", o->step_bytes);
  else
    printf("%g(factor)", o->step_factor);
  printf(" warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n", o->warmup, o->iters,
         o->check);
  printf("#\n# Library: %s\n", library);
  printf("# Collective: %s (%s), datatype float, op %s, host memory\n", coll_descs[o->coll].name,
         coll_descs[o->coll].tool, coll_descs[o->coll].reduces ? red_names[o->op] : "none");
  if (how && *how) printf("# How: %s\n", how);
}

static inline void format_time(char* buf, size_t len, double us) {
  if (us >= 100000.0)
    snprintf(buf, len, "%.0f", us);
  else if (us >= 1000.0)
    snprintf(buf, len, "%.1f", us);
  else
    snprintf(buf, len, "%.2f", us);
}

static inline void print_result(const struct bench_result* r, struct bench_totals* t) {
  char tbuf[32], wbuf[32];
  format_time(tbuf, sizeof(tbuf), r->time_us);
  if (r->wrong < 0)
    snprintf(wbuf, sizeof(wbuf), "N/A");
  else
    snprintf(wbuf, sizeof(wbuf), "%ld", r->wrong);
  printf("  %8s  %6.2f  %6.2f  %6s", tbuf, r->algbw, r->busbw, wbuf);
  t->busbw_sum += r->busbw;
  t->busbw_n++;
  if (r->wrong > 0) t->wrong += r->wrong;
}

static inline void print_row(const struct bench_opts* o, size_t count, int nranks,
                             const struct bench_result* oop, const struct bench_result* ip,
                             struct bench_totals* t) {
  int root = o->coll == COLL_BROADCAST ? o->root : -1;
  printf("  %10zu  %12zu  %8s  %6s  %6d", count * sizeof(float),
         coll_param_count(o->coll, count, nranks), "float",
         coll_descs[o->coll].reduces ? red_names[o->op] : "none", root);
  print_result(oop, t);
  print_result(ip, t);
  printf("\n");
  fflush(stdout);
}

static inline void print_footer(const struct bench_totals* t) {
  printf("# Out of bounds values : %ld %s\n", t->wrong, t->wrong ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n", t->busbw_n ? t->busbw_sum / t->busbw_n : 0.0);
  printf("#\n");
}

static inline void fill_result(struct bench_result* r, const struct bench_opts* o, size_t count,
                               int nranks, double seconds, long wrong) {
  double bytes = (double)count * sizeof(float);
  r->time_us = seconds * 1e6;
  r->algbw = seconds > 0 ? bytes / seconds / 1e9 : 0.0;
  r->busbw = r->algbw * bus_factor(o->coll, nranks);
  r->wrong = wrong;
}

static inline double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Page-aligned and touched, so that first-touch page faults stay out of the timed loops. */
static inline float* bench_alloc(size_t count) {
  void* p = NULL;
  size_t bytes = count * sizeof(float);
  if (posix_memalign(&p, 4096, bytes ? bytes : 4096) != 0) return NULL;
  memset(p, 0, bytes ? bytes : 4096);
  return (float*)p;
}

#endif /* LOOM_PERF_COMPARE_COMMON_H */
