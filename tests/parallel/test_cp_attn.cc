// Section 4 of PARALLEL.md: context-parallel attention. Every rank builds the same global
// q, k, v, dout from one seed, takes its shard with loomCpShard, and checks out, lse, dq, dk, dv
// against full attention computed here in float64 on the whole sequence (cp_test.cc).
#include "cp_test.h"

namespace {

using cptest::Prob;
using partest::Ctx;
using partest::Mode;
using partest::RanksMode;

const loomCpAlgo_t kAlgos[] = {loomCpRing, loomCpAllGatherKv, loomCpUlysses};
const loomCpLayout_t kLayouts[] = {loomCpContiguous, loomCpZigzag};

loomAttnOpts opts_of(loomCpAlgo_t a, loomCpLayout_t l, bool causal) {
  loomAttnOpts o = LOOM_ATTN_OPTS_INIT;
  o.algo = a, o.layout = l, o.causal = causal;
  return o;
}

class CpAttnRanks : public ::testing::TestWithParam<RanksMode> {};

// Every algorithm, layout and mask in float64; D != Dv; GQA with 2 query heads per key head
// (Ulysses: Hq = 2P, Hkv = P so that both divide by P).
TEST_P(CpAttnRanks, Float64AllAlgorithmsLayoutsMasks) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int P = c.nranks;
        for (loomCpAlgo_t a : kAlgos)
          for (bool causal : {false, true}) {
            int64_t Hq = a == loomCpUlysses ? 2 * P : 4, Hkv = Hq / 2;
            Prob p = cptest::make_prob(1, 6 * P, 6 * P, Hq, Hkv, 8, 6, causal, 100 + a);
            for (loomCpLayout_t l : kLayouts) {
              loomAttnOpts o = opts_of(a, l, causal);
              cptest::check_case(c, p, loomFloat64, o, cptest::name_of(o, loomFloat64));
            }
          }
      },
      partest::opts());
}

// GQA with Hq 8, Hkv 2 (Ulysses where P divides 2) and MQA (Hkv 1; Ulysses at P 1).
TEST_P(CpAttnRanks, GqaAndMqa) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int P = c.nranks;
        for (int64_t Hkv : {2, 1}) {
          Prob p = cptest::make_prob(1, 4 * P, 4 * P, 8, Hkv, 4, 4, true, 200 + Hkv);
          for (loomCpAlgo_t a : kAlgos) {
            if (a == loomCpUlysses && Hkv % P != 0) continue;
            for (loomCpLayout_t l : kLayouts) {
              loomAttnOpts o = opts_of(a, l, true);
              cptest::check_case(c, p, loomFloat64, o,
                                 cptest::name_of(o, loomFloat64) + " Hkv " + std::to_string(Hkv));
            }
          }
        }
      },
      partest::opts());
}

// Not causal, global Skv = 2 * Sq, and B = 2.
TEST_P(CpAttnRanks, UnequalLengthsAndBatch) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int P = c.nranks;
        Prob p = cptest::make_prob(2, 2 * P, 4 * P, P, P, 4, 3, false, 300);
        for (loomCpAlgo_t a : kAlgos)
          for (loomCpLayout_t l : kLayouts) {
            loomAttnOpts o = opts_of(a, l, false);
            cptest::check_case(c, p, loomFloat64, o, cptest::name_of(o, loomFloat64));
          }
      },
      partest::opts());
}

// float32, float16 and bfloat16 within the tolerances of cp_test.cc.
TEST_P(CpAttnRanks, Float32AndHalfTypes) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int P = c.nranks;
        Prob p = cptest::make_prob(1, 4 * P, 4 * P, 2 * P, P, 8, 8, true, 400);
        for (loomDataType_t dt : {loomFloat32, loomFloat16, loomBfloat16})
          for (loomCpAlgo_t a : kAlgos) {
            loomAttnOpts o = opts_of(a, loomCpZigzag, true);
            cptest::check_case(c, p, dt, o, cptest::name_of(o, dt));
          }
      },
      partest::opts());
}

