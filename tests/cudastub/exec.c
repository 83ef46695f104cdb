/* exec.c - the CUDA executor (src/collectives/exec_cuda.c) against the
 * stand-in driver (stub_stream.c, stub_kernels.c), on machines with no GPU:
 * thread ranks of one process on one device, each with a CUDA stream of
 * its own that a worker thread runs behind the host's back, as a GPU does;
 * or process ranks, one per forked process. The same program runs against
 * a GPU's driver (tests/gpu builds it as gpu_exec, given libcuda.so.1):
 * it reaches device memory only through the driver's copies.
 *
 * Checked: every collective the executor serves at 1, 2, 3, 4 and 8 ranks,
 * every datatype with every op that is exact for the inputs (so any order
 * of reduction gives one answer, the host kernels' fold in rank order),
 * loomAvg and PreMulSum with a host and a device scalar, in place and out of
 * place; that a call returns once queued while the stream is held by
 * earlier work, and its result lands only after that work; calls of one
 * communicator on two streams; one thread per rank as well as one thread
 * driving every rank in a group. Sends and receives: a ring in one group,
 * many messages of many sizes between every pair (self included) in one
 * group, more than the executor's descriptors per pair; a pipeline of
 * ungrouped calls by thread ranks forwarding one buffer; ranks making
 * different numbers of point-to-point calls between collectives;
 * all-to-all-v with uneven counts and zeros; a send and a receive of
 * different sizes, an error on both ranks. LOOM_ALGO (set by ctest per
 * run) forces each family.
 *   usage: exec PATH_OF_LIBCUDA_SO_1 [procs N | killed N] */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/dtype.h"
#include "kernels/codec.h"
#include "kernels/cpu/cpu_kernels.h"
#include "loom.h"

static int fails, checks;
static int (*cu_stream_create)(void**, unsigned);
static int (*cu_stream_destroy)(void*);
static int (*cu_mem_alloc)(uintptr_t*, size_t);
static int (*cu_mem_free)(uintptr_t);
static int (*cu_wait_value)(void*, uintptr_t, uint64_t, unsigned);
static int (*cu_h2d)(uintptr_t, const void*, size_t);
static int (*cu_d2h)(void*, uintptr_t, size_t);
static int (*cu_memset8)(uintptr_t, unsigned char, size_t);
static int (*cu_host_alloc)(void**, size_t, unsigned);
static int (*cu_host_dev_ptr)(uintptr_t*, void*, unsigned);
static int (*cu_init)(unsigned);
static int (*cu_primary_retain)(void**, int);
static int (*cu_ctx_set)(void*);
static void* the_ctx;
static int driver_start(void);

#define MAXR 8
static int nranks;
/* The ranks this process drives: all of them (thread ranks), or its one. */
static int lo, hi;
static int is_local(int r) {
  return r >= lo && r < hi;
}
static loomComm_t comms[MAXR];
static void* cstreams[MAXR];
static loomStream_t streams[MAXR];

#define CHECK(cond, ...)            \
  do {                              \
    checks++;                       \
    if (!(cond)) {                  \
      fails++;                      \
      printf("FAIL: " __VA_ARGS__); \
      printf("\n");                 \
    }                               \
  } while (0)

/* Device memory is reached through the driver's copies (on a GPU the host
 * cannot read it; the stand-in's copies are memcpy): into it, out of it, set
 * to a byte. Synchronous, and with the test's streams non-blocking they wait
 * for none of them. */
static void must(int r, const char* what) {
  if (r != 0) {
    printf("FAIL: %s: CUDA error %d\n", what, r);
    exit(1);
  }
}
static void to_dev(void* dev, const void* host, size_t bytes) {
  if (bytes) must(cu_h2d((uintptr_t)dev, host, bytes), "cuMemcpyHtoD");
}
static void from_dev(void* host, const void* dev, size_t bytes) {
  if (bytes) must(cu_d2h(host, (uintptr_t)dev, bytes), "cuMemcpyDtoH");
}
static void set_dev(void* dev, int byte, size_t bytes) {
  if (bytes) must(cu_memset8((uintptr_t)dev, (unsigned char)byte, bytes), "cuMemsetD8");
}
/* A word in host memory the device can wait on: *dev_out is its device
 * address. */
static uint64_t* host_word(uintptr_t* dev_out) {
  void* h = NULL;
  must(cu_host_alloc(&h, 64, 0x03), "cuMemHostAlloc"); /* portable, device-mapped */
  must(cu_host_dev_ptr(dev_out, h, 0), "cuMemHostGetDevicePointer");
  *(volatile uint64_t*)h = 0;
  return h;
}
/* This thread uses the primary context of device 0, as Loom does. */
static void ctx_here(void) {
  must(cu_ctx_set(the_ctx), "cuCtxSetCurrent");
}
/* The test's streams: non-blocking, so the synchronous copies above never
 * wait for them (a held stream would hold those). */
static void stream_new(void** s) {
  must(cu_stream_create(s, 1), "cuStreamCreate"); /* CU_STREAM_NON_BLOCKING */
}

static void* dev_alloc(size_t bytes) {
  uintptr_t p = 0;
  if (cu_mem_alloc(&p, bytes ? bytes : 1) != 0) {
    printf("cuMemAlloc failed\n");
    exit(1);
  }
  return (void*)p;
}

/* Element i of a buffer of type t holds the small integer v. */
static void put(loomDataType_t t, void* p, size_t i, int v) {
  switch (t) {
    case loomInt8:
      ((int8_t*)p)[i] = (int8_t)v;
      break;
    case loomUint8:
      ((uint8_t*)p)[i] = (uint8_t)v;
      break;
    case loomInt32:
      ((int32_t*)p)[i] = v;
      break;
    case loomUint32:
      ((uint32_t*)p)[i] = (uint32_t)v;
      break;
    case loomInt64:
      ((int64_t*)p)[i] = v;
      break;
    case loomUint64:
      ((uint64_t*)p)[i] = (uint64_t)v;
      break;
    case loomFloat16:
      ((uint16_t*)p)[i] = half_encode((float)v);
      break;
    case loomBfloat16:
      ((uint16_t*)p)[i] = bf16_encode((float)v);
      break;
    case loomFloat8e4m3:
      ((uint8_t*)p)[i] = fp8e4m3_encode((float)v);
      break;
    case loomFloat8e5m2:
      ((uint8_t*)p)[i] = fp8e5m2_encode((float)v);
      break;
    case loomFloat32:
      ((float*)p)[i] = (float)v;
      break;
    default:
      ((double*)p)[i] = v;
      break;
  }
}

