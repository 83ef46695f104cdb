// Section 3.2 of PARALLEL.md: column- and row-parallel linear layers. A TP MLP (column, GeLU,
// row) and an SP MLP give the unsharded MLP's output, input gradient and every weight and bias
// gradient in float64 (relative 1e-12) at tp 1..4 with uneven splits; a counting GEMM sees only
// the three stated forms; misuse is refused before any communication.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

#include "par_test.h"

namespace {

using partest::Ctx;
using partest::Mode;
using partest::RanksMode;
using Vec = std::vector<double>;

double gelu(double v) {
  return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
}
double gelu_grad(double v) {
  const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
  return 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * pdf;
}

// Row-major helpers on plain vectors: C[m x n] = A[m x k] * B^T (B is [n x k]).
Vec mul_bt(const Vec& A, const Vec& B, int64_t m, int64_t n, int64_t k) {
  Vec C(m * n, 0.0);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t l = 0; l < k; l++) s += A[i * k + l] * B[j * k + l];
      C[i * n + j] = s;
    }
  return C;
}
// C[m x n] = A[m x k] * B[k x n]
Vec mul(const Vec& A, const Vec& B, int64_t m, int64_t n, int64_t k) {
  Vec C(m * n, 0.0);
  for (int64_t i = 0; i < m; i++)
    for (int64_t l = 0; l < k; l++)
      for (int64_t j = 0; j < n; j++) C[i * n + j] += A[i * k + l] * B[l * n + j];
  return C;
}
// C[n x k] = A^T * B with A [m x n], B [m x k]
Vec mul_at(const Vec& A, const Vec& B, int64_t m, int64_t n, int64_t k) {
  Vec C(n * k, 0.0);
  for (int64_t i = 0; i < m; i++)
    for (int64_t a = 0; a < n; a++)
      for (int64_t b = 0; b < k; b++) C[a * k + b] += A[i * n + a] * B[i * k + b];
  return C;
}

// The MLP: x [S, B, H] -> h = x W1^T + b1 [S, B, F] -> a = gelu(h) -> y = a W2^T + b2 [S, B, H].
struct Mlp {
  int64_t S, B, H, F;
  Vec x, w1, b1, w2, b2, g;  // g: the output gradient
  Vec h, a, y, dx, dw1, db1, dw2, db2;
  Mlp(int64_t s, int64_t b, int64_t hd, int64_t f, uint64_t seed) : S(s), B(b), H(hd), F(f) {
    x = partest::random_f64(S * B * H, seed + 1);
    w1 = partest::random_f64(F * H, seed + 2);
    b1 = partest::random_f64(F, seed + 3);
    w2 = partest::random_f64(H * F, seed + 4);
    b2 = partest::random_f64(H, seed + 5);
    g = partest::random_f64(S * B * H, seed + 6);
    int64_t T = S * B;
    h = mul_bt(x, w1, T, F, H);
    for (int64_t t = 0; t < T; t++)
      for (int64_t j = 0; j < F; j++) h[t * F + j] += b1[j];
    a = h;
    for (auto& v : a) v = gelu(v);
    y = mul_bt(a, w2, T, H, F);
    for (int64_t t = 0; t < T; t++)
      for (int64_t j = 0; j < H; j++) y[t * H + j] += b2[j];
    Vec da = mul(g, w2, T, F, H);
    dw2 = mul_at(g, a, T, H, F);
    db2.assign(H, 0.0);
    for (int64_t t = 0; t < T; t++)
      for (int64_t j = 0; j < H; j++) db2[j] += g[t * H + j];
    Vec dh(T * F);
    for (int64_t i = 0; i < T * F; i++) dh[i] = da[i] * gelu_grad(h[i]);
    dx = mul(dh, w1, T, H, F);
    dw1 = mul_at(dh, x, T, F, H);
    db1.assign(F, 0.0);
    for (int64_t t = 0; t < T; t++)
      for (int64_t j = 0; j < F; j++) db1[j] += dh[t * F + j];
  }
};

