/* stub_stream.c - the stand-in driver's streams, events, stream memory
 * operations, device memory and contexts, for testing the CUDA executor
 * (src/collectives/exec_cuda.c) without a GPU.
 *
 * A stream is a queue of operations run in order by a worker thread of its
 * own, as a GPU runs a stream's work behind the host's back: kernels (see
 * stub_kernels.c), copies, 64-bit writes and waits on memory words, event
 * records and waits. A wait holds its stream until the word reaches the
 * value (polled, as the GPU's front end does); nothing else waits. The
 * legacy and per-thread default streams (handles 0, 1, 2) run each
 * operation at once on the calling thread. Device memory is host memory
 * that cuPointerGetAttribute reports as device memory of device 0, each
 * allocation a shared mapping of a memfd, so that its IPC handle names the
 * owner's pid and descriptor and another process opens it through /proc;
 * mapped and registered host memory has one address for both. Words are read and written with
 * acquire and release atomics, so what a stream wrote before it set a word
 * is seen by whoever waited for it (ThreadSanitizer sees that order too). */
#include "stub_stream.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { CU_ERR_INVALID_VALUE = 1, CU_ERR_OUT_OF_MEMORY = 2, CU_ERR_NOT_READY = 600 };

/* ---- Device memory ---- */

/* An allocation: a shared mapping of a memfd of its own, so that another
 * process can open it as it opens a real allocation's IPC handle (through
 * /proc/<pid>/fd), or such a mapping of a peer's (imported). */
struct alloc {
  uintptr_t lo, hi;
  size_t mapped;      /* bytes of the mapping */
  uint64_t id;        /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
  int fd;             /* -1 when imported */
  uint32_t owner_pid; /* imported: whose, and its id there */
  uint64_t owner_id;
};

/* How many times other processes have each allocation open, in memory that
 * every process forked from the one that loaded the stand-in shares: CUDA
 * leaves undefined an allocation freed while another process has it open,
 * so cuMemFree of one aborts here (on a GPU it may go unnoticed, or not). */
#define OPENS 4096
struct open_rec {
  uint32_t pid;
  int32_t count;
  uint64_t id;
};
static struct opens {
  _Atomic int lock;
  struct open_rec rec[OPENS];
} * opens;

