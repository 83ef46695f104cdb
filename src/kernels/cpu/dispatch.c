/* dispatch.c - picks the kernel ISA once (CPU features, LOOM_CPU_KERNEL) and
 * routes cpu_reduce, cpu_div and cpu_mul_scalar to that ISA's table.
 *
 * Arguments are not validated beyond staying safe: the callers check the
 * dtype and op first, so an unknown one here is a caller bug and does
 * nothing. */
#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "core/debug.h"
#include "core/params.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/reduce_impl.h"

static const struct cpu_kernel_table* const isa_tables[CPU_ISA_COUNT] = {
    [CPU_ISA_SCALAR] = &cpu_kernels_scalar,
    [CPU_ISA_AVX2] = &cpu_kernels_avx2,
    [CPU_ISA_AVX512] = &cpu_kernels_avx512,
};

static const char* const isa_names[CPU_ISA_COUNT] = {
    [CPU_ISA_SCALAR] = "scalar",
    [CPU_ISA_AVX2] = "avx2",
    [CPU_ISA_AVX512] = "avx512",
};

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static enum cpu_isa isa_chosen = CPU_ISA_SCALAR;

int cpu_isa_supported(enum cpu_isa isa) {
  /* Each vector file is compiled with -mfma too, so FMA is required even
   * though -ffp-contract=off keeps it out of the arithmetic. */
  __builtin_cpu_init();
#if defined(__clang__)
  int f16c = 1; /* clang's builtin (the fuzz build) does not know f16c; every AVX2 CPU has it */
#else
  int f16c = __builtin_cpu_supports("f16c");
#endif
  int avx2 = __builtin_cpu_supports("avx2") && f16c && __builtin_cpu_supports("fma");
  switch (isa) {
    case CPU_ISA_SCALAR:
      return 1;
    case CPU_ISA_AVX2:
      return avx2;
    case CPU_ISA_AVX512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    default:
      return 0;
  }
}

const char* cpu_isa_name(enum cpu_isa isa) {
  return (unsigned)isa < CPU_ISA_COUNT ? isa_names[isa] : "unknown";
}

static enum cpu_isa isa_best(void) {
  if (cpu_isa_supported(CPU_ISA_AVX512)) return CPU_ISA_AVX512;
  if (cpu_isa_supported(CPU_ISA_AVX2)) return CPU_ISA_AVX2;
  return CPU_ISA_SCALAR;
}

/* pthread_once body: LOOM_CPU_KERNEL may narrow the choice, never widen it
 * past what the CPU runs. */
static void isa_choose(void) {
  const char* want = params_get()->cpu_kernel;
  enum cpu_isa best = isa_best();
  isa_chosen = best;
  /* params.c accepted the value (any case) or kept the default. */
  if (want == NULL || want[0] == '\0' || strcasecmp(want, "auto") == 0) return;
  for (int i = 0; i < CPU_ISA_COUNT; i++) {
    if (strcasecmp(want, isa_names[i]) != 0) continue;
    if (cpu_isa_supported((enum cpu_isa)i)) {
      isa_chosen = (enum cpu_isa)i;
    } else {
      LOOM_INFO(SUB_ALL, "LOOM_CPU_KERNEL=%s: this cpu cannot run it, using %s kernels", want,
                isa_names[best]);
    }
    return;
  }
}

enum cpu_isa cpu_isa_active(void) {
  pthread_once(&isa_once, isa_choose);
  return isa_chosen;
}

/* The table for `isa`, or NULL where the CPU cannot run it. */
static const struct cpu_kernel_table* isa_table(enum cpu_isa isa) {
  if ((unsigned)isa >= CPU_ISA_COUNT || !cpu_isa_supported(isa)) return NULL;
  return isa_tables[isa];
}

static int op_index(loomRedOp_t op) {
  switch (op) {
    case loomSum:
    case loomAvg: /* the division by nranks is cpu_div's job */
      return CPU_OP_SUM;
    case loomProd:
      return CPU_OP_PROD;
    case loomMax:
      return CPU_OP_MAX;
    case loomMin:
      return CPU_OP_MIN;
    default:
      return -1;
  }
}

static int type_valid(loomDataType_t t) {
  return (unsigned)t < loomNumTypes;
}

static void reduce_with(const struct cpu_kernel_table* k, loomDataType_t t, loomRedOp_t op,
                        void* dst, const void* a, const void* b, size_t count) {
  int o = op_index(op);
  if (k == NULL || o < 0 || !type_valid(t) || count == 0) return;
  k->reduce[t][o](dst, a, b, count);
}

static void div_with(const struct cpu_kernel_table* k, loomDataType_t t, void* dst, const void* src,
                     size_t count, int divisor) {
  if (k == NULL || !type_valid(t) || count == 0) return;
  /* Integer division by zero would trap; floats give inf/NaN as IEEE says. */
  if (divisor == 0 && t <= loomUint64) return;
  k->div[t](dst, src, count, divisor);
}

static void mul_with(const struct cpu_kernel_table* k, loomDataType_t t, void* dst, const void* src,
                     size_t count, const void* scalar) {
  if (k == NULL || !type_valid(t) || count == 0) return;
  k->mul_scalar[t](dst, src, count, scalar);
}

void cpu_reduce(loomDataType_t t, loomRedOp_t op, void* dst, const void* a, const void* b,
                size_t count) {
  reduce_with(isa_tables[cpu_isa_active()], t, op, dst, a, b, count);
}

void cpu_div(loomDataType_t t, void* dst, const void* src, size_t count, int divisor) {
  div_with(isa_tables[cpu_isa_active()], t, dst, src, count, divisor);
}

void cpu_mul_scalar(loomDataType_t t, void* dst, const void* src, size_t count,
                    const void* scalar) {
  mul_with(isa_tables[cpu_isa_active()], t, dst, src, count, scalar);
}

void cpu_reduce_isa(enum cpu_isa isa, loomDataType_t t, loomRedOp_t op, void* dst, const void* a,
                    const void* b, size_t count) {
  reduce_with(isa_table(isa), t, op, dst, a, b, count);
}

void cpu_div_isa(enum cpu_isa isa, loomDataType_t t, void* dst, const void* src, size_t count,
                 int divisor) {
  div_with(isa_table(isa), t, dst, src, count, divisor);
}

void cpu_mul_scalar_isa(enum cpu_isa isa, loomDataType_t t, void* dst, const void* src,
                        size_t count, const void* scalar) {
  mul_with(isa_table(isa), t, dst, src, count, scalar);
}