// Offsets of uneven splits of n over p ranks: rank r gets about n/p, the first ones one more,
// and rank 1 none at all when `with_zero` (p > 2).
std::vector<int64_t> uneven(int64_t n, int p, bool with_zero) {
  std::vector<int64_t> s(p, 0);
  std::vector<int> who;
  for (int r = 0; r < p; r++)
    if (!(with_zero && p > 2 && r == 1)) who.push_back(r);
  for (int64_t i = 0; i < n; i++) s[who[(i * 7 + i / 3) % who.size()]]++;
  return s;
}
std::vector<int64_t> offsets(const std::vector<int64_t>& s) {
  std::vector<int64_t> o(s.size() + 1, 0);
  for (size_t i = 0; i < s.size(); i++) o[i + 1] = o[i] + s[i];
  return o;
}

void expect_close(const Vec& got, const Vec& want, const char* what, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); i++) {
    double e = partest::rel_err(got[i], want[i]);
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": element " << at << " is " << got[at] << ", expected "
                        << want[at];
}

// Columns [c0, c0 + n) of a rows x cols matrix.
Vec cols_of(const Vec& m, int64_t rows, int64_t cols, int64_t c0, int64_t n) {
  Vec out(rows * n);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < n; j++) out[i * n + j] = m[i * cols + c0 + j];
  return out;
}
// Positions [s0, s0 + n) along dim `sdim` (0 or 1) of an [S, B, W] array.
Vec seq_of(const Vec& m, int64_t S, int64_t B, int64_t W, int sdim, int64_t s0, int64_t n) {
  Vec out;
  for (int64_t s = 0; s < S; s++)
    for (int64_t b = 0; b < B; b++) {
      int64_t pos = sdim == 0 ? s : b;
      if (pos < s0 || pos >= s0 + n) continue;
      out.insert(out.end(), m.begin() + (s * B + b) * W, m.begin() + (s * B + b + 1) * W);
    }
  return out;
}

// A GEMM that counts the forms it is called in, then calls the default.
struct Counting {
  std::mutex mu;
  std::set<std::pair<int, int>> forms;
  std::atomic<int> calls{0};
};
loomResult_t counting_gemm(void* ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                           const void* A, int64_t lda, const void* B, int64_t ldb, double beta,
                           void* C, int64_t ldc, loomDataType_t dt, loomStream_t stream) {
  auto* cnt = static_cast<Counting*>(ctx);
  {
    std::lock_guard<std::mutex> g(cnt->mu);
    cnt->forms.insert({ta, tb});
  }
  cnt->calls++;
  const loomGemm* d = loomGemmDefault();
  return d->fn(d->ctx, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, dt, stream);
}

// One MLP forward and backward through the layer, checked against the reference.
// sp: sequence parallel along sdim (0: [S, B, H] with the ring; 1: [B-major] gather path).
// What one rank's layer calls produced, for the PyTorch check (TorchDump).
struct MlpOut {
  Vec y, dx, dw1, db1, dw2, db2;
  std::vector<int64_t> fs, ss;  // the hidden and sequence splits
};

