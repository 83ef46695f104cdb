// Section 7 of PARALLEL.md: the ZeRO layout (a hand-computed case and the rules on random
// ones), owned ranges, and the bucket collectives against loomAllReduce and an Adam step;
// section 8's ZeRO misuse.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "par_test.h"
#include "values.h"

namespace {

using harness::Ctx;
using harness::Mode;
using partest::RanksMode;

// A layout destroyed at scope exit.
struct Zero {
  loomZeroLayout_t z = nullptr;
  loomZeroLayoutInfo info{};
  Zero() = default;
  Zero(const Zero&) = delete;
  Zero& operator=(const Zero&) = delete;
  ~Zero() {
    if (z) loomZeroLayoutDestroy(z);
  }
  loomResult_t create(const std::vector<int64_t>& numels, int dp, int64_t bucket, int64_t align) {
    loomResult_t r = loomZeroLayoutCreate(numels.empty() ? nullptr : numels.data(),
                                          (int)numels.size(), dp, bucket, align, &z);
    if (r == loomSuccess) r = loomZeroLayoutGetInfo(z, &info);
    return r;
  }
};

struct Range {
  int64_t begin, count, shard;
};
Range owned(loomZeroLayout_t z, int param, int rank) {
  Range o{-1, -1, -1};
  EXPECT_LOOM_OK(loomZeroOwnedRange(z, param, rank, &o.begin, &o.count, &o.shard));
  return o;
}

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

// ---- The layout ------------------------------------------------------------------------

// numels {5, 3, 20, 1, 2}, dpSize 2, bucketElems 8, align 4:
//   bucket 0 at 0: p0 at 0 (length 5), p1 at roundup(5,4) = 8 (length 11 >= 8: closes),
//     count roundup(11, 2*4) = 16, shardOffset 0;
//   bucket 1 at 16: p2 (20 elements, more than bucketElems) at 16, closes at once,
//     count roundup(20, 8) = 24, shardOffset 16/2 = 8;
//   bucket 2 at 40: p3 at 40 (length 1), p4 at 44 (length 6), closed by the end,
//     count 8, shardOffset 8 + 24/2 = 20.
//   totalElems 48, shardElems 24.
TEST(ZeroLayout, HandComputedExample) {
  Zero z;
  ASSERT_LOOM_OK(z.create({5, 3, 20, 1, 2}, 2, 8, 4));
  const loomZeroLayoutInfo& in = z.info;
  EXPECT_EQ(in.numParams, 5);
  ASSERT_EQ(in.numBuckets, 3);
  EXPECT_EQ(in.dpSize, 2);
  EXPECT_EQ(in.totalElems, 48);
  EXPECT_EQ(in.shardElems, 24);
  const int64_t poff[5] = {0, 8, 16, 40, 44}, pnum[5] = {5, 3, 20, 1, 2};
  const int pbucket[5] = {0, 0, 1, 2, 2};
  for (int i = 0; i < 5; i++) {
    EXPECT_EQ(in.params[i].offset, poff[i]) << "param " << i;
    EXPECT_EQ(in.params[i].numel, pnum[i]) << "param " << i;
    EXPECT_EQ(in.params[i].bucket, pbucket[i]) << "param " << i;
  }
  const int64_t boff[3] = {0, 16, 40}, bcount[3] = {16, 24, 8}, bshard[3] = {0, 8, 20};
  for (int b = 0; b < 3; b++) {
    EXPECT_EQ(in.buckets[b].offset, boff[b]) << "bucket " << b;
    EXPECT_EQ(in.buckets[b].count, bcount[b]) << "bucket " << b;
    EXPECT_EQ(in.buckets[b].shardOffset, bshard[b]) << "bucket " << b;
  }
  // Rank slices: bucket 0 [0,8) [8,16); bucket 1 [16,28) [28,40); bucket 2 [40,44) [44,48).
  const Range want[5][2] = {
      {{0, 5, 0}, {0, 0, 0}},    // p0 [0,5): rank 0 only
      {{0, 0, 0}, {0, 3, 0}},    // p1 [8,11): rank 1, at the start of its bucket-0 slice
      {{0, 12, 8}, {12, 8, 8}},  // p2 [16,36): split 12 | 8
      {{0, 1, 20}, {0, 0, 0}},   // p3 [40,41)
      {{0, 0, 0}, {0, 2, 20}},   // p4 [44,46)
  };
  for (int i = 0; i < 5; i++)
    for (int r = 0; r < 2; r++) {
      Range o = owned(z.z, i, r);
      EXPECT_EQ(o.begin, want[i][r].begin) << "param " << i << " rank " << r;
      EXPECT_EQ(o.count, want[i][r].count) << "param " << i << " rank " << r;
      EXPECT_EQ(o.shard, want[i][r].shard) << "param " << i << " rank " << r;
    }
}

TEST(ZeroLayout, EdgeCases) {
  {  // No parameters: valid, no buckets, an empty buffer (numels may be NULL).
    Zero z;
    ASSERT_LOOM_OK(z.create({}, 3, 16, 2));
    EXPECT_EQ(z.info.numParams, 0);
    EXPECT_EQ(z.info.numBuckets, 0);
    EXPECT_EQ(z.info.totalElems, 0);
    EXPECT_EQ(z.info.shardElems, 0);
  }
  {  // dpSize 1, align 1: no padding, the buffer is the parameters back to back.
    Zero z;
    ASSERT_LOOM_OK(z.create({3, 4, 5, 6}, 1, 7, 1));
    EXPECT_EQ(z.info.totalElems, 18);
    ASSERT_EQ(z.info.numBuckets, 2);  // {3,4} reaches 7; {5,6} closes at 11
    EXPECT_EQ(z.info.buckets[0].count, 7);
    EXPECT_EQ(z.info.buckets[1].count, 11);
    EXPECT_EQ(z.info.params[2].offset, 7);
  }
  {  // Empty parameters take no room; a trailing one opens a bucket of count 0.
    Zero z;
    ASSERT_LOOM_OK(z.create({0, 4, 0}, 2, 4, 1));
    ASSERT_EQ(z.info.numBuckets, 2);
    EXPECT_EQ(z.info.params[0].bucket, 0);
    EXPECT_EQ(z.info.params[1].offset, 0);
    EXPECT_EQ(z.info.buckets[0].count, 4);
    EXPECT_EQ(z.info.params[2].bucket, 1);
    EXPECT_EQ(z.info.buckets[1].offset, 4);
    EXPECT_EQ(z.info.buckets[1].count, 0);
    EXPECT_EQ(owned(z.z, 2, 1).count, 0);
  }
  {  // One bucket for everything.
    Zero z;
    ASSERT_LOOM_OK(z.create({3, 3, 3}, 4, 1000, 2));
    ASSERT_EQ(z.info.numBuckets, 1);
    EXPECT_EQ(z.info.params[2].offset, 8);
    EXPECT_EQ(z.info.totalElems, 16);
  }
}

// The rules of section 7, checked on a layout without recomputing it the same way.
void check_rules(const std::vector<int64_t>& numels, int dp, int64_t be, int64_t align,
                 const loomZeroLayoutInfo& in) {
  ASSERT_EQ(in.numParams, (int)numels.size());
  ASSERT_EQ(in.dpSize, dp);
  int64_t end = 0, shard = 0;
  for (int b = 0; b < in.numBuckets; b++) {  // contiguous, padded, shard offsets summed
    const loomZeroBucket& k = in.buckets[b];
    EXPECT_EQ(k.offset, end) << "bucket " << b;
    EXPECT_EQ(k.shardOffset, shard) << "bucket " << b;
    EXPECT_EQ(k.count % (dp * align), 0) << "bucket " << b;
    end += k.count;
    shard += k.count / dp;
  }
  EXPECT_EQ(in.totalElems, end);
  EXPECT_EQ(in.shardElems * dp, in.totalElems);
  int64_t len = 0;  // the current bucket's length after each parameter
  for (int i = 0; i < in.numParams; i++) {
    const loomZeroParam& p = in.params[i];
    SCOPED_TRACE("param " + std::to_string(i));
    ASSERT_GE(p.bucket, 0);
    ASSERT_LT(p.bucket, in.numBuckets);
    const loomZeroBucket& k = in.buckets[p.bucket];
    bool first = i == 0 || in.params[i - 1].bucket != p.bucket;
    if (i > 0) {
      EXPECT_EQ(p.bucket, in.params[i - 1].bucket + (first ? 1 : 0));
    }
    if (first) {
      if (i > 0) {
        EXPECT_GE(len, be) << "a bucket closed before reaching bucketElems";
      }
      len = 0;
    } else {
      EXPECT_LT(len, be) << "a bucket stayed open past bucketElems";
    }
    EXPECT_EQ(p.numel, numels[i]);
    EXPECT_EQ(p.offset, k.offset + round_up(len, align));
    len = round_up(len, align) + p.numel;
    EXPECT_LE(p.offset + p.numel, k.offset + k.count);
    bool last = i + 1 == in.numParams || in.params[i + 1].bucket != p.bucket;
    if (last) {
      EXPECT_EQ(k.count, round_up(len, dp * align));
    }
  }
  if (in.numParams > 0) {
    EXPECT_EQ(in.params[in.numParams - 1].bucket, in.numBuckets - 1);
  }
}

// Over all ranks a parameter's owned ranges partition it, and each element sits in the shard
// where the rank's slice of its bucket puts it.
void check_owned(loomZeroLayout_t z, const loomZeroLayoutInfo& in) {
  for (int i = 0; i < in.numParams; i++) {
    const loomZeroParam& p = in.params[i];
    const loomZeroBucket& k = in.buckets[p.bucket];
    int64_t slice = k.count / in.dpSize;
    std::vector<int> hits((size_t)p.numel, 0);
    for (int r = 0; r < in.dpSize; r++) {
      Range o = owned(z, i, r);
      ASSERT_GE(o.count, 0);
      if (o.count == 0) continue;
      ASSERT_GE(o.begin, 0);
      ASSERT_LE(o.begin + o.count, p.numel);
      ASSERT_GE(o.shard, k.shardOffset);
      ASSERT_LE(o.shard + o.count, k.shardOffset + slice) << "param " << i << " rank " << r;
      // Shard position -> flat position: the rank's slice of the bucket.
      EXPECT_EQ(k.offset + r * slice + (o.shard - k.shardOffset), p.offset + o.begin);
      for (int64_t j = o.begin; j < o.begin + o.count; j++) hits[(size_t)j]++;
    }
    for (int64_t j = 0; j < p.numel; j++)
      ASSERT_EQ(hits[(size_t)j], 1) << "param " << i << " element " << j;
  }
}

TEST(ZeroLayout, RandomLayoutsFollowTheRules) {
  std::mt19937_64 g(7);
  for (int trial = 0; trial < 300; trial++) {
    int dp = 1 + (int)(g() % 5);
    int64_t be = 1 + (int64_t)(g() % 64), align = 1 + (int64_t)(g() % 8);
    std::vector<int64_t> numels(g() % 12);
    for (auto& n : numels) n = g() % 4 == 0 ? 0 : (int64_t)(g() % 90);
    SCOPED_TRACE("trial " + std::to_string(trial));
    Zero z;
    ASSERT_LOOM_OK(z.create(numels, dp, be, align));
    check_rules(numels, dp, be, align, z.info);
    check_owned(z.z, z.info);
  }
}

// ---- Values of every dtype -------------------------------------------------------------

// The bytes of one element of dtype t holding x (values::store enumerates a narrow format's
// codes, so each distinct value is encoded once).
struct Encoder {
  loomDataType_t t;
  size_t esz;
  std::vector<std::pair<double, uint64_t>> cache;
  explicit Encoder(loomDataType_t dt) : t(dt), esz(shim::dtype_size(dt)) {}
  void put(void* buf, size_t i, double x) {
    uint64_t bits = 0;
    auto it = std::find_if(cache.begin(), cache.end(), [x](auto& e) { return e.first == x; });
    if (it == cache.end()) {
      values::store(t, &bits, 0, x);
      cache.push_back({x, bits});
    } else {
      bits = it->second;
    }
    std::memcpy((char*)buf + i * esz, &bits, esz);
  }
};

// Which flat elements belong to a parameter (the rest is padding, kept zero).
std::vector<char> param_mask(const loomZeroLayoutInfo& in) {
  std::vector<char> m((size_t)in.totalElems, 0);
  for (int i = 0; i < in.numParams; i++)
    std::fill_n(m.begin() + in.params[i].offset, in.params[i].numel, 1);
  return m;
}

const std::vector<int64_t> kNumels = {37, 5, 100, 3, 64, 1, 0, 17};

struct Case {
  loomDataType_t t;
  loomRedOp_t op;
};
const Case kCases[] = {
    {loomFloat32, loomSum},    {loomFloat64, loomSum},    {loomBfloat16, loomSum},
    {loomFloat16, loomSum},    {loomInt32, loomSum},      {loomInt8, loomSum},
    {loomUint64, loomSum},     {loomFloat8e4m3, loomSum}, {loomFloat32, loomAvg},
    {loomBfloat16, loomAvg},   {loomInt32, loomAvg},      {loomFloat64, loomAvg},
    {loomFloat32, loomMax},    {loomInt32, loomProd},     {loomUint8, loomMin},
    {loomFloat8e5m2, loomSum},
};

// One bucket of one case: reduce-scatter into a shard (touching only the rank's slice), then
// all-gather back, equals loomAllReduce of the bucket, bitwise.
void rs_ag_bucket(Ctx& c, const Zero& z, int b, const Case& k, loomStream_t stream) {
  const loomZeroBucket& bk = z.info.buckets[b];
  size_t esz = shim::dtype_size(k.t), n = (size_t)bk.count, slice = n / (size_t)c.nranks;
  std::vector<char> mask = param_mask(z.info);
  std::vector<unsigned char> in(n * esz), ref(n * esz), out(n * esz, 0xCD);
  std::vector<unsigned char> shard((size_t)z.info.shardElems * esz + 1, 0xAB);
  values::Pattern pat = values::pattern(k.t, k.op);
  Encoder enc(k.t);
  for (size_t i = 0; i < n; i++)
    enc.put(in.data(), i, mask[(size_t)bk.offset + i] ? values::input(pat, c.rank, i) : 0.0);
  ASSERT_LOOM_OK(
      loomZeroReduceScatterBucket(z.z, b, in.data(), shard.data(), k.t, k.op, c.comm, stream));
  if (stream) ASSERT_LOOM_OK(loomStreamSynchronize(stream));
  size_t lo = (size_t)bk.shardOffset * esz, hi = lo + slice * esz;
  for (size_t j = 0; j < shard.size(); j++)
    if (j < lo || j >= hi) {
      ASSERT_EQ(shard[j], 0xAB) << "byte " << j << " outside the slice";
    }
  ASSERT_LOOM_OK(loomZeroAllGatherBucket(z.z, b, shard.data(), out.data(), k.t, c.comm, stream));
  if (stream) ASSERT_LOOM_OK(loomStreamSynchronize(stream));
  ASSERT_LOOM_OK(loomAllReduce(in.data(), ref.data(), n, k.t, k.op, c.comm, nullptr));
  EXPECT_TRUE(out == ref) << shim::dtype_name(k.t) << " " << shim::op_name(k.op) << " bucket " << b;
}

class ZeroBuckets : public ::testing::TestWithParam<RanksMode> {};

TEST_P(ZeroBuckets, ReduceScatterThenAllGatherIsAllReduce) {
  auto [nranks, mode] = GetParam();
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        Zero z;
        ASSERT_LOOM_OK(z.create(kNumels, c.nranks, 64, 4));
        ASSERT_GE(z.info.numBuckets, 3);
        shim::StreamGuard host;
        ASSERT_NE(host.get(), nullptr);
        int i = 0;
        for (const Case& k : kCases)
          for (int b = 0; b < z.info.numBuckets; b++, i++) {
            rs_ag_bucket(c, z, b, k, i % 3 == 0 ? host.get() : nullptr);
            if (::testing::Test::HasFatalFailure()) return;
          }
      },
      partest::opts());
}

