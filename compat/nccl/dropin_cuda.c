/* dropin_cuda.c - what the drop-in needs of CUDA, reached through the
 * libraries the process has already loaded (dlopen with RTLD_NOLOAD, then
 * dlsym), so that libnccl.so.2 links no CUDA library and host programs run
 * where there is no driver at all. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#include "dropin.h"

/* The driver API's values, as cuda.h defines them. */
enum { CU_OK = 0, CU_ATTR_MEMORY_TYPE = 2, CU_MEMTYPE_DEVICE = 2, CU_MEMTYPE_UNIFIED = 4 };

typedef int (*cu_pointer_attr_fn)(void* data, int attr, uintptr_t ptr);
typedef int (*cu_count_fn)(int* count);
typedef int (*cu_init_fn)(unsigned flags);
typedef int (*rt_malloc_fn)(void** ptr, size_t size);
typedef int (*rt_free_fn)(void* ptr);

/* The driver, if this process loaded it; looked up again until found, since
 * a program may load CUDA after its first NCCL call. */
static void* driver_sym(const char* name) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) return NULL;
  void* f = dlsym(h, name);
  dlclose(h); /* NOLOAD took a reference of its own; the library stays */
  return f;
}

int dropin_is_device(const void* ptr) {
  static cu_pointer_attr_fn attr;
  static __thread unsigned misses;
  if (!ptr) return 0;
  if (!__atomic_load_n(&attr, __ATOMIC_ACQUIRE)) {
    /* Looked for again every 1024 calls of a thread, not on each: dlopen
     * takes the loader's lock. */
    if ((misses++ & 1023) != 0) return 0;
    cu_pointer_attr_fn f = (cu_pointer_attr_fn)driver_sym("cuPointerGetAttribute");
    if (!f) return 0;
    __atomic_store_n(&attr, f, __ATOMIC_RELEASE);
  }
  unsigned type = 0;
  /* Memory CUDA never saw fails the query: host memory. */
  return attr(&type, CU_ATTR_MEMORY_TYPE, (uintptr_t)ptr) == CU_OK &&
         (type == CU_MEMTYPE_DEVICE || type == CU_MEMTYPE_UNIFIED);
}

int dropin_device_count(void) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return 0;
  cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
  cu_count_fn count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
  int n = 0;
  if (!init || !count || init(0) != CU_OK || count(&n) != CU_OK) n = 0;
  return n; /* the library stays loaded: CUDA programs keep it anyway */
}

/* cudaMalloc of the runtime the program uses (it is loaded when the program
 * does CUDA), else of any libcudart this machine can load. */
static void* runtime_sym(const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  static const char* const libs[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                     "libcudart.so.11.0"};
  for (size_t i = 0; !f && i < sizeof(libs) / sizeof(libs[0]); i++) {
    void* h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
    if (h) f = dlsym(h, name);
  }
  return f;
}

ncclResult_t dropin_device_alloc(void** ptr, size_t size) {
  rt_malloc_fn m = (rt_malloc_fn)runtime_sym("cudaMalloc");
  if (!m)
    return dropin_fail(NULL, ncclUnhandledCudaError,
                       "ncclMemAlloc: no CUDA runtime (libcudart) in this process or on this "
                       "machine; for host memory use malloc or loomMemAlloc");
  int e = m(ptr, size);
  if (e != 0)
    return dropin_fail(NULL, ncclUnhandledCudaError,
                       "ncclMemAlloc: cudaMalloc of %zu bytes failed with CUDA error %d", size, e);
  return ncclSuccess;
}

ncclResult_t dropin_device_free(void* ptr, int* was_device_out) {
  *was_device_out = dropin_is_device(ptr);
  if (!*was_device_out) return ncclSuccess;
  rt_free_fn f = (rt_free_fn)runtime_sym("cudaFree");
  int e = f ? f(ptr) : -1;
  if (e != 0)
    return dropin_fail(NULL, ncclUnhandledCudaError, "ncclMemFree: cudaFree failed (%d)", e);
  return ncclSuccess;
}

/* Loom's wrappers of the CUDA streams calls were made on, made once each and
 * kept for the life of the process, as NCCL keeps its per-stream state. */
#define STREAM_CACHE 256
static struct {
  cudaStream_t cuda;
  loomStream_t loom;
} wrapped[STREAM_CACHE];
static int nwrapped;
static pthread_mutex_t wrap_lock = PTHREAD_MUTEX_INITIALIZER;

static ncclResult_t stream_wrap(ncclComm_t comm, cudaStream_t s, loomStream_t* out) {
  ncclResult_t r = ncclSuccess;
  pthread_mutex_lock(&wrap_lock);
  int i = 0;
  while (i < nwrapped && wrapped[i].cuda != s) i++;
  if (i < nwrapped) {
    *out = wrapped[i].loom;
  } else if (nwrapped == STREAM_CACHE) {
    r = dropin_fail(comm, ncclInternalError, "device buffers on more than %d distinct CUDA streams",
                    STREAM_CACHE);
  } else {
    loomResult_t lr = loomStreamCreateFromCuda(out, (void*)s);
    if (lr != loomSuccess) {
      r = dropin_fail(comm, dropin_result(lr), "device buffers on CUDA stream %p: %s", (void*)s,
                      loomGetLastError(NULL));
    } else {
      wrapped[nwrapped].cuda = s;
      wrapped[nwrapped++].loom = *out;
    }
  }
  pthread_mutex_unlock(&wrap_lock);
  return r;
}

ncclResult_t dropin_stream(ncclComm_t comm, const void* a, const void* b, cudaStream_t s,
                           loomStream_t* out) {
  *out = NULL;
  if (!dropin_is_device(a) && !dropin_is_device(b)) return ncclSuccess;
  return stream_wrap(comm, s, out);
}
