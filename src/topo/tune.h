/* tune.h - the tuner: which algorithm serves a call.
 *
 * A cost model per algorithm, time = steps * latency + bytes moved per rank /
 * bandwidth (+ bytes reduced / reduction bandwidth), with constants measured
 * on this host at first use (a short calibration cached under the user's
 * cache directory) or read from LOOM_TUNING_FILE. LOOM_ALGO forces a choice;
 * a forced choice that cannot serve the call falls back with one INFO line.
 * The topology layer knows collectives only by this enum, not by their code. */
#ifndef LOOM_TOPO_TUNE_H
#define LOOM_TOPO_TUNE_H

#include <stddef.h>

#include "loom.h"

/* The collectives of core/colls.def, in its order (the collectives
 * layer's enum coll_kind keeps the same). */
enum tune_coll {
#define COLL(id, token, text, flags) TUNE_##id,
#include "core/colls.def"
#undef COLL
  TUNE_COLL_COUNT
};

enum tune_algo {
  TUNE_RING = 0,
  TUNE_TREE,
  TUNE_RHD,
  TUNE_PAIRWISE,
  TUNE_BRUCK,
  TUNE_DIRECT,
  TUNE_ONESHOT,  /* direct reads of peers' buffers: all-reduce, every rank reduces all */
  TUNE_TWOSHOT,  /* direct reads: all-reduce as reduce-scatter then all-gather */
  TUNE_READ,     /* direct reads: all-gather, reduce-scatter, broadcast, all-to-all */
  TUNE_HIER,     /* all-reduce in two levels: inside each host, then across hosts */
  TUNE_DOUBLING, /* all-reduce by recursive doubling: log2 n whole-buffer exchanges */
  TUNE_ORDERED,  /* reductions folded in rank order (LOOM_DETERMINISTIC): ordered.c */
  TUNE_LINES,    /* one exchange through low-latency lines: small messages, one host (lines.c) */
  TUNE_ALGO_COUNT
};
#define TUNE_ALGO_BIT(a) (1u << (a))

/* What one rank's low-latency lines carry in one call, bytes: TUNE_LINES
 * serves a call whose rank puts at most this much (all-reduce: the vector;
 * all-gather: its block; reduce-scatter: all its blocks; broadcast: the
 * root's vector). */
#define TUNE_LINES_BYTES (16u << 10)

/* The sizes at which the calibration measures the bandwidths, per rank's
 * buffer: 64 KiB, 256 KiB, 1 MiB, 4 MiB and 16 MiB. What a copy costs
 * depends on whether the buffers fit the caches, so one figure cannot serve
 * every size; between two points the model interpolates on a log scale,
 * outside them it takes the nearest. */
#define TUNE_CAL_POINTS 5
#define TUNE_CAL_FIRST (64u << 10)
size_t tune_cal_bytes(int point);

/* The measured (or loaded) constants of the model. */
struct tune_consts {
  double step_us;     /* one pipeline step between two ranks: post, signal, wake */
  double copy_gbps;   /* one rank's copy bandwidth through a connection, GB/s (16 MiB) */
  double reduce_gbps; /* one rank's reduction bandwidth, GB/s of output (16 MiB) */
  int ncpus;          /* ranks beyond this share cores */
  double cma_gbps;    /* reading another process's memory by process_vm_readv, GB/s (16 MiB) */
  double cma_us;      /* ... and the cost of one such call (a system call) */
  /* Low-latency lines (TUNE_LINES), measured by two threads with the
   * transport's own code (calibrate.c): GB/s of data one rank puts into its
   * lines and reads from a peer's at once, and what a call of a few bytes
   * costs as a fraction of the same exchange through a FIFO, which scales
   * the step. 0 (a tuning file without them): a quarter of the copy
   * bandwidth, and a quarter of the step less its fixed part. */
  double lines_gbps;
  double lines_step;
  /* Direct plans' read bandwidth for one communicator: plain loads for
   * thread ranks (twice copy_gbps: one copy, not two; at other sizes it
   * scales as the copy does); 0 between processes: cross-memory attach
   * (cma_at, cma_us). Set by the communicator, not calibrated. */
  double read_gbps;
  double read_call_us; /* per read: cma_us between processes, 0 for loads */
  /* The network between hosts: one host's bandwidth to the others, GB/s, and
   * the cost of one message across it, us. Not calibrated (a host alone has
   * no network to measure): LOOM_TUNING_FILE's net_gbps and net_us, else
   * 1.25 GB/s (10 Gbit/s) and 25 us. */
  double net_gbps;
  double net_us;
  /* The communicator's shape, set by the communicator (zero: one host). */
  int nhosts;     /* hosts its ranks span */
  int local;      /* ranks on its most populated host */
  int even;       /* 1 when every host holds `local` ranks */
  int ring_cross; /* most edges of the ring rank -> rank + 1 that leave one host */
  /* The bandwidths as the plans see them, at each of the TUNE_CAL_POINTS
   * sizes: two threads at once, each sending its buffer to the other
   * through a FIFO of slices (copy in, copy out), each reading the other's
   * buffer by cross-memory attach, each reducing two buffers into a third,
   * each reading the other's buffer by cross-memory attach a bounce buffer
   * at a time and folding it into its own (the reads of one-shot and
   * two-shot, GB/s of what is read). GB/s per rank; 0 (a tuning file
   * without them): the figures above at every size (for cma_reduce_at: a
   * read at cma_at, then a reduction at reduce_at). */
  double copy_at[TUNE_CAL_POINTS];
  double cma_at[TUNE_CAL_POINTS];
  double reduce_at[TUNE_CAL_POINTS];
  double cma_reduce_at[TUNE_CAL_POINTS];
  /* One step between two ranks that share a CPU, us: the waiter yields the
   * core and the peer it waits for runs (two threads on one CPU, measured as
   * step_us is). With more ranks on a host than cores, an exchange of a plan
   * often waits for a peer that holds no core, and costs this rather than
   * step_us. 0 (a tuning file without it, one CPU): not costed apart. */
  double handoff_us;
  /* How many of the calibration's bandwidth figures had no run in which
   * both threads held their cores throughout (another program took them: a
   * build, a test suite), even when measured again. Cached with the
   * figures ("disturbed N"); a cache that says so serves for ten minutes,
   * then the next process measures again (calibrate.c). */
  int disturbed;
};

