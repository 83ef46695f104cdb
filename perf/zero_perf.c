/* zero_perf - ZeRO-2's gradient reduce-scatter, bucket after bucket, against one all-reduce of
 * the whole flat gradient buffer (and, between them, DDP's all-reduce bucket after bucket).
 *
 *   loomrun -n 4 zero_perf [-p PARAMS] [-b BUCKET_BYTES] [-a ALIGN] [-l LAYERS] [-n ITERS]
 *                          [-w WARMUP] [-L]
 *
 * The layout is a GPT-like model's float32 parameters (PARAMS in all, 100M by default): LAYERS
 * transformer layers of hidden size h (the largest multiple of 64 whose layers take at most
 * 70% of PARAMS), a final layer norm and a token embedding that takes the rest, listed in the
 * order a backward pass makes their gradients ready (last layer first, embedding last), cut
 * into buckets of BUCKET_BYTES (25 MiB by default, PyTorch DDP's bucket_cap_mb) with every
 * parameter at a multiple of ALIGN elements (64 by default). PARAMS takes K, M, G as powers
 * of 1000 (100M = 1e8), BUCKET_BYTES as powers of 1024 (25M = 25 MiB). Every variant moves the
 * layout's totalElems floats per rank, so their algorithm bandwidths (bytes / time, as nccl-tests)
 * compare directly; busbw applies nccl-tests' factors (all-reduce 2(n-1)/n, reduce-scatter
 * (n-1)/n). A time is the median over ITERS iterations of the slowest rank's time, after
 * WARMUP unmeasured ones. Host memory, stream NULL; runs alone too (one rank). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom.h"
#include "loom_parallel.h"
#include "par_bench.h"

struct opts {
  int64_t params, bucket_bytes, align;
  int layers, iters, warmup;
  int layout_only; /* -L: print the layout and exit, allocating nothing */
};

struct bench {
  const struct opts* o;
  loomComm_t comm;
  int rank, nranks;
  loomZeroLayout_t z;
  loomZeroLayoutInfo info;
  int64_t elems; /* the parameters' elements, padding excluded */
  float *grads, *shard;
};

/* "100M", "25MB", "1G", "4096": K, M and G are powers of unit (1000 or 1024). */
static int64_t parse_size(const char* s, double unit) {
  char* end;
  double v = strtod(s, &end);
  const char* suffixes = "KMG";
  if (end == s || v < 0) return -1;
  for (int i = 0; i < 3; i++)
    if (*end == suffixes[i] || *end == suffixes[i] + 32) {
      for (int j = 0; j <= i; j++) v *= unit;
      end++;
      break;
    }
  if (*end == 'B' || *end == 'b') end++;
  return *end == '\0' && v < 9e18 ? (int64_t)v : -1;
}

static int parse_opts(int argc, char** argv, struct opts* o) {
  *o = (struct opts){100000000, 25 << 20, 64, 12, 20, 5, 0};
  int c;
  while ((c = getopt(argc, argv, "p:b:a:l:n:w:Lh")) != -1) {
    switch (c) {
      case 'p':
        o->params = parse_size(optarg, 1000);
        break;
      case 'b':
        o->bucket_bytes = parse_size(optarg, 1024);
        break;
      case 'a':
        o->align = parse_size(optarg, 1000);
        break;
      case 'l':
        o->layers = atoi(optarg);
        break;
      case 'n':
        o->iters = atoi(optarg);
        break;
      case 'L':
        o->layout_only = 1;
        break;
      case 'w':
        o->warmup = atoi(optarg);
        break;
      default:
        return -1;
    }
  }
  if (o->params < 1000 || o->bucket_bytes < 4 || o->align < 1 || o->layers < 1 || o->iters < 1 ||
      o->warmup < 0 || optind != argc)
    return -1;
  return 0;
}

/* ---- The model --------------------------------------------------------------------------- */

/* Appends one layer's parameters, in backward order (its last matrix first). */
static int layer_params(int64_t h, int64_t* out) {
  const int64_t sizes[] = {h, 4 * h * h, 4 * h, h * 4 * h, h, h,  /* fc2, fc1, ln2 */
                           h, h * h,     3 * h, 3 * h * h, h, h}; /* proj, qkv, ln1 */
  int n = (int)(sizeof(sizes) / sizeof(sizes[0]));
  if (out) memcpy(out, sizes, sizeof(sizes));
  return n;
}

