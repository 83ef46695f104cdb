// Section 3.3 of PARALLEL.md: vocab-parallel cross entropy. Every rank builds the same whole
// vocabulary of logits from one seed, keeps its columns, and checks loss, lse and gradient
// against single-rank cross entropy over the whole vocabulary computed here in float64.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "par_test.h"

namespace {

using partest::Ctx;
using partest::Mode;
using partest::RanksMode;

// ---- The problem and its float64 reference ----------------------------------------------

struct Problem {
  int64_t b0 = 3, b1 = 5;  // leading shape [b0, b1]
  int64_t V = 0;
  std::vector<int64_t> splits, offs;  // offs[r] = v_r
  std::vector<double> z;              // [N, V]
  std::vector<int64_t> t;             // [N]
  std::vector<double> dloss;          // [N]
  int64_t N() const { return b0 * b1; }
};

// Whole-vocabulary logits (uniform in [-scale, scale), or multiples of 1/16 in [-8, 8] when
// grid, exact in every float dtype), targets with some ignored ones and some in each rank's
// columns, and random dloss.
Problem make_problem(std::vector<int64_t> splits, double scale, bool grid, uint64_t seed,
                     int64_t ignore = -100) {
  Problem p;
  p.splits = splits;
  p.offs.assign(splits.size() + 1, 0);
  for (size_t r = 0; r < splits.size(); r++) p.offs[r + 1] = p.offs[r] + splits[r];
  p.V = p.offs.back();
  auto u = partest::random_f64((size_t)(p.N() * p.V), seed);
  p.z.resize(u.size());
  for (size_t i = 0; i < u.size(); i++) p.z[i] = grid ? std::round(u[i] * 128) / 16 : u[i] * scale;
  auto w = partest::random_f64((size_t)p.N() * 2, seed + 1);
  p.t.resize((size_t)p.N());
  p.dloss.resize((size_t)p.N());
  for (int64_t i = 0; i < p.N(); i++) {
    p.t[i] = std::min<int64_t>(p.V - 1, (int64_t)((w[i] + 1) / 2 * (double)p.V));
    if (i % 5 == 3) p.t[i] = ignore;
    // Token i < P: the target is the first column of rank i (skipping empty ranks' columns).
    if (i < (int64_t)splits.size() && splits[i] > 0) p.t[i] = p.offs[i];
    p.dloss[i] = 0.5 + (w[p.N() + i] + 1);
  }
  return p;
}

struct Ref {
  std::vector<double> loss, lse, grad;  // [N], [N], [N, V]
};

// -sum_j q_j log p_j with log p_j = z_j - lse: another formula than the library's.
Ref reference(const Problem& p, double eps, int64_t ignore, bool with_dloss) {
  Ref r;
  r.loss.assign((size_t)p.N(), 0);
  r.lse.assign((size_t)p.N(), 0);
  r.grad.assign(p.z.size(), 0);
  for (int64_t i = 0; i < p.N(); i++) {
    const double* z = &p.z[(size_t)(i * p.V)];
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < p.V; j++) m = std::max(m, z[j]);
    for (int64_t j = 0; j < p.V; j++) s += std::exp(z[j] - m);
    double lse = m + std::log(s);
    r.lse[i] = lse;
    int64_t t = p.t[i];
    bool bad = t != ignore && (t < 0 || t >= p.V);
    if (t == ignore || bad) {
      r.loss[i] = bad ? NAN : 0;
      for (int64_t j = 0; j < p.V; j++) r.grad[(size_t)(i * p.V + j)] = bad ? NAN : 0;
      continue;
    }
    double g = with_dloss ? p.dloss[i] : 1.0, loss = 0;
    for (int64_t j = 0; j < p.V; j++) {
      double q = (j == t ? 1 - eps : 0) + eps / (double)p.V;
      loss += q * (lse - z[j]);
      r.grad[(size_t)(i * p.V + j)] = g * (std::exp(z[j] - lse) - q);
    }
    r.loss[i] = loss;
  }
  return r;
}

// Megatron-LM's formula on rank r (megatron/core/tensor_parallel/cross_entropy.py): the
// smoothing uses the local vocabulary size and the mean of the local log-probabilities.
double megatron_loss(const Problem& p, int rank, int64_t i, double eps, double lse) {
  double K = (double)p.splits[rank], mean = 0;
  for (int64_t j = p.offs[rank]; j < p.offs[rank + 1]; j++)
    mean += p.z[(size_t)(i * p.V + j)] - lse;
  mean /= K;
  double s = eps * K / (K - 1);
  return (1 - s) * (lse - p.z[(size_t)(i * p.V + p.t[i])]) - s * mean;
}