/* Rank r's input element i: 1, 2 or 3 for sums (exact in every type at up
 * to 8 ranks but float8, whose sums the test does not ask), 1 or 2 for
 * products (powers of two: exact), anything small for max and min. */
static int input(int r, size_t i, loomRedOp_t op) {
  if (op == loomProd) return 1 + (int)((r + i) % 2);
  return 1 + (int)((r * 7 + i * 3) % 3) + (op == loomMax || op == loomMin ? r % 4 : 0);
}

/* Every rank's input of `count` elements, block by block (block b of rank r
 * is input(r * nblocks + b, ...), so the blocks differ). */
static void fill_inputs(loomDataType_t t, loomRedOp_t op, size_t count, int nblocks,
                        unsigned char* host[MAXR]) {
  for (int r = 0; r < nranks; r++)
    for (int b = 0; b < nblocks; b++)
      for (size_t i = 0; i < count; i++)
        put(t, host[r], (size_t)b * count + i, input(r * nblocks + b, i, op));
}

/* want = the reduction of in[0..nranks) block `blk` (of count elements), as
 * the host kernels fold it in rank order; loomAvg then divides. */
static void reduce_ref(loomDataType_t t, loomRedOp_t op, unsigned char* in[MAXR], size_t blk,
                       size_t count, unsigned char* want) {
  size_t es = dtype_size(t), at = blk * count * es;
  loomRedOp_t rop = op == loomAvg ? loomSum : op;
  memcpy(want, in[0] + at, count * es);
  for (int r = 1; r < nranks; r++) cpu_reduce(t, rop, want, want, in[r] + at, count);
  if (op == loomAvg) cpu_div(t, want, want, count, nranks);
}

static void sync_all(void) {
  for (int r = lo; r < hi; r++) {
    loomResult_t res = loomStreamSynchronize(streams[r]);
    CHECK(res == loomSuccess, "loomStreamSynchronize rank %d: %s", r, loomGetErrorString(res));
  }
}

enum coll {
  C_ALLREDUCE,
  C_REDUCESCATTER,
  C_ALLGATHER,
  C_BROADCAST,
  C_REDUCE,
  C_ALLTOALL,
  C_GATHER,
  C_SCATTER,
  C_N
};
static const char* const coll_name[C_N] = {"all-reduce", "reduce-scatter", "all-gather",
                                           "broadcast",  "reduce",         "all-to-all",
                                           "gather",     "scatter"};

static loomResult_t call(enum coll c, const void* s, void* d, size_t count, loomDataType_t t,
                         loomRedOp_t op, int root, int r) {
  switch (c) {
    case C_ALLREDUCE:
      return loomAllReduce(s, d, count, t, op, comms[r], streams[r]);
    case C_REDUCESCATTER:
      return loomReduceScatter(s, d, count, t, op, comms[r], streams[r]);
    case C_ALLGATHER:
      return loomAllGather(s, d, count, t, comms[r], streams[r]);
    case C_BROADCAST:
      return loomBroadcast(s, d, count, t, root, comms[r], streams[r]);
    case C_REDUCE:
      return loomReduce(s, d, count, t, op, root, comms[r], streams[r]);
    case C_ALLTOALL:
      return loomAlltoAll(s, d, count, t, comms[r], streams[r]);
    case C_GATHER:
      return loomGather(s, d, count, t, root, comms[r], streams[r]);
    default:
      return loomScatter(s, d, count, t, root, comms[r], streams[r]);
  }
}

/* Elements of the send and receive buffers of collective c. */
static void sizes(enum coll c, size_t count, size_t* send, size_t* recv) {
  size_t n = (size_t)nranks;
  *send = c == C_REDUCESCATTER || c == C_ALLTOALL || c == C_SCATTER ? n * count : count;
  *recv = c == C_ALLGATHER || c == C_ALLTOALL || c == C_GATHER ? n * count : count;
}

/* What rank r's receive buffer must hold, into want (recv elements). 0 when
 * r's receive buffer is not written by c (a non-root's of reduce, gather). */
static int expected(enum coll c, loomDataType_t t, loomRedOp_t op, size_t count, int root, int r,
                    unsigned char* in[MAXR], unsigned char* want) {
  size_t es = dtype_size(t), n = (size_t)nranks;
  switch (c) {
    case C_ALLREDUCE:
      reduce_ref(t, op, in, 0, count, want);
      return 1;
    case C_REDUCE:
      if (r != root) return 0;
      reduce_ref(t, op, in, 0, count, want);
      return 1;
    case C_REDUCESCATTER:
      reduce_ref(t, op, in, (size_t)r, count, want);
      return 1;
    case C_ALLGATHER:
      for (size_t p = 0; p < n; p++) memcpy(want + p * count * es, in[p], count * es);
      return 1;
    case C_GATHER:
      if (r != root) return 0;
      for (size_t p = 0; p < n; p++) memcpy(want + p * count * es, in[p], count * es);
      return 1;
    case C_BROADCAST:
      memcpy(want, in[root], count * es);
      return 1;
    case C_SCATTER:
      memcpy(want, in[root] + (size_t)r * count * es, count * es);
      return 1;
    default: /* all-to-all: block p of r's receive is block r of p's send */
      for (size_t p = 0; p < n; p++)
        memcpy(want + p * count * es, in[p] + (size_t)r * count * es, count * es);
      return 1;
  }
}