/* The parameter sizes of a GPT-like model of about o->params; *numels is malloc'ed. */
static int model_params(const struct opts* o, int64_t** numels, int64_t* hidden, int64_t* vocab) {
  int64_t h = 64;
  while (o->layers * (12 * (h + 64) * (h + 64) + 13 * (h + 64)) <= o->params * 7 / 10) h += 64;
  int64_t body = o->layers * (12 * h * h + 13 * h) + 2 * h;
  *vocab = o->params > body + h ? (o->params - body) / h : 1;
  *hidden = h;
  int per = layer_params(h, NULL), n = 2 + o->layers * per + 1;
  int64_t* v = malloc((size_t)n * sizeof(*v));
  if (v == NULL) return -1;
  int k = 0;
  v[k++] = h; /* the final layer norm, weight and bias */
  v[k++] = h;
  for (int l = 0; l < o->layers; l++) k += layer_params(h, v + k);
  v[k++] = *vocab * h; /* the embedding, tied with the output layer: ready last */
  *numels = v;
  return n;
}

/* ---- The variants ------------------------------------------------------------------------ */

static loomResult_t run_zero2(struct bench* b) {
  for (int k = 0; k < b->info.numBuckets; k++) {
    loomResult_t r = loomZeroReduceScatterBucket(b->z, k, b->grads + b->info.buckets[k].offset,
                                                 b->shard, loomFloat32, loomSum, b->comm, NULL);
    if (r != loomSuccess) return r;
  }
  return loomSuccess;
}

static loomResult_t run_ddp_buckets(struct bench* b) {
  for (int k = 0; k < b->info.numBuckets; k++) {
    float* g = b->grads + b->info.buckets[k].offset;
    loomResult_t r =
        loomAllReduce(g, g, (size_t)b->info.buckets[k].count, loomFloat32, loomSum, b->comm, NULL);
    if (r != loomSuccess) return r;
  }
  return loomSuccess;
}

static loomResult_t run_allreduce(struct bench* b) {
  return loomAllReduce(b->grads, b->grads, (size_t)b->info.totalElems, loomFloat32, loomSum,
                       b->comm, NULL);
}

/* A variant: fn run on b, timed by pb_median. */
struct variant_call {
  struct bench* b;
  loomResult_t (*fn)(struct bench*);
};

static loomResult_t variant_call_run(void* arg) {
  struct variant_call* c = arg;
  return c->fn(c->b);
}

static loomResult_t time_variant(struct bench* b, loomResult_t (*fn)(struct bench*),
                                 double* median_s) {
  struct variant_call c = {b, fn};
  return pb_median(b->comm, b->o->warmup, b->o->iters, variant_call_run, &c, median_s);
}

/* ---- Main -------------------------------------------------------------------------------- */

static int fail(struct bench* b, const char* what, loomResult_t r) {
  fprintf(stderr, "zero_perf: rank %d: %s failed: %s: %s\n", b->rank, what, loomGetErrorString(r),
          loomGetLastError(b->comm));
  return 1;
}

static int bench_setup(struct bench* b, int64_t* hidden, int64_t* vocab) {
  int64_t* numels = NULL;
  int n = model_params(b->o, &numels, hidden, vocab);
  if (n < 0) return fail(b, "malloc", loomSystemError);
  for (int i = 0; i < n; i++) b->elems += numels[i];
  loomResult_t r =
      loomZeroLayoutCreate(numels, n, b->nranks, b->o->bucket_bytes / 4, b->o->align, &b->z);
  free(numels);
  if (r != loomSuccess) return fail(b, "loomZeroLayoutCreate", r);
  loomZeroLayoutGetInfo(b->z, &b->info);
  if (b->o->layout_only) return 0;
  size_t total = (size_t)b->info.totalElems, shard = (size_t)b->info.shardElems;
  b->grads = malloc(total * sizeof(float));
  b->shard = malloc((shard ? shard : 1) * sizeof(float));
  if (!b->grads || !b->shard) return fail(b, "malloc", loomSystemError);
  /* Zeros: sums that stay zero, so repeated in-place all-reduces meet no inf or subnormal. */
  memset(b->grads, 0, total * sizeof(float));
  memset(b->shard, 0, shard * sizeof(float));
  return 0;
}