// ---- Storage of one rank's tensors --------------------------------------------------------

uint16_t to_bf16(double v) {  // exact for grid values
  float f = (float)v;
  uint32_t x;
  memcpy(&x, &f, 4);
  return (uint16_t)(x >> 16);
}
double from_bf16(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}
uint16_t to_half(double v) {  // exact for grid values (|v| >= 1/16 or 0)
  if (v == 0) return 0;
  int e;
  double m = std::frexp(std::fabs(v), &e);  // v = m * 2^e, m in [0.5, 1)
  uint16_t mant = (uint16_t)((m * 2 - 1) * 1024);
  return (uint16_t)((v < 0 ? 0x8000 : 0) | ((e - 1 + 15) << 10) | mant);
}
double from_half(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0    ? std::ldexp(m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
                       : std::ldexp(m + 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}

size_t dt_size(loomDataType_t dt) {
  return dt == loomFloat64 ? 8 : dt == loomFloat32 ? 4 : 2;
}
void put(void* base, size_t i, loomDataType_t dt, double v) {
  char* p = (char*)base + i * dt_size(dt);
  if (dt == loomFloat64) {
    memcpy(p, &v, 8);
  } else if (dt == loomFloat32) {
    float f = (float)v;
    memcpy(p, &f, 4);
  } else {
    uint16_t h = dt == loomBfloat16 ? to_bf16(v) : to_half(v);
    memcpy(p, &h, 2);
  }
}
double get(const void* base, size_t i, loomDataType_t dt) {
  const char* p = (const char*)base + i * dt_size(dt);
  if (dt == loomFloat64) {
    double v;
    memcpy(&v, p, 8);
    return v;
  }
  if (dt == loomFloat32) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  return dt == loomBfloat16 ? from_bf16(h) : from_half(h);
}

// One rank's logits as a strided view: rows of V_r + pad elements, of which the first V_r are
// the rank's columns (the leading strides are not contiguous ones; the last is 1).
struct Local {
  loomDataType_t dt;
  int64_t vr, ld;
  std::vector<unsigned char> store;
  loomTensor logits;
  Local(const Problem& p, int rank, loomDataType_t d, int64_t pad = 2) : dt(d) {
    vr = p.splits[rank];
    ld = vr + pad;
    store.assign((size_t)(p.N() * ld) * dt_size(dt), 0xEE);
    for (int64_t i = 0; i < p.N(); i++)
      for (int64_t j = 0; j < vr; j++)
        put(store.data(), (size_t)(i * ld + j), dt, p.z[(size_t)(i * p.V + p.offs[rank] + j)]);
    int64_t shape[3] = {p.b0, p.b1, ld};
    loomTensor full;
    EXPECT_LOOM_OK(loomTensorMake(store.data(), dt, 3, shape, &full));
    EXPECT_LOOM_OK(loomTensorSlice(&full, 2, 0, vr, &logits));
  }
  double at(int64_t i, int64_t j) const { return get(store.data(), (size_t)(i * ld + j), dt); }
};

loomDataType_t scalar_dt(loomDataType_t dt) {
  return dt == loomFloat64 ? loomFloat64 : loomFloat32;
}

std::vector<int64_t> uneven_splits(int n) {
  const int64_t s[4] = {9, 4, 13, 6};
  std::vector<int64_t> v((size_t)n);
  for (int i = 0; i < n; i++) v[(size_t)i] = s[i % 4] + i / 4;
  return v;
}

// ---- Float64: equal to the whole-vocabulary reference -------------------------------------

class XentRanks : public ::testing::TestWithParam<RanksMode> {};

// Forward and backward at one eps, float64 logits, checks against the reference; returns
// nothing but records failures. splits_arg: what the call is given (NULL for even splits).
void check_f64(Ctx& c, const Problem& p, double eps, bool even) {
  SCOPED_TRACE("eps " + std::to_string(eps) + (even ? " even" : " uneven"));
  Local L(p, c.rank, loomFloat64);
  std::vector<int64_t> t = p.t;
  std::vector<double> loss((size_t)p.N(), -7), lse((size_t)p.N(), -7), dloss = p.dloss;
  std::vector<double> grad((size_t)(p.N() * L.vr), -7);
  loomTensor tt = partest::make(t, loomInt64, {p.b0, p.b1});
  loomTensor lt = partest::make(loss, loomFloat64, {p.b0, p.b1});
  loomTensor st = partest::make(lse, loomFloat64, {p.b0, p.b1});
  loomTensor dt = partest::make(dloss, loomFloat64, {p.b0, p.b1});
  loomTensor gt = partest::make(grad, loomFloat64, {p.b0, p.b1, L.vr});
  loomCrossEntropyOpts o = LOOM_CROSS_ENTROPY_OPTS_INIT;
  o.labelSmoothing = eps;
  o.vocabSplits = even ? nullptr : p.splits.data();
  ASSERT_LOOM_OK(
      loomVocabParallelCrossEntropyForward(&L.logits, &tt, &lt, &st, &o, c.comm, nullptr));
  ASSERT_LOOM_OK(
      loomVocabParallelCrossEntropyBackward(&L.logits, &tt, &st, &dt, &gt, &o, c.comm, nullptr));
  Ref ref = reference(p, eps, -100, true);
  for (int64_t i = 0; i < p.N(); i++) {
    EXPECT_LE(partest::rel_err(loss[i], ref.loss[i]), 1e-12) << "token " << i;
    if (p.t[i] != -100) {
      EXPECT_LE(partest::rel_err(lse[i], ref.lse[i]), 1e-12) << "token " << i;
    }
    for (int64_t j = 0; j < L.vr; j++)
      EXPECT_LE(partest::rel_err(grad[(size_t)(i * L.vr + j)],
                                 ref.grad[(size_t)(i * p.V + p.offs[c.rank] + j)]),
                1e-12)
          << "token " << i << " column " << j;
  }
  // Megatron's local smoothing is another loss at tp > 1 (and differs between ranks).
  if (eps > 0 && c.nranks > 1 && L.vr > 1) {
    int differ = 0, counted = 0;
    for (int64_t i = 0; i < p.N(); i++) {
      if (p.t[i] == -100) continue;
      counted++;
      double meg = megatron_loss(p, c.rank, i, eps, ref.lse[i]);
      differ += std::fabs(meg - loss[i]) > 1e-6 * std::max(1.0, std::fabs(loss[i]));
    }
    EXPECT_EQ(differ, counted) << "Megatron's local formula gave Loom's loss";
  }
}

TEST_P(XentRanks, Float64EqualsWholeVocabulary) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        Problem p = make_problem(uneven_splits(c.nranks), 1000.0, false, 11);
        check_f64(c, p, 0.1, false);
        check_f64(c, p, 0.0, false);
        Problem q = make_problem(std::vector<int64_t>((size_t)c.nranks, 7), 1000.0, false, 12);
        check_f64(c, q, 0.1, true);
        // A rank with no columns at all.
        if (c.nranks == 1) return;
        std::vector<int64_t> z = uneven_splits(c.nranks);
        z[(size_t)c.nranks / 2] = 0;
        Problem e = make_problem(z, 30.0, false, 13);
        check_f64(c, e, 0.1, false);
      },
      partest::opts());
}