// The core's in-place forms pass through: the rank's slice at its own place in the bucket
// (bucket 0, whose shardOffset is 0, so the shard pointer is the slice itself).
TEST_P(ZeroBuckets, InPlaceAtTheRanksSlice) {
  auto [nranks, mode] = GetParam();
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        Zero z;
        ASSERT_LOOM_OK(z.create(kNumels, c.nranks, 64, 4));
        const loomZeroBucket& bk = z.info.buckets[0];
        ASSERT_EQ(bk.shardOffset, 0);
        size_t n = (size_t)bk.count, slice = n / (size_t)c.nranks;
        std::vector<float> in(n), ref(n);
        for (size_t i = 0; i < n; i++) in[i] = (float)((int)((i * 5 + (size_t)c.rank) % 9) - 4);
        ASSERT_LOOM_OK(
            loomAllReduce(in.data(), ref.data(), n, loomFloat32, loomSum, c.comm, nullptr));
        float* mine = in.data() + (size_t)c.rank * slice;
        ASSERT_LOOM_OK(loomZeroReduceScatterBucket(z.z, 0, in.data(), mine, loomFloat32, loomSum,
                                                   c.comm, nullptr));
        EXPECT_EQ(0, std::memcmp(mine, ref.data() + (size_t)c.rank * slice, slice * 4));
        ASSERT_LOOM_OK(
            loomZeroAllGatherBucket(z.z, 0, mine, in.data(), loomFloat32, c.comm, nullptr));
        EXPECT_TRUE(in == ref);
      },
      partest::opts());
}