__attribute__((constructor)) static void opens_init(void) {
  void* p = mmap(NULL, sizeof *opens, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  opens = p == MAP_FAILED ? NULL : p;
}

/* Adds d to the opens of (pid, id); returns the count. */
static int opens_add(uint32_t pid, uint64_t id, int d) {
  if (!opens) return 0;
  while (atomic_exchange_explicit(&opens->lock, 1, memory_order_acquire)) sched_yield();
  struct open_rec* hit = NULL;
  for (int i = 0; i < OPENS && !hit; i++)
    if (opens->rec[i].count > 0 && opens->rec[i].pid == pid && opens->rec[i].id == id)
      hit = &opens->rec[i];
  for (int i = 0; i < OPENS && !hit && d > 0; i++)
    if (opens->rec[i].count <= 0) hit = &opens->rec[i], *hit = (struct open_rec){pid, 0, id};
  int n = 0;
  if (hit) n = hit->count += d;
  atomic_store_explicit(&opens->lock, 0, memory_order_release);
  return n;
}
static struct alloc* allocs;
static size_t nallocs, allocs_cap;
static uint64_t next_id;
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;

/* Under alloc_lock: the allocation holding p, or NULL. */
static struct alloc* alloc_find(uintptr_t p) {
  for (size_t i = 0; i < nallocs; i++)
    if (p >= allocs[i].lo && p < allocs[i].hi) return &allocs[i];
  return NULL;
}

int stub_is_device(uintptr_t p) {
  pthread_mutex_lock(&alloc_lock);
  int found = alloc_find(p) != NULL;
  pthread_mutex_unlock(&alloc_lock);
  return found;
}

int stub_alloc_id(uintptr_t p, uint64_t* id) {
  pthread_mutex_lock(&alloc_lock);
  struct alloc* a = alloc_find(p);
  if (a) *id = a->id;
  pthread_mutex_unlock(&alloc_lock);
  return a ? 0 : CU_ERR_INVALID_VALUE;
}

static int alloc_add(uintptr_t lo, size_t bytes, size_t mapped, int fd) {
  pthread_mutex_lock(&alloc_lock);
  if (nallocs == allocs_cap) {
    size_t cap = allocs_cap ? allocs_cap * 2 : 64;
    struct alloc* a = realloc(allocs, cap * sizeof *a);
    if (!a) {
      pthread_mutex_unlock(&alloc_lock);
      return CU_ERR_OUT_OF_MEMORY;
    }
    allocs = a, allocs_cap = cap;
  }
  allocs[nallocs++] = (struct alloc){lo, lo + bytes, mapped, ++next_id, fd, 0, 0};
  pthread_mutex_unlock(&alloc_lock);
  return 0;
}

/* Removes the allocation at lo (imported or not, as asked): its mapping
 * and descriptor go. */
static int alloc_drop(uintptr_t lo, int imported) {
  struct alloc a = {0};
  int found = 0;
  pthread_mutex_lock(&alloc_lock);
  for (size_t i = 0; i < nallocs && !found; i++)
    if (allocs[i].lo == lo && (allocs[i].fd < 0) == imported) {
      a = allocs[i];
      allocs[i] = allocs[--nallocs];
      found = 1;
    }
  pthread_mutex_unlock(&alloc_lock);
  if (!found) return CU_ERR_INVALID_VALUE;
  if (imported) {
    opens_add(a.owner_pid, a.owner_id, -1);
  } else if (opens_add((uint32_t)getpid(), a.id, 0) > 0) {
    fprintf(stderr,
            "stand-in driver: cuMemFree of an allocation another process still has open "
            "through its IPC handle (undefined in CUDA)\n");
    abort();
  }
  munmap((void*)a.lo, a.mapped);
  if (a.fd >= 0) close(a.fd);
  return 0;
}

STUB_API int cuMemAlloc_v2(uintptr_t* out, size_t bytes) {
  size_t mapped = (bytes + 4095) & ~(size_t)4095;
  if (!mapped) mapped = 4096;
  int fd = memfd_create("stub-device-memory", MFD_CLOEXEC);
  if (fd < 0) return CU_ERR_OUT_OF_MEMORY;
  void* p = ftruncate(fd, (off_t)mapped) == 0
                ? mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  if (p == MAP_FAILED) {
    close(fd);
    return CU_ERR_OUT_OF_MEMORY;
  }
  memset(p, 0xa5, mapped); /* what fresh device memory holds: not zeros */
  if (alloc_add((uintptr_t)p, bytes ? bytes : 1, mapped, fd) != 0) {
    munmap(p, mapped);
    close(fd);
    return CU_ERR_OUT_OF_MEMORY;
  }
  *out = (uintptr_t)p;
  return 0;
}

STUB_API int cuMemFree_v2(uintptr_t p) {
  return alloc_drop(p, 0);
}

STUB_API int cuMemGetAddressRange_v2(uintptr_t* base, size_t* size, uintptr_t p) {
  pthread_mutex_lock(&alloc_lock);
  struct alloc* a = alloc_find(p);
  if (a) {
    if (base) *base = a->lo;
    if (size) *size = a->hi - a->lo;
  }
  pthread_mutex_unlock(&alloc_lock);
  return a ? 0 : CU_ERR_INVALID_VALUE;
}

/* An IPC handle: whose process and descriptor, and the size. */
struct ipc_handle {
  uint32_t magic, pid;
  int32_t fd;
  uint64_t bytes, mapped, id;
};
typedef struct {
  unsigned char bytes[64];
} stub_ipc_handle;
#define IPC_MAGIC 0x5354c0deu

STUB_API int cuIpcGetMemHandle(stub_ipc_handle* out, uintptr_t p) {
  struct ipc_handle h = {IPC_MAGIC, (uint32_t)getpid(), -1, 0, 0, 0};
  pthread_mutex_lock(&alloc_lock);
  struct alloc* a = alloc_find(p);
  if (a && a->lo == p && a->fd >= 0)
    h.fd = a->fd, h.bytes = a->hi - a->lo, h.mapped = a->mapped, h.id = a->id;
  pthread_mutex_unlock(&alloc_lock);
  if (h.fd < 0) return CU_ERR_INVALID_VALUE;
  memset(out, 0, sizeof *out);
  memcpy(out->bytes, &h, sizeof h);
  return 0;
}

STUB_API int cuIpcOpenMemHandle_v2(uintptr_t* out, stub_ipc_handle handle, unsigned flags) {
  (void)flags;
  struct ipc_handle h;
  memcpy(&h, handle.bytes, sizeof h);
  if (h.magic != IPC_MAGIC || h.pid == (uint32_t)getpid()) return CU_ERR_INVALID_VALUE;
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/fd/%d", h.pid, h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CU_ERR_INVALID_VALUE;
  void* p = mmap(NULL, h.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return CU_ERR_OUT_OF_MEMORY;
  if (alloc_add((uintptr_t)p, h.bytes, h.mapped, -1) != 0) {
    munmap(p, h.mapped);
    return CU_ERR_OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&alloc_lock);
  struct alloc* a = alloc_find((uintptr_t)p);
  a->owner_pid = h.pid;
  a->owner_id = h.id;
  pthread_mutex_unlock(&alloc_lock);
  opens_add(h.pid, h.id, 1);
  *out = (uintptr_t)p;
  return 0;
}

STUB_API int cuIpcCloseMemHandle(uintptr_t p) {
  return alloc_drop(p, 1);
}

/* The synchronous copies and set of the tests' own use (they know the
 * stand-in's device memory is host memory; on a GPU they are the driver's). */
STUB_API int cuMemcpyHtoD_v2(uintptr_t dst, const void* src, size_t bytes) {
  memcpy((void*)dst, src, bytes);
  return 0;
}

STUB_API int cuMemcpyDtoH_v2(void* dst, uintptr_t src, size_t bytes) {
  memcpy(dst, (const void*)src, bytes);
  return 0;
}

STUB_API int cuMemsetD8_v2(uintptr_t dst, unsigned char byte, size_t bytes) {
  memset((void*)dst, byte, bytes);
  return 0;
}

/* Host memory registered for the device: one address for both, as for
 * cuMemHostAlloc's. */
STUB_API int cuMemHostRegister_v2(void* p, size_t bytes, unsigned flags) {
  (void)flags;
  return p && bytes ? 0 : CU_ERR_INVALID_VALUE;
}

STUB_API int cuMemHostUnregister(void* p) {
  return p ? 0 : CU_ERR_INVALID_VALUE;
}

STUB_API int cuMemHostAlloc(void** out, size_t bytes, unsigned flags) {
  (void)flags;
  *out = calloc(1, bytes ? bytes : 1);
  return *out ? 0 : CU_ERR_OUT_OF_MEMORY;
}

STUB_API int cuMemFreeHost(void* p) {
  free(p);
  return 0;
}

STUB_API int cuMemHostGetDevicePointer_v2(uintptr_t* out, void* p, unsigned flags) {
  (void)flags;
  *out = (uintptr_t)p;
  return 0;
}

/* ---- Contexts: one, the primary context of device 0 ---- */

static int the_context;

STUB_API int cuCtxGetCurrent(void** ctx) {
  *ctx = &the_context;
  return 0;
}

STUB_API int cuCtxSetCurrent(void* ctx) {
  return ctx == &the_context ? 0 : CU_ERR_INVALID_VALUE;
}

STUB_API int cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  if (dev != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *ctx = &the_context;
  return 0;
}

STUB_API int cuCtxPushCurrent_v2(void* ctx) {
  return ctx == &the_context ? 0 : CU_ERR_INVALID_VALUE;
}

STUB_API int cuCtxPopCurrent_v2(void** ctx) {
  if (ctx) *ctx = &the_context;
  return 0;
}

/* ---- Streams ---- */

struct op {
  stub_op_fn run;
  unsigned char arg[STUB_OP_ARG];
  struct op* next;
};

struct stream {
  pthread_mutex_t lock;
  pthread_cond_t cond; /* work queued, work finished, shutting down */
  struct op *head, *tail;
  int busy, quit;
  pthread_t worker;
};

static void nap(void) {
  struct timespec ts = {0, 20000}; /* 20 us: a poll of the front end */
  nanosleep(&ts, NULL);
}

static void* worker_main(void* arg) {
  struct stream* s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->quit) pthread_cond_wait(&s->cond, &s->lock);
    if (!s->head) break;
    struct op* o = s->head;
    s->busy = 1;
    pthread_mutex_unlock(&s->lock);
    while (o->run(o->arg)) nap();
    pthread_mutex_lock(&s->lock);
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->busy = 0;
    free(o);
    pthread_cond_broadcast(&s->cond);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static int is_default(void* stream) {
  return (uintptr_t)stream <= 2;
}

int stub_submit(void* stream, stub_op_fn run, const void* arg, size_t bytes) {
  if (bytes > STUB_OP_ARG) return CU_ERR_INVALID_VALUE;
  if (is_default(stream)) {
    unsigned char copy[STUB_OP_ARG];
    memcpy(copy, arg, bytes);
    while (run(copy)) nap();
    return 0;
  }
  struct stream* s = stream;
  struct op* o = calloc(1, sizeof *o);
  if (!o) return CU_ERR_OUT_OF_MEMORY;
  o->run = run;
  memcpy(o->arg, arg, bytes);
  pthread_mutex_lock(&s->lock);
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  return 0;
}

STUB_API int cuStreamCreate(void** out, unsigned flags) {
  (void)flags;
  struct stream* s = calloc(1, sizeof *s);
  if (!s) return CU_ERR_OUT_OF_MEMORY;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
    free(s);
    return CU_ERR_OUT_OF_MEMORY;
  }
  *out = s;
  return 0;
}

STUB_API int cuStreamSynchronize(void* stream) {
  if (is_default(stream)) return 0;
  struct stream* s = stream;
  pthread_mutex_lock(&s->lock);
  while (s->head) pthread_cond_wait(&s->cond, &s->lock);
  pthread_mutex_unlock(&s->lock);
  return 0;
}

STUB_API int cuStreamQuery(void* stream) {
  if (is_default(stream)) return 0;
  struct stream* s = stream;
  pthread_mutex_lock(&s->lock);
  int left = s->head != NULL;
  pthread_mutex_unlock(&s->lock);
  return left ? CU_ERR_NOT_READY : 0;
}

STUB_API int cuStreamDestroy_v2(void* stream) {
  if (is_default(stream)) return CU_ERR_INVALID_VALUE;
  struct stream* s = stream;
  pthread_mutex_lock(&s->lock);
  s->quit = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->worker, NULL); /* the worker drains the queue first */
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
  return 0;
}