// Megatron's formula, spelled out on one token, with the numbers the two formulas give.
TEST_P(XentRanks, MegatronLocalSmoothingDiffers) {
  auto [n, mode] = GetParam();
  if (n == 1) GTEST_SKIP() << "at tp 1 local and global vocabulary are the same";
  harness::run(
      n, mode,
      [](Ctx& c) {
        Problem p = make_problem(uneven_splits(c.nranks), 1.0, false, 21);
        Ref ref = reference(p, 0.1, -100, false);
        double loom = ref.loss[0];
        double meg = megatron_loss(p, c.rank, 0, 0.1, ref.lse[0]);
        // Megatron's per-rank value is not even the same on every rank.
        double lo = 0, hi = 0;
        ASSERT_LOOM_OK(loomAllReduce(&meg, &lo, 1, loomFloat64, loomMin, c.comm, nullptr));
        ASSERT_LOOM_OK(loomAllReduce(&meg, &hi, 1, loomFloat64, loomMax, c.comm, nullptr));
        EXPECT_GT(hi - lo, 1e-6) << "Megatron's loss was rank-independent";
        EXPECT_GT(std::fabs(meg - loom), 1e-6);
        if (c.rank == 0)
          printf("token 0: whole-vocabulary loss %.12f, Megatron's local formula %.12f..%.12f\n",
                 loom, lo, hi);
      },
      partest::opts());
}

// ---- Lower precision ------------------------------------------------------------------------