void run_mlp(Ctx& c, bool sp, int sdim, bool give_full, Counting* cnt, MlpOut* out = nullptr,
             int overlap = 1) {
  const int64_t S = sdim == 0 ? 7 : 3, B = sdim == 0 ? 2 : 7, H = 5, F = 11;
  Mlp ref(S, B, H, F, 1234);
  const int P = c.nranks, r = c.rank;
  auto fs = uneven(F, P, true);
  auto fo = offsets(fs);
  const int64_t seq = sdim == 0 ? S : B;  // the split extent
  auto ss = uneven(seq, P, P > 2);
  auto so = offsets(ss);
  const int64_t Fr = fs[r], T = S * B;
  Vec w1r(ref.w1.begin() + fo[r] * H, ref.w1.begin() + fo[r + 1] * H);
  Vec b1r(ref.b1.begin() + fo[r], ref.b1.begin() + fo[r + 1]);
  Vec w2r = cols_of(ref.w2, H, F, fo[r], Fr), b2 = ref.b2;
  Counting local;
  loomGemm gemm{counting_gemm, cnt ? cnt : &local};
  loomLinearOpts o = LOOM_LINEAR_OPTS_INIT;
  o.gemm = &gemm;
  o.sequenceParallel = sp;
  o.seqDim = sdim;
  o.seqSplits = ss.data();
  o.overlap = overlap;
  // Shapes: the local token part under SP.
  std::vector<int64_t> full_tok = {S, B}, my_tok = full_tok;
  if (sp) my_tok[sdim] = ss[r];
  auto shape = [](std::vector<int64_t> tok, int64_t w) {
    tok.push_back(w);
    return tok;
  };
  Vec x = sp ? seq_of(ref.x, S, B, H, sdim, so[r], ss[r]) : ref.x;
  Vec h(T * Fr), xfull(give_full ? T * H : 0);
  auto tx = partest::make(x, loomFloat64, shape(my_tok, H));
  auto tw1 = partest::make(w1r, loomFloat64, {Fr, H});
  auto tb1 = partest::make(b1r, loomFloat64, {Fr});
  auto th = partest::make(h, loomFloat64, shape(full_tok, Fr));
  loomTensor txf;
  if (give_full) txf = partest::make(xfull, loomFloat64, shape(full_tok, H));
  ASSERT_LOOM_OK(loomColumnLinearForward(&tx, &tw1, &tb1, &th, give_full ? &txf : nullptr, &o,
                                         c.comm, nullptr));
  expect_close(h, cols_of(ref.h, T, F, fo[r], Fr), "h");
  if (give_full) expect_close(xfull, ref.x, "xFull");
  Vec a = h;
  for (auto& v : a) v = gelu(v);
  Vec y(sp ? seq_of(ref.y, S, B, H, sdim, so[r], ss[r]).size() : T * H);
  auto ta = partest::make(a, loomFloat64, shape(full_tok, Fr));
  auto tw2 = partest::make(w2r, loomFloat64, {H, Fr});
  auto tb2 = partest::make(b2, loomFloat64, {H});
  auto ty = partest::make(y, loomFloat64, shape(my_tok, H));
  ASSERT_LOOM_OK(loomRowLinearForward(&ta, &tw2, &tb2, &ty, &o, c.comm, nullptr));
  expect_close(y, sp ? seq_of(ref.y, S, B, H, sdim, so[r], ss[r]) : ref.y, "y");
  // Backward.
  Vec g = sp ? seq_of(ref.g, S, B, H, sdim, so[r], ss[r]) : ref.g;
  Vec da(T * Fr), gfull(sp ? T * H : 0);
  auto tg = partest::make(g, loomFloat64, shape(my_tok, H));
  auto tda = partest::make(da, loomFloat64, shape(full_tok, Fr));
  loomTensor tgf;
  if (sp) tgf = partest::make(gfull, loomFloat64, shape(full_tok, H));
  ASSERT_LOOM_OK(
      loomRowLinearBackwardInput(&tg, &tw2, &tda, sp ? &tgf : nullptr, &o, c.comm, nullptr));
  Vec dw2(H * Fr), db2(H);
  auto tdw2 = partest::make(dw2, loomFloat64, {H, Fr});
  auto tdb2 = partest::make(db2, loomFloat64, {H});
  ASSERT_LOOM_OK(loomLinearBackwardWeight(&ta, sp ? &tgf : &tg, &tdw2, &tdb2, &o, nullptr));
  expect_close(dw2, cols_of(ref.dw2, H, F, fo[r], Fr), "dW2");
  expect_close(db2, ref.db2, "db2");
  Vec dh(T * Fr);
  for (int64_t i = 0; i < T * Fr; i++) dh[i] = da[i] * gelu_grad(h[i]);
  Vec dx(x.size());
  auto tdh = partest::make(dh, loomFloat64, shape(full_tok, Fr));
  auto tdx = partest::make(dx, loomFloat64, shape(my_tok, H));
  ASSERT_LOOM_OK(loomColumnLinearBackwardInput(&tdh, &tw1, &tdx, &o, c.comm, nullptr));
  expect_close(dx, sp ? seq_of(ref.dx, S, B, H, sdim, so[r], ss[r]) : ref.dx, "dx");
  // The weight gradient adds with accumulate: twice gives 2x.
  Vec dw1(Fr * H, 0.0), db1(Fr, 0.0);
  auto tdw1 = partest::make(dw1, loomFloat64, {Fr, H});
  auto tdb1 = partest::make(db1, loomFloat64, {Fr});
  Vec xf = sp ? ref.x : x;
  auto txall = partest::make(xf, loomFloat64, shape(full_tok, H));
  o.accumulate = 1;
  ASSERT_LOOM_OK(loomLinearBackwardWeight(&txall, &tdh, &tdw1, &tdb1, &o, nullptr));
  ASSERT_LOOM_OK(loomLinearBackwardWeight(&txall, &tdh, &tdw1, &tdb1, &o, nullptr));
  Vec want_dw1(ref.dw1.begin() + fo[r] * H, ref.dw1.begin() + fo[r + 1] * H);
  Vec want_db1(ref.db1.begin() + fo[r], ref.db1.begin() + fo[r + 1]);
  for (auto& v : want_dw1) v *= 2;
  for (auto& v : want_db1) v *= 2;
  expect_close(dw1, want_dw1, "dW1 accumulated twice");
  expect_close(db1, want_db1, "db1 accumulated twice");
  if (out != nullptr) {
    for (auto& v : dw1) v /= 2;
    for (auto& v : db1) v /= 2;
    *out = MlpOut{y, dx, dw1, db1, dw2, db2, fs, ss};
  }
}