static void print_header(const struct bench* b, int64_t hidden, int64_t vocab) {
  const struct opts* o = b->o;
  int64_t largest = 0;
  for (int k = 0; k < b->info.numBuckets; k++)
    largest = b->info.buckets[k].count > largest ? b->info.buckets[k].count : largest;
  printf("# zero_perf: %d ranks, float32, sum, %d warm-up + %d measured iterations\n", b->nranks,
         o->warmup, o->iters);
  printf("# layout: %d tensors, %lld parameters (hidden %lld, %d layers, vocab %lld), align %lld\n",
         b->info.numParams, (long long)b->elems, (long long)hidden, o->layers, (long long)vocab,
         (long long)o->align);
  printf("# buckets: %d, bucketElems %lld (%lld bytes), the largest %lld elements\n",
         b->info.numBuckets, (long long)(o->bucket_bytes / 4), (long long)o->bucket_bytes,
         (long long)largest);
  printf("# totalElems %lld (%.1f MB per rank), shardElems %lld\n", (long long)b->info.totalElems,
         b->info.totalElems * 4.0 / 1e6, (long long)b->info.shardElems);
}

static void print_row(const struct bench* b, const char* name, const char* calls, double t,
                      double bus_factor) {
  double bytes = (double)b->info.totalElems * 4.0, algbw = bytes / t / 1e9;
  printf("  %-26s %-24s %10.2f %9.2f %9.2f\n", name, calls, t * 1e3, algbw, algbw * bus_factor);
}

static int bench_run(struct bench* b) {
  struct {
    const char* name;
    loomResult_t (*fn)(struct bench*);
    double bus;
  } v[] = {{"zero2-reduce-scatter", run_zero2, (b->nranks - 1.0) / b->nranks},
           {"ddp-allreduce-buckets", run_ddp_buckets, 2.0 * (b->nranks - 1.0) / b->nranks},
           {"allreduce-whole", run_allreduce, 2.0 * (b->nranks - 1.0) / b->nranks}};
  double t[3];
  for (int i = 0; i < 3; i++) {
    loomResult_t r = time_variant(b, v[i].fn, &t[i]);
    if (r != loomSuccess) return fail(b, v[i].name, r);
  }
  if (b->rank != 0) return 0;
  printf("#  %-26s %-24s %10s %9s %9s\n", "variant", "calls", "time(ms)", "algbw", "busbw");
  printf("#  %-26s %-24s %10s %9s %9s\n", "", "", "median", "(GB/s)", "(GB/s)");
  char calls[3][64];
  snprintf(calls[0], sizeof(calls[0]), "%d x reduce-scatter", b->info.numBuckets);
  snprintf(calls[1], sizeof(calls[1]), "%d x all-reduce", b->info.numBuckets);
  snprintf(calls[2], sizeof(calls[2]), "1 x all-reduce");
  for (int i = 0; i < 3; i++) print_row(b, v[i].name, calls[i], t[i], v[i].bus);
  printf("# zero2-reduce-scatter / allreduce-whole time: %.3f\n", t[0] / t[2]);
  return 0;
}

int main(int argc, char** argv) {
  struct opts o;
  if (parse_opts(argc, argv, &o) != 0) {
    fprintf(
        stderr,
        "usage: zero_perf [-p PARAMS (100M)] [-b BUCKET_BYTES (25MB)] [-a ALIGN (64)]\n"
        "                 [-l LAYERS (12)] [-n ITERS (20)] [-w WARMUP (5)] [-L (layout only)]\n");
    return 2;
  }
  struct bench b = {.o = &o};
  loomResult_t r = pb_comm_open("zero_perf", &b.comm);
  if (r != loomSuccess) return fail(&b, "opening the communicator", r);
  loomCommUserRank(b.comm, &b.rank);
  loomCommCount(b.comm, &b.nranks);
  int64_t hidden = 0, vocab = 0;
  int rc = bench_setup(&b, &hidden, &vocab);
  if (rc == 0 && b.rank == 0) print_header(&b, hidden, vocab);
  if (rc == 0 && !o.layout_only) rc = bench_run(&b);
  if (rc == 0 && (r = loomCommFinalize(b.comm)) != loomSuccess)
    rc = fail(&b, "loomCommFinalize", r);
  loomZeroLayoutDestroy(b.z);
  free(b.grads);
  free(b.shard);
  loomCommDestroy(b.comm);
  return rc;
}