TEST_P(XentRanks, Float32Bfloat16Float16WithinTolerance) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        // Grid logits are exact in every dtype, so the reference sees what the call sees.
        Problem p = make_problem(uneven_splits(c.nranks), 0, true, 31);
        Ref ref = reference(p, 0.1, -100, false);
        for (loomDataType_t dt : {loomFloat32, loomBfloat16, loomFloat16}) {
          SCOPED_TRACE(std::to_string((int)dt));
          Local L(p, c.rank, dt);
          std::vector<int64_t> t = p.t;
          std::vector<float> loss((size_t)p.N()), lse((size_t)p.N());
          std::vector<unsigned char> grad((size_t)(p.N() * L.vr) * dt_size(dt));
          loomTensor tt = partest::make(t, loomInt64, {p.b0, p.b1});
          loomTensor lt = partest::make(loss, loomFloat32, {p.b0, p.b1});
          loomTensor st = partest::make(lse, loomFloat32, {p.b0, p.b1});
          loomTensor gt;
          int64_t gs[3] = {p.b0, p.b1, L.vr};
          ASSERT_LOOM_OK(loomTensorMake(grad.data(), dt, 3, gs, &gt));
          loomCrossEntropyOpts o = {-100, 0.1, p.splits.data()};
          ASSERT_LOOM_OK(
              loomVocabParallelCrossEntropyForward(&L.logits, &tt, &lt, &st, &o, c.comm, nullptr));
          ASSERT_LOOM_OK(loomVocabParallelCrossEntropyBackward(&L.logits, &tt, &st, nullptr, &gt,
                                                               &o, c.comm, nullptr));
          double out_eps = dt == loomFloat32 ? 0x1p-24 : dt == loomBfloat16 ? 0x1p-8 : 0x1p-11;
          for (int64_t i = 0; i < p.N(); i++) {
            EXPECT_LE(partest::rel_err(loss[i], ref.loss[i]), 1e-5) << "token " << i;
            for (int64_t j = 0; j < L.vr; j++) {
              double want = ref.grad[(size_t)(i * p.V + p.offs[c.rank] + j)];
              double got = get(grad.data(), (size_t)(i * L.vr + j), dt);
              EXPECT_LE(std::fabs(got - want), out_eps * std::fabs(want) + 1e-5)
                  << "token " << i << " column " << j;
            }
          }
        }
      },
      partest::opts());
}

// ---- Targets outside the vocabulary ---------------------------------------------------------

TEST_P(XentRanks, OutOfRangeTargetIsNaNForThatTokenOnly) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        Problem p = make_problem(uneven_splits(c.nranks), 1000.0, false, 41, -1);
        p.t[2] = p.V;       // one past the vocabulary
        p.t[7] = -5;        // negative, not the ignore index (-1 here)
        p.t[11] = p.V + 9;  // further out
        Ref ref = reference(p, 0.1, -1, false);
        Local L(p, c.rank, loomFloat64);
        std::vector<int32_t> t(p.t.begin(), p.t.end());  // int32 targets
        std::vector<double> loss((size_t)p.N()), grad((size_t)(p.N() * L.vr));
        loomTensor tt = partest::make(t, loomInt32, {p.b0, p.b1});
        loomTensor lt = partest::make(loss, loomFloat64, {p.b0, p.b1});
        loomTensor gt = partest::make(grad, loomFloat64, {p.b0, p.b1, L.vr});
        std::vector<double> lse((size_t)p.N());
        loomTensor st = partest::make(lse, loomFloat64, {p.b0, p.b1});
        loomCrossEntropyOpts o = {-1, 0.1, p.splits.data()};
        ASSERT_LOOM_OK(
            loomVocabParallelCrossEntropyForward(&L.logits, &tt, &lt, &st, &o, c.comm, nullptr));
        ASSERT_LOOM_OK(loomVocabParallelCrossEntropyBackward(&L.logits, &tt, &st, nullptr, &gt, &o,
                                                             c.comm, nullptr));
        for (int64_t i = 0; i < p.N(); i++) {
          bool bad = i == 2 || i == 7 || i == 11;
          EXPECT_EQ(std::isnan(loss[i]), bad) << "token " << i;
          if (!bad) {
            EXPECT_LE(partest::rel_err(loss[i], ref.loss[i]), 1e-12) << "token " << i;
          }
          if (p.t[i] == -1) {
            EXPECT_EQ(loss[i], 0.0) << "ignored token " << i;
          }
          for (int64_t j = 0; j < L.vr; j++) {
            double g = grad[(size_t)(i * L.vr + j)];
            EXPECT_EQ(std::isnan(g), bad) << "token " << i << " column " << j;
            if (!bad) {
              EXPECT_LE(partest::rel_err(g, ref.grad[(size_t)(i * p.V + p.offs[c.rank] + j)]),
                        1e-12);
            }
          }
        }
      },
      partest::opts());
}