class LinearMlp : public ::testing::TestWithParam<RanksMode> {};

TEST_P(LinearMlp, TensorParallelEqualsUnsharded) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode, [](Ctx& c) { run_mlp(c, false, 0, false, nullptr); }, partest::opts());
}

TEST_P(LinearMlp, SequenceParallelRingEqualsUnsharded) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        run_mlp(c, true, 0, true, nullptr);  // the ring (overlap 1)
        run_mlp(c, true, 0, false, nullptr);
        run_mlp(c, true, 0, true, nullptr, nullptr, 0);  // the layer's choice: gather first
        run_mlp(c, true, 0, false, nullptr, nullptr, -1);
      },
      partest::opts());
}

TEST_P(LinearMlp, SequenceParallelInnerDimEqualsUnsharded) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        run_mlp(c, true, 1, false, nullptr);
        run_mlp(c, true, 1, true, nullptr);
      },
      partest::opts());
}

TEST_P(LinearMlp, CountingGemmSeesOnlyTheThreeForms) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        Counting cnt;
        run_mlp(c, false, 0, false, &cnt);
        run_mlp(c, true, 0, false, &cnt);
        if (uneven(11, c.nranks, true)[(size_t)c.rank] == 0) {  // no hidden units (F is 11):
          EXPECT_EQ(cnt.calls.load(), 0) << "every GEMM here is empty, and empty ones are skipped";
          return;
        }
        EXPECT_GT(cnt.calls.load(), 0);
        std::set<std::pair<int, int>> allowed = {{0, 1}, {0, 0}, {1, 0}};
        for (auto& f : cnt.forms)
          EXPECT_TRUE(allowed.count(f)) << "form transA=" << f.first << " transB=" << f.second;
        EXPECT_EQ(cnt.forms, allowed) << "every form is used by some pass";
      },
      partest::opts());
}

// gatherOutput: y gathered along its last dim; the backward takes the full dy.
TEST_P(LinearMlp, GatherOutputAndItsBackward) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        const int64_t T = 6, H = 4, O = 3;  // out_r equal on every rank
        const int P = c.nranks, r = c.rank;
        Vec x = partest::random_f64(T * H, 7), w = partest::random_f64(P * O * H, 8);
        Vec wr(w.begin() + r * O * H, w.begin() + (r + 1) * O * H), y(T * P * O);
        auto tx = partest::make(x, loomFloat64, {T, H});
        auto tw = partest::make(wr, loomFloat64, {O, H});
        auto ty = partest::make(y, loomFloat64, {T, P * O});
        loomLinearOpts o = LOOM_LINEAR_OPTS_INIT;
        o.gatherOutput = 1;
        ASSERT_LOOM_OK(
            loomColumnLinearForward(&tx, &tw, nullptr, &ty, nullptr, &o, c.comm, nullptr));
        expect_close(y, mul_bt(x, w, T, P * O, H), "gathered y");
        Vec dy = partest::random_f64(T * P * O, 9), dx(T * H);
        auto tdy = partest::make(dy, loomFloat64, {T, P * O});
        auto tdx = partest::make(dx, loomFloat64, {T, H});
        ASSERT_LOOM_OK(loomColumnLinearBackwardInput(&tdy, &tw, &tdx, &o, c.comm, nullptr));
        expect_close(dx, mul(dy, w, T, H, P * O), "dx from the full dy");
      },
      partest::opts());
}

