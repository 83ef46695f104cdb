/* nccl_device: an NCCL program on device buffers and CUDA streams, written
 * against nccl.h and linked with Loom's libnccl.so.2, as a CUDA program is.
 * It takes the CUDA driver by path (the stand-in of tests/cudastub in CI,
 * whose streams run on threads; libcuda.so.1 on a GPU), allocates with it
 * and makes its streams with it (a CUstream is a cudaStream_t), and reaches
 * device memory only through the driver's copies. Checked on every rank:
 * all-reduce (sum, max, avg), broadcast, reduce, all-gather, reduce-scatter,
 * all-to-all, a ring of sends and receives in a group, counts 1 to 70,001.
 *   nccl_device DRIVER all N     N ranks of one process (ncclCommInitAll on
 *                                device 0 N times), one thread, groups
 *   nccl_device DRIVER procs N   N processes (fork), ids through shared memory
 * Exit 0 when every check passed, 77 when there is no driver or device. */
#include <dlfcn.h>
#include <nccl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXR 8
static int failures, checks;

#define CHECK(cond, ...)            \
  do {                              \
    checks++;                       \
    if (!(cond)) {                  \
      failures++;                   \
      fprintf(stderr, "FAIL: ");    \
      fprintf(stderr, __VA_ARGS__); \
      fprintf(stderr, "\n");        \
    }                               \
  } while (0)

