/* kernels.c - src/kernels/cuda/cuda_kernels.c against the stand-in driver
 * (stub_kernels.c), on machines with no GPU: the fatbin libloom carries
 * loads, every kernel the launcher asks for is in it under the name it
 * asks by, each launch passes the parameters reduce.cu declares, and the
 * kernel it picks for a datatype and op computes what the host kernels do
 * (the stub runs it on the host with the device's element operations). So
 * a wrong name, a swapped parameter or a kernel picked for the wrong type or
 * op shows here, before a GPU ever runs it.
 *   usage: kernels PATH_OF_THE_STUB_LIBCUDA_SO_1 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"

static int fails, checks;
static int (*launches)(int*, int*);

static void expect_same(const void* got, const void* want, size_t bytes, const char* what,
                        loomDataType_t t, size_t n) {
  checks++;
  if (memcmp(got, want, bytes) == 0) return;
  fails++;
  printf("FAIL %s %s n=%zu: the device kernel's result differs from the host's\n", dtype_name(t),
         what, n);
}

static void fill(unsigned char* p, size_t bytes, unsigned seed) {
  uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (size_t i = 0; i < bytes; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p[i] = (unsigned char)(x >> 32);
  }
}

static void one_type(loomDataType_t t) {
  const loomRedOp_t ops[] = {loomSum, loomProd, loomMax, loomMin, loomAvg};
  const size_t counts[] = {1, 7, 1000};
  size_t es = dtype_size(t);
  for (size_t ci = 0; ci < 3; ci++) {
    size_t n = counts[ci], bytes = n * es;
    unsigned char *a = malloc(bytes), *b = malloc(bytes), *got = malloc(bytes),
                  *want = malloc(bytes);
    fill(a, bytes, 1), fill(b, bytes, 2);
    for (int o = 0; o < 5; o++) {
      int before, grid, block;
      before = launches(&grid, &block);
      if (cuda_reduce(t, ops[o], got, a, b, n, NULL) != loomSuccess) {
        printf("FAIL %s %s: %s\n", dtype_name(t), redop_name(ops[o]), "cuda_reduce refused");
        fails++;
        continue;
      }
      cpu_reduce(t, ops[o], want, a, b, n);
      expect_same(got, want, bytes, redop_name(ops[o]), t, n);
      if (launches(&grid, &block) != before + 1 || block != 256 || grid < 1 || grid > 4 * 8) {
        printf("FAIL %s %s: one launch of 256-thread blocks, at most 8 a multiprocessor\n",
               dtype_name(t), redop_name(ops[o]));
        fails++;
      }
    }
    int divisors[] = {1, 3, -1};
    for (int di = 0; di < 3; di++) {
      if (divisors[di] < 0 && (t == loomUint8 || t == loomUint32 || t == loomUint64)) continue;
      if (cuda_div(t, got, a, n, divisors[di], NULL) != loomSuccess) fails++;
      cpu_div(t, want, a, n, divisors[di]);
      expect_same(got, want, bytes, "div", t, n);
    }
    for (int on_device = 0; on_device < 2; on_device++) {
      /* The stub's "device" is the host: both forms read b[0]. */
      if (cuda_mul_scalar(t, got, a, n, b, on_device, NULL) != loomSuccess) fails++;
      cpu_mul_scalar(t, want, a, n, b);
      expect_same(got, want, bytes, on_device ? "mul (device scalar)" : "mul (host scalar)", t, n);
    }
    free(a), free(b), free(got), free(want);
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s STUB_LIBCUDA\n", argv[0]);
    return 2;
  }
  if (!cuda_kernels_built()) {
    printf("SKIPPED: this build has no device kernels (nvcc was not found at configure time)\n");
    return 77;
  }
  /* Global, so that the launcher's dlopen("libcuda.so.1") finds it loaded. */
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 1;
  }
  *(void**)&launches = dlsym(h, "stub_launches");
  const char* why = NULL;
  if (!launches || !cuda_kernels_usable(&why)) {
    fprintf(stderr, "the stand-in driver is not usable: %s\n", why ? why : "no stub_launches");
    return 1;
  }
  for (int t = 0; t < loomNumTypes; t++) one_type((loomDataType_t)t);
  unsigned char src[301], dst[301];
  fill(src, sizeof src, 3);
  if (cuda_copy(dst, src, sizeof src, NULL) != loomSuccess) fails++;
  expect_same(dst, src, sizeof src, "copy", loomUint8, sizeof src);
  /* A count of zero launches nothing. */
  int grid, block, before = launches(&grid, &block);
  if (cuda_reduce(loomFloat32, loomSum, dst, src, src, 0, NULL) != loomSuccess ||
      launches(&grid, &block) != before) {
    printf("FAIL a count of 0 launched a kernel\n");
    fails++;
  }
  printf("%d passed, %d failed\n", checks > fails ? checks - fails : 0, fails);
  return fails ? 1 : 0;
}