// Logits scaled by 1000 (softmaxScale 1000/sqrt(D)): float64 still the reference at 1e-10;
// float32, whose logits of ~2000 carry errors of ~1e-4, within 100 times its tolerance; never
// NaN.
TEST_P(CpAttnRanks, HugeLogitsNoNaN) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int P = c.nranks;
        Prob p = cptest::make_prob(1, 4 * P, 4 * P, P, P, 4, 4, true, 500, 1000.0 / 2);
        for (loomCpAlgo_t a : kAlgos)
          for (loomCpLayout_t l : kLayouts) {
            loomAttnOpts o = opts_of(a, l, true);
            o.softmaxScale = p.scale;
            cptest::check_case(c, p, loomFloat64, o, cptest::name_of(o, loomFloat64) + " x1000");
            cptest::check_case(c, p, loomFloat32, o, cptest::name_of(o, loomFloat32) + " x1000",
                               100);
          }
      },
      partest::opts());
}

// The same call twice gives the same bytes (fixed summation orders).
TEST_P(CpAttnRanks, BitwiseRepeatable) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int P = c.nranks;
        Prob p = cptest::make_prob(1, 4 * P, 4 * P, 2 * P, P, 8, 8, true, 600);
        for (loomCpAlgo_t a : kAlgos) {
          loomAttnOpts o = opts_of(a, loomCpZigzag, true);
          cptest::Local x = cptest::check_case(c, p, loomFloat32, o, "first");
          cptest::Local y = cptest::check_case(c, p, loomFloat32, o, "second");
          EXPECT_EQ(x.out.bytes, y.out.bytes) << cptest::name_of(o, loomFloat32);
          EXPECT_EQ(x.lse.bytes, y.lse.bytes) << cptest::name_of(o, loomFloat32);
          EXPECT_EQ(x.dq.bytes, y.dq.bytes) << cptest::name_of(o, loomFloat32);
          EXPECT_EQ(x.dk.bytes, y.dk.bytes) << cptest::name_of(o, loomFloat32);
          EXPECT_EQ(x.dv.bytes, y.dv.bytes) << cptest::name_of(o, loomFloat32);
        }
      },
      partest::opts());
}

// ---- The blocks the kernel is given -------------------------------------------------------

// A user kernel around loomAttnKernelReference that checks every block it is given: its q and
// k/v rows are the global rows qStart.. and kStart.. (one contiguous range each; heads from h0
// on, for Ulysses), and no causal block is fully masked.
struct Counter {
  const Prob* p = nullptr;
  int64_t hq0 = 0, hkv0 = 0;
  int fwd = 0, bwd = 0, masked = 0, wrong_rows = 0;
};

bool rows_match(const loomTensor* t, const std::vector<double>& g, int64_t start, int64_t Lg,
                int64_t Hg, int64_t h0) {
  const double* d = (const double*)t->data;
  for (int64_t b = 0; b < t->shape[0]; b++)
    for (int64_t i = 0; i < t->shape[1]; i++)
      for (int64_t h = 0; h < t->shape[2]; h++)
        for (int64_t e = 0; e < t->shape[3]; e++) {
          double got = d[b * t->strides[0] + i * t->strides[1] + h * t->strides[2] + e];
          size_t w = (size_t)(((b * Lg + start + i) * Hg + h0 + h) * t->shape[3] + e);
          if (start + i >= Lg || got != g[w]) return false;
        }
  return true;
}

void count_block(Counter* n, const loomTensor* q, const loomTensor* k, const loomTensor* v,
                 int64_t qStart, int64_t kStart, int causal) {
  const Prob& p = *n->p;
  if (causal && kStart > qStart + q->shape[1] - 1) n->masked++;
  if (!rows_match(q, p.q, qStart, p.S, p.Hq, n->hq0) ||
      !rows_match(k, p.k, kStart, p.Skv, p.Hkv, n->hkv0) ||
      !rows_match(v, p.v, kStart, p.Skv, p.Hkv, n->hkv0))
    n->wrong_rows++;
}