// ---- In place and reproducible ---------------------------------------------------------------

TEST_P(XentRanks, InPlaceBackwardAndBitwiseRepeat) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        Problem p = make_problem(uneven_splits(c.nranks), 0, true, 51);
        for (loomDataType_t dt : {loomFloat64, loomBfloat16}) {
          loomDataType_t sdt = scalar_dt(dt);
          Local L(p, c.rank, dt), M(p, c.rank, dt);
          std::vector<int64_t> t = p.t;
          std::vector<double> buf((size_t)p.N() * 6);  // loss, lse, dloss twice over (any dtype)
          for (int64_t i = 0; i < p.N(); i++)
            put(buf.data() + 2 * p.N(), (size_t)i, sdt, p.dloss[i]);
          loomTensor tt = partest::make(t, loomInt64, {p.b0, p.b1});
          int64_t ls[2] = {p.b0, p.b1};
          loomTensor lt, st, dt2, lt2, st2;
          ASSERT_LOOM_OK(loomTensorMake(buf.data(), sdt, 2, ls, &lt));
          ASSERT_LOOM_OK(loomTensorMake(buf.data() + p.N(), sdt, 2, ls, &st));
          ASSERT_LOOM_OK(loomTensorMake(buf.data() + 2 * p.N(), sdt, 2, ls, &dt2));
          ASSERT_LOOM_OK(loomTensorMake(buf.data() + 3 * p.N(), sdt, 2, ls, &lt2));
          ASSERT_LOOM_OK(loomTensorMake(buf.data() + 4 * p.N(), sdt, 2, ls, &st2));
          loomCrossEntropyOpts o = {-100, 0.1, p.splits.data()};
          ASSERT_LOOM_OK(
              loomVocabParallelCrossEntropyForward(&L.logits, &tt, &lt, &st, &o, c.comm, nullptr));
          ASSERT_LOOM_OK(loomVocabParallelCrossEntropyForward(&L.logits, &tt, &lt2, &st2, &o,
                                                              c.comm, nullptr));
          EXPECT_EQ(memcmp(buf.data(), buf.data() + 3 * p.N(), (size_t)p.N() * dt_size(sdt)), 0);
          // Out of place into a dense tensor, then in place over M's (strided) logits.
          std::vector<unsigned char> g((size_t)(p.N() * L.vr) * dt_size(dt));
          int64_t gs[3] = {p.b0, p.b1, L.vr};
          loomTensor gt;
          ASSERT_LOOM_OK(loomTensorMake(g.data(), dt, 3, gs, &gt));
          ASSERT_LOOM_OK(loomVocabParallelCrossEntropyBackward(&L.logits, &tt, &st, &dt2, &gt, &o,
                                                               c.comm, nullptr));
          ASSERT_LOOM_OK(loomVocabParallelCrossEntropyBackward(&M.logits, &tt, &st, &dt2, &M.logits,
                                                               &o, c.comm, nullptr));
          for (int64_t i = 0; i < p.N(); i++)
            for (int64_t j = 0; j < L.vr; j++)
              EXPECT_EQ(get(g.data(), (size_t)(i * L.vr + j), dt), M.at(i, j))
                  << "token " << i << " column " << j;
          // The padding between M's rows is untouched.
          for (int64_t i = 0; i < p.N(); i++)
            EXPECT_EQ(M.store[(size_t)(i * M.ld + M.vr) * dt_size(dt)], 0xEE);
        }
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(Xent, XentRanks,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         partest::ranks_mode_name);

// ---- For tests/parallel/torch_xent.py ---------------------------------------------------------