/* One collective on every rank, issued in one group by this thread (or, with
 * in_place, from the receive buffer), checked on every rank. */
static void one(enum coll c, loomDataType_t t, loomRedOp_t op, size_t count, int in_place) {
  size_t es = dtype_size(t), ns, nr;
  sizes(c, count, &ns, &nr);
  int root = c == C_BROADCAST || c == C_SCATTER ? nranks - 1 : 0;
  int nblocks = (int)(ns / count);
  unsigned char *hin[MAXR], *want = malloc(nr * es), *got = malloc(nr * es);
  void *din[MAXR], *dout[MAXR];
  for (int r = 0; r < nranks; r++) {
    hin[r] = malloc(ns * es);
    dout[r] = dev_alloc(nr * es);
    set_dev(dout[r], 0xee, nr * es);
    din[r] = in_place ? dout[r] : dev_alloc(ns * es);
  }
  fill_inputs(t, op, count, nblocks, hin);
  for (int r = 0; r < nranks; r++) to_dev(din[r], hin[r], ns * es);
  loomResult_t res = loomGroupStart();
  for (int r = lo; r < hi && res == loomSuccess; r++)
    res = call(c, din[r], dout[r], count, t, op, root, r);
  loomResult_t end = loomGroupEnd();
  CHECK(res == loomSuccess && end == loomSuccess, "%s %s op %d n=%zu at %d ranks: %s", coll_name[c],
        dtype_name(t), (int)op, count, nranks, loomGetLastError(NULL));
  sync_all();
  for (int r = 0; r < nranks; r++) {
    if (!is_local(r) || !expected(c, t, op, count, root, r, hin, want)) continue;
    from_dev(got, dout[r], nr * es);
    CHECK(memcmp(got, want, nr * es) == 0, "%s %s op %d n=%zu%s at %d ranks: rank %d wrong",
          coll_name[c], dtype_name(t), (int)op, count, in_place ? " in place" : "", nranks, r);
  }
  for (int r = 0; r < nranks; r++) {
    free(hin[r]);
    if (!in_place) cu_mem_free((uintptr_t)din[r]);
    cu_mem_free((uintptr_t)dout[r]);
  }
  free(want);
  free(got);
}

/* Ops exact for the inputs: sums not for float8 (their sums round). */
static int op_exact(loomDataType_t t, loomRedOp_t op) {
  int fp8 = t == loomFloat8e4m3 || t == loomFloat8e5m2;
  if (fp8 && (op == loomSum || op == loomAvg)) return 0;
  if (op == loomAvg) return t == loomFloat32 || t == loomFloat64 || t == loomInt32;
  return 1;
}

/* PreMulSum by 2 (exact), the scalar on the host (read at the call) or in
 * device memory (read by the device). */
static void premul(int on_device) {
  size_t count = 1000;
  float two = 2.0f, *dtwo = dev_alloc(sizeof(float)), *got = malloc(count * 4);
  to_dev(dtwo, &two, sizeof two);
  loomRedOp_t ops[MAXR];
  unsigned char *hin[MAXR], *want = malloc(count * 4);
  void* d[MAXR];
  for (int r = 0; r < nranks; r++) {
    loomResult_t res = !is_local(r)
                           ? loomSuccess
                           : loomRedOpCreatePreMulSum(
                                 &ops[r], on_device ? (void*)dtwo : &two, loomFloat32,
                                 on_device ? loomScalarDevice : loomScalarHostImmediate, comms[r]);
    CHECK(res == loomSuccess, "PreMulSum create: %s", loomGetLastError(NULL));
    hin[r] = malloc(count * 4);
    d[r] = dev_alloc(count * 4);
  }
  fill_inputs(loomFloat32, loomSum, count, 1, hin);
  for (int r = 0; r < nranks; r++) to_dev(d[r], hin[r], count * 4);
  reduce_ref(loomFloat32, loomSum, hin, 0, count, want);
  for (size_t i = 0; i < count; i++) ((float*)want)[i] *= 2.0f;
  loomGroupStart();
  for (int r = lo; r < hi; r++)
    loomAllReduce(d[r], d[r], count, loomFloat32, ops[r], comms[r], streams[r]);
  CHECK(loomGroupEnd() == loomSuccess, "PreMulSum all-reduce: %s", loomGetLastError(NULL));
  sync_all();
  for (int r = 0; r < nranks; r++) {
    if (is_local(r)) {
      from_dev(got, d[r], count * 4);
      CHECK(memcmp(got, want, count * 4) == 0, "PreMulSum (%s scalar) at %d ranks: rank %d wrong",
            on_device ? "device" : "host", nranks, r);
      loomRedOpDestroy(ops[r], comms[r]);
    }
    cu_mem_free((uintptr_t)d[r]);
    free(hin[r]);
  }
  cu_mem_free((uintptr_t)dtwo);
  free(want);
  free(got);
}

/* A call returns once queued: each rank's stream is held by a wait (the
 * user's earlier work) while the call is made; nothing lands until it ends,
 * and then the result is there. Then two calls of one communicator on two
 * streams per rank, the second reading the first's result. */
