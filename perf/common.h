/* common.h - the harness shared by Loom's perf tools (all_reduce_perf and friends).
 *
 * The tools follow nccl-tests: the same flags, defaults and table, so that a reader who knows
 * all_reduce_perf reads these at once (docs/PERF.md). One small file per collective fills a
 * struct perf_coll (how many elements, which call, which result where) and calls perf_main;
 * everything else lives here:
 *
 *   args.c    flags, --help, validation            mem.c     buffer kinds (host; cuda refused)
 *   dtype.c   datatype and op names, encodings     data.c    check values and their checking
 *   setup.c   ranks: launcher, threads, comms      bench.c   the timed sweep
 *   report.c  the table, the device lines, JSON
 *
 * Ranks: P processes (from a launcher, or 1) x T threads (-t) x G ranks per thread (-g), as
 * nccl-tests counts them; the rank of local rank g of thread t of process p is (p*T + t)*G + g. */
#ifndef LOOM_PERF_COMMON_H
#define LOOM_PERF_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#define PERF_VERSION "0.1.0"
#define PERF_OP_MULSUM ((int)loomNumOps) /* op index of a PreMulSum made per rank */
#define PERF_NUM_OPS (PERF_OP_MULSUM + 1)
#define PERF_ALL (-1)                /* -d all, -o all, -r -1 */
#define PERF_MAX_TIMED_ITERS 1000000 /* --min_ms never times more iterations than this */

/* Exit statuses: a failed run or wrong results, and bad usage. */
enum { PERF_EXIT_FAIL = 1, PERF_EXIT_USAGE = 2 };

/* ---- Buffer kinds (mem.c) ---- */

/* Where the benchmarked buffers live. Adding CUDA means one more table: allocation, a fill,
 * and copies to and from host memory for the checks. */
struct perf_mem_kind {
  const char* name;        /* "host", "cuda" */
  const char* unsupported; /* NULL when usable; otherwise why not, said to the user */
  int direct;              /* 1: host code may read and write the buffers in place */
  /* loom_alloc: take the memory from loomMemAlloc instead of the kind's own allocator.
   * Returns 0, or -1 with err filled. */
  int (*alloc)(void** out, size_t bytes, int loom_alloc, char* err, size_t errlen);
  void (*release)(void* p, int loom_alloc);
  void (*fill)(void* dst, int byte, size_t bytes);
  void (*to_host)(void* host_dst, const void* src, size_t bytes);
  void (*from_host)(void* dst, const void* host_src, size_t bytes);
};

const struct perf_mem_kind* perf_mem_find(const char* name);

/* ---- Options (args.c) ---- */

struct perf_opts {
  int nthreads, ngpus;
  size_t min_bytes, max_bytes, step_bytes, step_factor;
  int iters, warmup_iters, agg_iters, run_cycles;
  int check;          /* number of checked calls per size and placement; 0: none */
  int op;             /* 0..PERF_NUM_OPS-1 or PERF_ALL */
  int type;           /* a loomDataType_t or PERF_ALL */
  int root;           /* a rank or PERF_ALL */
  int blocking;       /* -z 0..3 */
  int stream_null;    /* -y 1: collectives on the NULL stream (each call blocks) */
  int timeout_s;      /* -T: the communicators' timeout; 0: Loom's default */
  int average;        /* -a 0 rank 0, 1 mean, 2 min, 3 max */
  int local_register; /* -R 0 none, 1 loomCommRegister, 2 loomMemAlloc + loomCommRegister */
  int min_ms;         /* --min_ms: time each size for at least this long; 0: -n iterations */
  const char* json_path;
  const char* type_arg; /* as given, for the JSON header */
  const char* op_arg;
  const struct perf_mem_kind* mem;
  int argc;
  char** argv;
};

/* Parses argv into o. Returns -1 to go on, or the exit status to leave with (0 after --help,
 * PERF_EXIT_USAGE after a bad flag, with the message printed). quiet: print nothing (every
 * process of a launcher parses; one speaks). */
int perf_args_parse(struct perf_opts* o, int argc, char** argv, const char* tool, int quiet);

/* ---- Datatypes and ops (dtype.c) ---- */