STUB_API int cuStreamIsCapturing(void* stream, int* status) {
  (void)stream;
  *status = 0;
  return 0;
}

/* ---- Copies and memory words ---- */

struct copy_arg {
  void* dst;
  const void* src;
  size_t bytes;
};
static int copy_run(void* a) {
  struct copy_arg* c = a;
  memmove(c->dst, c->src, c->bytes);
  return 0;
}

STUB_API int cuMemcpyAsync(uintptr_t dst, uintptr_t src, size_t bytes, void* stream) {
  struct copy_arg c = {(void*)dst, (const void*)src, bytes};
  return stub_submit(stream, copy_run, &c, sizeof c);
}

struct word_arg {
  uint64_t* word;
  uint64_t value;
};
/* Words may be reached through two mappings of one page (a peer's rank
 * segment as each rank maps it): the hardware keeps them coherent, but
 * ThreadSanitizer orders atomics by address and would miss that a wait
 * through one mapping saw a write through another. Every write and every
 * poll of a wait also take one lock, which orders them for it as they are
 * ordered in fact. */
static pthread_mutex_t word_lock = PTHREAD_MUTEX_INITIALIZER;
static int write_run(void* a) {
  struct word_arg* w = a;
  pthread_mutex_lock(&word_lock);
  __atomic_store_n(w->word, w->value, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&word_lock);
  return 0;
}
/* GEQ as the driver compares: cyclically, (int64_t)(word - value) >= 0. */
static int wait_run(void* a) {
  struct word_arg* w = a;
  pthread_mutex_lock(&word_lock);
  int passed = (int64_t)(__atomic_load_n(w->word, __ATOMIC_ACQUIRE) - w->value) >= 0;
  pthread_mutex_unlock(&word_lock);
  return passed ? 0 : 1;
}