loomResult_t count_fwd(void* ctx, const loomTensor* q, const loomTensor* k, const loomTensor* v,
                       int64_t qStart, int64_t kStart, int causal, double scale, loomTensor* out,
                       loomTensor* lse, loomStream_t stream) {
  Counter* n = (Counter*)ctx;
  n->fwd++;
  count_block(n, q, k, v, qStart, kStart, causal);
  const loomAttnKernel* r = loomAttnKernelReference();
  return r->forward(r->ctx, q, k, v, qStart, kStart, causal, scale, out, lse, stream);
}

loomResult_t count_bwd(void* ctx, const loomTensor* q, const loomTensor* k, const loomTensor* v,
                       const loomTensor* out, const loomTensor* dout, const loomTensor* lse,
                       int64_t qStart, int64_t kStart, int causal, double scale, loomTensor* dq,
                       loomTensor* dk, loomTensor* dv, loomStream_t stream) {
  Counter* n = (Counter*)ctx;
  n->bwd++;
  count_block(n, q, k, v, qStart, kStart, causal);
  const loomAttnKernel* r = loomAttnKernelReference();
  return r->backward(r->ctx, q, k, v, out, dout, lse, qStart, kStart, causal, scale, dq, dk, dv,
                     stream);
}

// The blocks a rank's queries meet: ring, every pair of runs that is not fully masked; all-gather,
// one per run of queries; Ulysses, one.
int expected_blocks(loomCpAlgo_t a, loomCpLayout_t l, bool causal, int r, int P, int64_t S) {
  if (a == loomCpUlysses) return 1;
  int runs = l == loomCpZigzag ? 2 : 1;
  if (a == loomCpAllGatherKv) return runs;
  int64_t L = S / P, C = L / 2;
  auto starts = [&](int s) {
    return l == loomCpZigzag ? std::vector<int64_t>{s * C, (2 * P - 1 - s) * C}
                             : std::vector<int64_t>{s * L};
  };
  int64_t len = l == loomCpZigzag ? C : L;
  int count = 0;
  for (int64_t qs : starts(r))
    for (int s = 0; s < P; s++)
      for (int64_t ks : starts(s)) count += !causal || ks <= qs + len - 1;
  return count;
}

TEST_P(CpAttnRanks, KernelSeesContiguousBlocksAndNoMaskedOnes) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int P = c.nranks;
        Prob p = cptest::make_prob(1, 4 * P, 4 * P, 2 * P, P, 4, 4, true, 800);
        for (loomCpAlgo_t a : kAlgos)
          for (loomCpLayout_t l : kLayouts)
            for (bool causal : {false, true}) {
              Prob pc = p;
              pc.causal = causal;
              if (!causal) pc = cptest::make_prob(1, 4 * P, 4 * P, 2 * P, P, 4, 4, false, 800);
              Counter cnt;
              cnt.p = &pc;
              if (a == loomCpUlysses) cnt.hq0 = c.rank * 2, cnt.hkv0 = c.rank;
              loomAttnKernel kern = {count_fwd, count_bwd, &cnt};
              loomAttnOpts o = opts_of(a, l, causal), od = o;
              o.kernel = &kern;
              std::string what = cptest::name_of(o, loomFloat64) + " counted";
              cptest::Local x = cptest::check_case(c, pc, loomFloat64, o, what);
              cptest::Local y = cptest::check_case(c, pc, loomFloat64, od, what + " (default)");
              EXPECT_EQ(x.out.bytes, y.out.bytes) << what;
              EXPECT_EQ(x.dk.bytes, y.dk.bytes) << what;
              int want = expected_blocks(a, l, causal, c.rank, P, pc.S);
              EXPECT_EQ(cnt.fwd, want) << what;
              EXPECT_EQ(cnt.bwd, want) << what;
              EXPECT_EQ(cnt.masked, 0) << what;
              EXPECT_EQ(cnt.wrong_rows, 0) << what;
            }
      },
      partest::opts());
}

// ---- The reference kernel on masked blocks --------------------------------------------------