static void ordering(void) {
  size_t count = 4096;
  static uint64_t* gate;
  static uintptr_t gate_dev;
  if (!gate) gate = host_word(&gate_dev);
  __atomic_store_n(gate, 0, __ATOMIC_RELEASE);
  float *d[MAXR], *h = malloc(count * 4);
  for (int r = 0; r < nranks; r++) {
    d[r] = dev_alloc(count * 4);
    for (size_t i = 0; i < count; i++) h[i] = (float)(r + 1);
    to_dev(d[r], h, count * 4);
    if (is_local(r)) cu_wait_value(cstreams[r], gate_dev, 1, 0);
  }
  loomGroupStart();
  for (int r = lo; r < hi; r++)
    loomAllReduce(d[r], d[r], count, loomFloat32, loomSum, comms[r], streams[r]);
  CHECK(loomGroupEnd() == loomSuccess, "held all-reduce: %s", loomGetLastError(NULL));
  int untouched = 1;
  for (int r = 0; r < nranks; r++) {
    from_dev(h, d[r], 4);
    untouched &= h[0] == (float)(r + 1);
  }
  CHECK(untouched, "the all-reduce ran before the work queued ahead of it on the stream");
  CHECK(nranks == 1 || loomStreamQuery(streams[lo]) == loomInProgress,
        "loomStreamQuery says done while the stream is held");
  __atomic_store_n(gate, 1, __ATOMIC_RELEASE);
  sync_all();
  float sum = (float)(nranks * (nranks + 1) / 2);
  for (int r = lo; r < hi; r++) {
    from_dev(h, d[r], count * 4);
    CHECK(h[0] == sum && h[count - 1] == sum, "held all-reduce: rank %d has %g, not %g", r, h[0],
          sum);
  }
  /* A second stream per rank: the next call on it follows the first. */
  void* other[MAXR];
  loomStream_t lother[MAXR];
  for (int r = lo; r < hi; r++) {
    stream_new(&other[r]);
    loomStreamCreateFromCuda(&lother[r], other[r]);
  }
  loomGroupStart();
  for (int r = lo; r < hi; r++)
    loomAllReduce(d[r], d[r], count, loomFloat32, loomSum, comms[r], streams[r]);
  loomGroupEnd();
  loomGroupStart();
  for (int r = lo; r < hi; r++)
    loomAllReduce(d[r], d[r], count, loomFloat32, loomSum, comms[r], lother[r]);
  CHECK(loomGroupEnd() == loomSuccess, "all-reduce on a second stream: %s", loomGetLastError(NULL));
  for (int r = lo; r < hi; r++) loomStreamSynchronize(lother[r]);
  float want = sum * (float)nranks * (float)nranks;
  for (int r = 0; r < nranks; r++) {
    if (is_local(r)) {
      from_dev(h, d[r], count * 4);
      CHECK(h[7] == want, "two streams: rank %d has %g, not %g", r, h[7], want);
      loomStreamDestroy(lother[r]);
      cu_stream_destroy(other[r]);
    }
    cu_mem_free((uintptr_t)d[r]);
  }
  free(h);
}

/* One thread per rank, each calling on its own. */
struct worker_arg {
  int r;
  float* d;
  loomResult_t res;
};
static void* rank_main(void* p) {
  struct worker_arg* a = p;
  ctx_here();
  for (int it = 0; it < 20 && a->res == loomSuccess; it++)
    a->res = loomAllReduce(a->d, a->d, 777, loomFloat32, loomMax, comms[a->r], streams[a->r]);
  if (a->res == loomSuccess) a->res = loomStreamSynchronize(streams[a->r]);
  return NULL;
}
static void threads(void) {
  pthread_t th[MAXR];
  struct worker_arg a[MAXR];
  for (int r = 0; r < nranks; r++) {
    a[r].r = r;
    a[r].res = loomSuccess;
    a[r].d = dev_alloc(777 * 4);
    float h[777];
    for (int i = 0; i < 777; i++) h[i] = (float)((r * 31 + i) % 97);
    to_dev(a[r].d, h, sizeof h);
    if (is_local(r)) pthread_create(&th[r], NULL, rank_main, &a[r]);
  }
  for (int r = lo; r < hi; r++) pthread_join(th[r], NULL);
  for (int r = lo; r < hi; r++) {
    CHECK(a[r].res == loomSuccess, "thread rank %d: %s", r, loomGetErrorString(a[r].res));
    int ok = 1;
    float h[777];
    from_dev(h, a[r].d, sizeof h);
    for (int i = 0; i < 777; i++) {
      float m = 0;
      for (int p = 0; p < nranks; p++)
        m = m > (float)((p * 31 + i) % 97) ? m : (float)((p * 31 + i) % 97);
      ok &= h[i] == m;
    }
    CHECK(ok, "thread ranks: rank %d's max is wrong", r);
  }
  for (int r = 0; r < nranks; r++) cu_mem_free((uintptr_t)a[r].d);
}

/* Value of element i of message m from rank a to rank b. */
static int32_t msg_val(int a, int b, int m, size_t i) {
  return (int32_t)(a * 1000003 + b * 10007 + m * 101 + (int)i);
}

/* Each rank sends count elements to the next and receives from the one
 * before, all in one group. */
static void p2p_ring(size_t count) {
  int32_t *s[MAXR], *d[MAXR], *h = malloc(count * 4);
  for (int r = 0; r < nranks; r++) {
    s[r] = dev_alloc(count * 4);
    d[r] = dev_alloc(count * 4);
    for (size_t i = 0; i < count; i++) h[i] = msg_val(r, (r + 1) % nranks, 0, i);
    to_dev(s[r], h, count * 4);
    set_dev(d[r], 0xee, count * 4);
  }
  loomGroupStart();
  for (int r = lo; r < hi; r++) {
    loomRecv(d[r], count, loomInt32, (r - 1 + nranks) % nranks, comms[r], streams[r]);
    loomSend(s[r], count, loomInt32, (r + 1) % nranks, comms[r], streams[r]);
  }
  CHECK(loomGroupEnd() == loomSuccess, "ring of sends n=%zu: %s", count, loomGetLastError(NULL));
  sync_all();
  for (int r = 0; r < nranks; r++) {
    int from = (r - 1 + nranks) % nranks, ok = 1;
    if (is_local(r)) {
      from_dev(h, d[r], count * 4);
      for (size_t i = 0; i < count; i++) ok &= h[i] == msg_val(from, r, 0, i);
    }
    CHECK(ok, "ring of sends n=%zu at %d ranks: rank %d wrong", count, nranks, r);
    cu_mem_free((uintptr_t)s[r]);
    cu_mem_free((uintptr_t)d[r]);
  }
  free(h);
}

/* NMSG messages from every rank to every rank (itself too) in one group,
 * of sizes that differ per message, sends and receives in mixed orders. */