STUB_API int cuStreamWriteValue64_v2(void* stream, uintptr_t addr, uint64_t value, unsigned flags) {
  if (flags != 0 || addr % 8) return CU_ERR_INVALID_VALUE;
  struct word_arg w = {(uint64_t*)addr, value};
  return stub_submit(stream, write_run, &w, sizeof w);
}

/* Only CU_STREAM_WAIT_VALUE_GEQ (0), the one compare Loom uses. */
STUB_API int cuStreamWaitValue64_v2(void* stream, uintptr_t addr, uint64_t value, unsigned flags) {
  if (flags != 0 || addr % 8) return CU_ERR_INVALID_VALUE;
  struct word_arg w = {(uint64_t*)addr, value};
  return stub_submit(stream, wait_run, &w, sizeof w);
}

/* ---- Events: a record is a generation; a wait holds until it is done ---- */

struct event {
  uint64_t recorded; /* generations recorded (host side) */
  uint64_t done;     /* generations whose record has run (atomics) */
};

STUB_API int cuEventCreate(void** out, unsigned flags) {
  (void)flags;
  *out = calloc(1, sizeof(struct event));
  return *out ? 0 : CU_ERR_OUT_OF_MEMORY;
}

STUB_API int cuEventDestroy_v2(void* ev) {
  free(ev);
  return 0;
}

