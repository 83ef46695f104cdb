/* zero.c - ZeRO helpers (PARALLEL.md section 7): the bucketed layout of a flat parameter (or
 * gradient) buffer, which elements of a parameter each data-parallel rank owns, and the two
 * per-bucket collectives, a reduce-scatter into the shards and an all-gather out of them.
 *
 * The layout is pure arithmetic on the parameter sizes, so every rank computes the same one
 * without talking. Every bucket's count is a multiple of dpSize*align, which is what makes
 * the rest simple: buckets start at multiples of dpSize*align, parameters at multiples of
 * align, rank slices are count/dpSize long, and the shard offset of a bucket is just its flat
 * offset divided by dpSize.
 *
 * Readings of the contract: numParams 0 is a valid, empty layout (no buckets, totalElems 0;
 * numels may then be NULL). A parameter of 0 elements belongs to the bucket that is open when
 * it comes, so a layout whose last parameters are empty ends with a bucket of count 0 (a
 * no-op for the bucket calls). A rank that owns none of a parameter gets begin, count and
 * shardOffset all 0. (Loom) The bucket calls accept the core's in-place forms, the rank's
 * slice (shard + shardOffset) at its own place in the bucket (bucket + rank*count/dpSize),
 * as Megatron's distributed optimizer runs them; any other overlap is misuse. */
#include <stdint.h>
#include <stdlib.h>

#include "par.h"

struct loomZeroLayout {
  int num_params, num_buckets, dp_size;
  int64_t total; /* flat length, padding included */
  loomZeroParam* params;
  loomZeroBucket* buckets;
};

/* ---- The layout -------------------------------------------------------------------------- */

static void layout_free(struct loomZeroLayout* z) {
  if (z == NULL) return;
  free(z->params);
  free(z->buckets);
  free(z);
}

/* *out = x rounded up to a multiple of m (x >= 0, m >= 1); 0 when that overflows int64. */
static int round_up(int64_t x, int64_t m, int64_t* out) {
  int64_t pad = (m - x % m) % m;
  return !__builtin_add_overflow(x, pad, out);
}

static loomResult_t layout_args_check(const int64_t* numels, int num_params, int dp_size,
                                      int64_t bucket_elems, int64_t align,
                                      const loomZeroLayout_t* layout) {
  static const char fn[] = "loomZeroLayoutCreate";
  if (layout == NULL) return par_err(NULL, fn, "layout is NULL");
  if (num_params < 0) return par_err(NULL, fn, "numParams is %d, below 0", num_params);
  if (numels == NULL && num_params > 0)
    return par_err(NULL, fn, "numels is NULL but numParams is %d", num_params);
  if (dp_size < 1) return par_err(NULL, fn, "dpSize is %d, below 1", dp_size);
  if (bucket_elems < 1)
    return par_err(NULL, fn, "bucketElems is %lld, below 1", (long long)bucket_elems);
  if (align < 1) return par_err(NULL, fn, "align is %lld, below 1", (long long)align);
  int64_t quantum;
  if (__builtin_mul_overflow((int64_t)dp_size, align, &quantum))
    return par_err(NULL, fn, "dpSize*align (%d*%lld) overflows int64", dp_size, (long long)align);
  for (int i = 0; i < num_params; i++)
    if (numels[i] < 0)
      return par_err(NULL, fn, "numels[%d] is %lld, below 0", i, (long long)numels[i]);
  return loomSuccess;
}

/* Closes bucket nb, which starts at start and holds len elements so far; 0 on overflow. Its
 * shard offset is start/dpSize because every earlier count is a multiple of dpSize. */
static int bucket_close(struct loomZeroLayout* z, int nb, int64_t start, int64_t len,
                        int64_t quantum) {
  loomZeroBucket* b = &z->buckets[nb];
  int64_t end;
  if (!round_up(len, quantum, &b->count) || __builtin_add_overflow(start, b->count, &end)) return 0;
  b->offset = start;
  b->shardOffset = start / z->dp_size;
  z->num_buckets = nb + 1;
  z->total = end;
  return 1;
}

/* Places the parameters and closes the buckets; -1 - (the parameter at which an element
 * count overflowed int64) on failure, 0 on success. */
static int layout_place(struct loomZeroLayout* z, const int64_t* numels, int64_t bucket_elems,
                        int64_t align, int64_t quantum) {
  int64_t start = 0, len = 0;
  int nb = 0, open = 0;
  for (int i = 0; i < z->num_params; i++) {
    int64_t pos, end, flat;
    if (!round_up(len, align, &pos) || __builtin_add_overflow(pos, numels[i], &end) ||
        __builtin_add_overflow(start, end, &flat))
      return -1 - i;
    z->params[i] = (loomZeroParam){start + pos, numels[i], nb};
    len = end;
    open = 1;
    if (len >= bucket_elems) { /* a large parameter closes its bucket on its own */
      if (!bucket_close(z, nb, start, len, quantum)) return -1 - i;
      start = z->total;
      nb++;
      len = 0;
      open = 0;
    }
  }
  /* The last bucket closes at the end, even when it holds only empty parameters: each
   * parameter names a bucket. */
  if (open && !bucket_close(z, nb, start, len, quantum)) return -z->num_params;
  return 0;
}