#define NMSG 20
static size_t msg_count(int a, int b, int m) {
  return (size_t)(1 + (a * 13 + b * 7 + m * 29) % 300);
}
static void p2p_all_pairs(void) {
  size_t total = 0;
  for (int m = 0; m < NMSG; m++) total += 300;
  int32_t *s[MAXR][MAXR], *d[MAXR][MAXR], *h = malloc(total * 4);
  for (int a = 0; a < nranks; a++)
    for (int b = 0; b < nranks; b++) {
      s[a][b] = dev_alloc(total * 4);
      d[a][b] = dev_alloc(total * 4);
      set_dev(d[a][b], 0xee, total * 4);
      for (int m = 0; m < NMSG; m++)
        for (size_t i = 0; i < msg_count(a, b, m); i++) h[m * 300 + i] = msg_val(a, b, m, i);
      to_dev(s[a][b], h, total * 4);
    }
  loomGroupStart();
  for (int r = lo; r < hi; r++)
    for (int m = 0; m < NMSG; m++)
      for (int j = 0; j < nranks; j++) {
        int to = (r + j) % nranks, from = (r - j + nranks) % nranks;
        if ((r + m) % 2)
          loomSend(s[r][to] + m * 300, msg_count(r, to, m), loomInt32, to, comms[r], streams[r]);
        loomRecv(d[from][r] + m * 300, msg_count(from, r, m), loomInt32, from, comms[r],
                 streams[r]);
        if ((r + m) % 2 == 0)
          loomSend(s[r][to] + m * 300, msg_count(r, to, m), loomInt32, to, comms[r], streams[r]);
      }
  CHECK(loomGroupEnd() == loomSuccess, "sends between all pairs: %s", loomGetLastError(NULL));
  sync_all();
  for (int a = 0; a < nranks; a++)
    for (int b = 0; b < nranks; b++) {
      int ok = 1;
      if (is_local(b)) {
        from_dev(h, d[a][b], total * 4);
        for (int m = 0; m < NMSG; m++) {
          size_t n = msg_count(a, b, m);
          for (size_t i = 0; i < n; i++) ok &= h[m * 300 + i] == msg_val(a, b, m, i);
          ok &= n == 300 || h[m * 300 + n] == (int32_t)0xeeeeeeee;
        }
      }
      CHECK(ok, "sends between all pairs at %d ranks: rank %d from rank %d wrong", nranks, b, a);
      cu_mem_free((uintptr_t)s[a][b]);
      cu_mem_free((uintptr_t)d[a][b]);
    }
  free(h);
}

/* Thread ranks, ungrouped calls: rank 0 sends a buffer down the line
 * ITERS times; each other rank receives into one buffer and forwards it
 * from there, so a send must be read before the next receive lands. */
#define ITERS 30
struct pipe_arg {
  int r;
  int32_t* buf;
  int32_t* last; /* the last rank's copies, ITERS * 333 */
  loomResult_t res;
};
static void* pipe_main(void* p) {
  struct pipe_arg* a = p;
  loomComm_t c = comms[a->r];
  loomStream_t st = streams[a->r];
  ctx_here();
  for (int it = 0; it < ITERS && a->res == loomSuccess; it++) {
    if (a->r == 0) {
      int32_t h[333];
      for (int i = 0; i < 333; i++) h[i] = msg_val(0, it, 0, (size_t)i);
      to_dev(a->buf, h, sizeof h);
    } else {
      a->res = loomRecv(a->buf, 333, loomInt32, a->r - 1, c, st);
    }
    if (a->res == loomSuccess && a->r + 1 < nranks)
      a->res = loomSend(a->buf, 333, loomInt32, a->r + 1, c, st);
    if (a->res == loomSuccess && a->r == 0) a->res = loomStreamSynchronize(st);
    if (a->res == loomSuccess && a->r == nranks - 1 && a->r > 0) {
      a->res = loomStreamSynchronize(st);
      from_dev(a->last + it * 333, a->buf, 333 * 4);
    }
  }
  if (a->res == loomSuccess) a->res = loomStreamSynchronize(st);
  return NULL;
}
static void p2p_pipeline(void) {
  if (nranks < 2) return;
  pthread_t th[MAXR];
  struct pipe_arg a[MAXR];
  int32_t* last = malloc(ITERS * 333 * 4);
  for (int r = 0; r < nranks; r++) {
    a[r] = (struct pipe_arg){.r = r, .buf = dev_alloc(333 * 4), .last = last};
    if (is_local(r)) pthread_create(&th[r], NULL, pipe_main, &a[r]);
  }
  for (int r = lo; r < hi; r++) pthread_join(th[r], NULL);
  int ok = 1;
  for (int r = 0; r < nranks; r++) {
    CHECK(a[r].res == loomSuccess || !is_local(r), "pipeline rank %d: %s", r,
          loomGetErrorString(a[r].res));
    cu_mem_free((uintptr_t)a[r].buf);
  }
  for (int it = 0; it < ITERS; it++)
    for (int i = 0; i < 333; i++) ok &= last[it * 333 + i] == msg_val(0, it, 0, (size_t)i);
  CHECK(ok || !is_local(nranks - 1),
        "pipeline of sends at %d ranks: the last rank's copies are wrong", nranks);
  free(last);
}

/* Rank 0 sends rank 1 three messages the others never see, then every
 * rank all-reduces: point-to-point calls do not shift the collectives'
 * numbering. */
