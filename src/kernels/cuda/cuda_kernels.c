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
typedef void* cu_context;
typedef void* cu_module;
typedef void* cu_function;
enum { CU_DEV_ATTR_SM_COUNT = 16 }; /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */

static struct {
  int tried, ok;
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
#undef DRV_SYM
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
