/* cuda_kernels.c - loads the device kernels' fatbin into each CUDA context
 * that asks for them and enqueues them, through the driver API reached by
 * dlopen (the same rule as core/memkind.c: no build of Loom links libcuda).
 *
 * Without LOOM_HAVE_CUDA_KERNELS (nvcc was not found at configure time)
 * every entry point says so. */
#include "kernels/cuda/cuda_kernels.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/checks.h"
#include "core/debug.h"
#include "core/dtype.h"

#ifdef LOOM_HAVE_CUDA_KERNELS
/* cuda_fatbin.c: the image nvcc made, between these two symbols. */
extern const unsigned char loom_cuda_fatbin[];
extern const unsigned char loom_cuda_fatbin_end[];
#endif

int cuda_kernels_built(void) {
#ifdef LOOM_HAVE_CUDA_KERNELS
  return 1;
#else
  return 0;
#endif
}

/* ---- Kernel names: the instances reduce.cu defines ---- */

/* Storage names by datatype, and the one whose sum and product a type uses
 * (both signs of an integer width share the unsigned kernels). */
static const char* const type_tag[loomNumTypes] = {
    [loomInt8] = "i8",       [loomUint8] = "u8",        [loomInt32] = "i32",
    [loomUint32] = "u32",    [loomInt64] = "i64",       [loomUint64] = "u64",
    [loomFloat16] = "f16",   [loomFloat32] = "f32",     [loomFloat64] = "f64",
    [loomBfloat16] = "bf16", [loomFloat8e4m3] = "e4m3", [loomFloat8e5m2] = "e5m2"};
static const char* const wrap_tag[loomNumTypes] = {
    [loomInt8] = "u8",       [loomUint8] = "u8",        [loomInt32] = "u32",
    [loomUint32] = "u32",    [loomInt64] = "u64",       [loomUint64] = "u64",
    [loomFloat16] = "f16",   [loomFloat32] = "f32",     [loomFloat64] = "f64",
    [loomBfloat16] = "bf16", [loomFloat8e4m3] = "e4m3", [loomFloat8e5m2] = "e5m2"};

enum { KOP_SUM, KOP_PROD, KOP_MAX, KOP_MIN, KOP_DIV, KOP_MUL, KOP_N };
#define KERNEL_COUNT (loomNumTypes * KOP_N + 1)
#define KERNEL_COPY (loomNumTypes * KOP_N)

static void kernel_name(int k, char* buf, size_t len) {
  static const char* const op_text[KOP_N] = {"sum", "prod", "max", "min", "div", "mul"};
  if (k == KERNEL_COPY) {
    snprintf(buf, len, "loom_copy");
    return;
  }
  int t = k / KOP_N, op = k % KOP_N;
  const char* tag = op == KOP_SUM || op == KOP_PROD || op == KOP_MUL ? wrap_tag[t] : type_tag[t];
  if (op == KOP_DIV || op == KOP_MUL)
    snprintf(buf, len, "loom_%s_%s", op_text[op], tag);
  else
    snprintf(buf, len, "loom_reduce_%s_%s", tag, op_text[op]);
}

/* ---- The driver ---- */

typedef int cu_result;
typedef struct {
  unsigned char bytes[64];
} cu_ipc_handle; /* CUipcMemHandle: passed by value */
typedef void* cu_context;
typedef void* cu_module;
typedef void* cu_function;
enum { CU_DEV_ATTR_SM_COUNT = 16 }; /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */

static struct {
  int tried, ok, stream_ok;
  const char* why;
  cu_result (*init)(unsigned);
  cu_result (*ctx_get_current)(cu_context*);
  cu_result (*ctx_get_id)(cu_context, unsigned long long*); /* CUDA 12 on; may be NULL */
  cu_result (*ctx_get_device)(int*);
  cu_result (*device_get_attribute)(int*, int, int);
  cu_result (*module_load_data)(cu_module*, const void*);
  cu_result (*module_get_function)(cu_function*, cu_module, const char*);
  cu_result (*launch_kernel)(cu_function, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, void*, void**, void**);
  cu_result (*get_error_string)(cu_result, const char**);
  /* What the CUDA executor queues besides kernels (cuda_stream_* below). */
  cu_result (*primary_retain)(cu_context*, int);
  cu_result (*ctx_push)(cu_context);
  cu_result (*ctx_pop)(cu_context*);
  cu_result (*memcpy_async)(uintptr_t, uintptr_t, size_t, void*);
  cu_result (*write_value64)(void*, uintptr_t, uint64_t, unsigned);
  cu_result (*wait_value64)(void*, uintptr_t, uint64_t, unsigned);
  cu_result (*mem_alloc)(uintptr_t*, size_t);
  cu_result (*mem_free)(uintptr_t);
  cu_result (*host_dev_ptr)(uintptr_t*, void*, unsigned);
  cu_result (*stream_sync)(void*);
  cu_result (*stream_query)(void*);
  cu_result (*stream_is_capturing)(void*, int*);
  cu_result (*event_create)(void**, unsigned);
  cu_result (*event_record)(void*, void*);
  cu_result (*event_destroy)(void*);
  cu_result (*stream_wait_event)(void*, void*, unsigned);
  cu_result (*event_sync)(void*);
  /* Ranks in other processes (cuda_host_register, cuda_ipc_*); optional. */
  cu_result (*host_register)(void*, size_t, unsigned);
  cu_result (*host_unregister)(void*);
  cu_result (*mem_range)(uintptr_t*, size_t*, uintptr_t);
  cu_result (*pointer_attr)(void*, int, uintptr_t);
  cu_result (*ipc_get)(void*, uintptr_t);
  cu_result (*ipc_open)(uintptr_t*, cu_ipc_handle, unsigned);
  cu_result (*ipc_close)(uintptr_t);
} drv;

/* One context's module and kernels. Contexts are few (one per device and
 * process, the primary ones, in the usual program); a full table refuses. */
#define CTX_MAX 64
struct ctx_kernels {
  cu_context ctx;
  unsigned long long id; /* the context's unique id, or 0 where the driver has none */
  cu_module mod;
  int sms;
  cu_function fn[KERNEL_COUNT];
};
static struct ctx_kernels ctx_table[CTX_MAX];
static int ctx_count;
static pthread_mutex_t kern_lock = PTHREAD_MUTEX_INITIALIZER;

static const char* cu_text(cu_result r) {
  const char* s = NULL;
  if (drv.get_error_string) drv.get_error_string(r, &s);
  return s ? s : "unknown CUDA error";
}

/* Under kern_lock. */
static void drv_load(void) {
  if (drv.tried) return;
  drv.tried = 1;
  if (!cuda_kernels_built()) {
    drv.why =
        "this build of Loom has no device kernels (nvcc was not found when it was configured)";
    return;
  }
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    drv.why = "no CUDA driver (libcuda.so.1) on this machine";
    return;
  }
#define DRV_SYM(field, name) *(void**)&drv.field = dlsym(h, name)
  DRV_SYM(init, "cuInit");
  DRV_SYM(ctx_get_current, "cuCtxGetCurrent");
  DRV_SYM(ctx_get_id, "cuCtxGetId");
  DRV_SYM(ctx_get_device, "cuCtxGetDevice");
  DRV_SYM(device_get_attribute, "cuDeviceGetAttribute");
  DRV_SYM(module_load_data, "cuModuleLoadData");
  DRV_SYM(module_get_function, "cuModuleGetFunction");
  DRV_SYM(launch_kernel, "cuLaunchKernel");
  DRV_SYM(get_error_string, "cuGetErrorString");
  DRV_SYM(primary_retain, "cuDevicePrimaryCtxRetain");
  DRV_SYM(ctx_push, "cuCtxPushCurrent_v2");
  DRV_SYM(ctx_pop, "cuCtxPopCurrent_v2");
  DRV_SYM(memcpy_async, "cuMemcpyAsync");
  DRV_SYM(write_value64, "cuStreamWriteValue64_v2");
  if (!drv.write_value64) DRV_SYM(write_value64, "cuStreamWriteValue64");
  DRV_SYM(wait_value64, "cuStreamWaitValue64_v2");
  if (!drv.wait_value64) DRV_SYM(wait_value64, "cuStreamWaitValue64");
  DRV_SYM(mem_alloc, "cuMemAlloc_v2");
  DRV_SYM(mem_free, "cuMemFree_v2");
  DRV_SYM(host_dev_ptr, "cuMemHostGetDevicePointer_v2");
  DRV_SYM(stream_sync, "cuStreamSynchronize");
  DRV_SYM(stream_query, "cuStreamQuery");
  DRV_SYM(stream_is_capturing, "cuStreamIsCapturing");
  DRV_SYM(event_create, "cuEventCreate");
  DRV_SYM(event_record, "cuEventRecord");
  DRV_SYM(event_destroy, "cuEventDestroy_v2");
  DRV_SYM(stream_wait_event, "cuStreamWaitEvent");
  DRV_SYM(event_sync, "cuEventSynchronize");
  DRV_SYM(host_register, "cuMemHostRegister_v2");
  DRV_SYM(host_unregister, "cuMemHostUnregister");
  DRV_SYM(mem_range, "cuMemGetAddressRange_v2");
  DRV_SYM(pointer_attr, "cuPointerGetAttribute");
  DRV_SYM(ipc_get, "cuIpcGetMemHandle");
  DRV_SYM(ipc_open, "cuIpcOpenMemHandle_v2");
  DRV_SYM(ipc_close, "cuIpcCloseMemHandle");
