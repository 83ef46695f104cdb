/* gpu_kernels.c - Loom's device kernels (src/kernels/cuda) on a real GPU:
 * every datatype and op, counts 0, 1, 7, 1000 and 2^20 + 3, aligned,
 * misaligned by an element and by a byte, out of place and in place, with
 * PreMulSum's scalar on the host and on the device; each result must have
 * the bits the host kernels give for the same inputs. Then the bandwidth of
 * the reduction against the device-to-device copy measured in the same run.
 *
 * Without a driver or a device it prints why and exits 77 (ctest: SKIPPED).
 * Usage: gpu_kernels [--bench-only|--no-bench] [--quick] [--bench-mib N]
 * (--quick: counts up to 1000, for the compute-sanitizer passes). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"

typedef int cu_result;
typedef unsigned long long cu_ptr;
static struct {
  cu_result (*init)(unsigned);
  cu_result (*device_get)(int*, int);
  cu_result (*device_get_name)(char*, int, int);
  cu_result (*primary_retain)(void**, int);
  cu_result (*ctx_set_current)(void*);
  cu_result (*mem_alloc)(cu_ptr*, size_t);
  cu_result (*mem_free)(cu_ptr);
  cu_result (*htod)(cu_ptr, const void*, size_t);
  cu_result (*dtoh)(void*, cu_ptr, size_t);
  cu_result (*memset8)(cu_ptr, unsigned char, size_t);
  cu_result (*ctx_sync)(void);
  cu_result (*dtod_async)(cu_ptr, cu_ptr, size_t, void*);
  cu_result (*event_create)(void**, unsigned);
  cu_result (*event_record)(void*, void*);
  cu_result (*event_sync)(void*);
  cu_result (*event_elapsed)(float*, void*, void*);
} cu;

static int fails, passes;

static int cu_load(const char** why) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return *why = "no CUDA driver (libcuda.so.1)", 0;
#define S(f, n) *(void**)&cu.f = dlsym(h, n)
  S(init, "cuInit");
  S(device_get, "cuDeviceGet");
  S(device_get_name, "cuDeviceGetName");
  S(primary_retain, "cuDevicePrimaryCtxRetain");
  S(ctx_set_current, "cuCtxSetCurrent");
  S(mem_alloc, "cuMemAlloc_v2");
  S(mem_free, "cuMemFree_v2");
  S(htod, "cuMemcpyHtoD_v2");
  S(dtoh, "cuMemcpyDtoH_v2");
  S(memset8, "cuMemsetD8_v2");
  S(ctx_sync, "cuCtxSynchronize");
  S(dtod_async, "cuMemcpyDtoDAsync_v2");
  S(event_create, "cuEventCreate");
  S(event_record, "cuEventRecord");
  S(event_sync, "cuEventSynchronize");
  S(event_elapsed, "cuEventElapsedTime");
#undef S
  int dev;
  void* ctx;
  if (cu.init(0) != 0) return *why = "cuInit failed: no usable GPU", 0;
  if (cu.device_get(&dev, 0) != 0) return *why = "no CUDA device 0", 0;
  if (cu.primary_retain(&ctx, dev) != 0 || cu.ctx_set_current(ctx) != 0)
    return *why = "cannot make device 0's primary context current", 0;
  char name[128] = "";
  cu.device_get_name(name, sizeof name, dev);
  printf("device 0: %s\n", name);
  return 1;
}

#define CU_OK(call)                                                             \
  do {                                                                          \
    cu_result r_ = (call);                                                      \
    if (r_ != 0) {                                                              \
      fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, r_); \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return rng_state;
}

/* Random bits, with a sprinkling of the values where processors differ:
 * NaNs (quiet, signalling, with payloads), infinities, zeros, subnormals. */
static void fill(unsigned char* p, size_t n, loomDataType_t t) {
  size_t es = dtype_size(t);
  for (size_t i = 0; i < n; i++) {
    uint64_t v = rnd();
    unsigned pick = (unsigned)(rnd() % 16);
    if (pick == 0) v = ~0ull;                /* all ones: a NaN, or -1 */
    if (pick == 1) v = 0;                    /* +0 */
    if (pick == 2) v = 1;                    /* the smallest subnormal, or 1 */
    if (pick == 3) v = 1ull << (es * 8 - 1); /* -0, or the most negative integer */
    memcpy(p + i * es, &v, es);
  }
}

static const loomRedOp_t ops[] = {loomSum, loomProd, loomMax, loomMin};

/* One case: count elements at byte offset off of each buffer. mode 0:
 * reduce op, 1: div, 2: mul by a host scalar, 3: mul by a device scalar,
 * 4: copy. in_place: dst is a. */