loomResult_t loomZeroLayoutCreate(const int64_t numels[], int numParams, int dpSize,
                                  int64_t bucketElems, int64_t align, loomZeroLayout_t* layout) {
  static const char fn[] = "loomZeroLayoutCreate";
  loomResult_t r = layout_args_check(numels, numParams, dpSize, bucketElems, align, layout);
  if (r != loomSuccess) return r;
  struct loomZeroLayout* z = calloc(1, sizeof(*z));
  /* At most one bucket per parameter; one entry at least, so that no array is NULL. */
  size_t n = numParams > 0 ? (size_t)numParams : 1;
  if (z != NULL) {
    z->params = calloc(n, sizeof(*z->params));
    z->buckets = calloc(n, sizeof(*z->buckets));
  }
  if (z == NULL || z->params == NULL || z->buckets == NULL) {
    layout_free(z);
    return par_fail(NULL, loomSystemError, fn, "out of memory for a layout of %d parameters",
                    numParams);
  }
  z->num_params = numParams;
  z->dp_size = dpSize;
  int bad = layout_place(z, numels, bucketElems, align, (int64_t)dpSize * align);
  if (bad < 0) {
    layout_free(z);
    int i = -1 - bad;
    return par_err(NULL, fn,
                   "the flat buffer's length overflows int64 at numels[%d] = %lld (dpSize %d, "
                   "bucketElems %lld, align %lld)",
                   i, (long long)numels[i], dpSize, (long long)bucketElems, (long long)align);
  }
  *layout = z;
  return loomSuccess;
}

loomResult_t loomZeroLayoutGetInfo(loomZeroLayout_t layout, loomZeroLayoutInfo* info) {
  static const char fn[] = "loomZeroLayoutGetInfo";
  if (layout == NULL) return par_err(NULL, fn, "layout is NULL");
  if (info == NULL) return par_err(NULL, fn, "info is NULL");
  info->numParams = layout->num_params;
  info->numBuckets = layout->num_buckets;
  info->dpSize = layout->dp_size;
  info->totalElems = layout->total;
  info->shardElems = layout->total / layout->dp_size;
  info->params = layout->params;
  info->buckets = layout->buckets;
  return loomSuccess;
}

loomResult_t loomZeroOwnedRange(loomZeroLayout_t layout, int param, int dpRank, int64_t* begin,
                                int64_t* count, int64_t* shardOffset) {
  static const char fn[] = "loomZeroOwnedRange";
  if (layout == NULL) return par_err(NULL, fn, "layout is NULL");
  if (param < 0 || param >= layout->num_params)
    return par_err(NULL, fn, "param %d is outside [0, %d)", param, layout->num_params);
  if (dpRank < 0 || dpRank >= layout->dp_size)
    return par_err(NULL, fn, "dpRank %d is outside [0, %d)", dpRank, layout->dp_size);
  if (begin == NULL || count == NULL || shardOffset == NULL)
    return par_err(NULL, fn, "%s is NULL",
                   begin == NULL   ? "begin"
                   : count == NULL ? "count"
                                   : "shardOffset");
  const loomZeroParam* p = &layout->params[param];
  const loomZeroBucket* b = &layout->buckets[p->bucket];
  int64_t slice = b->count / layout->dp_size;
  int64_t lo = b->offset + (int64_t)dpRank * slice; /* the rank's flat range [lo, lo+slice) */
  int64_t from = PAR_MAX(lo, p->offset), to = PAR_MIN(lo + slice, p->offset + p->numel);
  if (to <= from) { /* none: all three 0 */
    *begin = *count = *shardOffset = 0;
    return loomSuccess;
  }
  *begin = from - p->offset;
  *count = to - from;
  *shardOffset = b->shardOffset + (from - lo);
  return loomSuccess;
}

loomResult_t loomZeroLayoutDestroy(loomZeroLayout_t layout) {
  if (layout == NULL) return par_err(NULL, "loomZeroLayoutDestroy", "layout is NULL");
  layout_free(layout);
  return loomSuccess;
}

/* ---- The bucket collectives -------------------------------------------------------------- */

/* A bucket call's validated arguments: the element size, the rank's slice length, and where
 * its slice lives in the shard buffer. */
struct bucket_call {
  const loomZeroBucket* b;
  size_t esz, slice;
  char* shard_slice; /* shard + shardOffset elements; the shard pointer itself when empty */
};

/* 1 when [p, p + n) fits in the address space. */
static int span_fits(const void* p, size_t n) {
  uintptr_t end;
  return !__builtin_add_overflow((uintptr_t)p, n, &end);
}

