/* data.c - check values: small integers derived from the rank, the element and a seed, chosen
 * per datatype, op and rank count so that every partial result a library can form, in any
 * order, is exact in the datatype. A wrong element is then really wrong, for every type:
 *
 *   copies, max, min  values in [-B, B] (unsigned: [0, B]), B the type's exact-integer bound
 *                     capped at 1000 (f8e5m2: 8, f8e4m3: 16, bfloat16: 256);
 *   sum, mulsum       floats: [-m, m] with m = B / nranks (mulsum: B / 2 / nranks), so every
 *                     partial sum stays within B; with more ranks than B, 1 on a sparse set of
 *                     ranks per element (at most B of them) and 0 elsewhere. Integers: any
 *                     small values, since their sums wrap exactly (two's complement);
 *   prod              +-1 and +-2, with at most E twos per element (2^E exact, in range);
 *   avg               one value per element for every rank, within B / nranks, so that the
 *                     sum is n times it and the division is exact.
 *
 * The reference is computed here in 64-bit integers (wrapping, as the integer types do) and
 * encoded by dtype_store; nothing of the library's arithmetic is used. */
#include <string.h>

#include "common.h"

/* The largest magnitude below which every integer is exact in t (and has not wrapped). */
static int64_t exact_bound(loomDataType_t t) {
  switch (t) {
    case loomInt8:
      return 127;
    case loomUint8:
      return 255;
    case loomFloat16:
      return 2048;
    case loomBfloat16:
      return 256;
    case loomFloat8e4m3:
      return 16;
    case loomFloat8e5m2:
      return 8;
    case loomFloat32:
      return (int64_t)1 << 24;
    default:
      return (int64_t)1 << 30;
  }
}

/* The largest E such that 2^E is exact and in range (and does not wrap) in t. */
static int prod_exponent(loomDataType_t t) {
  switch (t) {
    case loomInt8:
      return 6;
    case loomUint8:
      return 7;
    case loomInt32:
      return 30;
    case loomUint32:
      return 31;
    case loomInt64:
      return 62;
    case loomUint64:
      return 63;
    case loomFloat16:
      return 15;
    case loomFloat8e4m3:
      return 8;
    case loomFloat8e5m2:
      return 15;
    default:
      return 62; /* the reference is a 64-bit integer */
  }
}

static int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

static void init_sum(struct perf_data* d, int64_t bound) {
  if (!dtype_is_float(d->type)) { /* wrapping sums are exact */
    d->lo = dtype_is_signed(d->type) ? -100 : 0;
    d->hi = 100;
    return;
  }
  int64_t m = min64(bound / d->nranks, 1000);
  if (m >= 1) {
    d->lo = -m;
    d->hi = m;
  } else { /* at most bound ranks hold a 1 in any element */
    d->sparse_q = (int)((d->nranks + bound - 1) / bound);
  }
}

void data_init(struct perf_data* d, loomDataType_t type, int op, int nranks, int root,
               uint64_t seed, const struct perf_counts* cnt) {
  memset(d, 0, sizeof(*d));
  d->type = type;
  d->op = op;
  d->nranks = nranks;
  d->root = root;
  d->seed = seed;
  d->cnt = *cnt;
  int64_t bound = exact_bound(type), cap = min64(bound, 1000);
  int sgn = dtype_is_signed(type);
  if (op == loomSum || op == PERF_OP_MULSUM) {
    init_sum(d, op == PERF_OP_MULSUM ? bound / 2 : bound);
  } else if (op == loomProd) {
    int e = prod_exponent(type);
    d->prod_q = (nranks + e - 1) / e;
  } else if (op == loomAvg) {
    int64_t m = min64(bound / nranks, 1000);
    d->lo = sgn ? -m : 0;
    d->hi = m;
    d->rank_free = 1;
  } else { /* copies, max, min */
    d->lo = sgn ? -cap : 0;
    d->hi = cap;
  }
}