struct ev_arg {
  struct event* ev;
  uint64_t gen;
};
static int record_run(void* a) {
  struct ev_arg* e = a;
  __atomic_store_n(&e->ev->done, e->gen, __ATOMIC_RELEASE);
  return 0;
}
static int ev_wait_run(void* a) {
  struct ev_arg* e = a;
  return __atomic_load_n(&e->ev->done, __ATOMIC_ACQUIRE) >= e->gen ? 0 : 1;
}

STUB_API int cuEventRecord(void* ev, void* stream) {
  struct event* e = ev;
  struct ev_arg a = {e, __atomic_add_fetch(&e->recorded, 1, __ATOMIC_ACQ_REL)};
  return stub_submit(stream, record_run, &a, sizeof a);
}

STUB_API int cuStreamWaitEvent(void* stream, void* ev, unsigned flags) {
  (void)flags;
  struct event* e = ev;
  struct ev_arg a = {e, __atomic_load_n(&e->recorded, __ATOMIC_ACQUIRE)};
  return stub_submit(stream, ev_wait_run, &a, sizeof a);
}

STUB_API int cuEventSynchronize(void* ev) {
  struct event* e = ev;
  uint64_t gen = __atomic_load_n(&e->recorded, __ATOMIC_ACQUIRE);
  while (__atomic_load_n(&e->done, __ATOMIC_ACQUIRE) < gen) nap();
  return 0;
}