static void p2p_then_collective(void) {
  if (nranks < 2) return;
  float *x[MAXR], *m[3], *got[3], hm[3][100], hx[64];
  for (int i = 0; i < 3; i++) {
    m[i] = dev_alloc(100 * 4);
    got[i] = dev_alloc(100 * 4);
    for (int j = 0; j < 100; j++) hm[i][j] = (float)(i * 100 + j);
    to_dev(m[i], hm[i], sizeof hm[i]);
  }
  for (int r = 0; r < nranks; r++) {
    x[r] = dev_alloc(64 * 4);
    for (int j = 0; j < 64; j++) hx[j] = (float)(r + 1);
    to_dev(x[r], hx, sizeof hx);
  }
  for (int i = 0; i < 3; i++) {
    loomGroupStart();
    if (is_local(0)) loomSend(m[i], 100, loomFloat32, 1, comms[0], streams[0]);
    if (is_local(1)) loomRecv(got[i], 100, loomFloat32, 0, comms[1], streams[1]);
    CHECK(loomGroupEnd() == loomSuccess, "send %d from 0 to 1: %s", i, loomGetLastError(NULL));
  }
  loomGroupStart();
  for (int r = lo; r < hi; r++)
    loomAllReduce(x[r], x[r], 64, loomFloat32, loomSum, comms[r], streams[r]);
  CHECK(loomGroupEnd() == loomSuccess, "all-reduce after sends: %s", loomGetLastError(NULL));
  sync_all();
  float sum = (float)(nranks * (nranks + 1) / 2);
  for (int r = 0; r < nranks; r++) {
    if (is_local(r)) from_dev(hx, x[r], sizeof hx);
    CHECK((hx[0] == sum && hx[63] == sum) || !is_local(r), "all-reduce after sends: rank %d has %g",
          r, hx[0]);
    cu_mem_free((uintptr_t)x[r]);
  }
  for (int i = 0; i < 3; i++) {
    float hg[100];
    if (is_local(1)) from_dev(hg, got[i], sizeof hg);
    CHECK(!is_local(1) || memcmp(hm[i], hg, sizeof hg) == 0, "send %d from 0 to 1 wrong", i);
    cu_mem_free((uintptr_t)m[i]);
    cu_mem_free((uintptr_t)got[i]);
  }
}

/* All-to-all-v: rank a sends rank b cnt(a, b) elements (0 for some pairs),
 * packed in b's order on both sides. */
static size_t a2av_count(int a, int b) {
  return (a + 2 * b) % 5 == 0 ? 0 : (size_t)((a * 37 + b * 11) % 900 + 1);
}
static void alltoallv(void) {
  size_t sc[MAXR][MAXR], sd[MAXR][MAXR], rc[MAXR][MAXR], rd[MAXR][MAXR], stot[MAXR], rtot[MAXR];
  int32_t *s[MAXR], *d[MAXR];
  for (int r = 0; r < nranks; r++) {
    stot[r] = rtot[r] = 0;
    for (int p = 0; p < nranks; p++) {
      sc[r][p] = a2av_count(r, p);
      sd[r][p] = stot[r];
      stot[r] += sc[r][p];
      rc[r][p] = a2av_count(p, r);
      rd[r][p] = rtot[r];
      rtot[r] += rc[r][p];
    }
    s[r] = dev_alloc(stot[r] * 4);
    d[r] = dev_alloc(rtot[r] * 4);
    set_dev(d[r], 0xee, rtot[r] * 4);
    int32_t* h = malloc(stot[r] * 4 + 4);
    for (int p = 0; p < nranks; p++)
      for (size_t i = 0; i < sc[r][p]; i++) h[sd[r][p] + i] = msg_val(r, p, 7, i);
    to_dev(s[r], h, stot[r] * 4);
    free(h);
  }
  loomGroupStart();
  for (int r = lo; r < hi; r++)
    loomAlltoAllv(s[r], sc[r], sd[r], d[r], rc[r], rd[r], loomInt32, comms[r], streams[r]);
  CHECK(loomGroupEnd() == loomSuccess, "all-to-all-v: %s", loomGetLastError(NULL));
  sync_all();
  for (int r = 0; r < nranks; r++) {
    int ok = 1;
    if (is_local(r)) {
      int32_t* h = malloc(rtot[r] * 4 + 4);
      from_dev(h, d[r], rtot[r] * 4);
      for (int p = 0; p < nranks; p++)
        for (size_t i = 0; i < rc[r][p]; i++) ok &= h[rd[r][p] + i] == msg_val(p, r, 7, i);
      free(h);
    }
    CHECK(ok, "all-to-all-v at %d ranks: rank %d wrong", nranks, r);
    cu_mem_free((uintptr_t)s[r]);
    cu_mem_free((uintptr_t)d[r]);
  }
}

/* A send of 16 elements meets a receive of 8: the receiver says so, and
 * the sender hears that its send was refused; neither hangs. Thread ranks
 * on two fresh communicators (these ones end failed). */