/* splitmix64: a well-mixed hash of the seed, the rank and the element. */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int64_t data_value(const struct perf_data* d, int rank, size_t k) {
  uint64_t pos = (uint64_t)rank + (uint64_t)k;
  if (d->sparse_q) return pos % (uint64_t)d->sparse_q == 0 ? 1 : 0;
  uint64_t h = mix(d->seed ^ mix((uint64_t)k ^ ((uint64_t)(d->rank_free ? 0 : rank + 1) << 40)));
  if (d->prod_q) {
    int64_t mag = pos % (uint64_t)d->prod_q == 0 ? 2 : 1;
    return dtype_is_signed(d->type) && (h & 1) ? -mag : mag;
  }
  return d->lo + (int64_t)(h % (uint64_t)(d->hi - d->lo + 1));
}

int64_t data_premul_scalar(int rank) {
  return 1 + (rank & 1);
}

int64_t data_reduced(const struct perf_data* d, size_t k) {
  uint64_t acc = 0; /* unsigned: wraps as the integer types do */
  for (int r = 0; r < d->nranks; r++) {
    int64_t v = data_value(d, r, k);
    if (r == 0) {
      acc = (uint64_t)(d->op == PERF_OP_MULSUM ? v * data_premul_scalar(0) : v);
      continue;
    }
    switch (d->op) {
      case loomProd:
        acc *= (uint64_t)v;
        break;
      case loomMax:
        acc = (uint64_t)((int64_t)acc > v ? (int64_t)acc : v);
        break;
      case loomMin:
        acc = (uint64_t)((int64_t)acc < v ? (int64_t)acc : v);
        break;
      case PERF_OP_MULSUM:
        acc += (uint64_t)(v * data_premul_scalar(r));
        break;
      default:
        acc += (uint64_t)v;
        break; /* sum, avg */
    }
  }
  if (d->op == loomAvg) return (int64_t)acc / d->nranks; /* exact: every rank gave the same */
  return (int64_t)acc;
}

void data_fill(const struct perf_data* d, int rank, void* host_buf, size_t count) {
  size_t es = dtype_size(d->type);
  char* p = host_buf;
  for (size_t k = 0; k < count; k++) dtype_store(d->type, p + k * es, data_value(d, rank, k));
}

size_t data_check(const struct perf_coll* c, const struct perf_data* d, int rank,
                  const void* host_buf) {
  size_t es = dtype_size(d->type), wrong = 0;
  const char* p = host_buf;
  unsigned char want[8];
  for (size_t k = 0; k < d->cnt.recv; k++) {
    int64_t v;
    if (!c->expect(d, rank, k, &v)) return 0;
    dtype_store(d->type, want, v);
    wrong += !dtype_equal(d->type, p + k * es, want);
  }
  return wrong;
}

size_t perf_split_count(size_t count, size_t esize, int nranks) {
  size_t align = esize < 16 ? 16 / esize : 1;
  return (count / (size_t)nranks) & ~(align - 1);
}

void perf_counts_whole(size_t count, size_t esize, int nranks, struct perf_counts* c) {
  *c = (struct perf_counts){.send = count, .recv = count, .param = count};
}

void perf_counts_gathered(size_t count, size_t esize, int nranks, struct perf_counts* c) {
  size_t block = perf_split_count(count, esize, nranks);
  *c = (struct perf_counts){
      .send = block, .recv = block * (size_t)nranks, .param = block, .send_inplace = block};
}

void perf_counts_scattered(size_t count, size_t esize, int nranks, struct perf_counts* c) {
  size_t block = perf_split_count(count, esize, nranks);
  *c = (struct perf_counts){
      .send = block * (size_t)nranks, .recv = block, .param = block, .recv_inplace = block};
}

double perf_bus_one(int nranks) {
  return 1.0;
}

double perf_bus_split(int nranks) {
  return (double)(nranks - 1) / nranks;
}
