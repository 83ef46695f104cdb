/* stub_kernels.c - the stand-in driver's modules and launches, for testing
 * src/kernels/cuda/cuda_kernels.c without a GPU: cuModuleLoadData takes
 * Loom's fatbin (its header checked), cuModuleGetFunction finds a kernel
 * only when its name is in that fatbin's bytes and follows reduce.cu's
 * naming, and cuLaunchKernel runs the kernel on the host, reading its
 * parameters as reduce.cu declares them, with the element operations the
 * device compiles (dev_elem.h). Pointers are host memory. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/dev_elem.h"
#include "stub_stream.h"

enum { CU_ERR_INVALID_VALUE = 1, CU_ERR_INVALID_IMAGE = 200, CU_ERR_NOT_FOUND = 500 };

typedef void (*bin_fn)(void* d, const void* a, const void* b, size_t n);
typedef void (*div_fn)(void* d, const void* s, size_t n, int dv);
typedef void (*mul_fn)(void* d, const void* s, size_t n, const void* k);

#define STUB_BIN(S, s, op)                                                    \
  static void s##_##op##_k(void* d, const void* a, const void* b, size_t n) { \
    for (size_t i = 0; i < n; i++) {                                          \
      S x, y, r;                                                              \
      memcpy(&x, (const char*)a + i * sizeof x, sizeof x);                    \
      memcpy(&y, (const char*)b + i * sizeof y, sizeof y);                    \
      r = dev_##s##_##op(x, y);                                               \
      memcpy((char*)d + i * sizeof r, &r, sizeof r);                          \
    }                                                                         \
  }
#define STUB_DIV(S, s)                                                \
  static void s##_div_k(void* d, const void* src, size_t n, int dv) { \
    for (size_t i = 0; i < n; i++) {                                  \
      S x;                                                            \
      memcpy(&x, (const char*)src + i * sizeof x, sizeof x);          \
      x = dev_##s##_div(x, dv);                                       \
      memcpy((char*)d + i * sizeof x, &x, sizeof x);                  \
    }                                                                 \
  }
#define STUB_MUL(S, s)                                                        \
  static void s##_mul_k(void* d, const void* src, size_t n, const void* kp) { \
    S k;                                                                      \
    memcpy(&k, kp, sizeof k);                                                 \
    for (size_t i = 0; i < n; i++) {                                          \
      S x;                                                                    \
      memcpy(&x, (const char*)src + i * sizeof x, sizeof x);                  \
      x = dev_##s##_prod(x, k);                                               \
      memcpy((char*)d + i * sizeof x, &x, sizeof x);                          \
    }                                                                         \
  }
#define STUB_ORDER(S, s) STUB_BIN(S, s, max) STUB_BIN(S, s, min) STUB_DIV(S, s)
#define STUB_WRAP(S, s) STUB_BIN(S, s, sum) STUB_BIN(S, s, prod) STUB_MUL(S, s)
STUB_ORDER(int8_t, i8)
STUB_ORDER(uint8_t, u8)
STUB_ORDER(int32_t, i32)
STUB_ORDER(uint32_t, u32)
STUB_ORDER(int64_t, i64)
STUB_ORDER(uint64_t, u64)
STUB_ORDER(uint16_t, half)
STUB_ORDER(uint16_t, bf16)
STUB_ORDER(uint8_t, fp8e4m3)
STUB_ORDER(uint8_t, fp8e5m2)
STUB_ORDER(float, f32)
STUB_ORDER(double, f64)
STUB_WRAP(uint8_t, u8)
STUB_WRAP(uint32_t, u32)
STUB_WRAP(uint64_t, u64)
STUB_WRAP(uint16_t, half)
STUB_WRAP(uint16_t, bf16)
STUB_WRAP(uint8_t, fp8e4m3)
STUB_WRAP(uint8_t, fp8e5m2)
STUB_WRAP(float, f32)
STUB_WRAP(double, f64)

/* reduce.cu's storage tags, and what each has: sum, product and multiply
 * only for the unsigned widths and the floating types. */