static loomResult_t bucket_buffers_check(loomZeroLayout_t z, const void* full,
                                         const char* full_name, const void* shard,
                                         const char* shard_name, int rank, loomComm_t dp,
                                         const char* fn, struct bucket_call* c) {
  size_t count = (size_t)c->b->count, total_bytes;
  if (__builtin_mul_overflow((size_t)z->total, c->esz, &total_bytes) ||
      total_bytes > (size_t)PTRDIFF_MAX)
    return par_err(dp, fn, "the layout's %lld elements of %zu bytes overflow the address space",
                   (long long)z->total, c->esz);
  if (full == NULL && count > 0)
    return par_err(dp, fn, "%s is NULL but the bucket holds %zu elements", full_name, count);
  if (shard == NULL && c->slice > 0)
    return par_err(dp, fn, "%s is NULL but the rank's slice holds %zu elements", shard_name,
                   c->slice);
  size_t off_bytes = (size_t)c->b->shardOffset * c->esz, n_full = count * c->esz;
  size_t n_slice = c->slice * c->esz;
  if ((full && !span_fits(full, n_full)) || (shard && !span_fits(shard, off_bytes + n_slice)))
    return par_err(dp, fn, "%s or %s runs past the end of the address space", full_name,
                   shard_name);
  c->shard_slice = c->slice > 0 ? (char*)shard + off_bytes : (char*)shard;
  /* Overlap: only the core's in-place form, the slice at its own place in the bucket. */
  uintptr_t f = (uintptr_t)full, s = (uintptr_t)c->shard_slice;
  int overlap = n_full > 0 && n_slice > 0 && s < f + n_full && f < s + n_slice;
  if (overlap && s != f + (uintptr_t)rank * n_slice)
    return par_err(dp, fn,
                   "%s (bucket of %zu bytes at %p) overlaps the rank's slice of %s (%zu bytes "
                   "at %p) other than in place (the slice at byte %zu of the bucket)",
                   full_name, n_full, full, shard_name, n_slice, (void*)s, (size_t)rank * n_slice);
  return loomSuccess;
}

/* What both bucket calls check before any communication. */
static loomResult_t bucket_check(loomZeroLayout_t z, int bucket, const void* full,
                                 const char* full_name, const void* shard, const char* shard_name,
                                 loomDataType_t dt, loomComm_t dp, const char* fn,
                                 struct bucket_call* c) {
  int rank, n;
  loomResult_t r = par_comm(dp, fn, "dp", &rank, &n);
  if (r != loomSuccess) return r;
  if (z == NULL) return par_err(dp, fn, "layout is NULL");
  if (bucket < 0 || bucket >= z->num_buckets)
    return par_err(dp, fn, "bucket %d is outside [0, %d)", bucket, z->num_buckets);
  if (n != z->dp_size)
    return par_err(dp, fn, "dp has %d ranks but the layout's dpSize is %d", n, z->dp_size);
  c->esz = par_dtype_size(dt);
  if (c->esz == 0) return par_err(dp, fn, "datatype %d is not a Loom dtype", (int)dt);
  c->b = &z->buckets[bucket];
  c->slice = (size_t)(c->b->count / z->dp_size);
  return bucket_buffers_check(z, full, full_name, shard, shard_name, rank, dp, fn, c);
}

loomResult_t loomZeroReduceScatterBucket(loomZeroLayout_t layout, int bucket,
                                         const void* bucketGrads, void* gradShard,
                                         loomDataType_t datatype, loomRedOp_t op, loomComm_t dp,
                                         loomStream_t stream) {
  static const char fn[] = "loomZeroReduceScatterBucket";
  struct bucket_call c;
  loomResult_t r = bucket_check(layout, bucket, bucketGrads, "bucketGrads", gradShard, "gradShard",
                                datatype, dp, fn, &c);
  if (r != loomSuccess) return r;
  /* Ops at and past loomNumOps are PreMulSum ops of dp, which only the core can check. */
  if ((int)op < 0) return par_err(dp, fn, "op %d is not a reduction op", (int)op);
  r = par_enter(dp, fn, stream);
  if (r != loomSuccess) return r;
  return loomReduceScatter(bucketGrads, c.shard_slice, c.slice, datatype, op, dp, NULL);
}

loomResult_t loomZeroAllGatherBucket(loomZeroLayout_t layout, int bucket, const void* paramShard,
                                     void* bucketParams, loomDataType_t datatype, loomComm_t dp,
                                     loomStream_t stream) {
  static const char fn[] = "loomZeroAllGatherBucket";
  struct bucket_call c;
  loomResult_t r = bucket_check(layout, bucket, bucketParams, "bucketParams", paramShard,
                                "paramShard", datatype, dp, fn, &c);
  if (r != loomSuccess) return r;
  r = par_enter(dp, fn, stream);
  if (r != loomSuccess) return r;
  return loomAllGather(c.shard_slice, bucketParams, c.slice, datatype, dp, NULL);
}
