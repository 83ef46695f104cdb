// cp_test.cc - the shared pieces of the context-parallel attention tests (cp_test.h).
#include "cp_test.h"

#include <cstdio>

namespace cptest {

Buf::Buf(loomDataType_t d, std::vector<int64_t> s) : dt(d), shape(std::move(s)) {
  bytes.assign(n() * size() + 8, 0);
  EXPECT_EQ(loomTensorMake(bytes.data(), dt, (int)shape.size(), shape.data(), &t), loomSuccess);
}

size_t Buf::size() const {
  return dt == loomFloat64 ? 8 : dt == loomFloat32 ? 4 : 2;
}

double Buf::get(size_t i) const {
  return partest::load_float(dt, bytes.data() + i * size());
}

void Buf::set(size_t i, double v) {
  partest::store_float(dt, bytes.data() + i * size(), v);
}

// ---- The reference ------------------------------------------------------------------------

namespace {

// Multiples of 1/64 in [-1, 1]: exact in float16 and bfloat16 alike.
std::vector<double> grid(size_t n, uint64_t seed) {
  auto u = partest::random_f64(n, seed);
  for (auto& x : u) x = std::round(x * 64) / 64;
  return u;
}

// Direct softmax per row in float64, then the gradients of section 4 spelled out.
void reference(Prob& p) {
  int64_t G = p.Hq / p.Hkv;
  double c = p.c();
  p.out.assign((size_t)(p.B * p.S * p.Hq * p.Dv), 0);
  p.lse.assign((size_t)(p.B * p.Hq * p.S), -INFINITY);
  p.dq.assign(p.q.size(), 0);
  p.dk.assign(p.k.size(), 0);
  p.dv.assign(p.v.size(), 0);
  auto Q = [&](int64_t b, int64_t i, int64_t h) {
    return &p.q[(size_t)(((b * p.S + i) * p.Hq + h) * p.D)];
  };
  auto K = [&](int64_t b, int64_t j, int64_t g) {
    return (size_t)(((b * p.Skv + j) * p.Hkv + g) * p.D);
  };
  auto V = [&](int64_t b, int64_t j, int64_t g) {
    return (size_t)(((b * p.Skv + j) * p.Hkv + g) * p.Dv);
  };
  std::vector<double> s((size_t)p.Skv), dp((size_t)p.Skv);
  for (int64_t b = 0; b < p.B; b++)
    for (int64_t h = 0; h < p.Hq; h++)
      for (int64_t i = 0; i < p.S; i++) {
        int64_t g = h / G, n = p.causal ? std::min(i + 1, p.Skv) : p.Skv;
        if (n <= 0) continue;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++) {
          double d = 0;
          for (int64_t e = 0; e < p.D; e++) d += Q(b, i, h)[e] * p.k[K(b, j, g) + e];
          s[j] = c * d;
          mx = std::max(mx, s[j]);
        }
        for (int64_t j = 0; j < n; j++) sum += std::exp(s[j] - mx);
        double lse = mx + std::log(sum);
        p.lse[(size_t)((b * p.Hq + h) * p.S + i)] = lse;
        double* o = &p.out[(size_t)(((b * p.S + i) * p.Hq + h) * p.Dv)];
        const double* dout = &p.dout[(size_t)(((b * p.S + i) * p.Hq + h) * p.Dv)];
        double Di = 0;
        for (int64_t j = 0; j < n; j++) {
          s[j] = std::exp(s[j] - lse);  // P_ij
          dp[j] = 0;
          for (int64_t e = 0; e < p.Dv; e++) {
            o[e] += s[j] * p.v[V(b, j, g) + e];
            dp[j] += dout[e] * p.v[V(b, j, g) + e];
          }
          Di += s[j] * dp[j];
        }
        for (int64_t j = 0; j < n; j++) {
          double ds = s[j] * (dp[j] - Di);
          for (int64_t e = 0; e < p.D; e++) {
            p.dq[(size_t)(((b * p.S + i) * p.Hq + h) * p.D + e)] += c * ds * p.k[K(b, j, g) + e];
            p.dk[K(b, j, g) + e] += c * ds * Q(b, i, h)[e];
          }
          for (int64_t e = 0; e < p.Dv; e++) p.dv[V(b, j, g) + e] += s[j] * dout[e];
        }
      }
}

}  // namespace

Prob make_prob(int64_t B, int64_t S, int64_t Skv, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv,
               bool causal, uint64_t seed, double scale) {
  Prob p;
  p.B = B, p.S = S, p.Skv = Skv, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.Dv = Dv;
  p.causal = causal, p.scale = scale;
  p.q = grid((size_t)(B * S * Hq * D), seed);
  p.k = grid((size_t)(B * Skv * Hkv * D), seed + 1);
  p.v = grid((size_t)(B * Skv * Hkv * Dv), seed + 2);
  p.dout = grid((size_t)(B * S * Hq * Dv), seed + 3);
  reference(p);
  return p;
}

// Measured worst cases at S <= 24, D <= 8 are about a tenth of these. float32: ~1e-7 (a few
// float32 ulps through sums of a few dozen terms). float16 and bfloat16: the stored outputs are
// rounded once (half an ulp, 2^-12 and 2^-9, is most of the error), and backward also reads
// the rounded out in D_i.
double tol_fwd(loomDataType_t dt) {
  return dt == loomFloat64 ? 1e-10 : dt == loomFloat32 ? 2e-6 : dt == loomFloat16 ? 1e-3 : 4e-3;
}
double tol_bwd(loomDataType_t dt) {
  return dt == loomFloat64 ? 1e-10 : dt == loomFloat32 ? 5e-6 : dt == loomFloat16 ? 1.5e-3 : 8e-3;
}