// ---- Adam on shards --------------------------------------------------------------------

// One element of Adam; noinline so that both sides run the same instructions.
__attribute__((noinline)) void adam_elem(float* p, float g, float* m, float* v, float c1,
                                         float c2) {
  const float b1 = 0.9f, b2 = 0.999f, lr = 1e-2f, eps = 1e-8f;
  *m = b1 * *m + (1.0f - b1) * g;
  *v = b2 * *v + (1.0f - b2) * g * g;
  float mh = *m / c1, vh = *v / c2;
  *p -= lr * mh / (std::sqrt(vh) + eps);
}

void adam(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
          std::vector<float>& v, int step) {
  float c1 = 1.0f - std::pow(0.9f, (float)step), c2 = 1.0f - std::pow(0.999f, (float)step);
  for (size_t k = 0; k < p.size(); k++) adam_elem(&p[k], g[k], &m[k], &v[k], c1, c2);
}

// Integer-valued gradients of rank r at step s (zero in the padding): their sum is exact.
std::vector<float> grads(const loomZeroLayoutInfo& in, int r, int s) {
  std::vector<char> mask = param_mask(in);
  std::vector<float> g((size_t)in.totalElems, 0.0f);
  for (size_t k = 0; k < g.size(); k++)
    if (mask[k]) g[k] = (float)((int)((k * 7 + (size_t)r * 3 + (size_t)s * 11) % 9) - 4);
  return g;
}