#undef DRV_SYM
  drv.stream_ok = drv.primary_retain && drv.ctx_push && drv.ctx_pop && drv.memcpy_async &&
                  drv.write_value64 && drv.wait_value64 && drv.mem_alloc && drv.mem_free &&
                  drv.host_dev_ptr && drv.stream_sync && drv.stream_query && drv.event_create &&
                  drv.event_record && drv.event_destroy && drv.stream_wait_event && drv.event_sync;
  if (!drv.init || !drv.ctx_get_current || !drv.ctx_get_device || !drv.device_get_attribute ||
      !drv.module_load_data || !drv.module_get_function || !drv.launch_kernel) {
    drv.why = "the CUDA driver lacks an entry point Loom's kernels need";
    return;
  }
  if (drv.init(0) != 0) {
    drv.why = "the CUDA driver failed to initialise (cuInit): no usable device";
    return;
  }
  drv.ok = 1;
}

int cuda_kernels_usable(const char** why_out) {
  pthread_mutex_lock(&kern_lock);
  drv_load();
  int ok = drv.ok;
  const char* why = drv.why;
  pthread_mutex_unlock(&kern_lock);
  if (why_out) *why_out = ok ? NULL : why;
  return ok;
}

/* The kernels of the calling thread's current context, loading them the
 * first time. */
static loomResult_t ctx_kernels_get(struct ctx_kernels** out) {
  static __thread struct ctx_kernels* last; /* the usual case: the same context again */
  loomResult_t res = loomSuccess;
  pthread_mutex_lock(&kern_lock);
  drv_load();
  if (!drv.ok) {
    res = err_set(NULL, loomInvalidUsage, "device kernels: %s", drv.why);
    goto out;
  }
  cu_context ctx = NULL;
  cu_result r = drv.ctx_get_current(&ctx);
  if (r != 0 || !ctx) {
    res = err_set(NULL, loomInvalidUsage,
                  "device kernels: no CUDA context is current on this thread (%s)",
                  r ? cu_text(r) : "none set");
    goto out;
  }
  /* A context destroyed and another made at its address would find the old
   * module: the unique id tells them apart where the driver has one. */
  unsigned long long id = 0;
  if (drv.ctx_get_id && drv.ctx_get_id(ctx, &id) != 0) id = 0;
  if (last && last->ctx == ctx && last->id == id) {
    *out = last;
    goto out;
  }
  for (int i = 0; i < ctx_count; i++)
    if (ctx_table[i].ctx == ctx && ctx_table[i].id == id) {
      *out = last = &ctx_table[i];
      goto out;
    }
  if (ctx_count == CTX_MAX) {
    res = err_set(NULL, loomInternalError, "device kernels: more than %d CUDA contexts", CTX_MAX);
    goto out;
  }
#ifdef LOOM_HAVE_CUDA_KERNELS
  struct ctx_kernels* ck = &ctx_table[ctx_count];
  memset(ck, 0, sizeof *ck);
  int dev = 0;
  if ((r = drv.module_load_data(&ck->mod, loom_cuda_fatbin)) != 0) {
    res = err_set(NULL, loomUnhandledCudaError,
                  "device kernels: loading Loom's fatbin (%zu bytes) failed: %s",
                  (size_t)(loom_cuda_fatbin_end - loom_cuda_fatbin), cu_text(r));
    goto out;
  }
  if (drv.ctx_get_device(&dev) != 0 ||
      drv.device_get_attribute(&ck->sms, CU_DEV_ATTR_SM_COUNT, dev) != 0 || ck->sms <= 0)
    ck->sms = 16;
  for (int k = 0; k < KERNEL_COUNT; k++) {
    char name[48];
    kernel_name(k, name, sizeof name);
    if ((r = drv.module_get_function(&ck->fn[k], ck->mod, name)) != 0) {
      res = err_set(NULL, loomInternalError,
                    "device kernels: kernel %s missing from the fatbin: %s", name, cu_text(r));
      goto out;
    }
  }
  ck->ctx = ctx;
  ck->id = id;
  ctx_count++;
  *out = last = ck;
#else
  res = err_set(NULL, loomInvalidUsage, "device kernels: not built");
#endif
out:
  pthread_mutex_unlock(&kern_lock);
  return res;
}