#define NCCL_OK(call)                                                           \
  do {                                                                          \
    ncclResult_t r_ = (call);                                                   \
    if (r_ != ncclSuccess) {                                                    \
      fprintf(stderr, "FAIL: %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                  \
      exit(2);                                                                  \
    }                                                                           \
  } while (0)

/* ---- The driver ---- */

static int (*cu_init)(unsigned);
static int (*cu_retain)(void**, int);
static int (*cu_ctx_set)(void*);
static int (*cu_alloc)(uintptr_t*, size_t);
static int (*cu_free)(uintptr_t);
static int (*cu_h2d)(uintptr_t, const void*, size_t);
static int (*cu_d2h)(void*, uintptr_t, size_t);
static int (*cu_stream_create)(void**, unsigned);
static int (*cu_stream_sync)(void*);
static int (*cu_stream_destroy)(void*);

/* 0, 77 (no driver here) or 1. RTLD_GLOBAL: the drop-in finds a driver
 * the process loaded by its name, as it finds the one a CUDA program loads. */
static int driver_open(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    printf("%s: no CUDA driver here (%s)\n", strchr(path, '/') ? "FAIL" : "SKIPPED", dlerror());
    return strchr(path, '/') ? 1 : 77;
  }
  *(void**)&cu_init = dlsym(h, "cuInit");
  *(void**)&cu_retain = dlsym(h, "cuDevicePrimaryCtxRetain");
  *(void**)&cu_ctx_set = dlsym(h, "cuCtxSetCurrent");
  *(void**)&cu_alloc = dlsym(h, "cuMemAlloc_v2");
  *(void**)&cu_free = dlsym(h, "cuMemFree_v2");
  *(void**)&cu_h2d = dlsym(h, "cuMemcpyHtoD_v2");
  *(void**)&cu_d2h = dlsym(h, "cuMemcpyDtoH_v2");
  *(void**)&cu_stream_create = dlsym(h, "cuStreamCreate");
  *(void**)&cu_stream_sync = dlsym(h, "cuStreamSynchronize");
  *(void**)&cu_stream_destroy = dlsym(h, "cuStreamDestroy_v2");
  if (!cu_init || !cu_retain || !cu_ctx_set || !cu_alloc || !cu_free || !cu_h2d || !cu_d2h ||
      !cu_stream_create || !cu_stream_sync || !cu_stream_destroy) {
    printf("FAIL: the driver lacks an entry point this test uses\n");
    return 1;
  }
  return 0;
}

/* Device 0's primary context on this thread; 77 when there is no device. */
static int driver_start(void) {
  void* ctx = NULL;
  if (cu_init(0) != 0 || cu_retain(&ctx, 0) != 0 || cu_ctx_set(ctx) != 0) {
    printf("SKIPPED: no usable CUDA device\n");
    return 77;
  }
  return 0;
}

static void* dev_new(size_t bytes) {
  uintptr_t p = 0;
  if (cu_alloc(&p, bytes ? bytes : 4) != 0) {
    fprintf(stderr, "FAIL: cuMemAlloc of %zu bytes\n", bytes);
    exit(2);
  }
  return (void*)p;
}
static void put(void* dev, const void* host, size_t bytes) {
  if (bytes && cu_h2d((uintptr_t)dev, host, bytes) != 0) exit(2);
}
static void get(void* host, const void* dev, size_t bytes) {
  if (bytes && cu_d2h(host, (uintptr_t)dev, bytes) != 0) exit(2);
}

/* ---- The checks ---- */

static int nranks, lo, hi; /* ranks [lo, hi) are this process's */
static ncclComm_t comms[MAXR];
static void* streams[MAXR]; /* CUstream: what a cudaStream_t is */

static float val(int r, size_t i) {
  return (float)((r * 7 + (int)(i % 13)) % 11); /* small integers: sums are exact */
}

enum coll {
  ALLREDUCE_SUM,
  ALLREDUCE_MAX,
  ALLREDUCE_AVG,
  BROADCAST,
  REDUCE,
  ALLGATHER,
  REDUCESCATTER,
  ALLTOALL,
  RING,
  NCOLL
};
static const char* const names[NCOLL] = {"all-reduce sum", "all-reduce max", "all-reduce avg",
                                         "broadcast",      "reduce",         "all-gather",
                                         "reduce-scatter", "all-to-all",     "ring of sends"};

/* Elements each rank sends and receives. */
static void sizes(enum coll c, size_t n, size_t* s, size_t* d) {
  size_t R = (size_t)nranks;
  *s = c == REDUCESCATTER || c == ALLTOALL ? n * R : n;
  *d = c == ALLGATHER || c == ALLTOALL ? n * R : n;
}

/* What rank r must receive: element i of d elements. */
static float want(enum coll c, size_t n, int r, size_t i, int root) {
  float sum = 0, max = 0;
  switch (c) {
    case ALLREDUCE_SUM:
    case REDUCE:
    case ALLREDUCE_AVG:
      for (int p = 0; p < nranks; p++) sum += val(p, i);
      return c == ALLREDUCE_AVG ? sum / (float)nranks : sum;
    case ALLREDUCE_MAX:
      for (int p = 0; p < nranks; p++) max = val(p, i) > max ? val(p, i) : max;
      return max;
    case BROADCAST:
      return val(root, i);
    case ALLGATHER:
      return val((int)(i / n), i % n);
    case REDUCESCATTER:
      for (int p = 0; p < nranks; p++) sum += val(p, (size_t)r * n + i);
      return sum;
    case ALLTOALL: /* block p of r's receive is block r of p's send */
      return val((int)(i / n), (size_t)r * n + i % n);
    default: /* ring: from r - 1 */
      return val((r - 1 + nranks) % nranks, i);
  }
}

static void one(enum coll c, size_t n) {
  size_t ns, nd;
  sizes(c, n, &ns, &nd);
  int root = nranks - 1;
  float *s[MAXR], *d[MAXR], *h = malloc((ns > nd ? ns : nd) * sizeof(float));
  for (int r = lo; r < hi; r++) {
    s[r] = dev_new(ns * 4);
    d[r] = dev_new(nd * 4);
    for (size_t i = 0; i < ns; i++) h[i] = val(r, i);
    put(s[r], h, ns * 4);
    for (size_t i = 0; i < nd; i++) h[i] = -1.0f;
    put(d[r], h, nd * 4);
  }
  NCCL_OK(ncclGroupStart());
  for (int r = lo; r < hi; r++) {
    cudaStream_t st = (cudaStream_t)streams[r];
    switch (c) {
      case ALLREDUCE_SUM:
        NCCL_OK(ncclAllReduce(s[r], d[r], n, ncclFloat32, ncclSum, comms[r], st));
        break;
      case ALLREDUCE_MAX:
        NCCL_OK(ncclAllReduce(s[r], d[r], n, ncclFloat32, ncclMax, comms[r], st));
        break;
      case ALLREDUCE_AVG:
        NCCL_OK(ncclAllReduce(s[r], d[r], n, ncclFloat32, ncclAvg, comms[r], st));
        break;
      case BROADCAST:
        NCCL_OK(ncclBroadcast(s[r], d[r], n, ncclFloat32, root, comms[r], st));
        break;
      case REDUCE:
        NCCL_OK(ncclReduce(s[r], d[r], n, ncclFloat32, ncclSum, root, comms[r], st));
        break;
      case ALLGATHER:
        NCCL_OK(ncclAllGather(s[r], d[r], n, ncclFloat32, comms[r], st));
        break;
      case REDUCESCATTER:
        NCCL_OK(ncclReduceScatter(s[r], d[r], n, ncclFloat32, ncclSum, comms[r], st));
        break;
      case ALLTOALL:
        NCCL_OK(ncclAlltoAll(s[r], d[r], n, ncclFloat32, comms[r], st));
        break;
      default:
        NCCL_OK(ncclSend(s[r], n, ncclFloat32, (r + 1) % nranks, comms[r], st));
        NCCL_OK(ncclRecv(d[r], n, ncclFloat32, (r - 1 + nranks) % nranks, comms[r], st));
        break;
    }
  }
  NCCL_OK(ncclGroupEnd());
  for (int r = lo; r < hi; r++) CHECK(cu_stream_sync(streams[r]) == 0, "cuStreamSynchronize");
  for (int r = lo; r < hi; r++) {
    if (c == REDUCE && r != root) continue;
    get(h, d[r], nd * 4);
    size_t bad = nd;
    for (size_t i = 0; i < nd && bad == nd; i++)
      if (h[i] != want(c, n, r, i, root)) bad = i;
    CHECK(bad == nd, "%s n=%zu at %d ranks: rank %d element %zu is %g, not %g", names[c], n, nranks,
          r, bad, bad < nd ? h[bad] : 0.0, bad < nd ? want(c, n, r, bad, root) : 0.0);
  }
  for (int r = lo; r < hi; r++) {
    cu_free((uintptr_t)s[r]);
    cu_free((uintptr_t)d[r]);
  }
  free(h);
}

static void run_checks(void) {
  for (int r = lo; r < hi; r++)
    if (cu_stream_create(&streams[r], 1) != 0) exit(2); /* non-blocking */
  const size_t counts[] = {1, 1000, 70001};
  for (int c = 0; c < NCOLL; c++)
    for (int k = 0; k < 3; k++) one((enum coll)c, counts[k]);
  for (int r = lo; r < hi; r++) {
    NCCL_OK(ncclCommDestroy(comms[r]));
    cu_stream_destroy(streams[r]);
  }
}

static int run_all(int n) {
  int rc = driver_start(), devs[MAXR] = {0};
  if (rc) return rc;
  nranks = n;
  lo = 0;
  hi = n;
  NCCL_OK(ncclCommInitAll(comms, n, devs)); /* every rank on device 0: Loom serves that */
  run_checks();
  printf("nccl_device all %d: %d checks, %d failed\n", n, checks, failures);
  return failures ? 1 : 0;
}

struct shared {
  _Atomic int ready;
  ncclUniqueId id;
};

static int run_rank(struct shared* sh, int n, int r) {
  int rc = driver_start();
  if (rc) return rc;
  nranks = n;
  lo = r;
  hi = r + 1;
  if (r == 0) {
    NCCL_OK(ncclGetUniqueId(&sh->id));
    atomic_store(&sh->ready, 1);
  }
  for (int i = 0; i < 30000 && !atomic_load(&sh->ready); i++) usleep(1000);
  NCCL_OK(ncclCommInitRank(&comms[r], n, sh->id, r));
  run_checks();
  printf("nccl_device procs %d, rank %d: %d checks, %d failed\n", n, r, checks, failures);
  return failures ? 1 : 0;
}

static int run_procs(int n) {
  struct shared* sh =
      mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  pid_t pids[MAXR];
  for (int r = 0; r < n; r++)
    if ((pids[r] = fork()) == 0) _exit(run_rank(sh, n, r));
  int bad = 0, skipped = 0;
  for (int r = 0; r < n; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    skipped += WIFEXITED(st) && WEXITSTATUS(st) == 77;
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 77)) {
      fprintf(stderr, "FAIL: rank %d: %s %d\n", r, WIFEXITED(st) ? "exit" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      bad = 1;
    }
  }
  munmap(sh, sizeof *sh);
  if (!bad && skipped == n) return 77;
  return bad || skipped;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int n = argc == 4 ? atoi(argv[3]) : 0;
  if (n < 1 || n > MAXR || (strcmp(argv[2], "procs") && strcmp(argv[2], "all"))) {
    fprintf(stderr, "usage: nccl_device DRIVER procs|all N (1..8)\n");
    return 2;
  }
  int rc = driver_open(argv[1]);
  if (rc) return rc;
  return strcmp(argv[2], "all") == 0 ? run_all(n) : run_procs(n);
}