struct mm_arg {
  loomComm_t c;
  void* stream;
  loomStream_t ls;
  float* buf;
  loomResult_t res;
  char msg[512];
};
static void* mm_main(void* p) {
  struct mm_arg* a = p;
  ctx_here();
  int me;
  loomCommUserRank(a->c, &me);
  a->res = me == 0 ? loomSend(a->buf, 16, loomFloat32, 1, a->c, a->ls)
                   : loomRecv(a->buf, 8, loomFloat32, 0, a->c, a->ls);
  snprintf(a->msg, sizeof a->msg, "%s", loomGetLastError(NULL));
  return NULL;
}
static void p2p_mismatch(void) {
  loomComm_t c[2];
  int devs[2] = {0, 0};
  if (loomCommInitAll(c, 2, devs) != loomSuccess) {
    CHECK(0, "loomCommInitAll(2): %s", loomGetLastError(NULL));
    return;
  }
  struct mm_arg a[2];
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    memset(&a[r], 0, sizeof a[r]);
    a[r].c = c[r];
    stream_new(&a[r].stream);
    loomStreamCreateFromCuda(&a[r].ls, a[r].stream);
    a[r].buf = dev_alloc(64);
    pthread_create(&th[r], NULL, mm_main, &a[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  CHECK(a[1].res == loomInvalidUsage && strstr(a[1].msg, "sends 64 bytes") &&
            strstr(a[1].msg, "takes 32"),
        "a receive smaller than its send is an error naming both sizes (got %d: %s)", a[1].res,
        a[1].msg);
  CHECK(a[0].res == loomInvalidUsage && strstr(a[0].msg, "refused"),
        "the sender hears its send was refused (got %d: %s)", a[0].res, a[0].msg);
  for (int r = 0; r < 2; r++) {
    loomStreamSynchronize(a[r].ls);
    loomStreamDestroy(a[r].ls);
    loomCommDestroy(c[r]);
    cu_stream_destroy(a[r].stream);
    cu_mem_free((uintptr_t)a[r].buf);
  }
}

/* Every check, on the ranks of this process (comms[lo..hi)). */
static void checks_run(void) {
  for (int i = lo; i < hi; i++) {
    stream_new(&cstreams[i]);
    loomResult_t r = loomStreamCreateFromCuda(&streams[i], cstreams[i]);
    CHECK(r == loomSuccess, "loomStreamCreateFromCuda: %s", loomGetLastError(NULL));
  }
  const size_t counts[] = {1, 7, 1000, 70001};
  const loomRedOp_t ops[] = {loomSum, loomProd, loomMax, loomMin, loomAvg};
  for (int t = 0; t < loomNumTypes; t++)
    for (int o = 0; o < 5; o++)
      if (op_exact((loomDataType_t)t, ops[o]))
        for (int ci = 0; ci < 3; ci++) one(C_ALLREDUCE, (loomDataType_t)t, ops[o], counts[ci], 0);
  for (int c = 0; c < C_N; c++)
    for (int ci = 0; ci < 4; ci++) {
      one((enum coll)c, loomFloat32, loomSum, counts[ci], 0);
      one((enum coll)c, loomBfloat16, loomMax, counts[ci], 0);
      one((enum coll)c, loomInt8, loomSum, counts[ci], 0);
    }
  one(C_ALLREDUCE, loomFloat32, loomSum, 70001, 1);
  one(C_ALLREDUCE, loomFloat16, loomSum, 1000, 1);
  one(C_BROADCAST, loomFloat64, loomSum, 1000, 1);
  premul(0);
  premul(1);
  ordering();
  threads();
  const size_t pcounts[] = {1, 1000, 70001};
  for (int i = 0; i < 3; i++) p2p_ring(pcounts[i]);
  p2p_all_pairs();
  p2p_pipeline();
  p2p_then_collective();
  alltoallv();
  for (int i = lo; i < hi; i++) {
    loomStreamDestroy(streams[i]);
    cu_stream_destroy(cstreams[i]);
  }
}

/* n thread ranks of this process. */
static void at(int n) {
  nranks = n;
  lo = 0;
  hi = n;
  int devs[MAXR] = {0};
  loomResult_t r = loomCommInitAll(comms, n, devs);
  if (r != loomSuccess) {
    printf("FAIL: loomCommInitAll(%d, devlist of device 0): %s\n", n, loomGetLastError(NULL));
    fails++;
    return;
  }
  checks_run();
  for (int i = 0; i < n; i++)
    CHECK(loomCommDestroy(comms[i]) == loomSuccess, "loomCommDestroy: %s", loomGetLastError(NULL));
}

/* n process ranks, one per forked process: device buffers between
 * processes (each opens its peers' allocations by their IPC handles). */
struct shared {
  _Atomic int ready;
  loomUniqueId id;
};
/* Rank r of n processes: starts the driver and gets the id rank 0 made.
 * 0, or the exit code (77: skipped). */
static int rank_join(struct shared* sh, int n, int r) {
  nranks = n;
  lo = r;
  hi = r + 1;
  int rc = driver_start();
  if (rc) return rc;
  if (r == 0) {
    if (loomGetUniqueId(&sh->id) != loomSuccess) return 3;
    atomic_store(&sh->ready, 1);
  }
  for (int i = 0; i < 30000 && !atomic_load(&sh->ready); i++) usleep(1000);
  return 0;
}

static int proc_rank(struct shared* sh, int n, int r) {
  int rc = rank_join(sh, n, r);
  if (rc) return rc;
  loomResult_t res = loomCommInitRank(&comms[r], n, sh->id, r);
  if (res != loomSuccess) {
    printf("FAIL: rank %d: loomCommInitRank: %s\n", r, loomGetLastError(NULL));
    return 1;
  }
  checks_run();
  CHECK(loomCommDestroy(comms[r]) == loomSuccess, "loomCommDestroy: %s", loomGetLastError(NULL));
  printf("rank %d of %d processes: %d checks, %d failed\n", r, n, checks, fails);
  return fails ? 1 : 0;
}
/* A rank killed mid-collective: the last rank queues an all-reduce behind
 * a wait that never ends (its stream stays in the call), then SIGKILLs
 * itself. The others' streams wait on its progress words, which it will
 * never write: they must still drain (the failure of the communicator sets
 * those words so every wait passes), and the communicator reports the
 * peer's death. Returns the rank's exit code. */
static int killed_rank(struct shared* sh, int n, int r) {
  int rc = rank_join(sh, n, r);
  if (rc) return rc;
  alarm(60); /* a hung stream fails the test */
  if (loomCommInitRank(&comms[r], n, sh->id, r) != loomSuccess) return 4;
  stream_new(&cstreams[r]);
  loomStreamCreateFromCuda(&streams[r], cstreams[r]);
  float* d = dev_alloc(1 << 20);
  float* h = malloc(1 << 20);
  for (int i = 0; i < (1 << 18); i++) h[i] = 1.0f;
  to_dev(d, h, 1 << 20);
  for (int it = 0; it < 2; it++)
    if (loomAllReduce(d, d, 1 << 18, loomFloat32, loomSum, comms[r], streams[r]) != loomSuccess)
      return 5;
  if (loomStreamSynchronize(streams[r]) != loomSuccess) return 6;
  from_dev(h, d, 1 << 20);
  if (h[7] != (float)(n * n)) return 6;
  uintptr_t never;
  host_word(&never);
  if (r == n - 1) {
    cu_wait_value(cstreams[r], never, 1, 0);
    loomAllReduce(d, d, 1 << 18, loomFloat32, loomSum, comms[r], streams[r]);
    raise(SIGKILL);
  }
  /* Queued, or refused once the death is known: either way no hang. */
  loomResult_t q = loomAllReduce(d, d, 1 << 18, loomFloat32, loomSum, comms[r], streams[r]);
  loomResult_t s = loomStreamSynchronize(streams[r]);
  loomResult_t e = loomInProgress;
  for (int i = 0; i < 20000 && (e == loomInProgress || e == loomSuccess); i++) {
    loomCommGetAsyncError(comms[r], &e);
    if (e == loomInProgress || e == loomSuccess) usleep(1000);
  }
  printf("rank %d: the all-reduce gave %d, the stream %d, the communicator %d (%s)\n", r, q, s, e,
         loomGetErrorString(e));
  int ok = e == loomRemoteError && (q == loomSuccess || q == loomRemoteError);
  loomStreamDestroy(streams[r]);
  loomCommAbort(comms[r]);
  cu_stream_destroy(cstreams[r]);
  return ok ? 0 : 7;
}

/* Runs body as ranks 0..n-1, a process each, and waits for them: 0 when
 * each exited 0 (rank `dies`, if >= 0, must die of SIGKILL instead), 77
 * when every one skipped, else 1 (one line per rank that did not). */
static int fork_ranks(int n, int (*body)(struct shared*, int, int), int dies) {
  struct shared* sh =
      mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 3;
  pid_t pids[MAXR];
  for (int r = 0; r < n; r++)
    if ((pids[r] = fork()) == 0) _exit(body(sh, n, r));
  int bad = 0, skipped = 0;
  for (int r = 0; r < n; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
      skipped++;
      continue;
    }
    int ok = r == dies ? WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL
                       : WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok) {
      printf("FAIL: rank %d: %s %d\n", r, WIFEXITED(st) ? "exit" : "signal",
             WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      bad = 1;
    }
  }
  munmap(sh, sizeof *sh);
  if (!bad && skipped == n) return 77;
  return bad || skipped;
}

static int killed(int n) {
  int rc = fork_ranks(n, killed_rank, n - 1);
  if (rc != 77)
    printf("a rank killed mid-collective at %d processes: %s\n", n,
           rc ? "FAILED" : "the others' streams drained, each reports the death");
  return rc;
}

static int procs(int n) {
  int rc = fork_ranks(n, proc_rank, -1);
  if (rc != 77) printf("%d processes: %s\n", n, rc ? "FAILED" : "every rank passed");
  return rc;
}

/* The driver at path (the stand-in, or libcuda.so.1 on a GPU): its entry
 * points, no call yet (a process that forks ranks must not start CUDA
 * before it forks). */
static int driver_open(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h && !strchr(path, '/')) { /* the machine's driver (gpu_exec): none here */
    printf("SKIPPED: no CUDA driver here (%s)\n", dlerror());
    return 77;
  }
  if (!h) {
    printf("cannot load the driver: %s\n", dlerror());
    return 1;
  }
  *(void**)&cu_stream_create = dlsym(h, "cuStreamCreate");
  *(void**)&cu_stream_destroy = dlsym(h, "cuStreamDestroy_v2");
  *(void**)&cu_mem_alloc = dlsym(h, "cuMemAlloc_v2");
  *(void**)&cu_mem_free = dlsym(h, "cuMemFree_v2");
  *(void**)&cu_wait_value = dlsym(h, "cuStreamWaitValue64_v2");
  *(void**)&cu_h2d = dlsym(h, "cuMemcpyHtoD_v2");
  *(void**)&cu_d2h = dlsym(h, "cuMemcpyDtoH_v2");
  *(void**)&cu_memset8 = dlsym(h, "cuMemsetD8_v2");
  *(void**)&cu_host_alloc = dlsym(h, "cuMemHostAlloc");
  *(void**)&cu_host_dev_ptr = dlsym(h, "cuMemHostGetDevicePointer_v2");
  *(void**)&cu_init = dlsym(h, "cuInit");
  *(void**)&cu_primary_retain = dlsym(h, "cuDevicePrimaryCtxRetain");
  *(void**)&cu_ctx_set = dlsym(h, "cuCtxSetCurrent");
  if (!cu_stream_create || !cu_stream_destroy || !cu_mem_alloc || !cu_mem_free || !cu_wait_value ||
      !cu_h2d || !cu_d2h || !cu_memset8 || !cu_host_alloc || !cu_host_dev_ptr || !cu_init ||
      !cu_primary_retain || !cu_ctx_set) {
    printf("the driver lacks an entry point the test uses\n");
    return 1;
  }
  return 0;
}