/* Blocks of 256 threads, enough to cover the work (each thread takes one
 * 16-byte vector a pass) up to 8 blocks an SM: the loops stride over the
 * rest, and more blocks only add scheduling. */
static loomResult_t kern_launch(int k, size_t bytes, void* stream, void** params) {
  struct ctx_kernels* ck = NULL;
  LOOM_CHECK(ctx_kernels_get(&ck));
  size_t units = (bytes + 15) / 16, want = (units + 255) / 256, cap = (size_t)ck->sms * 8;
  unsigned grid = (unsigned)(want < 1 ? 1 : want > cap ? cap : want);
  cu_result r = drv.launch_kernel(ck->fn[k], grid, 1, 1, 256, 1, 1, 0, stream, params, NULL);
  if (r != 0) {
    char name[48];
    kernel_name(k, name, sizeof name);
    return err_set(NULL, loomUnhandledCudaError, "device kernels: launching %s failed: %s", name,
                   cu_text(r));
  }
  return loomSuccess;
}

static loomResult_t type_ok(loomDataType_t t, const char* fn) {
  if ((int)t < 0 || (int)t >= loomNumTypes)
    return err_set(NULL, loomInvalidArgument, "%s: datatype %d is not a loomDataType_t", fn,
                   (int)t);
  return loomSuccess;
}

loomResult_t cuda_reduce(loomDataType_t t, loomRedOp_t op, void* dst, const void* a, const void* b,
                         size_t count, void* stream) {
  LOOM_CHECK(type_ok(t, "cuda_reduce"));
  int kop = op == loomSum || op == loomAvg ? KOP_SUM
            : op == loomProd               ? KOP_PROD
            : op == loomMax                ? KOP_MAX
            : op == loomMin                ? KOP_MIN
                                           : -1;
  if (kop < 0) return err_set(NULL, loomInvalidArgument, "cuda_reduce: op %d is not built in", op);
  if (count == 0) return loomSuccess;
  void* params[] = {&dst, (void*)&a, (void*)&b, &count};
  return kern_launch((int)t * KOP_N + kop, count * dtype_size(t), stream, params);
}

loomResult_t cuda_div(loomDataType_t t, void* dst, const void* src, size_t count, int divisor,
                      void* stream) {
  LOOM_CHECK(type_ok(t, "cuda_div"));
  if (divisor == 0) return err_set(NULL, loomInvalidArgument, "cuda_div: divisor 0");
  if (count == 0) return loomSuccess;
  void* params[] = {&dst, (void*)&src, &count, &divisor};
  return kern_launch((int)t * KOP_N + KOP_DIV, count * dtype_size(t), stream, params);
}

loomResult_t cuda_mul_scalar(loomDataType_t t, void* dst, const void* src, size_t count,
                             const void* scalar, int on_device, void* stream) {
  LOOM_CHECK(type_ok(t, "cuda_mul_scalar"));
  if (!scalar) return err_set(NULL, loomInvalidArgument, "cuda_mul_scalar: NULL scalar");
  if (count == 0) return loomSuccess;
  const void* kp = on_device ? scalar : NULL;
  unsigned long long kv = 0;
  if (!on_device) memcpy(&kv, scalar, dtype_size(t));
  void* params[] = {&dst, (void*)&src, &count, (void*)&kp, &kv};
  return kern_launch((int)t * KOP_N + KOP_MUL, count * dtype_size(t), stream, params);
}

loomResult_t cuda_copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return loomSuccess;
  void* params[] = {&dst, (void*)&src, &bytes};
  return kern_launch(KERNEL_COPY, bytes, stream, params);
}

/* ---- Streams, memory and context: what the CUDA executor queues ---- */