TEST_P(ZeroBuckets, AdamOnShardsEqualsUnshardedAdam) {
  auto [nranks, mode] = GetParam();
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        Zero z;
        ASSERT_LOOM_OK(z.create(kNumels, c.nranks, 64, 4));
        const loomZeroLayoutInfo& in = z.info;
        size_t total = (size_t)in.totalElems, sh = (size_t)in.shardElems;
        std::vector<char> mask = param_mask(in);
        std::vector<float> full(total, 0.0f), m(total, 0.0f), v(total, 0.0f);
        for (size_t k = 0; k < total; k++)
          if (mask[k]) full[k] = (float)((int)(k % 13) - 6) * 0.125f;
        std::vector<float> flat = full;  // the ZeRO side's parameters
        // The shard's parameters, from the owned ranges of each parameter.
        std::vector<float> ps(sh, 0.0f), gs(sh), ms(sh, 0.0f), vs(sh, 0.0f);
        for (int i = 0; i < in.numParams; i++) {
          Range o = owned(z.z, i, c.rank);
          for (int64_t j = 0; j < o.count; j++)
            ps[(size_t)(o.shard + j)] = full[(size_t)(in.params[i].offset + o.begin + j)];
        }
        for (int step = 1; step <= 3; step++) {
          std::vector<float> g = grads(in, c.rank, step), gsum(total);
          ASSERT_LOOM_OK(
              loomAllReduce(g.data(), gsum.data(), total, loomFloat32, loomSum, c.comm, nullptr));
          adam(full, gsum, m, v, step);
          for (int b = 0; b < in.numBuckets; b++)
            ASSERT_LOOM_OK(loomZeroReduceScatterBucket(z.z, b, g.data() + in.buckets[b].offset,
                                                       gs.data(), loomFloat32, loomSum, c.comm,
                                                       nullptr));
          adam(ps, gs, ms, vs, step);
          for (int b = 0; b < in.numBuckets; b++)
            ASSERT_LOOM_OK(loomZeroAllGatherBucket(z.z, b, ps.data(),
                                                   flat.data() + in.buckets[b].offset, loomFloat32,
                                                   c.comm, nullptr));
          ASSERT_EQ(0, std::memcmp(flat.data(), full.data(), total * 4)) << "step " << step;
        }
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(, ZeroBuckets,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         partest::ranks_mode_name);

// ---- Misuse ----------------------------------------------------------------------------

// One suite: the local calls (a plain test) and the bucket calls (over ranks).
class ZeroArgs : public ::testing::TestWithParam<RanksMode> {};

TEST_F(ZeroArgs, LayoutMisuse) {
  std::vector<int64_t> n = {4, 8};
  loomZeroLayout_t z = (loomZeroLayout_t)(uintptr_t)0x1234;
  std::vector<loomZeroLayout_t> out(1, z);
  auto bytes = [&] { return partest::bytes_of(out); };
  const char* fn = "loomZeroLayoutCreate";
  EXPECT_MISUSE(loomZeroLayoutCreate(n.data(), 2, 0, 8, 1, &out[0]), nullptr, fn, bytes(), "dpSize",
                "0");
  EXPECT_MISUSE(loomZeroLayoutCreate(n.data(), 2, 2, 0, 1, &out[0]), nullptr, fn, bytes(),
                "bucketElems", "0");
  EXPECT_MISUSE(loomZeroLayoutCreate(n.data(), 2, 2, 8, -3, &out[0]), nullptr, fn, bytes(), "align",
                "-3");
  EXPECT_MISUSE(loomZeroLayoutCreate(n.data(), -1, 2, 8, 1, &out[0]), nullptr, fn, bytes(),
                "numParams", "-1");
  EXPECT_MISUSE(loomZeroLayoutCreate(nullptr, 2, 2, 8, 1, &out[0]), nullptr, fn, bytes(), "numels",
                "NULL");
  EXPECT_MISUSE(loomZeroLayoutCreate(n.data(), 2, 2, 8, 1, nullptr), nullptr, fn, bytes(), "layout",
                "NULL");
  std::vector<int64_t> neg = {4, -5};
  EXPECT_MISUSE(loomZeroLayoutCreate(neg.data(), 2, 2, 8, 1, &out[0]), nullptr, fn, bytes(),
                "numels[1]", "-5");
  std::vector<int64_t> huge = {INT64_MAX - 2, 5};
  EXPECT_MISUSE(loomZeroLayoutCreate(huge.data(), 2, 2, 8, 4, &out[0]), nullptr, fn, bytes(),
                "overflow", "numels[0]");
  std::vector<int64_t> big2 = {INT64_MAX / 2, INT64_MAX / 2 + 100};
  EXPECT_MISUSE(loomZeroLayoutCreate(big2.data(), 2, 1, INT64_MAX, 1, &out[0]), nullptr, fn,
                bytes(), "overflow", "numels[1]");
  EXPECT_MISUSE(loomZeroLayoutCreate(n.data(), 2, 1 << 30, 8, INT64_MAX / 4, &out[0]), nullptr, fn,
                bytes(), "dpSize*align", "overflow");
  // The next valid call works.
  Zero ok;
  ASSERT_LOOM_OK(ok.create(n, 2, 8, 4));
  loomZeroLayoutInfo info{};
  std::vector<unsigned char> none;
  EXPECT_MISUSE(loomZeroLayoutGetInfo(nullptr, &info), nullptr, "loomZeroLayoutGetInfo", none,
                "layout", "NULL");
  EXPECT_MISUSE(loomZeroLayoutGetInfo(ok.z, nullptr), nullptr, "loomZeroLayoutGetInfo", none,
                "info", "NULL");
  std::vector<int64_t> r(3, -7);
  auto rb = [&] { return partest::bytes_of(r); };
  fn = "loomZeroOwnedRange";
  EXPECT_MISUSE(loomZeroOwnedRange(ok.z, 2, 0, &r[0], &r[1], &r[2]), nullptr, fn, rb(), "param 2",
                "[0, 2)");
  EXPECT_MISUSE(loomZeroOwnedRange(ok.z, -1, 0, &r[0], &r[1], &r[2]), nullptr, fn, rb(),
                "param -1");
  EXPECT_MISUSE(loomZeroOwnedRange(ok.z, 0, 2, &r[0], &r[1], &r[2]), nullptr, fn, rb(), "dpRank 2",
                "[0, 2)");
  EXPECT_MISUSE(loomZeroOwnedRange(ok.z, 0, -1, &r[0], &r[1], &r[2]), nullptr, fn, rb(),
                "dpRank -1");
  EXPECT_MISUSE(loomZeroOwnedRange(nullptr, 0, 0, &r[0], &r[1], &r[2]), nullptr, fn, rb(),
                "layout");
  EXPECT_MISUSE(loomZeroOwnedRange(ok.z, 0, 0, &r[0], nullptr, &r[2]), nullptr, fn, rb(), "count");
  EXPECT_MISUSE(loomZeroOwnedRange(ok.z, 0, 0, &r[0], &r[1], nullptr), nullptr, fn, rb(),
                "shardOffset");
  Range o = owned(ok.z, 1, 0);
  EXPECT_EQ(o.count, 4);  // {4, 8}, bucket 8, align 4: p1 at 4 of count 16; rank 0 owns [4, 8)
  EXPECT_MISUSE(loomZeroLayoutDestroy(nullptr), nullptr, "loomZeroLayoutDestroy", none, "layout",
                "NULL");
}

TEST_P(ZeroArgs, BucketCallMisuse) {
  auto [nranks, mode] = GetParam();
  harness::run(
      nranks, mode,
      [](Ctx& c) {
        Zero z, wrong;
        // {20, 10}, bucketElems 16, align 2: two buckets, the first the larger.
        ASSERT_LOOM_OK(z.create({20, 10}, c.nranks, 16, 2));
        ASSERT_LOOM_OK(wrong.create({20, 10}, c.nranks + 1, 16, 2));
        ASSERT_EQ(z.info.numBuckets, 2);
        size_t n = (size_t)z.info.buckets[1].count, slice = n / (size_t)c.nranks;
        size_t n0 = (size_t)z.info.buckets[0].count, slice0 = n0 / (size_t)c.nranks;
        std::vector<float> full(n0 + 1, 1.0f), shard((size_t)z.info.shardElems, 5.0f);
        auto sb = [&] { return partest::bytes_of(shard); };
        auto fb = [&] { return partest::bytes_of(full); };
        const char* rs = "loomZeroReduceScatterBucket";
        const char* ag = "loomZeroAllGatherBucket";
        loomComm_t dp = c.comm;
        EXPECT_MISUSE(loomZeroReduceScatterBucket(z.z, 1, full.data(), shard.data(), loomFloat32,
                                                  loomSum, nullptr, nullptr),
                      nullptr, rs, sb(), "dp", "NULL");
        EXPECT_MISUSE(loomZeroReduceScatterBucket(nullptr, 1, full.data(), shard.data(),
                                                  loomFloat32, loomSum, dp, nullptr),
                      dp, rs, sb(), "layout", "NULL");
        EXPECT_MISUSE(loomZeroReduceScatterBucket(z.z, 2, full.data(), shard.data(), loomFloat32,
                                                  loomSum, dp, nullptr),
                      dp, rs, sb(), "bucket 2", "[0, 2)");
        EXPECT_MISUSE(
            loomZeroAllGatherBucket(z.z, -1, shard.data(), full.data(), loomFloat32, dp, nullptr),
            dp, ag, fb(), "bucket -1");
        std::string ranks = std::to_string(c.nranks), dps = std::to_string(c.nranks + 1);
        EXPECT_MISUSE(loomZeroReduceScatterBucket(wrong.z, 0, full.data(), shard.data(),
                                                  loomFloat32, loomSum, dp, nullptr),
                      dp, rs, sb(), "dpSize", ranks.c_str(), dps.c_str());
        EXPECT_MISUSE(loomZeroAllGatherBucket(wrong.z, 0, shard.data(), full.data(), loomFloat32,
                                              dp, nullptr),
                      dp, ag, fb(), "dpSize", dps.c_str());
        EXPECT_MISUSE(loomZeroReduceScatterBucket(z.z, 1, full.data(), shard.data(),
                                                  (loomDataType_t)42, loomSum, dp, nullptr),
                      dp, rs, sb(), "datatype", "42");
        EXPECT_MISUSE(loomZeroAllGatherBucket(z.z, 1, shard.data(), full.data(), (loomDataType_t)-1,
                                              dp, nullptr),
                      dp, ag, fb(), "datatype", "-1");
        EXPECT_MISUSE(loomZeroReduceScatterBucket(z.z, 1, full.data(), shard.data(), loomFloat32,
                                                  (loomRedOp_t)-2, dp, nullptr),
                      dp, rs, sb(), "op", "-2");
        EXPECT_MISUSE(loomZeroReduceScatterBucket(z.z, 1, nullptr, shard.data(), loomFloat32,
                                                  loomSum, dp, nullptr),
                      dp, rs, sb(), "bucketGrads", "NULL");
        EXPECT_MISUSE(
            loomZeroAllGatherBucket(z.z, 1, nullptr, full.data(), loomFloat32, dp, nullptr), dp, ag,
            fb(), "paramShard", "NULL");
        std::vector<unsigned char> none;
        EXPECT_MISUSE(loomZeroReduceScatterBucket(z.z, 1, full.data(), nullptr, loomFloat32,
                                                  loomSum, dp, nullptr),
                      dp, rs, none, "gradShard", "NULL");
        EXPECT_MISUSE(
            loomZeroAllGatherBucket(z.z, 1, shard.data(), nullptr, loomFloat32, dp, nullptr), dp,
            ag, none, "bucketParams", "NULL");
        // Overlap other than in place: bucket 0 (shardOffset 0) with the shard pointer in the
        // bucket but not at the rank's own slice.
        ASSERT_EQ(z.info.buckets[0].shardOffset, 0);
        float* off = full.data() + (c.rank == 0 ? 1 : 0);
        ASSERT_LE((size_t)(off - full.data()) + slice0, full.size());
        EXPECT_MISUSE(loomZeroReduceScatterBucket(z.z, 0, full.data(), off, loomFloat32, loomSum,
                                                  dp, nullptr),
                      dp, rs, fb(), "overlaps", "bucketGrads", "gradShard");
        EXPECT_MISUSE(loomZeroAllGatherBucket(z.z, 0, off, full.data(), loomFloat32, dp, nullptr),
                      dp, ag, fb(), "overlaps", "bucketParams", "paramShard");
        // The next valid calls work.
        ASSERT_LOOM_OK(loomZeroReduceScatterBucket(z.z, 1, full.data(), shard.data(), loomFloat32,
                                                   loomSum, dp, nullptr));
        for (size_t j = 0; j < slice; j++)
          EXPECT_EQ(shard[(size_t)z.info.buckets[1].shardOffset + j], (float)c.nranks);
        ASSERT_LOOM_OK(
            loomZeroAllGatherBucket(z.z, 1, shard.data(), full.data(), loomFloat32, dp, nullptr));
        for (size_t j = 0; j < n; j++) EXPECT_EQ(full[j], (float)c.nranks) << j;
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(, ZeroArgs,
                         ::testing::Values(RanksMode{1, Mode::Proc}, RanksMode{3, Mode::Proc},
                                           RanksMode{3, Mode::Thread}),
                         partest::ranks_mode_name);

}  // namespace
