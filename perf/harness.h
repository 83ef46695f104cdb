/* harness.h - the run's state, shared by setup.c, bench.c and report.c only. */
#ifndef LOOM_PERF_HARNESS_H
#define LOOM_PERF_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "common.h"

/* One "# Using devices" line, exchanged between ranks (host, cpus, model). */
#define PERF_LINE 512

/* One rank driven by a thread. */
struct perf_rank {
  int rank; /* global */
  loomComm_t comm;
  loomStream_t stream; /* NULL with -y 1 */
  char *send, *recv;   /* max_bytes each */
  void* staging;       /* host copy for the checks when the buffers are not host memory */
  void *send_handle, *recv_handle; /* from loomCommRegister (-R) */
  loomRedOp_t premul;              /* live while a mulsum test runs */
  int premul_live;
};

/* One measured placement of one row. */
struct perf_cell {
  double time_us, algbw, busbw;
  int64_t wrong; /* -1: not checked (N/A) */
  long iters;    /* timed iterations: -n, or more under --min_ms */
};

struct perf_row {
  size_t size, count;
  loomDataType_t type;
  int op; /* -1: none */
  int root;
  struct perf_cell cell[2]; /* out of place, in place */
};

/* What global rank 0 prints and writes. */
struct perf_report {
  struct perf_row* rows;
  size_t nrows, cap;
  double bw_sum;
  int bw_count;
  int64_t wrong_total;
};

struct perf_world {
  const struct perf_opts* o;
  const struct perf_coll* coll;
  int nprocs, proc, nranks;
  loomComm_t env_comm; /* from the launcher, used as the rank comm when T*G == 1 */
  loomUniqueId id;
  FILE* json; /* -J, opened by process 0 before anything runs */
  struct perf_report report;
};

struct perf_thread {
  struct perf_world* w;
  int thread;
  int nlocal; /* -g */
  struct perf_rank* ranks;
  int is_main;                 /* global rank 0's thread: it prints */
  int failed;                  /* an error was reported; the exit status is non-zero */
  int64_t wrong;               /* the sum of every #wrong, the same on every rank */
  int rep;                     /* check rounds so far, for fresh values each time */
  size_t min_bytes, max_bytes; /* the sweep, after the memory cap */
};

/* setup.c */
void perf_fail(struct perf_thread* t, const struct perf_rank* r, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Waits for every local rank's stream. */
int perf_sync(struct perf_thread* t);
/* A one-element all-reduce of each local rank's *vals (in place), on the ranks' streams,
 * waited for. op < 0: a broadcast from rank 0 instead. */
int perf_allreduce(struct perf_thread* t, void* vals, loomDataType_t type, loomRedOp_t op);
int perf_barrier(struct perf_thread* t);

/* bench.c: every test of the run (types x ops x roots), each a sweep of sizes. */
int bench_run(struct perf_thread* t);

/* report.c */
void report_preamble(const struct perf_world* w);
int report_devices(struct perf_thread* t);
void report_table_header(void);
void report_row_start(const struct perf_row* row);
void report_cell(const struct perf_cell* c);
void report_row_end(void);
int report_add_row(struct perf_report* rep, const struct perf_row* row);
void report_footer(const struct perf_world* w);
int report_json(const struct perf_world* w);

#endif /* LOOM_PERF_HARNESS_H */