enum {
  CU_ERR_NOT_READY = 600,
  CU_WAIT_GEQ = 0x0,       /* CU_STREAM_WAIT_VALUE_GEQ */
  CU_EVENT_NO_TIMING = 0x2 /* CU_EVENT_DISABLE_TIMING */
};

int cuda_stream_usable(const char** why_out) {
  pthread_mutex_lock(&kern_lock);
  drv_load();
  int ok = drv.ok && drv.stream_ok;
  const char* why = !drv.ok ? drv.why
                    : ok    ? NULL
                         : "the CUDA driver lacks stream memory operations or mapped host memory";
  pthread_mutex_unlock(&kern_lock);
  if (why_out) *why_out = why;
  return ok;
}

/* The driver, with every entry point the executor needs, or fn's error. */
static loomResult_t stream_drv(const char* fn) {
  const char* why;
  if (cuda_stream_usable(&why)) return loomSuccess;
  return err_set(NULL, loomInvalidUsage, "%s: %s", fn, why);
}

static loomResult_t cu_fail(const char* what, cu_result r) {
  return err_set(NULL, loomUnhandledCudaError, "%s failed: %s (CUDA error %d)", what, cu_text(r),
                 r);
}
#define CU_DO(what, call)                        \
  do {                                           \
    cu_result cu_r_ = (call);                    \
    if (cu_r_ != 0) return cu_fail(what, cu_r_); \
  } while (0)

#define DEV_MAX 64
static cu_context primary[DEV_MAX];

loomResult_t cuda_ctx_enter(int dev) {
  LOOM_CHECK(stream_drv("cuda_ctx_enter"));
  if (dev < 0 || dev >= DEV_MAX)
    return err_set(NULL, loomInvalidArgument, "CUDA device %d: out of range", dev);
  pthread_mutex_lock(&kern_lock);
  cu_result r = 0;
  if (!primary[dev]) r = drv.primary_retain(&primary[dev], dev);
  cu_context c = primary[dev];
  pthread_mutex_unlock(&kern_lock);
  if (r != 0) return cu_fail("retaining the device's primary context", r);
  CU_DO("making the device's context current", drv.ctx_push(c));
  return loomSuccess;
}

void cuda_ctx_leave(void) {
  cu_context c = NULL;
  if (drv.ctx_pop) drv.ctx_pop(&c);
}

loomResult_t cuda_memcpy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0 || dst == src) return loomSuccess;
  CU_DO("cuMemcpyAsync", drv.memcpy_async((uintptr_t)dst, (uintptr_t)src, bytes, stream));
  return loomSuccess;
}

loomResult_t cuda_write_value(void* stream, uint64_t* word, uint64_t value) {
  CU_DO("cuStreamWriteValue64", drv.write_value64(stream, (uintptr_t)word, value, 0));
  return loomSuccess;
}

loomResult_t cuda_wait_value(void* stream, const uint64_t* word, uint64_t value) {
  CU_DO("cuStreamWaitValue64", drv.wait_value64(stream, (uintptr_t)word, value, CU_WAIT_GEQ));
  return loomSuccess;
}

loomResult_t cuda_dev_alloc(void** out, size_t bytes) {
  LOOM_CHECK(stream_drv("cuda_dev_alloc"));
  uintptr_t p = 0;
  cu_result r = drv.mem_alloc(&p, bytes ? bytes : 1);
  if (r != 0)
    return err_set(NULL, loomSystemError, "out of device memory for %zu bytes: %s", bytes,
                   cu_text(r));
  *out = (void*)p;
  return loomSuccess;
}

void cuda_dev_free(void* p) {
  if (p && drv.mem_free) drv.mem_free((uintptr_t)p);
}

enum { CU_HOSTREG_PORTABLE_DEVICEMAP = 0x03, CU_PTR_ATTR_BUFFER_ID = 7, CU_IPC_LAZY_PEER = 1 };

loomResult_t cuda_host_register(void* host, size_t bytes, void** dev_out) {
  LOOM_CHECK(stream_drv("cuda_host_register"));
  if (!drv.host_register || !drv.host_unregister)
    return err_set(NULL, loomSystemError, "the CUDA driver has no cuMemHostRegister");
  uintptr_t d = 0;
  cu_result r = drv.host_register(host, bytes, CU_HOSTREG_PORTABLE_DEVICEMAP);
  if (r != 0) return cu_fail("cuMemHostRegister (shared memory for the device)", r);
  if ((r = drv.host_dev_ptr(&d, host, 0)) != 0) {
    drv.host_unregister(host);
    return cu_fail("cuMemHostGetDevicePointer", r);
  }
  *dev_out = (void*)d;
  return loomSuccess;
}