// float32 and bfloat16 follow the float64 reference within their precision; a host stream
// orders the call like NULL does.
TEST_P(LinearMlp, LowPrecisionAndHostStream) {
  auto [n, mode] = GetParam();
  harness::run(
      n, mode,
      [](Ctx& c) {
        const int64_t T = 8, H = 16, Fr = 4;
        const int P = c.nranks, r = c.rank;
        Vec x = partest::random_f64(T * H, 17), w = partest::random_f64(P * Fr * H, 18);
        Vec want = mul_bt(x, Vec(w.begin() + r * Fr * H, w.begin() + (r + 1) * Fr * H), T, Fr, H);
        loomStream_t s;
        ASSERT_LOOM_OK(loomStreamCreate(&s));
        for (loomDataType_t dt : {loomFloat32, loomBfloat16, loomFloat16}) {
          std::vector<uint32_t> xs(T * H), ws(Fr * H), ys(T * Fr);
          auto put = [dt](std::vector<uint32_t>& dst, const Vec& src, size_t off) {
            for (size_t i = 0; i < dst.size(); i++) {
              float f = (float)src[off + i];
              if (dt == loomFloat32) {
                std::memcpy(&dst[i], &f, 4);
              } else {
                uint32_t b;
                std::memcpy(&b, &f, 4);
                ((uint16_t*)dst.data())[i] = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
              }
            }
          };
          if (dt == loomFloat16) {
            for (size_t i = 0; i < xs.size(); i++) ((_Float16*)xs.data())[i] = (_Float16)x[i];
            for (size_t i = 0; i < ws.size(); i++)
              ((_Float16*)ws.data())[i] = (_Float16)w[r * Fr * H + i];
          } else {
            put(xs, x, 0);
            put(ws, w, r * Fr * H);
          }
          loomTensor tx, tw, ty;
          int64_t sx[2] = {T, H}, sw[2] = {Fr, H}, sy[2] = {T, Fr};
          ASSERT_LOOM_OK(loomTensorMake(xs.data(), dt, 2, sx, &tx));
          ASSERT_LOOM_OK(loomTensorMake(ws.data(), dt, 2, sw, &tw));
          ASSERT_LOOM_OK(loomTensorMake(ys.data(), dt, 2, sy, &ty));
          ASSERT_LOOM_OK(
              loomColumnLinearForward(&tx, &tw, nullptr, &ty, nullptr, nullptr, c.comm, s));
          ASSERT_LOOM_OK(loomStreamSynchronize(s));
          double tol = dt == loomFloat32 ? 1e-5 : dt == loomFloat16 ? 2e-2 : 6e-2;
          for (int64_t i = 0; i < T * Fr; i++) {
            double got;
            if (dt == loomFloat32) {
              float f;
              std::memcpy(&f, &ys[i], 4);
              got = f;
            } else if (dt == loomFloat16) {
              got = (double)((_Float16*)ys.data())[i];
            } else {
              uint32_t b = (uint32_t)((uint16_t*)ys.data())[i] << 16;
              float f;
              std::memcpy(&f, &b, 4);
              got = f;
            }
            ASSERT_LE(std::fabs(got - want[i]), tol * (1 + std::fabs(want[i])))
                << "dtype " << (int)dt << " element " << i;
          }
        }
        loomStreamDestroy(s);
      },
      partest::opts());
}