/* The constants in force: LOOM_TUNING_FILE, else the cache, else a fresh
 * calibration (about 1.6 seconds, then cached). Thread safe; never fails (falls
 * back to built-in values with an INFO line). */
const struct tune_consts* tune_consts_get(void);
/* Reads a tuning file (LOOM_TUNING_FILE, or the cache) into k: lines of key and value, the
 * tables as copy_gbps@<bytes>, cma_gbps@<bytes>, reduce_gbps@<bytes> and
 * cma_reduce_gbps@<bytes> at the points'
 * sizes. cache: every line a calibration writes must be there (an older cache lacks some and
 * is measured again); a tuning file may leave out cma_gbps (direct plans are then costed
 * with the copy bandwidth), lines_gbps and the tables (the single figures serve every
 * size). 0, or -1 when the file is missing, short or out of range. */
int tune_consts_read(const char* path, struct tune_consts* k, int cache);
/* Measures the constants now (for loom_info and tests). */
void tune_calibrate(struct tune_consts* out);

/* The predicted time in microseconds of coll over nranks ranks, with the
 * given slice size. On one host every pair of ranks costs the same; across
 * hosts (k->nhosts > 1) a flat algorithm's step costs a network message and
 * its bandwidth is the network's, shared by the flows that leave a host at
 * once, and TUNE_HIER (all-reduce, even layouts of more than one rank per
 * host) costs its three phases. bytes is the size of the whole vector: the
 * buffer of all-reduce, broadcast and reduce, the send buffer of
 * reduce-scatter, all-to-all and scatter, the receive buffer of all-gather
 * and gather (each rank's share is bytes / nranks). A negative value means the
 * algorithm cannot serve the call. Pure given the constants. */
double tune_predict_us(const struct tune_consts* k, enum tune_coll coll, enum tune_algo algo,
                       int nranks, size_t bytes, size_t slice_bytes);

/* The algorithm for a call: among the algorithms in avail (TUNE_ALGO_BIT
 * mask), LOOM_ALGO's choice when it names one of them, otherwise the
 * cheapest predicted by the constants k. Every rank of a communicator must
 * pass the same k (the communicator agrees on rank 0's at init), or ranks
 * could pick different plans. Thread safe. */
enum tune_algo tune_pick(const struct tune_consts* k, enum tune_coll coll, int nranks, size_t bytes,
                         size_t slice_bytes, unsigned avail);
/* As tune_pick with explicit constants and no LOOM_ALGO: the model's own
 * choice (unit tests, loom_info --tuning). */
enum tune_algo tune_pick_model(const struct tune_consts* k, enum tune_coll coll, int nranks,
                               size_t bytes, size_t slice_bytes, unsigned avail);

/* The all-reduce family (ring, tree, rhd or doubling) for the cross-host phase of
 * TUNE_HIER: nhosts ranks, one per host, each all-reducing part_bytes while
 * the host's other k->local - 1 ranks do the same on the same network. */
enum tune_algo tune_hier_cross(const struct tune_consts* k, int nhosts, size_t part_bytes,
                               size_t slice_bytes);

const char* tune_algo_name(enum tune_algo a);
const char* tune_coll_name(enum tune_coll c);
/* Parses an algorithm name ("ring", "tree", "rhd", "pairwise", "bruck",
 * "direct", "oneshot", "twoshot", "read", "hier", "doubling"); -1 if unknown. */
int tune_algo_parse(const char* name);
/* loomSuccess when LOOM_ALGO's value spec names only known collectives and
 * families; otherwise loomInvalidArgument naming the unknown name and what
 * is accepted (params_reject). */
loomResult_t tune_algo_check(const char* spec);

/* Protocols: how a slice crosses a connection. The host path has one,
 * simple (whole slots handed over by a flag each); a low-latency protocol
 * comes with a later issue, and with it a choice by size. */
enum tune_proto { TUNE_PROTO_SIMPLE = 0, TUNE_PROTO_COUNT };
const char* tune_proto_name(enum tune_proto p);
/* Parses a protocol name (case aside); -1 if unknown. */
int tune_proto_parse(const char* name);
/* loomSuccess when LOOM_PROTO is empty or names a protocol of this build;
 * otherwise loomInvalidArgument naming the value and the protocols
 * (params_reject). */
loomResult_t tune_proto_check(const char* name);
/* The protocol of a communicator's calls: LOOM_PROTO's, or the model's
 * (simple, the only one). Every rank picks the same (LOOM_PROTO is agreed
 * at init). */
enum tune_proto tune_proto_pick(void);
/* 1 when the protocol in force was forced by LOOM_PROTO. */
int tune_proto_forced(void);

#endif