std::string name_of(const loomAttnOpts& o, loomDataType_t dt) {
  static const char* algo[] = {"ring", "allgather", "ulysses"};
  static const char* dts[] = {"i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16"};
  char b[128];
  snprintf(b, sizeof b, "%s %s %s %s", algo[o.algo], o.layout ? "zigzag" : "contiguous",
           o.causal ? "causal" : "full", (int)dt < 10 ? dts[(int)dt] : "?");
  return b;
}

Local shard(const Prob& p, loomDataType_t dt, loomCpLayout_t layout, int rank, int P) {
  Local l;
  loomDataType_t acc = dt == loomFloat64 ? loomFloat64 : loomFloat32;
  int64_t Sq = p.S / P, Sk = p.Skv / P;
  auto one = [&](const std::vector<double>& g, std::vector<int64_t> full, int64_t local, Buf& out) {
    Buf f(dt, full);
    for (size_t i = 0; i < g.size(); i++) f.set(i, g[i]);
    full[1] = local;
    out = Buf(dt, full);
    EXPECT_EQ(loomCpShard(f.tp(), 1, layout, rank, P, out.tp(), nullptr), loomSuccess)
        << loomGetLastError(nullptr);
  };
  one(p.q, {p.B, p.S, p.Hq, p.D}, Sq, l.q);
  one(p.k, {p.B, p.Skv, p.Hkv, p.D}, Sk, l.k);
  one(p.v, {p.B, p.Skv, p.Hkv, p.Dv}, Sk, l.v);
  one(p.dout, {p.B, p.S, p.Hq, p.Dv}, Sq, l.dout);
  l.out = Buf(dt, {p.B, Sq, p.Hq, p.Dv});
  l.lse = Buf(acc, {p.B, p.Hq, Sq});
  l.dq = Buf(dt, {p.B, Sq, p.Hq, p.D});
  l.dk = Buf(dt, {p.B, Sk, p.Hkv, p.D});
  l.dv = Buf(dt, {p.B, Sk, p.Hkv, p.Dv});
  return l;
}

namespace {

// got [B, L, H, E] (local rows) against want [B, Lg, H, E] (global rows pos[i]); or, when
// lse_form, [B, H, L] against [B, H, Lg]. Counts NaNs and the worst relative error.
void compare(const Buf& got, const std::vector<double>& want, const std::vector<int64_t>& pos,
             int64_t Lg, bool lse_form, double tol, const std::string& what) {
  int64_t B = got.shape[0], L = lse_form ? got.shape[2] : got.shape[1];
  int64_t H = lse_form ? got.shape[1] : got.shape[2], E = lse_form ? 1 : got.shape[3];
  double worst = 0;
  int64_t nan = 0, bad_inf = 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < L; i++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t e = 0; e < E; e++) {
          size_t gi =
              lse_form ? (size_t)((b * H + h) * L + i) : (size_t)(((b * L + i) * H + h) * E + e);
          size_t wi = lse_form ? (size_t)((b * H + h) * Lg + pos[(size_t)i])
                               : (size_t)(((b * Lg + pos[(size_t)i]) * H + h) * E + e);
          double g = got.get(gi), w = want[wi];
          if (std::isnan(g)) nan++;
          if (std::isinf(w) || std::isinf(g)) {
            bad_inf += g != w;
            continue;
          }
          worst = std::max(worst, partest::rel_err(g, w));
        }
  EXPECT_EQ(nan, 0) << what;
  EXPECT_EQ(bad_inf, 0) << what;
  EXPECT_LE(worst, tol) << what;
}

}  // namespace

Local check_case(const harness::Ctx& c, const Prob& p, loomDataType_t dt, const loomAttnOpts& o,
                 const std::string& what, double tol_scale) {
  int P = c.nranks, r = c.rank;
  Local l = shard(p, dt, o.layout, r, P);
  std::vector<int64_t> qpos((size_t)(p.S / P)), kpos((size_t)(p.Skv / P));
  EXPECT_EQ(loomCpPositions(p.S, o.layout, r, P, qpos.data()), loomSuccess);
  EXPECT_EQ(loomCpPositions(p.Skv, o.layout, r, P, kpos.data()), loomSuccess);
  loomResult_t res = loomCpAttentionForward(l.q.tp(), l.k.tp(), l.v.tp(), l.out.tp(), l.lse.tp(),
                                            &o, c.comm, nullptr);
  EXPECT_EQ(res, loomSuccess) << what << ": " << loomGetLastError(c.comm);
  if (res != loomSuccess) return l;
  compare(l.out, p.out, qpos, p.S, false, tol_fwd(dt) * tol_scale, what + " out");
  compare(l.lse, p.lse, qpos, p.S, true, tol_fwd(dt) * tol_scale, what + " lse");
  res = loomCpAttentionBackward(l.q.tp(), l.k.tp(), l.v.tp(), l.out.tp(), l.dout.tp(), l.lse.tp(),
                                l.dq.tp(), l.dk.tp(), l.dv.tp(), &o, c.comm, nullptr);
  EXPECT_EQ(res, loomSuccess) << what << ": " << loomGetLastError(c.comm);
  if (res != loomSuccess) return l;
  compare(l.dq, p.dq, qpos, p.S, false, tol_bwd(dt) * tol_scale, what + " dq");
  compare(l.dk, p.dk, kpos, p.Skv, false, tol_bwd(dt) * tol_scale, what + " dk");
  compare(l.dv, p.dv, kpos, p.Skv, false, tol_bwd(dt) * tol_scale, what + " dv");
  return l;
}

}  // namespace cptest