/* Starts the driver on this thread (device 0's primary context, as Loom
 * uses it): 0, or 77 (skip) when Loom cannot run on CUDA streams here. */
static int driver_start(void) {
  if (cu_init(0) != 0 || cu_primary_retain(&the_ctx, 0) != 0) {
    printf("SKIPPED: no usable CUDA device\n");
    return 77;
  }
  ctx_here();
  loomStream_t probe;
  if (loomStreamCreateFromCuda(&probe, NULL) != loomSuccess) {
    printf("SKIPPED: %s\n", loomGetLastError(NULL));
    return 77;
  }
  loomStreamDestroy(probe);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int np = argc == 4 ? atoi(argv[3]) : 0;
  int kill_mode = argc == 4 && !strcmp(argv[2], "killed");
  if (argc != 2 && (np < 1 + kill_mode || np > MAXR ||
                    (strcmp(argv[2], "procs") && strcmp(argv[2], "killed")))) {
    fprintf(stderr, "usage: %s PATH_OF_LIBCUDA_SO_1 [procs N | killed N]\n", argv[0]);
    return 2;
  }
  int rc = driver_open(argv[1]);
  if (rc) return rc;
  if (np) return kill_mode ? killed(np) : procs(np);
  rc = driver_start();
  if (rc) return rc;
  const int ns[] = {1, 2, 3, 4, 8};
  for (int i = 0; i < 5; i++) at(ns[i]);
  p2p_mismatch();
  printf("%d checks, %d failed\n", checks, fails);
  return fails ? 1 : 0;
}