struct KernelBlock {
  cptest::Buf q, k, v, out, lse, dout, dq, dk, dv;
  KernelBlock(int64_t Lq, int64_t Lk, loomDataType_t dt, uint64_t seed) {
    loomDataType_t acc = dt == loomFloat64 ? loomFloat64 : loomFloat32;
    q = cptest::Buf(dt, {1, Lq, 2, 4});
    k = cptest::Buf(dt, {1, Lk, 1, 4});
    v = cptest::Buf(dt, {1, Lk, 1, 3});
    dout = cptest::Buf(dt, {1, Lq, 2, 3});
    out = cptest::Buf(acc, {1, Lq, 2, 3});
    lse = cptest::Buf(acc, {1, 2, Lq});
    dq = cptest::Buf(acc, {1, Lq, 2, 4});
    dk = cptest::Buf(acc, {1, Lk, 1, 4});
    dv = cptest::Buf(acc, {1, Lk, 1, 3});
    cptest::Buf* in[4] = {&q, &k, &v, &dout};
    for (int i = 0; i < 4; i++) {
      auto r = partest::random_f64(in[i]->n(), seed + (uint64_t)i);
      for (size_t j = 0; j < r.size(); j++) in[i]->set(j, r[j]);
    }
  }
  // out and lse in the input dtype for backward: out is acc-typed here, so backward takes a
  // copy of it in dt.
  loomResult_t forward(int64_t qStart, int64_t kStart, double scale) {
    const loomAttnKernel* r = loomAttnKernelReference();
    return r->forward(r->ctx, q.tp(), k.tp(), v.tp(), qStart, kStart, 1, scale, out.tp(), lse.tp(),
                      nullptr);
  }
  loomResult_t backward(int64_t qStart, int64_t kStart, double scale) {
    cptest::Buf o(q.dt, out.shape);
    for (size_t i = 0; i < out.n(); i++) o.set(i, out.get(i));
    const loomAttnKernel* r = loomAttnKernelReference();
    return r->backward(r->ctx, q.tp(), k.tp(), v.tp(), o.tp(), dout.tp(), lse.tp(), qStart, kStart,
                       1, scale, dq.tp(), dk.tp(), dv.tp(), nullptr);
  }
};

int64_t count_nan(const cptest::Buf& b) {
  int64_t n = 0;
  for (size_t i = 0; i < b.n(); i++) n += std::isnan(b.get(i));
  return n;
}

// kStart > qStart + Lq - 1: every row is empty: lse -inf, out 0, gradients 0, no NaN.
TEST(CpAttnKernel, FullyMaskedBlockIsEmptyNotNaN) {
  for (loomDataType_t dt : {loomFloat64, loomFloat32, loomBfloat16})
    for (double scale : {0.5, 1000.0}) {
      KernelBlock k(4, 3, dt, 900);
      ASSERT_LOOM_OK(k.forward(10, 14, scale));
      for (size_t i = 0; i < k.lse.n(); i++) EXPECT_EQ(k.lse.get(i), -INFINITY);
      for (size_t i = 0; i < k.out.n(); i++) EXPECT_EQ(k.out.get(i), 0.0);
      ASSERT_LOOM_OK(k.backward(10, 14, scale));
      for (cptest::Buf* g : {&k.dq, &k.dk, &k.dv})
        for (size_t i = 0; i < g->n(); i++) EXPECT_EQ(g->get(i), 0.0);
    }
}

// kStart = qStart + 2: rows 0 and 1 see no key (empty), rows 2 and 3 do; logits x1000.
TEST(CpAttnKernel, PartlyMaskedRowsWithHugeLogits) {
  for (loomDataType_t dt : {loomFloat64, loomFloat32, loomFloat16}) {
    KernelBlock k(4, 4, dt, 910);
    ASSERT_LOOM_OK(k.forward(0, 2, 1000.0));
    ASSERT_LOOM_OK(k.backward(0, 2, 1000.0));
    for (cptest::Buf* b : {&k.out, &k.lse, &k.dq, &k.dk, &k.dv}) EXPECT_EQ(count_nan(*b), 0);
    for (int64_t h = 0; h < 2; h++)
      for (int64_t i = 0; i < 4; i++)
        EXPECT_EQ(std::isinf(k.lse.get((size_t)(h * 4 + i))), i < 2) << "row " << i;
    for (size_t i = 0; i < 2 * 2 * 4; i++) EXPECT_EQ(k.dq.get(i), 0.0) << "dq of an empty row";
    // Keys 2 and 3 are past every query of the block's last row (position 3 sees keys 2..3
    // at local 0..1): their gradients are 0.
    for (size_t i = 2 * 4; i < 4 * 4; i++) EXPECT_EQ(k.dk.get(i), 0.0);
  }
}