static void one_case(loomDataType_t t, int mode, loomRedOp_t op, int divisor, size_t count,
                     size_t off, int in_place, cu_ptr da, cu_ptr db, cu_ptr dd, cu_ptr dk) {
  size_t es = dtype_size(t), bytes = count * es;
  unsigned char *a = malloc(bytes + 1), *b = malloc(bytes + 1), *want = malloc(bytes + 1),
                *got = malloc(bytes + 1), k[8];
  fill(a, count, t), fill(b, count, t), fill(k, 1, t);
  CU_OK(cu.htod(da + off, a, bytes ? bytes : 1));
  CU_OK(cu.htod(db + off, b, bytes ? bytes : 1));
  CU_OK(cu.htod(dk, k, es));
  CU_OK(cu.memset8(dd, 0xa5, bytes + off + 64));
  void* dst = (void*)(uintptr_t)(in_place ? da + off : dd + off);
  void* pa = (void*)(uintptr_t)(da + off);
  void* pb = (void*)(uintptr_t)(db + off);
  loomResult_t r;
  const char* what;
  if (mode == 0) {
    cpu_reduce(t, op, want, a, b, count);
    r = cuda_reduce(t, op, dst, pa, pb, count, NULL);
    what = redop_name(op);
  } else if (mode == 1) {
    cpu_div(t, want, a, count, divisor);
    r = cuda_div(t, dst, pa, count, divisor, NULL);
    what = "div";
  } else if (mode == 4) {
    memcpy(want, a, bytes);
    r = cuda_copy(dst, pa, bytes, NULL);
    what = "copy";
  } else {
    cpu_mul_scalar(t, want, a, count, k);
    r = cuda_mul_scalar(t, dst, pa, count, mode == 3 ? (void*)(uintptr_t)dk : (void*)k, mode == 3,
                        NULL);
    what = mode == 3 ? "mul (device scalar)" : "mul (host scalar)";
  }
  CU_OK(cu.ctx_sync());
  int ok = r == loomSuccess;
  if (ok && bytes) {
    CU_OK(cu.dtoh(got, (cu_ptr)(uintptr_t)dst, bytes));
    for (size_t i = 0; i < count && ok; i++)
      if (memcmp(got + i * es, want + i * es, es) != 0) {
        uint64_t g = 0, w = 0, x = 0, y = 0;
        memcpy(&g, got + i * es, es), memcpy(&w, want + i * es, es);
        memcpy(&x, a + i * es, es), memcpy(&y, b + i * es, es);
        printf(
            "FAIL %s %s n=%zu off=%zu%s: element %zu of 0x%llx, 0x%llx: device 0x%llx, host "
            "0x%llx\n",
            dtype_name(t), what, count, off, in_place ? " in place" : "", i, (unsigned long long)x,
            (unsigned long long)y, (unsigned long long)g, (unsigned long long)w);
        ok = 0;
      }
  }
  if (ok && !in_place) { /* nothing written past the end */
    unsigned char tail[64];
    CU_OK(cu.dtoh(tail, dd + off + bytes, sizeof tail));
    for (size_t i = 0; i < sizeof tail; i++)
      if (tail[i] != 0xa5) {
        printf("FAIL %s %s n=%zu off=%zu: byte %zu past the end written\n", dtype_name(t), what,
               count, off, i);
        ok = 0;
        break;
      }
  }
  if (r != loomSuccess) printf("FAIL %s %s n=%zu: returned %d\n", dtype_name(t), what, count, r);
  ok ? passes++ : fails++;
  free(a), free(b), free(want), free(got);
}