void cuda_host_unregister(void* host) {
  if (host && drv.host_unregister) drv.host_unregister(host);
}

static loomResult_t ipc_drv(void) {
  LOOM_CHECK(stream_drv("cuda_ipc"));
  if (!drv.mem_range || !drv.pointer_attr || !drv.ipc_get || !drv.ipc_open || !drv.ipc_close)
    return err_set(NULL, loomSystemError, "the CUDA driver lacks the IPC entry points (cuIpc*)");
  return loomSuccess;
}

loomResult_t cuda_alloc_of(const void* p, uint64_t* base_out, size_t* size_out, uint64_t* id_out) {
  LOOM_CHECK(ipc_drv());
  uintptr_t base = 0;
  size_t size = 0;
  unsigned long long id = 0;
  cu_result r = drv.mem_range(&base, &size, (uintptr_t)p);
  if (r != 0) return cu_fail("cuMemGetAddressRange", r);
  if ((r = drv.pointer_attr(&id, CU_PTR_ATTR_BUFFER_ID, (uintptr_t)p)) != 0)
    return cu_fail("cuPointerGetAttribute (buffer id)", r);
  *base_out = base;
  *size_out = size;
  *id_out = id;
  return loomSuccess;
}

loomResult_t cuda_ipc_export(uint64_t base, unsigned char handle[CUDA_IPC_BYTES]) {
  LOOM_CHECK(ipc_drv());
  cu_result r = drv.ipc_get(handle, (uintptr_t)base);
  if (r != 0)
    return err_set(NULL, loomInvalidUsage,
                   "a device buffer at %#llx cannot be shared with a rank in another process "
                   "(cuIpcGetMemHandle: %s); allocate it with cudaMalloc or loomMemAlloc",
                   (unsigned long long)base, cu_text(r));
  return loomSuccess;
}

loomResult_t cuda_ipc_open(const unsigned char handle[CUDA_IPC_BYTES], void** out) {
  LOOM_CHECK(ipc_drv());
  uintptr_t p = 0;
  cu_ipc_handle h;
  memcpy(h.bytes, handle, sizeof h.bytes);
  cu_result r = drv.ipc_open(&p, h, CU_IPC_LAZY_PEER);
  if (r != 0) return cu_fail("cuIpcOpenMemHandle (a peer process's buffer)", r);
  *out = (void*)p;
  return loomSuccess;
}

void cuda_ipc_close(void* p) {
  if (p && drv.ipc_close) drv.ipc_close((uintptr_t)p);
}

loomResult_t cuda_stream_sync(void* stream) {
  LOOM_CHECK(stream_drv("cuda_stream_sync"));
  CU_DO("cuStreamSynchronize", drv.stream_sync(stream));
  return loomSuccess;
}

loomResult_t cuda_stream_query(void* stream) {
  LOOM_CHECK(stream_drv("cuda_stream_query"));
  cu_result r = drv.stream_query(stream);
  if (r == CU_ERR_NOT_READY) return loomInProgress;
  if (r != 0) return cu_fail("cuStreamQuery", r);
  return loomSuccess;
}

int cuda_stream_capturing(void* stream) {
  int status = 0; /* CU_STREAM_CAPTURE_STATUS_NONE */
  if (!drv.stream_is_capturing || drv.stream_is_capturing(stream, &status) != 0) return 0;
  return status != 0;
}

loomResult_t cuda_event_create(void** ev) {
  LOOM_CHECK(stream_drv("cuda_event_create"));
  CU_DO("cuEventCreate", drv.event_create(ev, CU_EVENT_NO_TIMING));
  return loomSuccess;
}

void cuda_event_destroy(void* ev) {
  if (ev && drv.event_destroy) drv.event_destroy(ev);
}

loomResult_t cuda_event_record(void* ev, void* stream) {
  CU_DO("cuEventRecord", drv.event_record(ev, stream));
  return loomSuccess;
}

loomResult_t cuda_event_wait(void* stream, void* ev) {
  CU_DO("cuStreamWaitEvent", drv.stream_wait_event(stream, ev, 0));
  return loomSuccess;
}

loomResult_t cuda_event_sync(void* ev) {
  CU_DO("cuEventSynchronize", drv.event_sync(ev));
  return loomSuccess;
}