// ---- Strided views --------------------------------------------------------------------------

// A copy of b as a view that is not contiguous: 4-D tensors with each row padded by 3 elements,
// lse [B, H, L] with a stride of 2 along L.
struct View {
  cptest::Buf mem;
  loomTensor t{};
};

int64_t offset_of(const loomTensor& t, int64_t flat) {
  int64_t off = 0;
  for (int d = t.ndim - 1; d >= 0; d--) {
    off += flat % t.shape[d] * t.strides[d];
    flat /= t.shape[d];
  }
  return off;
}

View view_of(const cptest::Buf& b) {
  View v;
  std::vector<int64_t> s = b.shape;
  if (s.size() == 4)
    s[3] += 3;
  else
    s.push_back(2);
  v.mem = cptest::Buf(b.dt, s);
  v.t = v.mem.t;
  v.t.ndim = (int)b.shape.size();
  for (size_t d = 0; d < b.shape.size(); d++) v.t.shape[d] = b.shape[d];
  if (s.size() == 4 && b.shape.size() == 3) v.t.strides[2] = 2;
  for (size_t i = 0; i < b.n(); i++) v.mem.set((size_t)offset_of(v.t, (int64_t)i), b.get(i));
  return v;
}

void expect_same(const View& v, const cptest::Buf& b, const std::string& what) {
  int64_t differ = 0;
  for (size_t i = 0; i < b.n(); i++)
    differ += v.mem.get((size_t)offset_of(v.t, (int64_t)i)) != b.get(i);
  EXPECT_EQ(differ, 0) << what << ": a strided view gives another result than a copy";
}

TEST_P(CpAttnRanks, StridedViewsGiveWhatCopiesGive) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        int P = c.nranks;
        Prob p = cptest::make_prob(1, 4 * P, 4 * P, 2 * P, P, 4, 3, true, 1000);
        for (loomCpAlgo_t a : kAlgos) {
          loomAttnOpts o = opts_of(a, loomCpZigzag, true);
          std::string what = cptest::name_of(o, loomFloat32);
          cptest::Local l = cptest::check_case(c, p, loomFloat32, o, what);
          View q = view_of(l.q), k = view_of(l.k), v = view_of(l.v), dout = view_of(l.dout);
          View out = view_of(l.out), lse = view_of(l.lse), dq = view_of(l.dq), dk = view_of(l.dk),
               dv = view_of(l.dv);
          ASSERT_LOOM_OK(
              loomCpAttentionForward(&q.t, &k.t, &v.t, &out.t, &lse.t, &o, c.comm, nullptr));
          expect_same(out, l.out, what + " out");
          expect_same(lse, l.lse, what + " lse");
          ASSERT_LOOM_OK(loomCpAttentionBackward(&q.t, &k.t, &v.t, &out.t, &dout.t, &lse.t, &dq.t,
                                                 &dk.t, &dv.t, &o, c.comm, nullptr));
          expect_same(dq, l.dq, what + " dq");
          expect_same(dk, l.dk, what + " dk");
          expect_same(dv, l.dv, what + " dv");
        }
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(CpAttn, CpAttnRanks,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         partest::ranks_mode_name);

// Eight thread ranks: every algorithm, zig-zag, causal, float64 (Hq = Hkv = 8 for Ulysses).
TEST(CpAttnEight, Thread8AllAlgorithmsZigzagCausal) {
  harness::run(
      8, Mode::Thread,
      [](Ctx& c) {
        Prob p = cptest::make_prob(1, 16, 16, 8, 8, 4, 4, true, 700);
        for (loomCpAlgo_t a : kAlgos) {
          loomAttnOpts o = opts_of(a, loomCpZigzag, true);
          cptest::check_case(c, p, loomFloat64, o, cptest::name_of(o, loomFloat64));
        }
      },
      partest::opts());
}

}  // namespace