static void check_all(int quick) {
  const size_t counts[] = {0, 1, 7, 1000, (1u << 20) + 3};
  const size_t ncounts = quick ? 4 : 5;
  size_t maxb = ((1u << 20) + 3) * 8 + 128;
  cu_ptr da, db, dd, dk;
  CU_OK(cu.mem_alloc(&da, maxb));
  CU_OK(cu.mem_alloc(&db, maxb));
  CU_OK(cu.mem_alloc(&dd, maxb + 64));
  CU_OK(cu.mem_alloc(&dk, 64));
  for (int t = 0; t < loomNumTypes; t++) {
    size_t es = dtype_size((loomDataType_t)t);
    size_t offs[] = {0, es, 1}; /* aligned, an element off, a byte off */
    for (size_t ci = 0; ci < ncounts; ci++)
      for (size_t oi = 0; oi < 3; oi++) {
        if (oi == 2 && es == 1) continue;
        size_t n = counts[ci], off = offs[oi];
        for (int op = 0; op < 4; op++)
          for (int ip = 0; ip < 2; ip++) one_case(t, 0, ops[op], 0, n, off, ip, da, db, dd, dk);
        const int divisors[] = {1, 3, 8, -1};
        int signed_or_float = t != loomUint8 && t != loomUint32 && t != loomUint64;
        for (int di = 0; di < 3 + signed_or_float; di++)
          one_case(t, 1, loomSum, divisors[di], n, off, 0, da, db, dd, dk);
        one_case(t, 1, loomSum, 3, n, off, 1, da, db, dd, dk);
        one_case(t, 2, loomSum, 0, n, off, 0, da, db, dd, dk);
        one_case(t, 3, loomSum, 0, n, off, 1, da, db, dd, dk);
        if (t == loomUint8) one_case(t, 4, loomSum, 0, n, off, 0, da, db, dd, dk);
      }
  }
  CU_OK(cu.mem_free(da));
  CU_OK(cu.mem_free(db));
  CU_OK(cu.mem_free(dd));
  CU_OK(cu.mem_free(dk));
}

/* GB/s of bytes moved (read + written) by fn over iters runs. */
static double time_it(int which, loomDataType_t t, cu_ptr a, cu_ptr b, cu_ptr d, size_t bytes,
                      int iters) {
  void *e0, *e1;
  CU_OK(cu.event_create(&e0, 0));
  CU_OK(cu.event_create(&e1, 0));
  size_t n = bytes / dtype_size(t);
  for (int w = 0; w < iters + 3; w++) {
    if (w == 3) CU_OK(cu.event_record(e0, NULL));
    if (which == 0) CU_OK(cu.dtod_async(d, a, bytes, NULL));
    if (which == 1 && cuda_copy((void*)d, (void*)a, bytes, NULL) != loomSuccess) exit(1);
    if (which == 2 && cuda_reduce(t, loomSum, (void*)d, (void*)a, (void*)b, n, NULL) != loomSuccess)
      exit(1);
  }
  CU_OK(cu.event_record(e1, NULL));
  CU_OK(cu.event_sync(e1));
  float ms = 0;
  CU_OK(cu.event_elapsed(&ms, e0, e1));
  double moved = (double)bytes * (which == 2 ? 3 : 2) * iters;
  return moved / (ms * 1e-3) / 1e9;
}

static void bench(size_t mib) {
  size_t bytes = mib << 20;
  cu_ptr a, b, d;
  CU_OK(cu.mem_alloc(&a, bytes));
  CU_OK(cu.mem_alloc(&b, bytes));
  CU_OK(cu.mem_alloc(&d, bytes));
  CU_OK(cu.memset8(a, 0x3c, bytes));
  CU_OK(cu.memset8(b, 0x3c, bytes));
  double copy = time_it(0, loomFloat32, a, b, d, bytes, 20);
  double kcopy = time_it(1, loomUint8, a, b, d, bytes, 20);
  printf("bandwidth, %zu MiB a buffer, GB/s of bytes read + written:\n", mib);
  printf("  cuMemcpyDtoDAsync        %8.1f\n", copy);
  printf("  loom_copy kernel         %8.1f  (%.0f%% of the copy)\n", kcopy, 100 * kcopy / copy);
  const loomDataType_t ts[] = {loomFloat32,    loomBfloat16, loomFloat16,
                               loomFloat8e4m3, loomFloat64,  loomInt32};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
    double red = time_it(2, ts[i], a, b, d, bytes, 20);
    printf("  reduce %-10s sum     %8.1f  (%.0f%% of the copy; goal 90%%)\n", dtype_name(ts[i]),
           red, 100 * red / copy);
  }
  CU_OK(cu.mem_free(a));
  CU_OK(cu.mem_free(b));
  CU_OK(cu.mem_free(d));
}

int main(int argc, char** argv) {
  int check = 1, run_bench = 1, quick = 0;
  size_t mib = 256;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--bench-only"))
      check = 0;
    else if (!strcmp(argv[i], "--no-bench"))
      run_bench = 0;
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--bench-mib") && i + 1 < argc)
      mib = strtoul(argv[++i], NULL, 10);
  }
  const char* why = NULL;
  if (!cuda_kernels_usable(&why) || !cu_load(&why)) {
    printf("SKIPPED: %s\n", why);
    return 77;
  }
  if (check) {
    check_all(quick);
    printf("%d passed, %d failed\n", passes, fails);
  }
  if (run_bench) bench(mib);
  return fails ? 1 : 0;
}