// With LOOM_TORCH_XENT_DIR set: a tp=3 run with uneven splits, eps 0.1, ignore -100, writes
// meta.txt ("N V eps ignore"), logits.bin [N, V], dloss.bin [N], loss.bin [N] and grad.bin
// [N, V] as raw float64 and target.bin [N] as raw int64, for torch to recompute.
TEST(XentTorch, DumpForTorch) {
  const char* dir = getenv("LOOM_TORCH_XENT_DIR");
  if (dir == nullptr) GTEST_SKIP() << "LOOM_TORCH_XENT_DIR is not set (torch_xent.py sets it)";
  std::string d = dir;
  harness::run(
      3, Mode::Thread,
      [d](Ctx& c) {
        Problem p = make_problem({11, 3, 7}, 1000.0, false, 61);
        Local L(p, c.rank, loomFloat64);
        std::vector<double> loss((size_t)p.N()), lse((size_t)p.N()), dloss = p.dloss;
        std::vector<double> grad((size_t)(p.N() * L.vr));
        loomTensor tt = partest::make(p.t, loomInt64, {p.b0, p.b1});
        loomTensor lt = partest::make(loss, loomFloat64, {p.b0, p.b1});
        loomTensor st = partest::make(lse, loomFloat64, {p.b0, p.b1});
        loomTensor dt = partest::make(dloss, loomFloat64, {p.b0, p.b1});
        loomTensor gt = partest::make(grad, loomFloat64, {p.b0, p.b1, L.vr});
        loomCrossEntropyOpts o = {-100, 0.1, p.splits.data()};
        ASSERT_LOOM_OK(
            loomVocabParallelCrossEntropyForward(&L.logits, &tt, &lt, &st, &o, c.comm, nullptr));
        ASSERT_LOOM_OK(loomVocabParallelCrossEntropyBackward(&L.logits, &tt, &st, &dt, &gt, &o,
                                                             c.comm, nullptr));
        // The whole gradient: each rank its columns, zeros elsewhere, summed (exact).
        std::vector<double> full(p.z.size(), 0.0), sum(p.z.size());
        for (int64_t i = 0; i < p.N(); i++)
          for (int64_t j = 0; j < L.vr; j++)
            full[(size_t)(i * p.V + p.offs[c.rank] + j)] = grad[(size_t)(i * L.vr + j)];
        ASSERT_LOOM_OK(loomAllReduce(full.data(), sum.data(), full.size(), loomFloat64, loomSum,
                                     c.comm, nullptr));
        if (c.rank != 0) return;
        auto write = [&](const char* name, const void* data, size_t bytes) {
          std::ofstream f(d + "/" + name, std::ios::binary);
          f.write((const char*)data, (std::streamsize)bytes);
          ASSERT_TRUE(f.good()) << "cannot write " << d << "/" << name;
        };
        std::ofstream(d + "/meta.txt") << p.N() << " " << p.V << " 0.1 -100\n";
        write("logits.bin", p.z.data(), p.z.size() * 8);
        write("target.bin", p.t.data(), p.t.size() * 8);
        write("dloss.bin", p.dloss.data(), p.dloss.size() * 8);
        write("loss.bin", loss.data(), loss.size() * 8);
        write("grad.bin", sum.data(), sum.size() * 8);
      },
      partest::opts());
}

// ---- Misuse ---------------------------------------------------------------------------------

