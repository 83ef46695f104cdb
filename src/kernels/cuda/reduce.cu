/* reduce.cu - Loom's device kernels: element-wise reduction, PreMulSum's
 * multiply, loomAvg's division and a copy, for every datatype, built into
 * one fatbin (sm_80 and sm_90 machine code, compute_90 PTX for later GPUs)
 * that libloom carries and loads through the driver (cuda_kernels.c).
 *
 * Every kernel is extern "C" so that the driver finds it by name, and
 * computes element by element with dev_elem.h, the functions the unit tests
 * compare with the host kernels bit for bit. Instances, 64 in all: sum and
 * product per storage width for integers (both signs share the unsigned
 * one, as on the host) and per floating type, max and min per type,
 * division per type, multiply by a scalar per sum width, one copy.
 *
 * Memory access: grid-stride loops over 16-byte vectors (uint4) when the
 * buffers share their address modulo 16, with scalar heads and tails; one
 * element a thread when they do not; bytes assembled one at a time when an
 * address is not even a multiple of the element size (a host program can
 * pass such a pointer; a typed load there would fault). Buffers may alias
 * exactly (dst == a or dst == b), never partially: each element is read
 * before its own store and by the same thread. */
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/dev_elem.h"

namespace {

template <typename S>
__device__ __forceinline__ S ld_any(const void* p, size_t i) {
  S v;
  memcpy(&v, (const char*)p + i * sizeof(S), sizeof(S));
  return v;
}
template <typename S>
__device__ __forceinline__ void st_any(void* p, size_t i, S v) {
  memcpy((char*)p + i * sizeof(S), &v, sizeof(S));
}

template <typename S>
union Vec {
  uint4 u;
  S s[16 / sizeof(S)];
};

/* dst[i] = op(a[i], b[i]); for a unary kernel b == a and op ignores it. */
template <typename S, typename Op>
__device__ __forceinline__ void binop(void* dst, const void* a, const void* b, size_t n, Op op) {
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t nth = (size_t)gridDim.x * blockDim.x;
  const uintptr_t pd = (uintptr_t)dst, pa = (uintptr_t)a, pb = (uintptr_t)b;
  if ((pd | pa | pb) % sizeof(S) != 0) {
    for (size_t i = tid; i < n; i += nth) st_any<S>(dst, i, op(ld_any<S>(a, i), ld_any<S>(b, i)));
    return;
  }
  S* d = (S*)dst;
  const S* x = (const S*)a;
  const S* y = (const S*)b;
  size_t done = 0;
  if (((pd ^ pa) | (pd ^ pb)) % 16 == 0) {
    constexpr size_t K = 16 / sizeof(S);
    size_t head = (16 - pd % 16) % 16 / sizeof(S);
    head = head < n ? head : n;
    for (size_t i = tid; i < head; i += nth) d[i] = op(x[i], y[i]);
    const size_t nv = (n - head) / K;
    uint4* vd = (uint4*)(d + head);
    const uint4* vx = (const uint4*)(x + head);
    const uint4* vy = (const uint4*)(y + head);
    for (size_t v = tid; v < nv; v += nth) {
      Vec<S> p, q;
      p.u = vx[v];
      q.u = vy[v];
#pragma unroll
      for (size_t k = 0; k < K; k++) p.s[k] = op(p.s[k], q.s[k]);
      vd[v] = p.u;
    }
    done = head + nv * K;
  }
  for (size_t i = done + tid; i < n; i += nth) d[i] = op(x[i], y[i]);
}

}  // namespace

#define LOOM_REDUCE(name, S, fn)                                                                   \
  extern "C" __global__ void loom_reduce_##name(void* d, const void* a, const void* b, size_t n) { \
    binop<S>(d, a, b, n, [](S x, S y) { return fn(x, y); });                                       \
  }
#define LOOM_DIV(name, S, fn)                                                            \
  extern "C" __global__ void loom_div_##name(void* d, const void* s, size_t n, int dv) { \
    binop<S>(d, s, s, n, [dv](S x, S) { return fn(x, dv); });                            \
  }
/* The scalar is read from device memory (loomScalarDevice: kp, by this
 * kernel, so after the work before it on the stream) or passed by value
 * (kv, its bytes in the low end). */
#define LOOM_MUL(name, S, fn)                                                                  \
  extern "C" __global__ void loom_mul_##name(void* d, const void* s, size_t n, const void* kp, \
                                             unsigned long long kv) {                          \
    S k;                                                                                       \
    memcpy(&k, kp ? kp : (const void*)&kv, sizeof k);                                          \
    binop<S>(d, s, s, n, [k](S x, S) { return fn(x, k); });                                    \
  }

/* Sums and products: integer widths (both signs), then floating types. */
#define LOOM_SUM_PROD(name, S, s)           \
  LOOM_REDUCE(name##_sum, S, dev_##s##_sum) \
  LOOM_REDUCE(name##_prod, S, dev_##s##_prod) LOOM_MUL(name, S, dev_##s##_prod)
LOOM_SUM_PROD(u8, uint8_t, u8)
LOOM_SUM_PROD(u32, uint32_t, u32)
LOOM_SUM_PROD(u64, uint64_t, u64)
LOOM_SUM_PROD(f16, uint16_t, half)
LOOM_SUM_PROD(bf16, uint16_t, bf16)
LOOM_SUM_PROD(e4m3, uint8_t, fp8e4m3)
LOOM_SUM_PROD(e5m2, uint8_t, fp8e5m2)
LOOM_SUM_PROD(f32, float, f32)
LOOM_SUM_PROD(f64, double, f64)

/* Max, min and division: every type. */
#define LOOM_ORDER_DIV(name, S, s)          \
  LOOM_REDUCE(name##_max, S, dev_##s##_max) \
  LOOM_REDUCE(name##_min, S, dev_##s##_min) LOOM_DIV(name, S, dev_##s##_div)
LOOM_ORDER_DIV(i8, int8_t, i8)
LOOM_ORDER_DIV(u8, uint8_t, u8)
LOOM_ORDER_DIV(i32, int32_t, i32)
LOOM_ORDER_DIV(u32, uint32_t, u32)
LOOM_ORDER_DIV(i64, int64_t, i64)
LOOM_ORDER_DIV(u64, uint64_t, u64)
LOOM_ORDER_DIV(f16, uint16_t, half)
LOOM_ORDER_DIV(bf16, uint16_t, bf16)
LOOM_ORDER_DIV(e4m3, uint8_t, fp8e4m3)
LOOM_ORDER_DIV(e5m2, uint8_t, fp8e5m2)
LOOM_ORDER_DIV(f32, float, f32)
LOOM_ORDER_DIV(f64, double, f64)

/* dst = src, bytes: 16-byte vectors where the two share their address
 * modulo 16, bytes elsewhere. */
extern "C" __global__ void loom_copy(void* d, const void* s, size_t n) {
  binop<uint8_t>(d, s, s, n, [](uint8_t x, uint8_t) { return x; });
}
