/* nccl_ranks: a program written against NCCL's nccl.h (the official header
 * where the CUDA toolkit has one, else Loom's text of it) and linked with
 * Loom's libnccl.so.2. Every collective, send/recv, groups, split, shrink,
 * configs and errors, on host buffers, checked element by element.
 *   nccl_ranks procs N   N processes (fork), ids passed through shared memory
 *   nccl_ranks all N     N ranks of one process from ncclCommInitAll, driven
 *                        by one thread through groups, as NCCL programs drive
 *                        one process's devices
 * Exit 0 when every check passed; each failure prints one line. */
#include <nccl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;
static int me = -1;

#define CHECK(cond, ...)                                           \
  do {                                                             \
    if (!(cond)) {                                                 \
      failures++;                                                  \
      fprintf(stderr, "rank %d: %s:%d: ", me, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                \
      fprintf(stderr, "\n");                                       \
    }                                                              \
  } while (0)

#define NCCL_OK(call)                                                                  \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess) {                                                           \
      fprintf(stderr, "rank %d: %s:%d: %s -> %s: %s\n", me, __FILE__, __LINE__, #call, \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                         \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

/* ---- Elements of every type as doubles (exact for the values used) ---- */

static size_t type_size(ncclDataType_t t) {
  static const size_t sz[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return sz[t];
}

static uint16_t to_half(float f) { /* normal values and zero, exact inputs */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) == 0) return (uint16_t)(u >> 16);
  int e = (int)((u >> 23) & 0xff) - 127 + 15;
  return (uint16_t)(((u >> 16) & 0x8000) | ((unsigned)e << 10) | ((u >> 13) & 0x3ff));
}
static float from_half(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
  if (e == 0 && m == 0)
    u = s;
  else
    u = s | ((e - 15 + 127) << 23) | (m << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void put(void* b, ncclDataType_t t, size_t i, double v) {
  switch (t) {
    case ncclInt8:
      ((int8_t*)b)[i] = (int8_t)v;
      break;
    case ncclUint8:
      ((uint8_t*)b)[i] = (uint8_t)v;
      break;
    case ncclInt32:
      ((int32_t*)b)[i] = (int32_t)v;
      break;
    case ncclUint32:
      ((uint32_t*)b)[i] = (uint32_t)v;
      break;
    case ncclInt64:
      ((int64_t*)b)[i] = (int64_t)v;
      break;
    case ncclUint64:
      ((uint64_t*)b)[i] = (uint64_t)v;
      break;
    case ncclFloat16:
      ((uint16_t*)b)[i] = to_half((float)v);
      break;
    case ncclFloat32:
      ((float*)b)[i] = (float)v;
      break;
    case ncclFloat64:
      ((double*)b)[i] = v;
      break;
    case ncclBfloat16: {
      float f = (float)v;
      uint32_t u;
      memcpy(&u, &f, 4);
      ((uint16_t*)b)[i] = (uint16_t)(u >> 16);
      break;
    }
    default:
      break;
  }
}

static double get(const void* b, ncclDataType_t t, size_t i) {
  switch (t) {
    case ncclInt8:
      return ((const int8_t*)b)[i];
    case ncclUint8:
      return ((const uint8_t*)b)[i];
    case ncclInt32:
      return ((const int32_t*)b)[i];
    case ncclUint32:
      return ((const uint32_t*)b)[i];
    case ncclInt64:
      return (double)((const int64_t*)b)[i];
    case ncclUint64:
      return (double)((const uint64_t*)b)[i];
    case ncclFloat16:
      return from_half(((const uint16_t*)b)[i]);
    case ncclFloat32:
      return ((const float*)b)[i];
    case ncclFloat64:
      return ((const double*)b)[i];
    case ncclBfloat16: {
      uint32_t u = (uint32_t)((const uint16_t*)b)[i] << 16;
      float f;
      memcpy(&f, &u, 4);
      return f;
    }
    default:
      return 0;
  }
}

static int is_float(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16;
}

/* Rank r's element i for op (small values: exact in every type, no overflow
 * at 8 ranks). */
static double input(ncclRedOp_t op, int r, size_t i) {
  if (op == ncclProd) return (double)((r + i) % 2 + 1);
  if (op == ncclMax || op == ncclMin) return (double)((r * 7 + i) % 11);
  return (double)(r + 1 + i % 3);
}

static double fold(ncclRedOp_t op, int n, size_t i, double premul) {
  double acc = input(op, 0, i);
  for (int r = 1; r < n; r++) {
    double v = input(op, r, i);
    if (op == ncclProd)
      acc *= v;
    else if (op == ncclMax)
      acc = v > acc ? v : acc;
    else if (op == ncclMin)
      acc = v < acc ? v : acc;
    else
      acc += v;
  }
  if (op == ncclAvg) acc /= n;
  if (op >= ncclNumOps) acc = acc * premul;
  return acc;
}

static int near(double got, double want, ncclDataType_t t) {
  double tol = t == ncclFloat16 || t == ncclBfloat16 ? 1e-2 : t == ncclFloat32 ? 1e-5 : 1e-12;
  double d = got - want;
  if (d < 0) d = -d;
  return is_float(t) ? d <= tol * (want < 0 ? -want : want) + 1e-12 : got == want;
}

/* ---- The checks of one rank (or, in "all" mode, of every rank at once) ---- */

struct ranks {
  int n;      /* ranks in the communicator */
  int nlocal; /* communicators this thread drives: 1, or n for "all" */
  ncclComm_t* comms;
  int first_rank; /* the rank of comms[0] */
};

static void* xalloc(size_t n) {
  void* p = calloc(1, n ? n : 1);
  if (!p) exit(3);
  return p;
}

static void check_allreduce(const struct ranks* R, ncclDataType_t t, ncclRedOp_t op, size_t count,
                            int inplace, cudaStream_t stream) {
  void** in = xalloc(sizeof(void*) * R->nlocal);
  void** out = xalloc(sizeof(void*) * R->nlocal);
  double premul = 0.5;
  ncclRedOp_t* ops = xalloc(sizeof(ncclRedOp_t) * R->nlocal);
  for (int l = 0; l < R->nlocal; l++) {
    int r = R->first_rank + l;
    in[l] = xalloc(count * type_size(t));
    out[l] = inplace ? in[l] : xalloc(count * type_size(t));
    for (size_t i = 0; i < count; i++) put(in[l], t, i, input(op, r, i));
    ops[l] = op;
    if (op == ncclNumOps) { /* stands for PreMulSum */
      double d = premul;
      float f = (float)premul;
      uint16_t h = t == ncclFloat16 ? to_half(f) : 0;
      void* s = t == ncclFloat64 ? (void*)&d : t == ncclFloat32 ? (void*)&f : (void*)&h;
      NCCL_OK(ncclRedOpCreatePreMulSum(&ops[l], s, t, ncclScalarHostImmediate, R->comms[l]));
    }
  }
  NCCL_OK(ncclGroupStart());
  for (int l = 0; l < R->nlocal; l++)
    NCCL_OK(ncclAllReduce(in[l], out[l], count, t, ops[l], R->comms[l], stream));
  NCCL_OK(ncclGroupEnd());
  for (int l = 0; l < R->nlocal; l++) {
    int bad = 0;
    for (size_t i = 0; i < count && bad < 3; i++) {
      double want = fold(op, R->n, i, premul), got = get(out[l], t, i);
      if (op == ncclAvg && !is_float(t)) want = (double)(long long)want; /* integer average */
      if (!near(got, want, t)) {
        bad++;
        CHECK(0, "all-reduce type %d op %d count %zu%s: element %zu is %g, expected %g", t, op,
              count, inplace ? " in place" : "", i, got, want);
      }
    }
    if (op == ncclNumOps) NCCL_OK(ncclRedOpDestroy(ops[l], R->comms[l]));
    if (!inplace) free(out[l]);
    free(in[l]);
  }
  free(in);
  free(out);
  free(ops);
}

static void check_rooted(const struct ranks* R, size_t count) {
  for (int root = 0; root < R->n; root++) {
    int32_t** a = xalloc(sizeof(void*) * R->nlocal);
    int32_t** b = xalloc(sizeof(void*) * R->nlocal);
    int32_t** c = xalloc(sizeof(void*) * R->nlocal);
    for (int l = 0; l < R->nlocal; l++) {
      int r = R->first_rank + l;
      a[l] = xalloc(count * 4);
      b[l] = xalloc(count * 4 * (size_t)R->n);
      c[l] = xalloc(count * 4 * (size_t)R->n);
      for (size_t i = 0; i < count; i++) a[l][i] = r == root ? (int32_t)(i * 3 + 1) : -1;
      for (size_t i = 0; i < count * (size_t)R->n; i++) c[l][i] = (int32_t)(i + 7 * r);
    }
    /* In-place broadcast (ncclBcast), reduce, gather and scatter in one group. */
    NCCL_OK(ncclGroupStart());
    for (int l = 0; l < R->nlocal; l++) {
      NCCL_OK(ncclBcast(a[l], count, ncclInt32, root, R->comms[l], NULL));
      NCCL_OK(ncclReduce(c[l], b[l], count, ncclInt32, ncclSum, root, R->comms[l], NULL));
    }
    NCCL_OK(ncclGroupEnd());
    for (int l = 0; l < R->nlocal; l++) {
      int r = R->first_rank + l;
      int bad = 0;
      for (size_t i = 0; i < count && bad < 3; i++) {
        int64_t want = 0;
        for (int q = 0; q < R->n; q++) want += (int64_t)i + 7 * q;
        if (a[l][i] != (int32_t)(i * 3 + 1) || (r == root && b[l][i] != want)) {
          bad++;
          CHECK(0, "root %d [%zu]: bcast %d (expected %d), reduce %d (expected %lld)", root, i,
                a[l][i], (int)(i * 3 + 1), r == root ? b[l][i] : 0,
                r == root ? (long long)want : 0LL);
        }
      }
    }
    /* Gather: root receives each rank's count elements; scatter sends them back. */
    NCCL_OK(ncclGroupStart());
    for (int l = 0; l < R->nlocal; l++) {
      int r = R->first_rank + l;
      for (size_t i = 0; i < count; i++) a[l][i] = (int32_t)(r * 1000 + i);
      NCCL_OK(ncclGather(a[l], b[l], count, ncclInt32, root, R->comms[l], NULL));
    }
    NCCL_OK(ncclGroupEnd());
    for (int l = 0; l < R->nlocal; l++) {
      int r = R->first_rank + l;
      if (r != root) continue;
      for (int q = 0; q < R->n; q++)
        for (size_t i = 0; i < count; i += 1 + count / 17)
          CHECK(b[l][(size_t)q * count + i] == (int32_t)(q * 1000 + i), "gather root %d from %d",
                root, q);
    }
    NCCL_OK(ncclGroupStart());
    for (int l = 0; l < R->nlocal; l++) {
      memset(a[l], 0xff, count * 4);
      NCCL_OK(ncclScatter(b[l], a[l], count, ncclInt32, root, R->comms[l], NULL));
    }
    NCCL_OK(ncclGroupEnd());
    for (int l = 0; l < R->nlocal; l++) {
      int r = R->first_rank + l;
      for (size_t i = 0; i < count; i += 1 + count / 17)
        CHECK(a[l][i] == (int32_t)(r * 1000 + i), "scatter root %d: [%zu] = %d", root, i, a[l][i]);
    }
    for (int l = 0; l < R->nlocal; l++) {
      free(a[l]);
      free(b[l]);
      free(c[l]);
    }
    free(a);
    free(b);
    free(c);
  }
}

static void check_gathers(const struct ranks* R, size_t count, cudaStream_t stream) {
  size_t n = (size_t)R->n;
  float** s = xalloc(sizeof(void*) * R->nlocal);
  float** g = xalloc(sizeof(void*) * R->nlocal);
  float** rs = xalloc(sizeof(void*) * R->nlocal);
  int32_t** a2a = xalloc(sizeof(void*) * R->nlocal);
  int32_t** a2b = xalloc(sizeof(void*) * R->nlocal);
  for (int l = 0; l < R->nlocal; l++) {
    int r = R->first_rank + l;
    s[l] = xalloc(count * n * 4);
    g[l] = xalloc(count * n * 4);
    rs[l] = xalloc(count * 4);
    a2a[l] = xalloc(count * n * 4);
    a2b[l] = xalloc(count * n * 4);
    for (size_t i = 0; i < count * n; i++) {
      s[l][i] = (float)(r + 1) * (float)(i % 5);
      a2a[l][i] = (int32_t)(r * 100000 + i);
    }
    /* In-place all-gather: this rank's part already sits at its offset. */
    for (size_t i = 0; i < count; i++) g[l][(size_t)r * count + i] = (float)(r * 10 + i % 7);
  }
  NCCL_OK(ncclGroupStart());
  for (int l = 0; l < R->nlocal; l++) {
    int r = R->first_rank + l;
    NCCL_OK(ncclAllGather(g[l] + (size_t)r * count, g[l], count, ncclFloat32, R->comms[l], stream));
    NCCL_OK(ncclReduceScatter(s[l], rs[l], count, ncclFloat32, ncclSum, R->comms[l], stream));
    NCCL_OK(ncclAlltoAll(a2a[l], a2b[l], count, ncclInt32, R->comms[l], stream));
  }
  NCCL_OK(ncclGroupEnd());
  for (int l = 0; l < R->nlocal; l++) {
    int r = R->first_rank + l, bad = 0;
    for (size_t q = 0; q < n && bad < 3; q++)
      for (size_t i = 0; i < count && bad < 3; i++) {
        float want = (float)(q * 10 + i % 7);
        if (g[l][q * count + i] != want) {
          bad++;
          CHECK(0, "all-gather: from %zu [%zu] = %g, expected %g", q, i, g[l][q * count + i], want);
        }
        int32_t w2 = (int32_t)(q * 100000 + (size_t)r * count + i);
        if (a2b[l][q * count + i] != w2) {
          bad++;
          CHECK(0, "all-to-all: from %zu [%zu] = %d, expected %d", q, i, a2b[l][q * count + i], w2);
        }
      }
    for (size_t i = 0; i < count && bad < 3; i++) {
      float want = (float)(n * (n + 1) / 2) * (float)(((size_t)r * count + i) % 5);
      if (rs[l][i] != want) {
        bad++;
        CHECK(0, "reduce-scatter: [%zu] = %g, expected %g", i, rs[l][i], want);
      }
    }
    free(s[l]);
    free(g[l]);
    free(rs[l]);
    free(a2a[l]);
    free(a2b[l]);
  }
  free(s);
  free(g);
  free(rs);
  free(a2a);
  free(a2b);
}

/* Every rank sends to every rank (itself included) in one group, sends and
 * receives in an order that would deadlock without the group. */
static void check_p2p(const struct ranks* R, size_t count) {
  size_t n = (size_t)R->n;
  int64_t** out = xalloc(sizeof(void*) * R->nlocal);
  int64_t** in = xalloc(sizeof(void*) * R->nlocal);
  for (int l = 0; l < R->nlocal; l++) {
    int r = R->first_rank + l;
    out[l] = xalloc(count * n * 8);
    in[l] = xalloc(count * n * 8);
    for (size_t i = 0; i < count * n; i++) out[l][i] = (int64_t)r << 40 | (int64_t)i;
  }
  NCCL_OK(ncclGroupStart());
  for (int l = 0; l < R->nlocal; l++)
    for (size_t q = 0; q < n; q++) {
      NCCL_OK(ncclRecv(in[l] + q * count, count, ncclInt64, (int)q, R->comms[l], NULL));
      NCCL_OK(ncclSend(out[l] + q * count, count, ncclInt64, (int)q, R->comms[l], NULL));
    }
  NCCL_OK(ncclGroupEnd());
  for (int l = 0; l < R->nlocal; l++) {
    int r = R->first_rank + l;
    for (size_t q = 0; q < n; q++)
      for (size_t i = 0; i < count; i += 1 + count / 13) {
        int64_t want = (int64_t)q << 40 | (int64_t)((size_t)r * count + i);
        CHECK(in[l][q * count + i] == want, "send/recv from %zu [%zu]", q, i);
      }
    free(out[l]);
    free(in[l]);
  }
  free(out);
  free(in);
}

static void check_collectives(const struct ranks* R) {
  static const ncclDataType_t types[] = {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,
                                         ncclInt64,   ncclUint64,  ncclFloat16, ncclFloat32,
                                         ncclFloat64, ncclBfloat16};
  static const size_t counts[] = {0, 1, 1000, 70000};
  /* A CUDA stream that is not one: host buffers never touch it. */
  cudaStream_t fake = (cudaStream_t)(uintptr_t)0x1000;
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
    for (int op = ncclSum; op <= ncclNumOps; op++) {
      if (op == ncclNumOps &&
          !(types[t] == ncclFloat16 || types[t] == ncclFloat32 || types[t] == ncclFloat64))
        continue;
      for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        check_allreduce(R, types[t], (ncclRedOp_t)op, counts[c], (int)(c & 1),
                        c == 2 ? fake : NULL);
    }
  check_rooted(R, 1);
  check_rooted(R, 5000);
  check_gathers(R, 1, NULL);
  check_gathers(R, 33333, fake);
  check_p2p(R, 1);
  check_p2p(R, 40000);
}

/* ---- What a process rank checks beyond the collectives ---- */

static void check_errors(ncclComm_t comm, int n, int rank) {
  int v = 0, c = 0, u = -1, dev = 0;
  NCCL_OK(ncclGetVersion(&v));
  CHECK(v >= 22800, "ncclGetVersion gave %d", v);
  NCCL_OK(ncclCommCount(comm, &c));
  NCCL_OK(ncclCommUserRank(comm, &u));
  NCCL_OK(ncclCommCuDevice(comm, &dev));
  CHECK(c == n && u == rank, "count %d rank %d, expected %d %d", c, u, n, rank);
  CHECK(dev == -1, "a host rank's CUDA device is %d", dev);
  for (int r = 0; r <= ncclNumResults; r++)
    CHECK(ncclGetErrorString((ncclResult_t)r) && *ncclGetErrorString((ncclResult_t)r),
          "no text for result %d", r);
  int x = 1;
  CHECK(ncclAllReduce(&x, &x, 1, (ncclDataType_t)99, ncclSum, comm, NULL) == ncclInvalidArgument,
        "a bad datatype was accepted");
  CHECK(strstr(ncclGetLastError(comm), "type") != NULL, "last error: '%s'", ncclGetLastError(comm));
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCL_OK(ncclGroupStart());
  CHECK(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage, "ncclGroupSimulateEnd did not refuse");
  NCCL_OK(ncclGroupEnd());
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  ncclComm_t none = NULL;
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  CHECK(ncclCommInitRankConfig(&none, n, id, rank, &bad) == ncclInvalidArgument && !none,
        "a config not from NCCL_CONFIG_INITIALIZER was accepted");
  CHECK(strstr(ncclGetLastError(NULL), "NCCL_CONFIG_INITIALIZER") != NULL, "last error: '%s'",
        ncclGetLastError(NULL));
  void* p = NULL;
  ncclResult_t r = ncclMemAlloc(&p, 4096);
  if (r == ncclSuccess)
    NCCL_OK(ncclMemFree(p)); /* a machine with a GPU */
  else
    CHECK(r == ncclUnhandledCudaError && *ncclGetLastError(NULL), "ncclMemAlloc gave %d", r);
}

/* A non-blocking communicator is ready when its async error leaves
 * ncclInProgress (within the 240 s alarm). */
static void wait_ready(ncclComm_t comm, const char* what) {
  ncclResult_t st = ncclInProgress;
  while (st == ncclInProgress) {
    NCCL_OK(ncclCommGetAsyncError(comm, &st));
    if (st == ncclInProgress) usleep(1000);
  }
  if (st != ncclSuccess) {
    fprintf(stderr, "rank %d: %s failed: %s\n", me, what, ncclGetLastError(comm));
    exit(2);
  }
}

/* Split by parity, then (n >= 3) shrink the last rank away; each new
 * communicator runs an all-reduce. */
static void check_split_shrink(ncclComm_t comm, int n, int rank) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = "parity";
  ncclComm_t half = NULL;
  NCCL_OK(ncclCommSplit(comm, rank % 2, rank, &half, &cfg));
  int hn = 0, x = rank, sum = 0;
  NCCL_OK(ncclCommCount(half, &hn));
  NCCL_OK(ncclAllReduce(&x, &sum, 1, ncclInt32, ncclSum, half, NULL));
  int want = 0;
  for (int q = rank % 2; q < n; q += 2) want += q;
  CHECK(sum == want && hn == (n - rank % 2 + 1) / 2, "split: sum %d of %d ranks", sum, hn);
  NCCL_OK(ncclCommDestroy(half));
  if (n < 3) return;
  int excl = n - 1;
  if (rank == excl) return;
  ncclComm_t less = NULL;
  /* NULL config: the new communicator inherits the old one's (non-blocking). */
  ncclResult_t r = ncclCommShrink(comm, &excl, 1, &less, NULL, NCCL_SHRINK_DEFAULT);
  CHECK(r == ncclSuccess || r == ncclInProgress, "shrink gave %d", r);
  wait_ready(less, "shrink");
  x = 1;
  NCCL_OK(ncclAllReduce(&x, &sum, 1, ncclInt32, ncclSum, less, NULL));
  CHECK(sum == n - 1, "shrink: %d ranks summed to %d", n - 1, sum);
  NCCL_OK(ncclCommDestroy(less));
}

struct shared {
  ncclUniqueId id;
  volatile int ready;
};

static int run_rank(struct shared* sh, int n, int rank) {
  me = rank;
  alarm(240); /* a hang is a failure, never a stuck test */
  if (rank == 0) {
    NCCL_OK(ncclGetUniqueId(&sh->id));
    __atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
  }
  for (int i = 0; !__atomic_load_n(&sh->ready, __ATOMIC_ACQUIRE); i++) {
    if (i > 60000) {
      fprintf(stderr, "rank %d: no unique id from rank 0 in 60 s\n", rank);
      return 1;
    }
    usleep(1000);
  }
  /* Non-blocking init: ncclInProgress until ncclCommGetAsyncError says done. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.commName = "nccl_ranks";
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, n, sh->id, rank, &cfg);
  CHECK(r == ncclSuccess || r == ncclInProgress, "non-blocking init gave %d", r);
  wait_ready(comm, "init");
  struct ranks R = {n, 1, &comm, rank};
  check_errors(comm, n, rank);
  check_collectives(&R);
  check_split_shrink(comm, n, rank);
  NCCL_OK(ncclCommFinalize(comm));
  NCCL_OK(ncclCommDestroy(comm));
  return failures ? 1 : 0;
}

static int run_procs(int n) {
  struct shared* sh =
      mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 3;
  pid_t pids[8];
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(run_rank(sh, n, r));
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d: %s %d\n", r, WIFEXITED(st) ? "exit" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      bad = 1;
    }
  }
  return bad;
}

static int run_all(int n) {
  ncclComm_t comms[8];
  alarm(240);
  NCCL_OK(ncclCommInitAll(comms, n, NULL));
  struct ranks R = {n, n, comms, 0};
  check_collectives(&R);
  for (int i = 0; i < n; i++) NCCL_OK(ncclCommDestroy(comms[i]));
  return failures ? 1 : 0;
}

int main(int argc, char** argv) {
  int n = argc == 3 ? atoi(argv[2]) : 0;
  if (n < 1 || n > 8 || (strcmp(argv[1], "procs") && strcmp(argv[1], "all"))) {
    fprintf(stderr, "usage: nccl_ranks procs|all N (1..8)\n");
    return 2;
  }
  int rc = strcmp(argv[1], "procs") == 0 ? run_procs(n) : run_all(n);
  printf("nccl_ranks %s %d: %s\n", argv[1], n, rc ? "FAILED" : "passed");
  return rc;
}