TEST(XentArgs, MisuseNamesTheArgumentAndLeavesOutputs) {
  harness::run(
      2, Mode::Proc,
      [](Ctx& c) {
        const char* F = "loomVocabParallelCrossEntropyForward";
        const char* B = "loomVocabParallelCrossEntropyBackward";
        Problem p = make_problem({6, 5}, 1.0, false, 71);
        Local L(p, c.rank, loomFloat32);
        std::vector<int64_t> t = p.t;
        std::vector<float> loss((size_t)p.N(), 3.0f), lse((size_t)p.N(), 4.0f),
            dl((size_t)p.N(), 1.0f);
        std::vector<float> g((size_t)(p.N() * L.vr), 5.0f);
        loomTensor tt = partest::make(t, loomInt64, {p.b0, p.b1});
        loomTensor lt = partest::make(loss, loomFloat32, {p.b0, p.b1});
        loomTensor st = partest::make(lse, loomFloat32, {p.b0, p.b1});
        loomTensor dt = partest::make(dl, loomFloat32, {p.b0, p.b1});
        loomTensor gt = partest::make(g, loomFloat32, {p.b0, p.b1, L.vr});
        loomCrossEntropyOpts o = {-100, 0.1, p.splits.data()};
        auto fwd = [&](const loomTensor* z, const loomTensor* tg, loomTensor* l, loomTensor* s,
                       const loomCrossEntropyOpts* op, loomComm_t comm) {
          return loomVocabParallelCrossEntropyForward(z, tg, l, s, op, comm, nullptr);
        };
        auto bwd = [&](const loomTensor* z, const loomTensor* s, const loomTensor* d,
                       loomTensor* gr, const loomCrossEntropyOpts* op) {
          return loomVocabParallelCrossEntropyBackward(z, &tt, s, d, gr, op, c.comm, nullptr);
        };
        auto outs = [&] {
          auto b = partest::bytes_of(loss);
          auto b2 = partest::bytes_of(lse);
          b.insert(b.end(), b2.begin(), b2.end());
          return b;
        };
        // Pointers and the communicator.
        EXPECT_MISUSE(fwd(nullptr, &tt, &lt, &st, &o, c.comm), c.comm, F, outs(), "logits");
        EXPECT_MISUSE(fwd(&L.logits, nullptr, &lt, &st, &o, c.comm), c.comm, F, outs(), "target");
        EXPECT_MISUSE(fwd(&L.logits, &tt, nullptr, &st, &o, c.comm), c.comm, F, outs(), "loss");
        EXPECT_MISUSE(fwd(&L.logits, &tt, &lt, &st, &o, nullptr), nullptr, F, outs(), "tp");
        // dtypes.
        loomTensor x = L.logits;
        x.dtype = loomInt32;
        EXPECT_MISUSE(fwd(&x, &tt, &lt, &st, &o, c.comm), c.comm, F, outs(), "logits.dtype",
                      "int32");
        loomTensor y = tt;
        y.dtype = loomFloat64;
        EXPECT_MISUSE(fwd(&L.logits, &y, &lt, &st, &o, c.comm), c.comm, F, outs(), "target.dtype");
        y = lt;
        y.dtype = loomFloat64;  // float32 logits take a float32 loss
        EXPECT_MISUSE(fwd(&L.logits, &tt, &y, &st, &o, c.comm), c.comm, F, outs(), "loss.dtype",
                      "float64");
        y = st;
        y.dtype = loomFloat16;
        EXPECT_MISUSE(fwd(&L.logits, &tt, &lt, &y, &o, c.comm), c.comm, F, outs(), "lse.dtype");
        // Shapes and strides.
        x = L.logits;
        x.ndim = 0;
        EXPECT_MISUSE(fwd(&x, &tt, &lt, &st, &o, c.comm), c.comm, F, outs(), "logits.ndim");
        x = L.logits;
        x.strides[2] = 2;
        x.shape[2] = 3;
        loomCrossEntropyOpts o3 = o;
        int64_t s3[2] = {3, 3};
        o3.vocabSplits = s3;
        EXPECT_MISUSE(fwd(&x, &tt, &lt, &st, &o3, c.comm), c.comm, F, outs(), "strides[2]", "2");
        y = tt;
        y.shape[1] = 4;
        EXPECT_MISUSE(fwd(&L.logits, &y, &lt, &st, &o, c.comm), c.comm, F, outs(), "target",
                      "[3, 4]", "[3, 5]");
        y = lt;
        y.ndim = 1;
        y.shape[0] = 15;
        y.strides[0] = 1;
        EXPECT_MISUSE(fwd(&L.logits, &tt, &y, &st, &o, c.comm), c.comm, F, outs(), "loss", "[15]");
        y = st;
        y.shape[0] = 2;
        EXPECT_MISUSE(fwd(&L.logits, &tt, &lt, &y, &o, c.comm), c.comm, F, outs(), "lse", "[2, 5]");
        // Options.
        for (double e : {1.0, -0.1, 1.5, (double)NAN}) {
          loomCrossEntropyOpts oe = o;
          oe.labelSmoothing = e;
          EXPECT_MISUSE(fwd(&L.logits, &tt, &lt, &st, &oe, c.comm), c.comm, F, outs(),
                        "labelSmoothing");
          EXPECT_MISUSE(bwd(&L.logits, &st, &dt, &gt, &oe), c.comm, B, partest::bytes_of(g),
                        "labelSmoothing");
        }
        int64_t neg[2] = {-1, 12};
        loomCrossEntropyOpts on = o;
        on.vocabSplits = neg;
        EXPECT_MISUSE(fwd(&L.logits, &tt, &lt, &st, &on, c.comm), c.comm, F, outs(),
                      "vocabSplits[0]", "-1");
        int64_t wrong[2] = {p.splits[1], p.splits[0]};  // entry [rank] is not this rank's V_r
        on.vocabSplits = wrong;
        EXPECT_MISUSE(fwd(&L.logits, &tt, &lt, &st, &on, c.comm), c.comm, F, outs(), "vocabSplits[",
                      "V_r");
        EXPECT_MISUSE(bwd(&L.logits, &st, &dt, &gt, &on), c.comm, B, partest::bytes_of(g),
                      "vocabSplits[");
        // Overlaps: loss inside logits, lse over loss, loss over itself.
        y = lt;
        y.data = L.logits.data;
        std::vector<unsigned char> lg = L.store;
        EXPECT_MISUSE(fwd(&L.logits, &tt, &y, &st, &o, c.comm), c.comm, F, lg, "loss", "logits");
        EXPECT_EQ(lg, L.store);
        y = st;
        y.data = loss.data() + 3;
        EXPECT_MISUSE(fwd(&L.logits, &tt, &lt, &y, &o, c.comm), c.comm, F, outs(), "loss", "lse");
        y = lt;
        y.strides[0] = 1;
        EXPECT_MISUSE(fwd(&L.logits, &tt, &y, &st, &o, c.comm), c.comm, F, outs(), "loss",
                      "overlaps itself");
        // Backward: lse is required; dloss, dlogits of the right shape and dtype; overlaps.
        auto gb = [&] { return partest::bytes_of(g); };
        EXPECT_MISUSE(bwd(&L.logits, nullptr, &dt, &gt, &o), c.comm, B, gb(), "lse");
        EXPECT_MISUSE(bwd(&L.logits, &st, &dt, nullptr, &o), c.comm, B, gb(), "dlogits");
        y = dt;
        y.shape[0] = 1;
        EXPECT_MISUSE(bwd(&L.logits, &st, &y, &gt, &o), c.comm, B, gb(), "dloss", "[1, 5]");
        y = st;
        y.dtype = loomFloat64;
        EXPECT_MISUSE(bwd(&L.logits, &y, &dt, &gt, &o), c.comm, B, gb(), "lse.dtype");
        y = gt;
        y.dtype = loomBfloat16;
        EXPECT_MISUSE(bwd(&L.logits, &st, &dt, &y, &o), c.comm, B, gb(), "dlogits.dtype",
                      "bfloat16");
        y = gt;
        y.shape[2] = L.vr - 1;
        y.strides[1] = L.vr - 1;
        y.strides[0] = 5 * (L.vr - 1);
        EXPECT_MISUSE(bwd(&L.logits, &st, &dt, &y, &o), c.comm, B, gb(), "dlogits", "shape");
        y = L.logits;  // the same storage one element on: not the in-place form
        y.data = (float*)L.logits.data + 1;
        lg = L.store;
        EXPECT_MISUSE(bwd(&L.logits, &st, &dt, &y, &o), c.comm, B, lg, "dlogits", "logits");
        EXPECT_EQ(lg, L.store);
        y = gt;
        y.data = lse.data();
        y.shape[2] = 1;
        y.strides[0] = 5;
        y.strides[1] = 1;
        loomTensor z1 = L.logits;
        z1.shape[2] = 1;
        loomCrossEntropyOpts o1 = o;
        int64_t ones[2] = {1, 1};
        o1.vocabSplits = ones;
        EXPECT_MISUSE(bwd(&z1, &st, &dt, &y, &o1), c.comm, B, partest::bytes_of(lse), "dlogits",
                      "lse");
        // Valid calls afterwards, with a host stream.
        loomStream_t s = nullptr;
        ASSERT_LOOM_OK(loomStreamCreate(&s));
        ASSERT_LOOM_OK(
            loomVocabParallelCrossEntropyForward(&L.logits, &tt, &lt, nullptr, &o, c.comm, s));
        ASSERT_LOOM_OK(loomStreamSynchronize(s));
        ASSERT_LOOM_OK(
            loomVocabParallelCrossEntropyForward(&L.logits, &tt, &lt, &st, &o, c.comm, s));
        ASSERT_LOOM_OK(loomVocabParallelCrossEntropyBackward(&L.logits, &tt, &st, nullptr, &gt, &o,
                                                             c.comm, s));
        ASSERT_LOOM_OK(loomStreamSynchronize(s));
        ASSERT_LOOM_OK(loomStreamDestroy(s));
        Ref ref = reference(p, 0.1, -100, false);
        for (int64_t i = 0; i < p.N(); i++)
          EXPECT_LE(partest::rel_err(loss[i], ref.loss[i]), 1e-5) << "token " << i;
      },
      partest::opts());
}

}  // namespace