struct tag_fns {
  const char* tag;
  bin_fn sum, prod, max, min;
  div_fn div;
  mul_fn mul;
};
#define ORDER_ONLY(tag, s) \
  { tag, NULL, NULL, s##_max_k, s##_min_k, s##_div_k, NULL }
#define ALL_OPS(tag, s) \
  { tag, s##_sum_k, s##_prod_k, s##_max_k, s##_min_k, s##_div_k, s##_mul_k }
static const struct tag_fns tags[] = {
    ORDER_ONLY("i8", i8),     ALL_OPS("u8", u8),      ORDER_ONLY("i32", i32),
    ALL_OPS("u32", u32),      ORDER_ONLY("i64", i64), ALL_OPS("u64", u64),
    ALL_OPS("f16", half),     ALL_OPS("bf16", bf16),  ALL_OPS("e4m3", fp8e4m3),
    ALL_OPS("e5m2", fp8e5m2), ALL_OPS("f32", f32),    ALL_OPS("f64", f64),
};

enum fn_kind { FN_BIN, FN_DIV, FN_MUL, FN_COPY };
struct stub_fn {
  enum fn_kind kind;
  bin_fn bin;
  div_fn div;
  mul_fn mul;
};

static const void* module_image;
static size_t module_bytes;
static int launches, last_grid, last_block;

/* NVIDIA's fatbin header: magic 0xba55ed50, a version, the header's size,
 * then the size of what follows. */
STUB_API int cuModuleLoadData(void** mod, const void* image) {
  uint32_t magic;
  uint16_t header;
  uint64_t fat;
  memcpy(&magic, image, 4);
  memcpy(&header, (const char*)image + 6, 2);
  memcpy(&fat, (const char*)image + 8, 8);
  if (magic != 0xba55ed50u || header < 16) return CU_ERR_INVALID_IMAGE;
  module_image = image;
  module_bytes = header + fat;
  *mod = (void*)image;
  return 0;
}

static const struct tag_fns* tag_find(const char* t) {
  for (size_t i = 0; i < sizeof tags / sizeof *tags; i++)
    if (!strcmp(tags[i].tag, t)) return &tags[i];
  return NULL;
}

/* The stub's meaning of a kernel name, NULL when reduce.cu has no such
 * kernel. */
static struct stub_fn* fn_parse(const char* name) {
  struct stub_fn f = {FN_COPY, NULL, NULL, NULL};
  char buf[64];
  if (strlen(name) >= sizeof buf) return NULL;
  strcpy(buf, name);
  const struct tag_fns* t;
  if (!strcmp(buf, "loom_copy")) {
    f.kind = FN_COPY;
  } else if (!strncmp(buf, "loom_div_", 9) && (t = tag_find(buf + 9))) {
    f.kind = FN_DIV, f.div = t->div;
  } else if (!strncmp(buf, "loom_mul_", 9) && (t = tag_find(buf + 9)) && t->mul) {
    f.kind = FN_MUL, f.mul = t->mul;
  } else if (!strncmp(buf, "loom_reduce_", 12)) {
    char* op = strrchr(buf, '_');
    if (!op || op < buf + 12) return NULL;
    *op++ = '\0';
    if (!(t = tag_find(buf + 12))) return NULL;
    f.kind = FN_BIN;
    f.bin = !strcmp(op, "sum")    ? t->sum
            : !strcmp(op, "prod") ? t->prod
            : !strcmp(op, "max")  ? t->max
            : !strcmp(op, "min")  ? t->min
                                  : NULL;
    if (!f.bin) return NULL;
  } else {
    return NULL;
  }
  struct stub_fn* out = malloc(sizeof *out);
  if (out) *out = f;
  return out;
}

/* Found only when the name is in the loaded fatbin (as a whole word: the
 * byte after it is not part of a longer name) and means a kernel. */
STUB_API int cuModuleGetFunction(void** fn, void* mod, const char* name) {
  if (mod != module_image || !module_image) return CU_ERR_INVALID_VALUE;
  size_t len = strlen(name);
  const char *p = module_image, *end = p + module_bytes;
  int found = 0;
  while (!found && (p = memmem(p, (size_t)(end - p), name, len)) != NULL) {
    char next = p + len < end ? p[len] : '\0';
    found = !(next == '_' || (next >= 'a' && next <= 'z') || (next >= '0' && next <= '9'));
    p++;
  }
  if (!found) return CU_ERR_NOT_FOUND;
  struct stub_fn* f = fn_parse(name);
  if (!f) return CU_ERR_NOT_FOUND;
  *fn = f;
  return 0;
}

/* A launch, with reduce.cu's parameters read at launch time:
 *  reduce (void* d, const void* a, const void* b, size_t n)
 *  div    (void* d, const void* s, size_t n, int divisor)
 *  mul    (void* d, const void* s, size_t n, const void* kp, unsigned long long kv)
 *  copy   (void* d, const void* s, size_t bytes) */
struct launch {
  const struct stub_fn* f;
  void* d;
  const void *s, *b, *kp;
  size_t n;
  int divisor;
  unsigned long long kv;
};

static int launch_run(void* arg) {
  const struct launch* l = arg;
  switch (l->f->kind) {
    case FN_BIN:
      l->f->bin(l->d, l->s, l->b, l->n);
      break;
    case FN_DIV:
      l->f->div(l->d, l->s, l->n, l->divisor);
      break;
    case FN_MUL:
      l->f->mul(l->d, l->s, l->n, l->kp ? l->kp : &l->kv);
      break;
    case FN_COPY:
      memmove(l->d, l->s, l->n);
      break;
  }
  return 0;
}

/* Queues the kernel on its stream (stub_stream.c), run on the host. */
STUB_API int cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shmem, void* stream, void** params,
                            void** extra) {
  const struct stub_fn* f = fn;
  if (!f || !params || extra || gx == 0 || gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 ||
      bx > 1024 || shmem)
    return CU_ERR_INVALID_VALUE;
  struct launch l = {f, *(void**)params[0], *(const void**)params[1], NULL, NULL, 0, 0, 0};
  switch (f->kind) {
    case FN_BIN:
      l.b = *(const void**)params[2];
      l.n = *(size_t*)params[3];
      break;
    case FN_DIV:
      l.n = *(size_t*)params[2];
      l.divisor = *(int*)params[3];
      break;
    case FN_MUL:
      l.n = *(size_t*)params[2];
      l.kp = *(const void**)params[3];
      l.kv = *(unsigned long long*)params[4];
      break;
    case FN_COPY:
      l.n = *(size_t*)params[2];
      break;
  }
  int r = stub_submit(stream, launch_run, &l, sizeof l);
  if (r) return r;
  __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&last_grid, (int)gx, __ATOMIC_RELAXED);
  __atomic_store_n(&last_block, (int)bx, __ATOMIC_RELAXED);
  return 0;
}

STUB_API int cuDeviceGetAttribute(int* v, int attr, int dev) {
  (void)dev;
  *v = attr == 16 ? 4 : 0; /* 4 multiprocessors */
  return 0;
}

STUB_API int cuGetErrorString(int r, const char** s) {
  *s = r == CU_ERR_NOT_FOUND ? "stub: named symbol not found" : "stub: error";
  return 0;
}

/* For the test: launches so far, and the last launch's grid and block. */
STUB_API int stub_launches(int* grid_out, int* block_out) {
  *grid_out = __atomic_load_n(&last_grid, __ATOMIC_RELAXED);
  *block_out = __atomic_load_n(&last_block, __ATOMIC_RELAXED);
  return __atomic_load_n(&launches, __ATOMIC_RELAXED);
}