const char* dtype_name(loomDataType_t t); /* nccl-tests' names: "float", "half", "f8e4m3" */
size_t dtype_size(loomDataType_t t);
int dtype_is_float(loomDataType_t t);
int dtype_is_signed(loomDataType_t t);
int dtype_parse(const char* s); /* a type, PERF_ALL for "all", -2 when unknown */
const char* op_name(int op);    /* "sum" .. "mulsum" */
int op_parse(const char* s);    /* an op, PERF_ALL for "all", -2 when unknown */
/* Stores the integer v as one element of type t (integers wrap, floats round to nearest). */
void dtype_store(loomDataType_t t, void* dst, int64_t v);
/* 1 when the two elements hold the same value (floats compare as values: +0 == -0). */
int dtype_equal(loomDataType_t t, const void* a, const void* b);

/* ---- Collectives ---- */

/* Element counts of one row, as nccl-tests' getCollByteCount: what each rank sends and
 * receives, the count passed to the call, and the in-place offsets (times the rank). */
struct perf_counts {
  size_t send, recv, param;
  size_t send_inplace, recv_inplace;
};

/* The values of one checked call (data.c). */
struct perf_data {
  loomDataType_t type;
  int op; /* -1: no reduction */
  int nranks, root;
  uint64_t seed;
  struct perf_counts cnt;
  int64_t lo, hi; /* dense values in [lo, hi] */
  int sparse_q;   /* > 0: value 1 where (rank + k) % q == 0, else 0 */
  int prod_q;     /* > 0: |value| is 2 where (rank + k) % q == 0, else 1 */
  int rank_free;  /* the value does not depend on the rank (avg) */
};

struct perf_call {
  const void* send;
  void* recv;
  size_t count;
  loomDataType_t type;
  loomRedOp_t op;
  int root, rank, nranks;
  loomComm_t comm;
  loomStream_t stream;
};

struct perf_coll {
  const char* tool;      /* "all_reduce_perf" */
  int has_op, has_root;  /* otherwise the row says "none" and -1 */
  int reduces;           /* the op combines values (send/receive lists ops but moves data) */
  int input_root_only;   /* only the root's input matters (broadcast, scatter) */
  int inplace_unchecked; /* the in-place form has no defined result (send/receive) */
  void (*counts)(size_t count, size_t esize, int nranks, struct perf_counts* out);
  double (*bus_factor)(int nranks);
  loomResult_t (*run)(const struct perf_call* c);
  /* Element k of rank's result; returns 0 when this rank has no result to check. */
  int (*expect)(const struct perf_data* d, int rank, size_t k, int64_t* out);
};

/* Elements per rank rounded down to 16 bytes, as nccl-tests does for split buffers. */
size_t perf_split_count(size_t count, size_t esize, int nranks);
/* The shapes of the collectives' buffers (data.c), for perf_coll.counts:
 * whole: every rank's buffers hold the whole vector (all-reduce, broadcast, reduce, sendrecv);
 * gathered: send one block, receive n (all-gather, gather; in place at recv + r*block);
 * scattered: send n blocks, receive one (reduce-scatter, scatter; in place at send + r*block). */
void perf_counts_whole(size_t count, size_t esize, int nranks, struct perf_counts* c);
void perf_counts_gathered(size_t count, size_t esize, int nranks, struct perf_counts* c);
void perf_counts_scattered(size_t count, size_t esize, int nranks, struct perf_counts* c);
/* nccl-tests' bus-bandwidth factors, for perf_coll.bus_factor: 1, and (n-1)/n. */
double perf_bus_one(int nranks);
double perf_bus_split(int nranks);

/* ---- Check values (data.c) ---- */

void data_init(struct perf_data* d, loomDataType_t type, int op, int nranks, int root,
               uint64_t seed, const struct perf_counts* cnt);
int64_t data_value(const struct perf_data* d, int rank, size_t k);
/* The reduction over all ranks of their element k. */
int64_t data_reduced(const struct perf_data* d, size_t k);
/* The PreMulSum scalar of a rank (1 or 2). */
int64_t data_premul_scalar(int rank);
void data_fill(const struct perf_data* d, int rank, void* host_buf, size_t count);
/* Wrong elements among the first d->cnt.recv of host_buf; 0 where the rank has no result. */
size_t data_check(const struct perf_coll* c, const struct perf_data* d, int rank,
                  const void* host_buf);

/* ---- The run (setup.c, bench.c, report.c) ---- */

int perf_main(const struct perf_coll* coll, int argc, char** argv);

#endif /* LOOM_PERF_COMMON_H */