// Misuse: refused on the calling rank before any communication, outputs untouched, and the
// communicator still works (process ranks would hang on a collective that one rank skipped).
TEST(LinearArgs, MisuseIsRefusedAndNamed) {
  harness::run(
      2, Mode::Thread,
      [](Ctx& c) {
        Vec x(6 * 4, 1.0), w(3 * 4, 1.0), b(3, 0.0), y(6 * 3, 7.0), wbad(3 * 5, 1.0);
        auto tx = partest::make(x, loomFloat64, {6, 4});
        auto tw = partest::make(w, loomFloat64, {3, 4});
        auto tb = partest::make(b, loomFloat64, {3});
        auto ty = partest::make(y, loomFloat64, {6, 3});
        auto twb = partest::make(wbad, loomFloat64, {3, 5});
        const char* fn = "loomColumnLinearForward";
        EXPECT_MISUSE(
            loomColumnLinearForward(&tx, &twb, &tb, &ty, nullptr, nullptr, c.comm, nullptr), c.comm,
            fn, partest::bytes_of(y), "4", "5");
        EXPECT_MISUSE(
            loomColumnLinearForward(nullptr, &tw, &tb, &ty, nullptr, nullptr, c.comm, nullptr),
            c.comm, fn, partest::bytes_of(y), "x is NULL");
        loomTensor ty_self = ty;  // an output overlapping itself
        ty_self.strides[0] = 1;
        EXPECT_MISUSE(
            loomColumnLinearForward(&tx, &tw, &tb, &ty_self, nullptr, nullptr, c.comm, nullptr),
            c.comm, fn, partest::bytes_of(y), "overlaps itself");
        loomTensor tyx = ty;  // y over x's bytes
        tyx.data = x.data();
        EXPECT_MISUSE(
            loomColumnLinearForward(&tx, &tw, &tb, &tyx, nullptr, nullptr, c.comm, nullptr), c.comm,
            fn, partest::bytes_of(x), "y overlaps x");
        std::vector<int32_t> xi(24);
        auto txi = partest::make(xi, loomInt32, {6, 4});
        EXPECT_MISUSE(
            loomColumnLinearForward(&txi, &tw, &tb, &ty, nullptr, nullptr, c.comm, nullptr), c.comm,
            fn, partest::bytes_of(y), "int32");
        std::vector<float> yf(18);
        auto tyf = partest::make(yf, loomFloat32, {6, 3});
        EXPECT_MISUSE(
            loomColumnLinearForward(&tx, &tw, &tb, &tyf, nullptr, nullptr, c.comm, nullptr), c.comm,
            fn, partest::bytes_of(yf), "float32", "float64");
        loomLinearOpts o = LOOM_LINEAR_OPTS_INIT;
        o.sequenceParallel = 1;
        o.seqDim = 1;  // the feature dim
        EXPECT_MISUSE(loomColumnLinearForward(&tx, &tw, &tb, &ty, nullptr, &o, c.comm, nullptr),
                      c.comm, fn, partest::bytes_of(y), "seqDim", "1");
        o.seqDim = 0;
        int64_t bad_splits[2] = {4, 4};  // this rank has 6 rows
        o.seqSplits = bad_splits;
        EXPECT_MISUSE(loomColumnLinearForward(&tx, &tw, &tb, &ty, nullptr, &o, c.comm, nullptr),
                      c.comm, fn, partest::bytes_of(y), "seqSplits", "6");
        int64_t neg[2] = {-1, 7};
        o.seqSplits = neg;
        EXPECT_MISUSE(loomColumnLinearForward(&tx, &tw, &tb, &ty, nullptr, &o, c.comm, nullptr),
                      c.comm, fn, partest::bytes_of(y), "seqSplits[0]", "-1");
        loomLinearOpts ov = LOOM_LINEAR_OPTS_INIT;
        ov.overlap = 2;
        EXPECT_MISUSE(loomColumnLinearForward(&tx, &tw, &tb, &ty, nullptr, &ov, c.comm, nullptr),
                      c.comm, fn, partest::bytes_of(y), "overlap", "2");
        loomGemm nofn{nullptr, nullptr};
        loomLinearOpts og = LOOM_LINEAR_OPTS_INIT;
        og.gemm = &nofn;
        EXPECT_MISUSE(loomColumnLinearForward(&tx, &tw, &tb, &ty, nullptr, &og, c.comm, nullptr),
                      c.comm, fn, partest::bytes_of(y), "gemm");
        // Row-parallel: gatherOutput is the column layer's; dw of the wrong shape.
        loomLinearOpts orow = LOOM_LINEAR_OPTS_INIT;
        orow.gatherOutput = 1;
        Vec yr(6 * 3, 7.0), wr(3 * 4, 1.0);
        auto tyr = partest::make(yr, loomFloat64, {6, 3});
        auto twr = partest::make(wr, loomFloat64, {3, 4});
        EXPECT_MISUSE(loomRowLinearForward(&tx, &twr, nullptr, &tyr, &orow, c.comm, nullptr),
                      c.comm, "loomRowLinearForward", partest::bytes_of(yr), "gatherOutput");
        Vec dw(4 * 4, 5.0);
        auto tdw = partest::make(dw, loomFloat64, {4, 4});
        EXPECT_MISUSE(loomLinearBackwardWeight(&tx, &ty, &tdw, nullptr, nullptr, nullptr), nullptr,
                      "loomLinearBackwardWeight", partest::bytes_of(dw), "dw is [4, 4]", "[3, 4]");
        // After all that, a valid call works on both ranks.
        ASSERT_LOOM_OK(
            loomColumnLinearForward(&tx, &tw, &tb, &ty, nullptr, nullptr, c.comm, nullptr));
        for (double v : y) EXPECT_EQ(v, 4.0);
      },
      partest::opts());
}

// For tests/parallel/torch_check.sh: with LOOM_TORCH_DIR set, a tp-3 SP MLP's inputs and the
// layer's gathered results go there as raw float64 files, for torch_mlp.py to recompute with
// PyTorch's autograd. Skipped otherwise.
TEST(TorchDump, MlpBlock) {
  std::string d = partest::torch_dir();
  if (d.empty()) GTEST_SKIP() << TORCH_DIR_UNSET;
  harness::run(
      3, Mode::Thread,
      [d](Ctx& c) {
        MlpOut o;
        run_mlp(c, true, 0, false, nullptr, &o);
        const int64_t S = 7, B = 2, H = 5, F = 11;
        auto gather = [&](Vec& local, std::vector<int64_t> shape, int dim,
                          const std::vector<int64_t>& splits) {
          std::vector<int64_t> full = shape;
          full[dim] = 0;
          for (auto v : splits) full[dim] += v;
          Vec all(partest::numel(full));
          auto tl = partest::make(local, loomFloat64, shape);
          auto ta = partest::make(all, loomFloat64, full);
          EXPECT_EQ(loomAllGatherDim(&tl, &ta, dim, splits.data(), c.comm, nullptr), loomSuccess);
          return all;
        };
        const int r = c.rank;
        Vec y = gather(o.y, {o.ss[r], B, H}, 0, o.ss), dx = gather(o.dx, {o.ss[r], B, H}, 0, o.ss);
        Vec dw1 = gather(o.dw1, {o.fs[r], H}, 0, o.fs), db1 = gather(o.db1, {o.fs[r]}, 0, o.fs);
        Vec dw2 = gather(o.dw2, {H, o.fs[r]}, 1, o.fs);
        if (r != 0) return;
        Mlp ref(S, B, H, F, 1234);
        auto put = [&](const char* name, const Vec& v) { partest::torch_put(d, name, v); };
        put("mlp_shape", Vec{(double)S, (double)B, (double)H, (double)F});
        put("mlp_x", ref.x), put("mlp_w1", ref.w1), put("mlp_b1", ref.b1);
        put("mlp_w2", ref.w2), put("mlp_b2", ref.b2), put("mlp_g", ref.g);
        put("mlp_y", y), put("mlp_dx", dx), put("mlp_dw1", dw1), put("mlp_db1", db1);
        put("mlp_dw2", dw2), put("mlp_db2", o.db2);
      },
      partest::opts());
}

INSTANTIATE_TEST_SUITE_P(Ranks, LinearMlp,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(Mode::Proc, Mode::Thread)),
                         partest::ranks_mode_name);

}  // namespace
